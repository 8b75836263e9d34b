"""The three MHA variants compute one function: checked against a plain reference written here, not in the library."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_textclf.attention import VARIANTS, build_attention

TOL = 1e-5
SHAPES = [(1, 8), (2, 16), (4, 32), (8, 64)]  # (n_heads, d_model), one head included


def reference_mha(query, key, value, key_padding_mask, P, n_heads, weights=None):
    """Textbook multi-head attention from the canonical parameters, einsum only. `weights` replaces the softmax."""
    B, Tq, C = query.shape
    hs = C // n_heads

    def project(x, name):
        y = x @ P[f"W_{name}"].T + P.get(f"b_{name}", 0)
        return y.view(B, x.size(1), n_heads, hs)  # (B, T, nh, hs)

    q, k, v = project(query, "q"), project(key, "k"), project(value, "v")
    if weights is None:
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(hs)
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
        weights = scores.softmax(dim=-1)
    y = torch.einsum("bhqk,bkhd->bqhd", weights, v).reshape(B, Tq, C)
    return y @ P["W_o"].T + P.get("b_o", 0), weights


def random_padding(B, Tk, generator):
    """Random key-padding mask (True = padding) that keeps at least one real key per row."""
    lengths = torch.randint(1, Tk + 1, (B,), generator=generator)
    return torch.arange(Tk)[None, :] >= lengths[:, None]


def make_inputs(B, Tq, Tk, C, cross, seed=0):
    """cross=False: self-attention (one tensor); "shared_kv": other queries over one key/value tensor; True: three."""
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(B, Tq, C, generator=g)
    if cross == "shared_kv":
        key = value = torch.randn(B, Tk, C, generator=g)
    elif cross:
        key, value = torch.randn(B, Tk, C, generator=g), torch.randn(B, Tk, C, generator=g)
    else:
        key = value = query
    return query, key, value, random_padding(B, Tk, g)


def leaves(query, key, value):
    """Fresh leaf tensors with gradients, keeping which of query, key and value are one tensor."""
    copies = {}
    return [copies.setdefault(id(t), t.clone().requires_grad_()) for t in (query, key, value)]


def build(variant, n_heads, C, bias, dropout=0.0, seed=0):
    torch.manual_seed(seed)
    return build_attention(variant, C, n_heads, bias=bias, dropout=dropout)


@pytest.mark.unit
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize(("n_heads", "C"), SHAPES)
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("cross", [False, True, "shared_kv"], ids=["self", "cross", "shared_kv"])
@pytest.mark.parametrize("need_weights", [True, False])
def test_outputs_and_gradients_match_the_reference(variant, n_heads, C, bias, cross, need_weights):
    B, Tq, Tk = 3, 7, (11 if cross else 7)
    query, key, value, mask = make_inputs(B, Tq, Tk, C, cross)
    attention = build(variant, n_heads, C, bias)
    # Random upstream gradient so that every output element matters.
    upstream = torch.randn(B, Tq, C, generator=torch.Generator().manual_seed(1))

    inputs = leaves(query, key, value)
    out, weights = attention(*inputs, key_padding_mask=mask, need_weights=need_weights)
    (out * upstream).sum().backward()

    P = {name: p.detach().clone().requires_grad_() for name, p in attention.projections().items()}
    ref_inputs = leaves(query, key, value)
    ref_out, ref_weights = reference_mha(*ref_inputs, mask, P, n_heads)
    (ref_out * upstream).sum().backward()

    torch.testing.assert_close(out, ref_out, atol=TOL, rtol=TOL)
    if need_weights:
        torch.testing.assert_close(weights, ref_weights, atol=TOL, rtol=TOL)
        assert weights.shape == (B, n_heads, Tq, Tk)
        assert (weights.masked_select(mask[:, None, None, :].expand_as(weights)) == 0).all()  # exactly 0 on padding
    else:
        assert weights is None  # never materialised unless asked
    for got, want in zip(inputs, ref_inputs, strict=True):
        torch.testing.assert_close(got.grad, want.grad, atol=TOL, rtol=TOL)
    grads = attention.projection_grads()
    expected = {"W_q", "W_k", "W_v", "W_o"} | ({"b_q", "b_k", "b_v", "b_o"} if bias else set())
    assert grads.keys() == P.keys() == expected
    for name, p in P.items():
        torch.testing.assert_close(grads[name], p.grad, atol=TOL, rtol=TOL, msg=f"gradient of {name}")


@pytest.mark.unit
@pytest.mark.parametrize(("n_heads", "C"), SHAPES)
@pytest.mark.parametrize("bias", [True, False])
def test_same_seed_same_weights_same_parameter_count(n_heads, C, bias):
    built = {v: build(v, n_heads, C, bias, seed=3) for v in VARIANTS}
    counts = {v: sum(p.numel() for p in m.parameters()) for v, m in built.items()}
    assert len(set(counts.values())) == 1
    assert counts["naive"] == 4 * C * C + (4 * C if bias else 0)
    reference = built["torch"].projections()
    for variant, module in built.items():
        for name, tensor in module.projections().items():
            assert torch.equal(tensor, reference[name]), f"{variant}.{name}"
    # ...and building any variant advances the global RNG by the same amount (layers built after it match too).
    after = set()
    for variant in VARIANTS:
        build(variant, n_heads, C, bias, seed=3)
        after.add(torch.rand(1).item())
    assert len(after) == 1


@pytest.mark.unit
@pytest.mark.parametrize("cross", [False, True], ids=["self", "cross"])
def test_sdpa_path_matches_explicit_path(cross):
    query, key, value, mask = make_inputs(4, 9, 13 if cross else 9, 32, cross)
    attention = build("efficient", 4, 32, bias=True)
    fast, none = attention(query, key, value, key_padding_mask=mask, need_weights=False)
    explicit, weights = attention(query, key, value, key_padding_mask=mask, need_weights=True)
    assert none is None and weights is not None
    torch.testing.assert_close(fast, explicit, atol=TOL, rtol=TOL)


@pytest.mark.unit
@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("need_weights", [False, True])
def test_appending_padding_changes_no_real_output(variant, need_weights):
    B, T, C, extra = 3, 6, 16, 5
    x, _, _, mask = make_inputs(B, T, T, C, cross=False)
    attention = build(variant, 4, C, bias=True).eval()
    out, _ = attention(x, x, x, key_padding_mask=mask, need_weights=need_weights)
    padded = torch.cat([x, 100 * torch.randn(B, extra, C)], dim=1)  # garbage where the padding is
    padded_mask = torch.cat([mask, torch.ones(B, extra, dtype=torch.bool)], dim=1)
    padded_out, _ = attention(padded, padded, padded, key_padding_mask=padded_mask, need_weights=need_weights)
    torch.testing.assert_close(padded_out[:, :T], out, atol=TOL, rtol=TOL)


@pytest.mark.unit
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_dropout_acts_on_attention_weights(variant):
    B, T, C, n_heads = 2, 16, 16, 2
    x, _, _, mask = make_inputs(B, T, T, C, cross=False)
    attention = build(variant, n_heads, C, bias=True, dropout=0.5)

    attention.eval()
    eval_out, eval_weights = attention(x, x, x, key_padding_mask=mask, need_weights=True)
    again, _ = attention(x, x, x, key_padding_mask=mask)
    torch.testing.assert_close(again, eval_out, atol=TOL, rtol=TOL)  # eval is deterministic, and no dropout

    attention.train()
    torch.manual_seed(0)
    train_out, train_weights = attention(x, x, x, key_padding_mask=mask, need_weights=True)
    assert not torch.allclose(train_out, eval_out, atol=1e-3)
    # The returned weights are the eval weights with links dropped (exact zeros) and the rest scaled by 1/(1-p)...
    kept = train_weights != 0
    assert (~kept & (eval_weights > 0)).any()
    torch.testing.assert_close(train_weights[kept], eval_weights[kept] * 2, atol=TOL, rtol=TOL)
    # ...and they are the weights the output was computed with: dropout sits on the attention weights.
    P = {name: p.detach() for name, p in attention.projections().items()}
    recomputed, _ = reference_mha(x, x, x, mask, P, n_heads, weights=train_weights)
    torch.testing.assert_close(train_out, recomputed, atol=TOL, rtol=TOL)
    # The fast path (no weights requested) drops links too.
    torch.manual_seed(1)
    fast_train, _ = attention(x, x, x, key_padding_mask=mask)
    assert not torch.allclose(fast_train, eval_out, atol=1e-3)


@pytest.mark.unit
def test_indivisible_heads_and_unknown_variants_are_refused():
    for variant in VARIANTS:
        with pytest.raises(AssertionError, match="d_model // n_heads"):
            build_attention(variant, 30, 4)
    with pytest.raises(AssertionError, match="efficient"):
        build_attention("flash", 16, 2)


@pytest.mark.unit
def test_naive_loops_over_heads_and_efficient_fuses_them_into_one_sdpa_call(monkeypatch):
    """`naive` is a loop over heads; `efficient` has fused projections, heads as a tensor dimension and
    F.scaled_dot_product_attention. Seen from outside, by the linear maps each one runs and the SDPA calls it makes
    in one self-attention forward: naive nh × 3 head-sized projections and no SDPA, efficient one fused (C -> 3C)
    projection and one SDPA call over (B, nh, T, hs)."""
    n_heads, C, B, T = 4, 16, 3, 7
    x, _, _, mask = make_inputs(B, T, T, C, cross=False)
    sdpa_calls, real_sdpa = [], F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention",
                        lambda q, *args, **kwargs: sdpa_calls.append(tuple(q.shape)) or real_sdpa(q, *args, **kwargs))
    linear_outputs = {}
    for variant in ("naive", "efficient"):
        attention, sdpa_calls[:] = build(variant, n_heads, C, bias=True), []
        outputs = linear_outputs[variant] = []
        for module in attention.modules():
            if isinstance(module, torch.nn.Linear):
                module.register_forward_hook(lambda m, args, out, outputs=outputs: outputs.append(out.size(-1)))
        attention(x, x, x, key_padding_mask=mask)
        linear_outputs[variant], linear_outputs[f"{variant} sdpa"] = sorted(outputs), list(sdpa_calls)
    hs = C // n_heads
    assert linear_outputs["naive"] == sorted([hs] * 3 * n_heads + [C]) and linear_outputs["naive sdpa"] == []
    assert linear_outputs["efficient"] == [C, 3 * C]
    assert linear_outputs["efficient sdpa"] == [(B, n_heads, T, hs)]


@pytest.mark.unit
def test_torch_variant_is_nn_multihead_attention_called_right():
    """Ours against a separately built nn.MultiheadAttention holding the same weights, called with torch's own
    defaults (need_weights=True, head-averaged weights): same output, so the mask reaches it with the right polarity
    and the fast path changes nothing."""
    attention = build("torch", 4, 16, bias=True)
    assert isinstance(attention.mha, torch.nn.MultiheadAttention) and attention.mha.batch_first
    theirs = torch.nn.MultiheadAttention(16, 4, bias=True, batch_first=True)
    theirs.load_state_dict(attention.mha.state_dict())
    x, _, _, mask = make_inputs(3, 7, 7, 16, cross=False)
    ours, weights = attention(x, x, x, key_padding_mask=mask, need_weights=True)
    expected, expected_weights = theirs(x, x, x, key_padding_mask=mask)
    torch.testing.assert_close(ours, expected, atol=TOL, rtol=TOL)
    torch.testing.assert_close(weights.mean(dim=1), expected_weights, atol=TOL, rtol=TOL)
    fast, _ = attention(x, x, x, key_padding_mask=mask)
    torch.testing.assert_close(fast, expected, atol=TOL, rtol=TOL)


@st.composite
def attention_cases(draw):
    """Random head counts and sizes, batch sizes and lengths, and key-padding masks: padding anywhere (token dropout
    hides keys in the middle), down to rows with a single visible key."""
    n_heads, head_dim = draw(st.sampled_from([1, 2, 3, 8])), draw(st.sampled_from([1, 2, 8]))
    B, T = draw(st.integers(1, 4)), draw(st.integers(1, 12))
    one_key = draw(st.booleans())  # every row all but one padded
    visible = [draw(st.sets(st.integers(0, T - 1), min_size=1, max_size=1 if one_key else T)) for _ in range(B)]
    mask = torch.tensor([[t not in keys for t in range(T)] for keys in visible])
    return n_heads, n_heads * head_dim, B, T, mask, draw(st.integers(0, 2**16))


@settings(max_examples=25)
@given(case=attention_cases(), bias=st.booleans(), cls_query=st.booleans(), need_weights=st.booleans())
def test_the_variants_and_the_reference_agree_on_random_shapes_and_masks(case, bias, cls_query, need_weights):
    """Self-attention, or the [CLS] query alone over every key (cls_only): outputs, input gradients and parameter
    gradients of every variant equal the reference's."""
    n_heads, C, B, T, mask, seed = case
    g = torch.Generator().manual_seed(seed)
    x, upstream = torch.randn(B, T, C, generator=g), torch.randn(B, 1 if cls_query else T, C, generator=g)

    def run(attend):
        leaf = x.clone().requires_grad_()
        out, weights = attend(leaf[:, :1] if cls_query else leaf, leaf, leaf)
        (out * upstream).sum().backward()
        return out, weights, leaf.grad

    reference = build("efficient", n_heads, C, bias)
    P = {name: p.detach().clone().requires_grad_() for name, p in reference.projections().items()}
    ref_out, ref_weights, ref_grad = run(lambda q, k, v: reference_mha(q, k, v, mask, P, n_heads))
    for variant in VARIANTS:
        attention = build(variant, n_heads, C, bias)
        out, weights, grad = run(lambda q, k, v, a=attention: a(q, k, v, key_padding_mask=mask,
                                                                  need_weights=need_weights))
        torch.testing.assert_close(out, ref_out, atol=TOL, rtol=TOL, msg=variant)
        torch.testing.assert_close(grad, ref_grad, atol=TOL, rtol=TOL, msg=variant)
        if need_weights:
            torch.testing.assert_close(weights, ref_weights, atol=TOL, rtol=TOL, msg=variant)
        grads = attention.projection_grads()
        for name, p in P.items():
            torch.testing.assert_close(grads[name], p.grad, atol=TOL, rtol=TOL, msg=f"{variant}: gradient of {name}")


@pytest.mark.unit
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_the_projections_start_as_nn_multihead_attention_draws_them(variant):
    """src/mha_textclf/attention.py: `init_projections` draws "W_q, W_k, W_v, W_o (and zero biases) with the
    distributions nn.MultiheadAttention uses": the three variants share one contract and this one initialisation.
    Against torch's own module, drawn under another seed: Xavier-uniform over the packed [W_q; W_k; W_v] (bound
    √(6/(3C + C)), not each C × C block's √(6/(2C))), nn.Linear's kaiming-uniform for W_o (bound 1/√C), biases zero;
    each matrix compared entry by entry in distribution (two-sample KS) and by its largest entry against the bound."""
    from scipy.stats import ks_2samp

    C, n_heads = 64, 8
    ours = build(variant, n_heads, C, bias=True, seed=0).projections()
    torch.manual_seed(1)
    theirs = torch.nn.MultiheadAttention(C, n_heads, bias=True, batch_first=True)
    expected = dict(zip(("W_q", "W_k", "W_v"), theirs.in_proj_weight.detach().chunk(3), strict=True))
    expected["W_o"] = theirs.out_proj.weight.detach()
    bounds = {"W_q": math.sqrt(6 / (4 * C)), "W_k": math.sqrt(6 / (4 * C)), "W_v": math.sqrt(6 / (4 * C)),
              "W_o": 1 / math.sqrt(C)}
    for name, reference in expected.items():
        drawn = ours[name].detach()
        assert ks_2samp(drawn.flatten().numpy(), reference.flatten().numpy()).pvalue > 1e-3, name
        assert 0.97 * bounds[name] < drawn.abs().max() <= bounds[name], name
        assert 0.97 * bounds[name] < reference.abs().max() <= bounds[name], name  # (the bound is torch's)
    for name in ("b_q", "b_k", "b_v", "b_o"):
        assert not ours[name].any(), name
    assert not theirs.in_proj_bias.any() and not theirs.out_proj.bias.any()
