"""Three implementations of multi-head attention behind one contract.

Contract, shared by `naive`, `efficient` and `torch`:

    forward(query (B, Tq, C), key (B, Tk, C), value (B, Tk, C), key_padding_mask (B, Tk) or None, need_weights=False)
        -> out (B, Tq, C), weights (B, nh, Tq, Tk) or None

- Batch first. Self-attention passes the same tensor three times; cross-attention (Tq != Tk) works too.
- **key_padding_mask is bool, True = padding** (that key is ignored), as in `nn.MultiheadAttention`.
  `F.scaled_dot_product_attention` uses the opposite convention (True = may attend); variants convert inside.
- Weights are returned only when asked, per head (average them yourself for a mean), after attention dropout: they
  are the weights the output was computed with.
- Parameters are W_q, W_k, W_v, W_o (C, C) and, with bias, b_q, b_k, b_v, b_o, drawn once by `init_projections`
  whatever the variant: the same seed gives the same function in all three; only the layout of the numbers differs.

Dimension names: B batch, T tokens, C d_model, nh n_heads, hs head_dim = C // nh.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from mha_textclf.settings import ATTENTION_VARIANTS

PROJECTIONS = ("q", "k", "v", "o")


def init_projections(d_model: int, bias: bool) -> dict[str, Tensor]:
    """Draw W_q, W_k, W_v, W_o (and zero biases) with the distributions `nn.MultiheadAttention` uses.

    Every variant builds its layers with `without_draws` and then loads these tensors, so the global RNG advances by the
    same amount whichever variant is built, and the layers built after it match too.
    """
    in_proj = torch.empty(3 * d_model, d_model)
    nn.init.xavier_uniform_(in_proj)  # over the packed [W_q; W_k; W_v], as torch does
    W_o = torch.empty(d_model, d_model)
    nn.init.kaiming_uniform_(W_o, a=math.sqrt(5))  # nn.Linear's default, which torch keeps for out_proj
    W_q, W_k, W_v = in_proj.chunk(3)
    params = {"W_q": W_q, "W_k": W_k, "W_v": W_v, "W_o": W_o}
    if bias:
        params |= {f"b_{p}": torch.zeros(d_model) for p in PROJECTIONS}
    return params


def without_draws(module_cls: type[nn.Module], *args, **kwargs) -> nn.Module:
    """`module_cls(*args, **kwargs)` with the global RNG left as it was: its initial weights are overwritten anyway.

    Not `torch.nn.utils.skip_init`: it builds on the meta device, whose first use imports torch's symbolic shapes
    (sympy): 0.6 s for a few small matrices, in `python -m predict` too, which never needs them otherwise."""
    with torch.random.fork_rng(devices=[]):  # the CPU generator only: layers are built on the CPU
        return module_cls(*args, **kwargs)


class MultiHeadAttention(nn.Module):
    """Base of the three variants: checks the sizes and moves parameters to and from the canonical layout."""

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__()
        assert d_model % n_heads == 0, f"each head gets d_model // n_heads dimensions: {d_model} % {n_heads} != 0"
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.bias, self.dropout = bias, dropout

    def projections(self) -> dict[str, Tensor]:
        """W_q, W_k, W_v, W_o (and biases) assembled from this variant's parameters (differentiable)."""
        return self._canonical(lambda p: p)

    def projection_grads(self) -> dict[str, Tensor]:
        """The gradients of `projections()`, in the same layout (after a backward pass)."""
        return self._canonical(lambda p: p.grad)

    @torch.no_grad()
    def load_projections(self, params: dict[str, Tensor]) -> None:
        for name, target in self._canonical(lambda p: p, views=True).items():
            target.copy_(params[name])

    def _canonical(self, get, views: bool = False) -> dict[str, Tensor]:
        raise NotImplementedError

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        raise NotImplementedError


class AttentionHead(nn.Module):
    """One head of scaled dot-product attention with its own query, key and value projections (C -> hs)."""

    def __init__(self, d_model: int, head_dim: int, bias: bool):
        super().__init__()
        self.q = without_draws(nn.Linear, d_model, head_dim, bias=bias)
        self.k = without_draws(nn.Linear, d_model, head_dim, bias=bias)
        self.v = without_draws(nn.Linear, d_model, head_dim, bias=bias)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None,
                dropout: float) -> tuple[Tensor, Tensor]:
        # Each token asks a question (its query), advertises what it holds (its key) and carries a payload (its
        # value). This head looks at tokens through its own hs-dimensional projections, so different heads can
        # attend to different kinds of relations.
        q = self.q(query)  # (B, Tq, hs)
        k = self.k(key)  # (B, Tk, hs)
        v = self.v(value)  # (B, Tk, hs)

        # How well every query matches every key. A dot product of two hs-dim vectors with unit-variance entries
        # has variance hs; dividing by √hs brings the scores back to variance ~1. Without it, large heads push
        # softmax into saturation, where one key takes all the weight and the gradients vanish.
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, Tq, hs) @ (B, hs, Tk) -> (B, Tq, Tk)

        # Padding is not text: a score of -inf becomes a weight of exactly 0 after softmax, so padded keys can
        # neither receive attention nor leak their values into the output. The mask marks keys (B, Tk), so it
        # broadcasts over the query axis: (B, 1, Tk). Every row keeps at least one real key ([CLS]).
        if key_padding_mask is not None:
            scores = scores.masked_fill(key_padding_mask[:, None, :], float("-inf"))

        # Softmax over the last axis, the keys: each query spreads one unit of attention over the keys it may see.
        weights = F.softmax(scores, dim=-1)  # (B, Tq, Tk), rows sum to 1
        # Attention dropout drops whole query→key links at random during training (and rescales the rest).
        weights = F.dropout(weights, p=dropout, training=dropout > 0)

        # Each query's output is the weighted average of the values it attends to.
        return weights @ v, weights  # (B, Tq, Tk) @ (B, Tk, hs) -> (B, Tq, hs)


class NaiveMultiHeadAttention(MultiHeadAttention):
    """Multi-head attention as the paper draws it: nh independent heads, concatenated, then projected by W_o.

    A Python loop over heads, each with its own three (C -> hs) projections. Together the heads' q-projections hold
    the same numbers as one (C -> C) W_q, split into nh row blocks; the efficient variant exploits exactly that.
    Kept slow on purpose: it is the baseline the other two are measured against.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__(d_model, n_heads, bias, dropout)
        self.heads = nn.ModuleList(AttentionHead(d_model, self.head_dim, bias) for _ in range(n_heads))
        self.out_proj = without_draws(nn.Linear, d_model, d_model, bias=bias)
        self.load_projections(init_projections(d_model, bias))

    def _canonical(self, get, views=False):
        # Head h owns rows h*hs:(h+1)*hs of W_q, W_k and W_v. Copying into the heads needs per-head views.
        def stacked(proj: str, attr: str):
            parts = [get(getattr(getattr(head, proj), attr)) for head in self.heads]
            return _Rows(parts) if views else torch.cat(parts)

        params = {f"W_{p}": stacked(p, "weight") for p in "qkv"} | {"W_o": get(self.out_proj.weight)}
        if self.bias:
            params |= {f"b_{p}": stacked(p, "bias") for p in "qkv"} | {"b_o": get(self.out_proj.bias)}
        return params

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False):
        dropout = self.dropout if self.training else 0.0
        outputs, weights = zip(*(head(query, key, value, key_padding_mask, dropout) for head in self.heads),
                               strict=True)
        y = torch.cat(outputs, dim=-1)  # nh × (B, Tq, hs) -> (B, Tq, C), head h in columns h*hs:(h+1)*hs
        # W_o mixes what the heads found: without it each output dimension would come from a single head.
        out = self.out_proj(y)  # (B, Tq, C)
        return out, torch.stack(weights, dim=1) if need_weights else None  # (B, nh, Tq, Tk)


class _Rows:
    """Row blocks of a matrix held by several tensors, written as if they were one (for `load_projections`)."""

    def __init__(self, parts: list[Tensor]):
        self.parts = parts

    def copy_(self, full: Tensor) -> None:
        for part, block in zip(self.parts, full.split([p.size(0) for p in self.parts]), strict=True):
            part.copy_(block)


class EfficientMultiHeadAttention(MultiHeadAttention):
    """Fused q/k/v projection, heads as a tensor dimension, `F.scaled_dot_product_attention` (flash/fused kernels).

    Weights are computed explicitly only when asked for (`need_weights=True`); SDPA never materialises them.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__(d_model, n_heads, bias, dropout)
        self.in_proj = without_draws(nn.Linear, d_model, 3 * d_model, bias=bias)  # [W_q; W_k; W_v] as torch packs it
        self.out_proj = without_draws(nn.Linear, d_model, d_model, bias=bias)
        self.load_projections(init_projections(d_model, bias))

    def _canonical(self, get, views=False):
        return _packed(get, self.in_proj.weight, self.in_proj.bias, self.out_proj)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False):
        B, Tq, C = query.shape
        Tk = key.size(1)
        nh, hs = self.n_heads, self.head_dim
        if query is key and key is value:  # self-attention: one (C -> 3C) matmul instead of three
            q, k, v = self.in_proj(query).split(C, dim=2)  # 3 × (B, T, C)
        else:
            W_q, W_kv = self.in_proj.weight.split([C, 2 * C])
            b_q, b_kv = self.in_proj.bias.split([C, 2 * C]) if self.bias else (None, None)
            q = F.linear(query, W_q, b_q)  # (B, Tq, C)
            if key is value:  # e.g. a few queries over a sequence (cls_only): keys and values in one matmul
                k, v = F.linear(key, W_kv, b_kv).split(C, dim=2)  # 2 × (B, Tk, C)
            else:
                (W_k, W_v), (b_k, b_v) = W_kv.split(C), (b_kv.split(C) if self.bias else (None, None))
                k, v = F.linear(key, W_k, b_k), F.linear(value, W_v, b_v)
        q = q.view(B, Tq, nh, hs).transpose(1, 2)  # (B, nh, Tq, hs)
        k = k.view(B, Tk, nh, hs).transpose(1, 2)  # (B, nh, Tk, hs)
        v = v.view(B, Tk, nh, hs).transpose(1, 2)  # (B, nh, Tk, hs)
        dropout = self.dropout if self.training else 0.0

        weights = None
        if need_weights:
            y, weights = explicit_attention(q, k, v, key_padding_mask, dropout)  # (B, nh, Tq, hs)
        else:
            # SDPA's bool mask means "may attend": invert ours, broadcast over heads and queries.
            attn_mask = None if key_padding_mask is None else ~key_padding_mask[:, None, None, :]  # (B, 1, 1, Tk)
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout)  # (B, nh, Tq, hs)
        y = y.transpose(1, 2).reshape(B, Tq, C)  # (B, Tq, nh, hs) -> (B, Tq, C)
        return self.out_proj(y), weights


def _packed(get, in_proj_weight: Tensor, in_proj_bias: Tensor | None, out_proj: nn.Linear) -> dict[str, Tensor]:
    """The canonical projections of torch's packed layout: in_proj = [W_q; W_k; W_v] (rows), out_proj = W_o."""
    params = dict(zip(("W_q", "W_k", "W_v"), get(in_proj_weight).chunk(3), strict=True))
    params["W_o"] = get(out_proj.weight)
    if in_proj_bias is not None:
        params |= dict(zip(("b_q", "b_k", "b_v"), get(in_proj_bias).chunk(3), strict=True))
        params["b_o"] = get(out_proj.bias)
    return params


def explicit_attention(q: Tensor, k: Tensor, v: Tensor, key_padding_mask: Tensor | None,
                       dropout: float) -> tuple[Tensor, Tensor]:
    """softmax(q kᵀ/√hs) v for all heads at once, returning the weights too (the naive head, batched over nh)."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, nh, Tq, hs) @ (B, nh, hs, Tk) -> (B, nh, Tq, Tk)
    if key_padding_mask is not None:
        scores = scores.masked_fill(key_padding_mask[:, None, None, :], float("-inf"))
    weights = F.dropout(F.softmax(scores, dim=-1), p=dropout, training=dropout > 0)  # (B, nh, Tq, Tk)
    return weights @ v, weights  # (B, nh, Tq, Tk) @ (B, nh, Tk, hs) -> (B, nh, Tq, hs)


class TorchMultiHeadAttention(MultiHeadAttention):
    """`nn.MultiheadAttention(batch_first=True)`, asked for weights only when needed.

    Its default `need_weights=True` silently takes a slow path that materialises (B, nh, Tq, Tk) weights and
    averages them over heads; with False it dispatches to scaled_dot_product_attention.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True, dropout: float = 0.0):
        super().__init__(d_model, n_heads, bias, dropout)
        self.mha = without_draws(nn.MultiheadAttention, d_model, n_heads, dropout=dropout, bias=bias, batch_first=True)
        self.load_projections(init_projections(d_model, bias))

    def _canonical(self, get, views=False):
        return _packed(get, self.mha.in_proj_weight, self.mha.in_proj_bias, self.mha.out_proj)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=False):
        # Same polarity as ours (True = ignore), so the mask passes through unchanged.
        return self.mha(query, key, value, key_padding_mask=key_padding_mask, need_weights=need_weights,
                        average_attn_weights=False)


VARIANTS: dict[str, type[MultiHeadAttention]] = dict(zip(
    ATTENTION_VARIANTS, (NaiveMultiHeadAttention, EfficientMultiHeadAttention, TorchMultiHeadAttention), strict=True))


def build_attention(variant: str, d_model: int, n_heads: int, bias: bool = True,
                    dropout: float = 0.0) -> MultiHeadAttention:
    assert variant in VARIANTS, f"unknown attention variant {variant!r}: {sorted(VARIANTS)}"
    return VARIANTS[variant](d_model, n_heads, bias=bias, dropout=dropout)
