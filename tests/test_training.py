"""The training loop on synthetic data: precision, divergence, devices."""

import io
import itertools
import os
import signal
import time

import numpy as np
import pytest
import torch

from conftest import Terminal
from mha_textclf import training
from mha_textclf.data.batches import collate, make_loader
from mha_textclf.errors import UserError
from mha_textclf.model import ModelConfig, TextClassifier
from mha_textclf.runs.checkpoint import load_checkpoint, load_training_state
from mha_textclf.settings import BY_TEXT_LENGTH, TrainerSettings
from mha_textclf.training import (
    DivergenceError,
    balanced_class_weights,
    evaluate,
    fit,
    lr_factor,
    resolve_device,
)

CPU = torch.device("cpu")


def toy_problem(n=64, seed=0):
    """Class = whether token 7 occurs: learnable in a few epochs by one attention layer."""
    g = torch.Generator().manual_seed(seed)
    ids, labels = [], []
    for i in range(n):
        words = torch.randint(10, 50, (int(torch.randint(4, 20, (1,), generator=g)),), generator=g).tolist()
        if i % 2:
            words[len(words) // 2] = 7
        ids.append([2, *words, 3])
        labels.append(i % 2)
    return ids, labels


def seeded_loaders(ids, labels, val=None):
    """Fresh training (shuffled by seed 0, the same order in every run of a test) and validation loaders: a run and
    its continuation each need their own."""
    val_ids, val_labels = val or (ids, labels)
    return make_loader(ids, labels, 8, 0, shuffle=True, seed=0), make_loader(val_ids, val_labels, 16, 0)


def interrupt_after(epoch):
    """An on_epoch_end callback that sends this process Ctrl-C once `epoch` is finished."""
    def callback(row):
        if row["epoch"] == epoch:
            os.kill(os.getpid(), signal.SIGINT)
    return callback


# No dropout of any kind, no bigrams: the model the tests reason about unless they ask for more.
PLAIN = {"token_dropout": 0.0, "token_dropout_keep": 0, "embedding_dropout": 0.0, "mlp_dropout": 0.0,
         "bigram_buckets": 0}

def model(**overrides):
    torch.manual_seed(0)
    return TextClassifier(ModelConfig(**PLAIN | overrides,
                                      attention="efficient", vocab_size=50,
                                      n_classes=2, d_model=16, n_heads=2, mlp_hidden=16, pe=False, max_length=32,
                                      pad_id=0))


def plain_trainer(**overrides) -> TrainerSettings:
    """The trainer settings with a plain constant learning rate, so that each test sees only what it changes (and
    those that adapt to a corpus at the values of short texts)."""
    short_texts = {k.removeprefix("trainer."): values[0] for k, values in BY_TEXT_LENGTH.items()
                   if k.startswith("trainer.")}
    return TrainerSettings(**short_texts | {"schedule": "constant", "warmup_epochs": 0.0, "rdrop": 0.0} | overrides)


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fit_learns_the_toy_problem(precision):
    ids, labels = toy_problem()
    train = make_loader(ids, labels, 8, 0, shuffle=True, seed=0)
    result = fit(model(), train, make_loader(ids, labels, 16, 0),
                 plain_trainer(epochs=15, lr=1e-2, weight_decay=0.0, precision=precision), CPU)
    assert len(result.history) == 15 and result.interrupted is None
    assert result.history[-1]["train_loss"] < 0.5 * result.history[0]["train_loss"]
    assert result.history[-1]["val_accuracy"] >= 0.9


@pytest.mark.slow
def test_the_training_bar_shows_on_a_terminal_and_not_in_a_redirected_log(monkeypatch):
    """Training shows a progress bar on a terminal and none in a redirected log (training.py: "disable=None: a bar on a
    terminal only; redirected to a file, its redraws would bury the log"). Each epoch's bar, drawn at once here, is on a
    terminal and nothing is written into a file (round 17: a bar forced on with disable=False passed; the tokenizer's
    bars have their own test)."""
    real_tqdm = training.tqdm
    ids, labels = toy_problem(n=16)
    for stream in (Terminal(), io.StringIO()):
        def drawn(*args, stream=stream, **kwargs):  # the bar asked for, shown at once, on this stream
            return real_tqdm(*args, file=stream, mininterval=0, **kwargs)

        monkeypatch.setattr(training, "tqdm", drawn)
        fit(model(), *seeded_loaders(ids, labels), plain_trainer(epochs=2), CPU)
        written = stream.getvalue()
        if stream.isatty():
            assert "epoch 1/2" in written and "epoch 2/2" in written, written
        else:
            assert written == ""


@pytest.mark.slow
@pytest.mark.parametrize(("precision", "dtype"), [("fp32", torch.float32), ("bf16", torch.bfloat16)])
def test_bf16_computes_the_model_in_bfloat16_and_the_loss_in_float32(precision, dtype, monkeypatch):
    """trainer.precision=bf16: matmuls and attention in bfloat16, the loss in float32 (training.autocast), in the
    training steps and in validation alike; fp32 computes everything in float32."""
    import torch.nn.functional as F

    ids, labels = toy_problem()
    net, logits, losses = model(), [], []
    net.register_forward_hook(lambda module, args, out: logits.append((module.training, out.dtype)))
    real_cross_entropy = F.cross_entropy

    def cross_entropy(*args, **kwargs):
        loss = real_cross_entropy(*args, **kwargs)
        losses.append(loss.dtype)
        return loss

    monkeypatch.setattr(F, "cross_entropy", cross_entropy)
    fit(net, make_loader(ids, labels, 16, 0), make_loader(ids, labels, 32, 0),
        plain_trainer(epochs=1, precision=precision), CPU)
    assert sorted(set(logits)) == [(False, dtype), (True, dtype)]  # validation, training
    assert set(losses) == {torch.float32}


@pytest.mark.unit
@pytest.mark.parametrize(("precision", "on"), [("bf16", True), ("fp32", False)])
def test_on_a_gpu_bf16_autocasts_on_cuda_itself(precision, on, monkeypatch):
    """On a GPU, `trainer.precision=bf16` autocasts; --help: "bf16 autocasts matmuls to bfloat16 (for CUDA; ...)".
    Autocast is per device type: the CPU's would leave a GPU's matmuls in float32. Faked: a GPU that torch.cuda says is
    present and supports bfloat16; training.autocast for a CUDA device turns on CUDA's autocast to bfloat16 with bf16,
    and nothing with fp32."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: True)
    for device in (torch.device("cuda"), torch.device("cuda:0")):
        with training.autocast(device, precision):
            assert torch.is_autocast_enabled("cuda") == on
            assert not torch.is_autocast_enabled("cpu")
            if on:
                assert torch.get_autocast_dtype("cuda") == torch.bfloat16
    assert not torch.is_autocast_enabled("cuda")


@pytest.mark.slow
def test_a_diverging_loss_names_epoch_and_step_and_keeps_finished_epochs():
    ids, labels = toy_problem()
    net = model()
    rows = []

    def poison_after_first_epoch(row):
        rows.append(row)
        with torch.no_grad():
            net.classifier[0].weight.fill_(float("nan"))

    with pytest.raises(DivergenceError, match="became nan at epoch 2, step 1"):
        fit(net, make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
            plain_trainer(epochs=3, lr=1e-3), CPU, on_epoch_end=poison_after_first_epoch)
    assert [r["epoch"] for r in rows] == [1]


@pytest.mark.slow
def test_an_infinite_loss_stops_the_run_as_a_nan_does(monkeypatch):
    """The loss becoming NaN *or inf* stops the run, naming the epoch and step."""
    import torch.nn.functional as F

    ids, labels = toy_problem()
    real_cross_entropy, rows = F.cross_entropy, []

    def cross_entropy(*args, **kwargs):  # from epoch 2 on, an infinite loss (finite weights, until its step)
        loss = real_cross_entropy(*args, **kwargs)
        return loss * float("inf") if rows and torch.is_grad_enabled() else loss

    monkeypatch.setattr(F, "cross_entropy", cross_entropy)
    with pytest.raises(DivergenceError, match="became inf at epoch 2, step 1"):
        fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
            plain_trainer(epochs=3, lr=1e-3), CPU, on_epoch_end=rows.append)
    assert [r["epoch"] for r in rows] == [1]


@pytest.mark.unit
def test_balanced_class_weights_are_n_texts_over_n_classes_times_the_class_count():
    """trainer.class_weights=balanced weighs each class by n_texts / (n_classes × its count), scikit-learn's definition
    (a class the labels lack weighs 0)."""
    from sklearn.utils.class_weight import compute_class_weight

    labels = [0] * 6 + [1] * 3 + [3]
    weights = balanced_class_weights(labels, 4)
    assert weights.tolist() == pytest.approx([10 / (4 * 6), 10 / (4 * 3), 0.0, 10 / (4 * 1)])
    assert weights[[0, 1, 3]].tolist() == pytest.approx(
        compute_class_weight("balanced", classes=np.array([0, 1, 3]), y=labels) * 3 / 4)  # sklearn's, over 3 classes


@pytest.mark.slow
def test_every_batch_goes_to_the_device_without_blocking_in_training_and_in_validation(monkeypatch):
    """On a GPU, batches are pinned and copied without blocking: each batch's token ids, padding mask and labels move
    with non_blocking=True, the training batches and the validation batches alike (a copy from pinned memory then
    overlaps the GPU's work; on the CPU it is the same copy)."""
    moved, real_to = [], torch.Tensor.to

    def to(tensor, *args, **kwargs):
        if args and args[0] == CPU:  # a copy to the run's device
            moved.append((tensor.dtype, tuple(tensor.shape), kwargs.get("non_blocking", False)))
        return real_to(tensor, *args, **kwargs)

    ids, labels = toy_problem(n=12)
    monkeypatch.setattr(torch.Tensor, "to", to)
    fit(model(), make_loader(ids, labels, 4, 0), make_loader(ids, labels, 6, 0), plain_trainer(epochs=1), CPU)
    batches = [(dtype, shape, blocking) for dtype, shape, blocking in moved if dtype in (torch.long, torch.bool)]
    labels_moved = [shape for dtype, shape, _ in batches if dtype == torch.long and len(shape) == 1]
    assert labels_moved == [(4,)] * 3 + [(6,)] * 2  # 3 training batches, then 2 validation batches
    assert len(batches) == 3 * len(labels_moved)  # each with its ids and padding mask
    assert all(non_blocking for _, _, non_blocking in batches), batches


@pytest.mark.unit
def test_unknown_device_is_a_clear_error():
    with pytest.raises(UserError, match="not a device name"):
        resolve_device("tpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


@pytest.mark.unit
@pytest.mark.parametrize("available", [True, False])
def test_device_auto_picks_cuda_where_pytorch_sees_a_gpu_and_the_cpu_elsewhere(available, monkeypatch):
    """On a GPU, `device=auto` picks CUDA; --help: device "auto (CUDA when available)". Both answers, whatever this
    machine has (asked of torch.cuda.is_available, which is all auto may ask)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    assert resolve_device("auto") == torch.device("cuda" if available else "cpu")
    assert resolve_device("cpu") == CPU  # an explicit cpu stays the CPU on a GPU machine too


@pytest.mark.unit
def test_where_a_gpu_is_cuda_and_cuda_n_name_the_gpu_asked_for(monkeypatch):
    """train --help: device "auto (CUDA when available) | cpu | cuda | cuda:N": on a machine with GPUs (faked:
    torch.cuda says one is present), cuda is the current GPU and cuda:N the N-th, not the first."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert resolve_device("cuda") == torch.device("cuda")
    assert [resolve_device(f"cuda:{n}") for n in (0, 1, 3)] == [torch.device("cuda", n) for n in (0, 1, 3)]


@pytest.mark.unit
@pytest.mark.parametrize("name", ["cuda", "cuda:1"])
def test_cuda_without_a_gpu_is_refused_with_the_two_devices_that_run(name, monkeypatch):
    """`device=cuda` without a GPU says "PyTorch sees no CUDA GPU; use device=cpu or device=auto": the setting named,
    and both ways to run, not only that the GPU is missing (test_cli.py reads the first half through the command
    line, where there is no GPU)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(UserError) as refused:
        resolve_device(name)
    message = str(refused.value)
    assert message.startswith(f"device={name} but PyTorch sees no CUDA GPU")
    assert message.endswith("; use device=cpu or device=auto.")
    assert resolve_device("auto") == CPU  # (the advice holds: auto runs here)


@pytest.mark.slow
def test_a_resumed_run_interrupted_before_its_first_epoch_ends_goes_back_to_its_last_finished_epoch(tmp_path):
    ids, labels = toy_problem()
    first = model()
    fit(first, *seeded_loaders(ids, labels), plain_trainer(epochs=1, lr=1e-2), CPU, state_path=tmp_path / "last.pt")
    state = load_training_state(tmp_path / "last.pt")

    resumed, calls = model(), []
    forward = resumed.forward

    def interrupting_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # mid-epoch: the new run folder has no last.pt yet
            os.kill(os.getpid(), signal.SIGINT)
        return forward(*args, **kwargs)

    resumed.forward = interrupting_forward
    result = fit(resumed, *seeded_loaders(ids, labels), plain_trainer(epochs=3, lr=1e-2), CPU, resume_state=state,
                 state_path=tmp_path / "new" / "last.pt")
    assert result.interrupted == "SIGINT" and [r["epoch"] for r in result.history] == [1]
    assert result.reported_epoch == 1
    for name, tensor in resumed.state_dict().items():
        assert torch.equal(tensor, state["model"][name]), name  # back to where the resumed run started


@pytest.mark.unit
def test_schedule_warms_up_then_decays():
    total, warmup = 100, 10
    factors = {name: [lr_factor(step, total, warmup, name) for step in range(total)] for name in
               ("constant", "linear", "cosine")}
    for f in factors.values():
        assert f[0] == pytest.approx(0.1) and f[9] == pytest.approx(1.0)  # linear warm-up to the base rate
        assert all(a <= b for a, b in itertools.pairwise(f[:10]))
    assert factors["constant"][50] == 1.0
    assert factors["linear"][55] == pytest.approx(0.5) and factors["cosine"][55] == pytest.approx(0.5)
    assert factors["cosine"][30] > factors["linear"][30]  # cosine stays high longer...
    assert factors["cosine"][-1] < 0.001 and factors["linear"][-1] < 0.02  # ...and both end near zero


@pytest.mark.slow
def test_the_schedule_moves_the_learning_rate_at_every_step():
    """history.csv's lr is the rate of each epoch's first step: warm-up over the first epoch, then cosine decay,
    stepped per optimiser step, not per epoch (8 steps an epoch here)."""
    ids, labels = toy_problem()
    result = fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
                 plain_trainer(epochs=4, lr=1e-2, schedule="cosine", warmup_epochs=0.5), CPU)
    assert [row["lr"] for row in result.history] == pytest.approx(
        [1e-2 * lr_factor(8 * epoch, 32, 4, "cosine") for epoch in range(4)])


@pytest.mark.slow
@pytest.mark.parametrize("final_weights", ["best", "last"])
def test_early_stopping_writes_best_pt_and_the_model_ends_with_the_final_weights(tmp_path, final_weights):
    ids, labels = toy_problem()
    # A tiny, noisy validation set and a high learning rate: the validation loss soon stops improving.
    val = make_loader(ids[:6], [1 - y for y in labels[:6]], 16, 0)
    net = model()
    result = fit(net, make_loader(ids, labels, 8, 0, shuffle=True), val,
                 plain_trainer(epochs=30, lr=3e-2, patience=2, final_weights=final_weights), CPU,
                 best_path=tmp_path / "best.pt", state_path=tmp_path / "last.pt")
    losses = [row["val_loss"] for row in result.history]
    assert result.stopped_early and len(result.history) < 30
    assert result.best_epoch == 1 + losses.index(min(losses))
    assert len(result.history) == result.best_epoch + 2  # patience 2: two epochs without improvement
    best, _ = load_checkpoint(tmp_path / "best.pt")
    last = load_training_state(tmp_path / "last.pt")["model"]
    ending = best.state_dict() if final_weights == "best" else last
    assert result.reported_epoch == (result.best_epoch if final_weights == "best" else len(result.history))
    assert not torch.equal(best.state_dict()["embedding.weight"], last["embedding.weight"])
    for name, tensor in net.state_dict().items():  # the model ends with the weights final_weights names
        assert torch.equal(tensor, ending[name]), name


@pytest.mark.slow
def test_best_pt_is_on_disk_as_soon_as_its_epoch_finishes(tmp_path):
    """best.pt holds the weights of the epoch with the lowest validation loss, saved as soon as that epoch finished: a
    run killed at any later moment keeps it. At the end of every epoch (on_epoch_end runs before the next starts),
    best.pt already holds the weights of the best epoch so far."""
    ids, labels = toy_problem()
    val = make_loader(ids[:6], [1 - y for y in labels[:6]], 16, 0)  # its loss soon rises: later epochs are worse
    net, seen = model(), []

    def check_best_pt(row):
        best, _ = load_checkpoint(tmp_path / "best.pt")
        seen.append((row["epoch"], row["val_loss"], {k: v.clone() for k, v in net.state_dict().items()},
                     best.state_dict()))

    result = fit(net, make_loader(ids, labels, 8, 0, shuffle=True), val,
                 plain_trainer(epochs=6, lr=3e-2), CPU, best_path=tmp_path / "best.pt", on_epoch_end=check_best_pt)
    assert len(seen) == 6 and result.best_epoch < 6  # (so that a best.pt written at the end would show)
    best_so_far = None
    for epoch, loss, weights, on_disk in seen:
        if best_so_far is None or loss < best_so_far[1]:
            best_so_far = (epoch, loss, weights)
        assert all(torch.equal(on_disk[k], best_so_far[2][k]) for k in weights), f"best.pt after epoch {epoch}"


@pytest.mark.slow
@pytest.mark.parametrize("final_weights", ["last", "best"])
def test_an_interrupted_run_ends_with_its_last_finished_epoch_or_with_best_the_best(tmp_path, final_weights):
    """Ctrl-C stops after the current step and writes the reports for the last finished epoch (or the best, with
    trainer.final_weights=best), as an uninterrupted run would: here after epoch 4 of 30, with the best epoch
    earlier."""
    ids, labels = toy_problem()
    val = make_loader(ids[:6], [1 - y for y in labels[:6]], 16, 0)  # its loss soon rises: the best epoch is early
    net = model()

    result = fit(net, make_loader(ids, labels, 8, 0, shuffle=True), val,
                 plain_trainer(epochs=30, lr=3e-2, final_weights=final_weights), CPU, best_path=tmp_path / "best.pt",
                 state_path=tmp_path / "last.pt", on_epoch_end=interrupt_after(4))
    assert result.interrupted == "SIGINT" and len(result.history) == 4 and result.best_epoch < 4
    best, _ = load_checkpoint(tmp_path / "best.pt")
    ending = best.state_dict() if final_weights == "best" else load_training_state(tmp_path / "last.pt")["model"]
    assert result.reported_epoch == (result.best_epoch if final_weights == "best" else 4)
    for name, tensor in net.state_dict().items():
        assert torch.equal(tensor, ending[name]), name


@pytest.mark.slow
def test_label_smoothing_changes_the_training_loss_only():
    ids, labels = toy_problem()
    rows = {}
    for smoothing in (0.0, 0.3):  # lr = 0: the model never changes, so train and val see the same function
        result = fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
                     plain_trainer(epochs=1, lr=0.0, weight_decay=0.0, label_smoothing=smoothing), CPU)
        rows[smoothing] = result.history[0]
    assert rows[0.0]["train_loss"] == pytest.approx(rows[0.0]["val_loss"], rel=1e-5)
    assert rows[0.3]["val_loss"] == pytest.approx(rows[0.0]["val_loss"], rel=1e-6)
    assert rows[0.3]["train_loss"] != pytest.approx(rows[0.3]["val_loss"], rel=1e-3)


@pytest.mark.slow
def test_the_optimiser_is_adamw_with_the_settings_lr_and_decoupled_weight_decay(tmp_path):
    """The optimiser of a model without a bigram table is AdamW, with the settings' learning rate and weight decay. The
    optimiser's state in last.pt is AdamW's: Adam would add the weight decay to the gradient (decoupled_weight_decay
    false), its state otherwise the same."""
    ids, labels = toy_problem()
    fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
        plain_trainer(epochs=1, lr=1e-2, weight_decay=0.05), CPU, state_path=tmp_path / "last.pt")
    group = load_training_state(tmp_path / "last.pt")["optimizer"]["param_groups"][0]
    assert group["decoupled_weight_decay"] is True
    assert group["weight_decay"] == 0.05 and group["initial_lr"] == 1e-2


@pytest.mark.slow
def test_gradient_clipping_reaches_the_update():
    ids, labels = toy_problem()
    moved = {}
    for clip in (None, 1e-12):
        net = model()
        before = torch.cat([p.detach().flatten().clone() for p in net.parameters()])
        fit(net, make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
            plain_trainer(epochs=1, lr=1e-2, weight_decay=0.0, grad_clip=clip), CPU)
        moved[clip] = (torch.cat([p.detach().flatten() for p in net.parameters()]) - before).abs().max().item()
    # Adam normalises gradient scale away, except below its eps: clipped to 1e-12 the steps all but vanish.
    assert moved[1e-12] < 1e-3 * moved[None]


@pytest.mark.unit
def test_embedding_and_mlp_dropout_act_in_training_only():
    net = model(embedding_dropout=0.5, mlp_dropout=0.5)
    ids = torch.randint(10, 50, (4, 12))
    net.eval()
    assert torch.equal(net(ids), net(ids))
    net.train()
    assert not torch.allclose(net(ids), net(ids))


@pytest.mark.unit
def test_balanced_class_weights_are_scikit_learns():
    from sklearn.utils.class_weight import compute_class_weight

    labels = [0] * 30 + [1] * 6 + [2] * 4
    expected = compute_class_weight("balanced", classes=np.arange(3), y=labels)
    torch.testing.assert_close(balanced_class_weights(labels, 3), torch.tensor(expected, dtype=torch.float32))
    assert balanced_class_weights([0, 0, 1], 3)[2] == 0  # a class the split lacks weighs nothing


@pytest.mark.unit
def test_weighted_evaluation_is_the_weighted_mean_cross_entropy():
    ids, labels = toy_problem(n=20)
    net = model().eval()
    weights = torch.tensor([0.3, 2.0])
    result = evaluate(net, make_loader(ids, labels, 6, 0), CPU, class_weights=weights)
    batch = collate(list(zip(ids, labels, strict=True)), 0)
    with torch.no_grad():
        logits = net(batch["input_ids"], batch["padding_mask"])
    expected = torch.nn.functional.cross_entropy(logits, batch["labels"], weight=weights)  # the whole set at once
    assert result.loss == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.unit
def test_evaluation_attends_with_the_cls_query_alone_over_the_real_tokens_under_inference_mode():
    """Evaluation has no token dropout (compaction drops padding only), computes the [CLS] query alone, under
    torch.inference_mode (no autograd bookkeeping at all); the model is not cls_only, so training would attend with
    every query."""
    ids, labels = toy_problem(n=20)
    net = model(token_dropout=0.5)
    assert not net.config.cls_only
    calls = []

    def record(module, args, kwargs, output):
        query, key = args[0], args[1]
        calls.append((query.size(1), key.size(1), torch.is_inference_mode_enabled()))

    net.attention.register_forward_hook(record, with_kwargs=True)
    loader = make_loader(ids, labels, 6, 0)
    evaluate(net, loader, CPU)
    longest = [max(len(ids[i]) for i in range(start, min(start + 6, 20))) for start in range(0, 20, 6)]
    assert calls == [(1, n, True) for n in longest]  # one query, over every token: no token dropout


@pytest.mark.slow
def test_gradient_clipping_scales_the_whole_gradient_down_to_the_max_norm(monkeypatch):
    """trainer.grad_clip is a max global gradient norm: the optimiser step gets the gradient scaled as a whole, its
    direction kept, not clamped entry by entry. The reference: the first batch's gradient, computed here."""
    ids, labels = toy_problem()
    reference = model()
    batch = collate(list(zip(ids[:8], labels[:8], strict=True)), 0)
    loss = torch.nn.functional.cross_entropy(reference(batch["input_ids"], batch["padding_mask"]), batch["labels"])
    loss.backward()
    gradient = [p.grad for p in reference.parameters()]
    norm = torch.linalg.vector_norm(torch.cat([g.flatten() for g in gradient])).item()
    clip = norm / 10  # well below the norm: clipping acts, and most entries are still below the clip value
    stepped_with = []
    real_step = torch.optim.AdamW.step

    def recording_step(self, *args, **kwargs):
        stepped_with.append([p.grad.clone() for p in self.param_groups[0]["params"]])
        return real_step(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", recording_step)
    fit(model(), make_loader(ids, labels, 8, 0), make_loader(ids, labels, 16, 0),  # batches in data order
        plain_trainer(epochs=1, lr=1e-2, grad_clip=clip), CPU)
    assert len(stepped_with) == 8
    for got, expected in zip(stepped_with[0], gradient, strict=True):
        torch.testing.assert_close(got, expected * (clip / norm))


@pytest.mark.slow
def test_weight_decay_is_adamws_decoupled_decay():
    """One full-batch step from the same weights with and without trainer.weight_decay: the gradient step is the same,
    so the two differ by exactly lr × weight_decay × the weights (AdamW's decoupled decay)."""
    ids, labels = toy_problem()
    lr, decay, after = 1e-2, 0.5, {}
    for weight_decay in (0.0, decay):
        net = model()
        before = {name: p.detach().clone() for name, p in net.named_parameters()}
        fit(net, make_loader(ids, labels, 64, 0), make_loader(ids, labels, 64, 0),
            plain_trainer(epochs=1, lr=lr, weight_decay=weight_decay), CPU)
        after[weight_decay] = {name: p.detach() for name, p in net.named_parameters()}
    for name, weights in before.items():
        torch.testing.assert_close(after[decay][name] - after[0.0][name], -lr * decay * weights, rtol=0, atol=1e-6)


@pytest.mark.unit
@pytest.mark.parametrize(("setting", "where", "elsewhere"), [("embedding_dropout", "attention", "classifier"),
                                                             ("mlp_dropout", "classifier", "attention")])
def test_each_dropout_acts_where_its_setting_says(setting, where, elsewhere):
    """model.embedding_dropout zeroes entries of the token vectors attention reads (its values; positional encoding is
    added to the queries and keys after it), model.mlp_dropout entries of the [CLS] vector entering the classifier;
    each alone leaves the other's input whole."""
    torch.manual_seed(0)
    net = TextClassifier(ModelConfig(attention="efficient", vocab_size=50, n_classes=2, d_model=16, n_heads=2,
                                     mlp_hidden=16, pe=True, max_length=32, pad_id=0, token_dropout=0.0,
                                     bigram_buckets=0, pe_gate=False,  # the encoding whole, not gated to 0
                                     **{"embedding_dropout": 0.0, "mlp_dropout": 0.0} | {setting: 0.5})).train()
    inputs = {}

    def record(name):
        def hook(module, args):
            # The first call's input (attention's: its values, the token vectors it reads); returning nothing
            # leaves it as it is.
            inputs.setdefault(name, args[2] if name == "attention" else args[0])
        return hook

    for name in (where, elsewhere):
        getattr(net, name).register_forward_pre_hook(record(name))
    net(torch.randint(10, 50, (4, 12), generator=torch.Generator().manual_seed(0)))
    zeros = {name: (x == 0).float().mean().item() for name, x in inputs.items()}
    assert 0.3 < zeros[where] < 0.7 and zeros[elsewhere] == 0, zeros


@pytest.mark.slow
def test_patience_that_runs_out_at_the_last_epoch_is_no_early_stop():
    """At lr 0 the validation loss is never lower than after epoch 1. Patience 2 ends a 4-epoch run after epoch 3,
    early; a 3-epoch run ends there too, but it did every epoch it was asked for."""
    ids, labels = toy_problem()
    for epochs, stopped_early in ((4, True), (3, False)):
        result = fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
                     plain_trainer(epochs=epochs, lr=0.0, patience=2), CPU)
        assert (len(result.history), result.best_epoch, result.stopped_early) == (3, 1, stopped_early), epochs


@pytest.mark.slow
def test_every_epoch_trains_in_training_mode_and_every_validation_evaluates_in_eval_mode():
    """Token dropout hides a different share of each text at every training pass, so that more passes keep finding
    something new; model.token_dropout's help: "while training, hide each token but [CLS]". Each epoch's training steps
    run the model in training mode (token dropout and every dropout on), after the previous epoch's validation put it in
    eval mode, and every validation runs it in eval mode without gradients."""
    ids, labels = toy_problem(n=32)
    net, calls = model(token_dropout=0.5), []
    net.register_forward_pre_hook(lambda module, args: calls.append((module.training, torch.is_grad_enabled())))
    fit(net, make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
        plain_trainer(epochs=3, lr=1e-3), CPU)
    steps, validation = 4, 2  # batches per epoch: 32 texts in 8s to train, in 16s to validate
    assert calls == [(True, True)] * steps + [(False, False)] * validation + (
        [(True, True)] * steps + [(False, False)] * validation) * 2


@pytest.mark.slow
def test_a_run_stopped_by_a_signal_as_its_patience_ran_out_continues_to_the_uninterrupted_early_stop(tmp_path):
    """Running the same command again continues an unfinished run after the last finished epoch (last.pt), in place,
    with history and metrics equal to an uninterrupted run's; last.pt holds the early-stopping state. At lr 0 patience 2
    ends a 6-epoch run after epoch 3; a Ctrl-C during that epoch's validation leaves last.pt at epoch 3 with patience
    spent, and the run continued from it stops there too, early, training nothing more."""
    ids, labels = toy_problem()

    trainer = plain_trainer(epochs=6, lr=0.0, patience=2)
    uninterrupted = fit(model(), *seeded_loaders(ids, labels), trainer, CPU)
    assert (len(uninterrupted.history), uninterrupted.best_epoch, uninterrupted.stopped_early) == (3, 1, True)

    stopped = fit(model(), *seeded_loaders(ids, labels), trainer, CPU, state_path=tmp_path / "last.pt",
                  on_epoch_end=interrupt_after(3))
    assert stopped.interrupted == "SIGINT" and not stopped.stopped_early and len(stopped.history) == 3
    state = load_training_state(tmp_path / "last.pt")
    assert state["epoch"] == 3 and state["best"]["epoch"] == 1

    trained = []
    continued = fit(model(), *seeded_loaders(ids, labels), trainer, CPU, resume_state=state,
                    state_path=tmp_path / "last.pt", on_epoch_end=trained.append)
    assert trained == []  # patience had run out: no epoch 4
    assert [r["epoch"] for r in continued.history] == [r["epoch"] for r in uninterrupted.history] == [1, 2, 3]
    assert [r["val_loss"] for r in continued.history] == [r["val_loss"] for r in uninterrupted.history]
    assert (continued.best_epoch, continued.reported_epoch, continued.stopped_early, continued.interrupted) == (
        uninterrupted.best_epoch, uninterrupted.reported_epoch, True, None)


@pytest.mark.slow
def test_a_continued_run_counts_its_training_seconds_from_the_first_epoch_of_the_run_not_of_the_attempt(tmp_path):
    """history.csv holds elapsed_train_seconds, and time_to_accuracy is the training seconds until validation accuracy
    first reached each level; a continued run's history equals an uninterrupted run's. After a resume the seconds so far
    go on from the epochs last.pt holds: every row's elapsed_train_seconds is the sum of the train_seconds of its epoch
    and all before it, those of the first attempt included."""
    ids, labels = toy_problem()

    fit(model(), *seeded_loaders(ids, labels), plain_trainer(epochs=2, lr=1e-2), CPU, state_path=tmp_path / "last.pt")
    state = load_training_state(tmp_path / "last.pt")
    result = fit(model(), *seeded_loaders(ids, labels), plain_trainer(epochs=4, lr=1e-2), CPU, resume_state=state)
    assert [r["epoch"] for r in result.history] == [1, 2, 3, 4]
    assert result.history[:2] == state["history"]
    assert [r["elapsed_train_seconds"] for r in result.history] == pytest.approx(
        list(itertools.accumulate(r["train_seconds"] for r in result.history)), rel=1e-9)


@pytest.mark.slow
def test_a_continued_run_keeps_the_best_epoch_s_weights_for_best_pt_and_for_final_weights_best(tmp_path):
    """last.pt holds the early-stopping state; best.pt the weights of the epoch with the lowest validation loss, which
    trainer.final_weights=best goes back to; and a run continued from last.pt (in place or into a new folder) ends with
    the history and metrics of an uninterrupted run. Here the best epoch comes before the interruption after epoch 4 of
    6: the continued run's best.pt and its reported model hold that epoch's weights, as the uninterrupted run's do, not
    those of the epoch it continued from."""
    ids, labels = toy_problem()
    val = ids[:6], [1 - y for y in labels[:6]]  # its loss soon rises: the best epoch is early

    trainer = plain_trainer(epochs=6, lr=3e-2, final_weights="best")
    for folder in ("full", "part", "new"):
        (tmp_path / folder).mkdir()
    reference = model()
    uninterrupted = fit(reference, *seeded_loaders(ids, labels, val), trainer, CPU,
                        best_path=tmp_path / "full" / "best.pt")

    fit(model(), *seeded_loaders(ids, labels, val), trainer, CPU, state_path=tmp_path / "part" / "last.pt",
        on_epoch_end=interrupt_after(4))
    state = load_training_state(tmp_path / "part" / "last.pt")
    assert state["epoch"] == 4 and state["best"]["epoch"] == uninterrupted.best_epoch < 4

    continued = model()
    result = fit(continued, *seeded_loaders(ids, labels, val), trainer, CPU, resume_state=state,
                 best_path=tmp_path / "new" / "best.pt")
    assert (result.best_epoch, result.reported_epoch) == (uninterrupted.best_epoch, uninterrupted.best_epoch)
    best, expected = (load_checkpoint(tmp_path / folder / "best.pt")[0].state_dict() for folder in ("new", "full"))
    for name, tensor in expected.items():
        assert torch.equal(best[name], tensor), f"best.pt: {name}"
        assert torch.equal(continued.state_dict()[name], reference.state_dict()[name]), f"reported model: {name}"


@pytest.mark.slow
def test_an_epochs_training_loss_is_the_mean_cross_entropy_over_its_texts_not_over_its_batches():
    """history.csv's `train_loss` is measured as trained, with token dropout hiding 75% of each text by default, so it
    sits above the validation loss (evaluated on whole texts): the same mean cross-entropy per text as val_loss, only on
    what training saw. At lr 0 without any dropout the model never changes, so an epoch over the training texts gives
    their validation loss; 20 texts in batches of 8 leave a last batch of 4, which a mean of the batches' losses would
    weigh as much as a full one."""
    ids, labels = toy_problem(n=20)
    result = fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
                 plain_trainer(epochs=1, lr=0.0, weight_decay=0.0), CPU)
    per_text = evaluate(model(), make_loader(ids, labels, 1, 0), CPU).loss
    batches = [evaluate(model(), make_loader(ids[i:i + 8], labels[i:i + 8], 8, 0), CPU).loss for i in (0, 8, 16)]
    assert result.history[0]["train_loss"] == pytest.approx(per_text, rel=1e-5)
    assert result.history[0]["val_loss"] == pytest.approx(per_text, rel=1e-5)
    assert np.mean(batches) != pytest.approx(per_text, rel=1e-3)  # (so that a mean over batches would show)


@pytest.mark.slow
def test_train_and_eval_seconds_time_the_training_pass_and_the_validation_apart(monkeypatch):
    """`train_seconds` counts the training passes alone and `eval_seconds` the validation after each epoch, timed apart,
    and elapsed_train_seconds adds up the training passes. On a clock that moves only when the test says (1 s per
    optimiser step, 0.25 s per validation), each epoch of 8 steps trains 8 s and validates 0.25 s, whatever the
    machine's load."""
    clock = {"now": 0.0}
    monkeypatch.setattr(time, "perf_counter", lambda: clock["now"])
    real_evaluate = evaluate

    def validating(*args, **kwargs):
        clock["now"] += 0.25
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(training, "evaluate", validating)
    ids, labels = toy_problem()
    result = fit(model(), make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
                 plain_trainer(epochs=3, lr=1e-3), CPU,
                 on_step=lambda step, values: clock.update(now=clock["now"] + 1.0))
    assert [(row["train_seconds"], row["eval_seconds"], row["elapsed_train_seconds"]) for row in result.history] == [
        (8.0, 0.25, 8.0), (8.0, 0.25, 16.0), (8.0, 0.25, 24.0)]


@pytest.mark.unit
def test_evaluate_refuses_a_shuffled_loader_whose_rows_it_could_not_place_in_their_split():
    loader = make_loader([[1, 2, 3], [1, 4]], [0, 1], batch_size=2, pad_id=0, shuffle=True)
    with pytest.raises(ValueError, match="fixed order"):
        evaluate(torch.nn.Linear(1, 1), loader, torch.device("cpu"))


@pytest.mark.slow
def test_a_bigram_table_moves_only_the_rows_of_the_pairs_in_each_batch():
    """The hashed bigram table learns lazily: an optimiser step moves the rows of the pairs its batch holds and leaves
    every other row as it was, where AdamW's moments would move a row whose pair occurred a step before."""
    ids, labels = toy_problem(n=32)
    net = model(bigram_buckets=4096)
    loader = make_loader(ids, labels, 8, 0)  # in order: batch k holds texts 8k..8k+7
    batches = list(loader)
    after = []  # the table after each step
    fit(net, loader, make_loader(ids, labels, 16, 0), plain_trainer(epochs=1, lr=1e-2), CPU,
        on_step=lambda step, values: after.append(net.bigrams.weight.detach().clone()))
    assert len(after) == len(batches) == 4
    for previous, table, batch in zip(after[:-1], after[1:], batches[1:], strict=True):
        rows = torch.zeros(table.size(0), dtype=torch.bool)
        rows[net.bigram_ids(batch["input_ids"]).flatten()] = True
        rows[0] = False  # "no pair": its row stays zero
        moved = (table != previous).any(dim=1)
        assert torch.equal(moved, rows)


@pytest.mark.slow
def test_a_run_with_a_bigram_table_continued_from_last_pt_equals_the_uninterrupted_run(tmp_path):
    """last.pt holds the table's optimiser too: stopped after epoch 1 and continued, a run with a bigram table ends with
    the uninterrupted run's history and weights."""
    ids, labels = toy_problem()
    trainer = plain_trainer(epochs=3, lr=1e-2)
    reference = model(bigram_buckets=512)
    uninterrupted = fit(reference, *seeded_loaders(ids, labels), trainer, CPU)
    fit(model(bigram_buckets=512), *seeded_loaders(ids, labels), trainer, CPU, state_path=tmp_path / "last.pt",
        on_epoch_end=interrupt_after(1))
    state = load_training_state(tmp_path / "last.pt")
    assert state["table_optimizer"]["state"]  # SparseAdam's moments, for the rows its pairs reached
    continued_model = model(bigram_buckets=512)
    continued = fit(continued_model, *seeded_loaders(ids, labels), trainer, CPU, resume_state=state)
    assert [r["val_loss"] for r in continued.history] == [r["val_loss"] for r in uninterrupted.history]
    for name, tensor in reference.state_dict().items():
        assert torch.equal(continued_model.state_dict()[name], tensor), name


@pytest.mark.slow
def test_a_run_saved_before_tables_learnt_lazily_continues_with_the_adamw_it_was_saved_with(tmp_path, monkeypatch):
    """A last.pt without a table optimiser was saved when AdamW stepped the whole model, table included: the run
    continues with AdamW over the whole model and ends as it would have, uninterrupted, before lazy tables."""
    ids, labels = toy_problem()
    trainer = plain_trainer(epochs=3, lr=1e-2)
    real = training.make_optimizer
    with monkeypatch.context() as patch:  # training as it was: AdamW for every parameter
        patch.setattr(training, "make_optimizer", lambda net, config, lazy_table=True: real(net, config, False))
        before = model(bigram_buckets=512)
        fit(before, *seeded_loaders(ids, labels), trainer, CPU)
        fit(model(bigram_buckets=512), *seeded_loaders(ids, labels), trainer, CPU, state_path=tmp_path / "last.pt",
            on_epoch_end=interrupt_after(1))
    state = load_training_state(tmp_path / "last.pt")
    del state["table_optimizer"]  # as last.pt was then
    # Continued, stopped again, and continued again: it saves itself as a run of AdamW alone.
    (tmp_path / "again").mkdir()
    fit(model(bigram_buckets=512), *seeded_loaders(ids, labels), trainer, CPU, resume_state=state,
        state_path=tmp_path / "again" / "last.pt", on_epoch_end=interrupt_after(2))
    continued = model(bigram_buckets=512)
    fit(continued, *seeded_loaders(ids, labels), trainer, CPU,
        resume_state=load_training_state(tmp_path / "again" / "last.pt"))
    for name, tensor in before.state_dict().items():
        assert torch.equal(continued.state_dict()[name], tensor), name


@pytest.mark.unit
@pytest.mark.parametrize("max_norm", [1e-3, 1e3])
def test_gradient_clipping_takes_a_sparse_table_gradient_s_norm_as_clip_grad_norm_takes_a_dense_one(max_norm):
    """clip_gradients scales a lazily learnt table's sparse gradient and the dense ones as clip_grad_norm_ scales the
    same gradients made dense (a gradient already under the norm is left alone)."""
    ids, labels = toy_problem(n=8)
    batch = collate(list(zip(ids, labels, strict=True)), 0)
    grads = {}
    for sparse in (True, False):
        net = model(bigram_buckets=64)
        net.bigrams.sparse = sparse
        torch.nn.functional.cross_entropy(net(batch["input_ids"], batch["padding_mask"]), batch["labels"]).backward()
        if sparse:
            training.clip_gradients(net, max_norm)
        else:
            torch.nn.utils.clip_grad_norm_(net.parameters(), max_norm)
        grads[sparse] = {name: p.grad.to_dense() for name, p in net.named_parameters() if p.grad is not None}
    assert net.bigrams.weight.grad.abs().sum() > 0
    for name, grad in grads[False].items():
        torch.testing.assert_close(grads[True][name], grad, rtol=1e-5, atol=1e-9)


@pytest.mark.slow
def test_a_bigram_table_learns_at_the_model_s_scheduled_rate(tmp_path):
    """The table's optimiser steps at the learning rate the schedule gives the rest of the model at that step: Adam's
    first step moves each entry its gradient reaches by that rate (less a hair for its eps)."""
    ids, labels = toy_problem()
    net = model(bigram_buckets=512)
    tables, rates = [net.bigrams.weight.detach().clone()], []

    def on_step(step, values):
        rates.append(values["lr"])
        tables.append(net.bigrams.weight.detach().clone())

    fit(net, *seeded_loaders(ids, labels), plain_trainer(epochs=2, lr=1e-2, schedule="cosine", warmup_epochs=0.5),
        CPU, state_path=tmp_path / "last.pt", on_step=on_step)
    assert rates[0] < rates[1] < 1e-2  # warming up
    assert (tables[1] - tables[0]).abs().max().item() == pytest.approx(rates[0], rel=1e-3)
    state = load_training_state(tmp_path / "last.pt")
    assert state["table_optimizer"]["param_groups"][0]["lr"] == rates[-1]


@pytest.mark.slow
def test_gradient_clipping_reaches_a_lazily_learnt_bigram_table():
    """trainer.grad_clip clips the table's sparse gradient in training too: Adam normalises gradient scale away, except
    below its eps, so clipped to 1e-12 the table's steps all but vanish."""
    ids, labels = toy_problem()
    moved = {}
    for clip in (None, 1e-12):
        net = model(bigram_buckets=512)
        before = net.bigrams.weight.detach().clone()
        fit(net, make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0),
            plain_trainer(epochs=1, lr=1e-2, weight_decay=0.0, grad_clip=clip), CPU)
        moved[clip] = (net.bigrams.weight.detach() - before).abs().max().item()
    assert moved[1e-12] < 1e-3 * moved[None]


@pytest.mark.unit
def test_r_drop_s_term_is_the_mean_over_texts_of_the_two_kl_divergences_halved():
    g = torch.Generator().manual_seed(0)
    first, second = torch.randn(6, 3, generator=g), torch.randn(6, 3, generator=g)
    p, q = first.softmax(-1), second.softmax(-1)
    kl = [(a * (a.log() - b.log())).sum(-1).mean() for a, b in ((p, q), (q, p))]
    torch.testing.assert_close(training.symmetric_kl(first, second), sum(kl) / 2)


@pytest.mark.slow
def test_r_drop_s_two_passes_take_the_class_weights_and_label_smoothing_and_the_reported_loss_is_cross_entropy(
        monkeypatch):
    """Each of R-Drop's two passes is a cross-entropy with the run's class weights and label smoothing; the training
    loss the run reports (history's train_loss) is their mean, without the divergence term the model also
    minimises."""
    ids, labels = toy_problem()
    weights = torch.tensor([0.25, 0.75])
    calls, cross_entropy = [], torch.nn.functional.cross_entropy

    def recording(*args, **kwargs):
        calls.append((kwargs.get("label_smoothing"), kwargs.get("weight")))
        return cross_entropy(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "cross_entropy", recording)
    monkeypatch.setattr(training, "symmetric_kl", lambda logits, again: 100.0 + 0 * logits.sum())
    result = fit(model(token_dropout=0.5), make_loader(ids, labels, 8, 0), make_loader(ids, labels, 16, 0),
                 plain_trainer(epochs=1, rdrop=1.0, label_smoothing=0.1), CPU, class_weights=weights)
    training_calls = [(smoothing, weight) for smoothing, weight in calls if smoothing == 0.1]
    assert len(training_calls) == 2 * 8 and all(torch.equal(weight, weights) for _, weight in training_calls)
    assert result.history[0]["train_loss"] < 10  # the divergence term (100 here) is not in it


@pytest.mark.slow
@pytest.mark.parametrize("rdrop", [0.0, 1.0])
def test_r_drop_passes_each_training_batch_through_the_model_twice(rdrop):
    """With trainer.rdrop each training batch goes through the model twice (validation once); without, once."""
    ids, labels = toy_problem()
    net, passes = model(token_dropout=0.5), []
    forward = net.forward

    def counting(*args, **kwargs):
        passes.append(net.training)
        return forward(*args, **kwargs)

    net.forward = counting
    fit(net, make_loader(ids, labels, 8, 0), make_loader(ids, labels, 16, 0), plain_trainer(epochs=1, rdrop=rdrop),
        CPU)
    assert passes.count(True) == (2 if rdrop else 1) * 8 and passes.count(False) == 4
