"""Bad input → one clear message, a non-zero exit, no traceback from library internals (through the real CLI)."""

import os

import pytest
import torch

from conftest import run_cli, write_jsonl

TINY = ["data.max_train_samples=32", "trainer.epochs=1"]


def rows(n, label=lambda i: i % 2):
    return [{"text": f"some words number {i}", "label": label(i), "label_text": f"class{label(i)}"} for i in range(n)]


def bad_datasets(root):
    return {
        "missing-label": write_jsonl(root / "missing-label", {s: [{"text": "hi"}] * 8 for s in ("train", "test")}),
        "string-labels": write_jsonl(root / "string-labels", {s: rows(8, label=lambda i: f"c{i % 2}")
                                                              for s in ("train", "test")}),
        "empty": write_jsonl(root / "empty", {"train": [], "test": rows(4)}),
        "one-class": write_jsonl(root / "one-class", {s: rows(8, label=lambda i: 0) for s in ("train", "test")}),
        "tiny-class": write_jsonl(root / "tiny-class", {s: rows(8, label=lambda i: int(i == 0)) for s in ("train",
                                                                                                      "test")}),
    }


CASES = [
    # (overrides, expected message, extra environment)
    (["model=transformer"], "Available options in 'model'", {}),
    (["model=base"], "Choose an attention variant: model=naive|efficient|torch", {}),
    (["model.n_heads=5"], "model.d_model=64 is not divisible by model.n_heads=5", {}),
    (["trainer.epochs=0"], "trainer.epochs=0 must be a positive whole number", {}),
    (["trainer.batch_size=-1"], "trainer.batch_size=-1 must be a positive whole number", {}),
    (["trainer.lr=0"], "trainer.lr=0 must be a positive number", {}),
    (["data.val_fraction=1.5"], "data.val_fraction=1.5 must lie strictly between 0 and 1", {}),
    (["tokenizer.vocab_size=50"], "tokenizer.vocab_size=50 is smaller than the special tokens plus the characters", {}),
    (["data.path=/nonexistent/bbc-news"], "does not exist", {}),
    (["data.path=SetFit/bbc-news"], "set data.path=<folder> or BBC_NEWS_PATH=<folder>",
     {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}),
    (["data.path={missing-label}"], "lacks column(s) ['label']", {}),
    (["data.path={string-labels}"], "non-integer labels", {}),
    (["data.path={empty}"], "is empty", {}),
    (["data.path={one-class}"], "has a single class", {}),
    (["resume={tmp}"], "No training state (last.pt)", {}),
    (["trainer.epochs=2.5"], "trainer.epochs=2.5 must be a positive whole number", {}),
    (["data.max_train_samples=0"], "data.max_train_samples=0 must be a positive whole number (or null)", {}),
    (["trainer.precision=fp16"], "trainer.precision=fp16 must be one of fp32, bf16", {}),
    (["data.path={tiny-class}"], "Cannot carve a stratified validation split", {}),
    (["trainer.grad_clip=0"], "trainer.grad_clip=0 must be positive (or null for no clipping)", {}),
    (["trainer.warmup_epochs=-1"], "trainer.warmup_epochs=-1 must be 0 or more", {}),
    (["+model.heads=4"], "model.heads is not a model setting", {}),
]


@pytest.mark.slow
@pytest.mark.parametrize(("overrides", "message", "env"), CASES, ids=lambda v: v[0] if isinstance(v, list) else "")
def test_bad_input_gives_one_clear_message(overrides, message, env, data_dir, tmp_path, monkeypatch):
    folders = bad_datasets(tmp_path) | {"tmp": tmp_path}
    overrides = [o.format(**folders) for o in overrides]
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    result = run_cli("train", *TINY, *overrides, f"hydra.run.dir={tmp_path / 'run'}", data_dir=data_dir)
    output = result.stdout + result.stderr
    assert result.returncode != 0
    assert message in output, output[-2000:]
    assert "Traceback" not in output


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when no GPU is present")
def test_cuda_without_a_gpu(data_dir, tmp_path):
    result = run_cli("train", "device=cuda", f"hydra.run.dir={tmp_path}", data_dir=data_dir)
    assert result.returncode == 2
    assert "device=cuda but PyTorch sees no CUDA GPU" in result.stderr + result.stdout


@pytest.mark.slow
def test_a_diverging_loss_stops_with_epoch_and_step(data_dir, tmp_path):
    result = run_cli("train", *TINY, "trainer.lr=1e30", "trainer.batch_size=4", f"hydra.run.dir={tmp_path}",
                     data_dir=data_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 2
    assert "The training loss became nan at epoch 1, step" in output, output[-2000:]
    assert "Traceback" not in output


@pytest.mark.slow
def test_empty_text_at_predict_time(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli("train", *TINY, f"hydra.run.dir={run_dir}", data_dir=data_dir).returncode == 0
    result = run_cli("predict", f"run_dir={run_dir}", 'text=["fine", " "]')
    assert result.returncode == 2
    assert "Text number(s) [2] are empty" in result.stdout + result.stderr
    result = run_cli("predict", f"run_dir={tmp_path / 'nowhere'}", "text=hello")
    assert result.returncode == 2 and "is not a folder" in result.stdout + result.stderr
    assert os.listdir(tmp_path) == ["run"]  # predict writes nothing of its own
