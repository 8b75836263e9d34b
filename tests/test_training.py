"""The training loop on synthetic data: precision, divergence, devices."""

import os
import signal

import pytest
import torch

from mha_textclf.checkpoint import load_training_state
from mha_textclf.data import make_loader
from mha_textclf.errors import UserError
from mha_textclf.model import ModelConfig, TextClassifier
from mha_textclf.training import DivergenceError, autocast, fit, resolve_device


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


def model(**overrides):
    torch.manual_seed(0)
    return TextClassifier(ModelConfig(vocab_size=50, n_classes=2, d_model=16, n_heads=2, mlp_hidden=16,
                                      max_length=32, **overrides))


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_fit_learns_the_toy_problem(precision):
    ids, labels = toy_problem()
    train = make_loader(ids, labels, 8, 0, shuffle=True, seed=0)
    result = fit(model(), train, make_loader(ids, labels, 16, 0), epochs=15, lr=1e-2, weight_decay=0.0,
                 device=torch.device("cpu"), precision=precision)
    assert len(result.history) == 15 and result.interrupted is None
    assert result.history[-1]["train_loss"] < 0.5 * result.history[0]["train_loss"]
    assert result.history[-1]["val_accuracy"] >= 0.9


def test_a_diverging_loss_names_epoch_and_step_and_keeps_finished_epochs():
    ids, labels = toy_problem()
    net = model()
    rows = []

    def poison_after_first_epoch(row):
        rows.append(row)
        with torch.no_grad():
            net.classifier[0].weight.fill_(float("nan"))

    with pytest.raises(DivergenceError, match="became nan at epoch 2, step 1"):
        fit(net, make_loader(ids, labels, 8, 0, shuffle=True), make_loader(ids, labels, 16, 0), epochs=3, lr=1e-3,
            weight_decay=0.0, device=torch.device("cpu"), on_epoch_end=poison_after_first_epoch)
    assert [r["epoch"] for r in rows] == [1]


def test_unknown_precision_and_device_are_clear_errors():
    with pytest.raises(UserError, match=r"trainer\.precision='fp16'"):
        autocast(torch.device("cpu"), "fp16")
    with pytest.raises(UserError, match="not a device name"):
        resolve_device("tpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_a_resumed_run_interrupted_before_its_first_epoch_ends_goes_back_to_the_resumed_state(tmp_path):
    ids, labels = toy_problem()
    cpu = torch.device("cpu")

    def loaders():
        return make_loader(ids, labels, 8, 0, shuffle=True, seed=0), make_loader(ids, labels, 16, 0)

    first = model()
    fit(first, *loaders(), epochs=1, lr=1e-2, weight_decay=0.0, device=cpu, state_path=tmp_path / "last.pt")
    state = load_training_state(tmp_path / "last.pt")

    resumed, calls = model(), []
    forward = resumed.forward

    def interrupting_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # mid-epoch: the new run folder has no last.pt yet
            os.kill(os.getpid(), signal.SIGINT)
        return forward(*args, **kwargs)

    resumed.forward = interrupting_forward
    result = fit(resumed, *loaders(), epochs=3, lr=1e-2, weight_decay=0.0, device=cpu, resume_state=state,
                 state_path=tmp_path / "new" / "last.pt")
    assert result.interrupted == "SIGINT" and [r["epoch"] for r in result.history] == [1]
    for name, tensor in resumed.state_dict().items():
        assert torch.equal(tensor, state["model"][name]), name  # back to where the resumed run started
