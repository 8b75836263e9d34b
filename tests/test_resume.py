"""No lost work: per-epoch history and last.pt, clean stop on SIGINT/SIGTERM, and exact resume."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import REPO, run_train
from mha_textclf.checkpoint import load_training_state

# Dropout (attention, embedding and token dropout draw from the global RNG), a warm-up + cosine schedule, early
# stopping and length grouping all carry state across epochs: resuming must restore each of them (RNG, scheduler,
# best epoch, sampler generator), not just the weights.
COMMON = ["data.max_train_samples=64", "trainer.batch_size=8", "model.dropout=0.2", "model.embedding_dropout=0.1",
          "model.token_dropout=0.5",
          "trainer.schedule=cosine", "trainer.warmup_epochs=1", "trainer.patience=2", "data.group_by_length=true",
          "trainer.epochs=3", "pe=true"]
COMPARED = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr"]


def rows(run_dir):
    path = run_dir / "history.csv"
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def interrupt_after(epochs: int, sig: signal.Signals, run_dir, data_dir, *overrides) -> int:
    """Start a run, send `sig` as soon as `epochs` epochs are on disk, return its exit code."""
    env = os.environ | {"BBC_NEWS_PATH": str(data_dir)}
    process = subprocess.Popen([sys.executable, "-m", "train", *overrides, f"hydra.run.dir={run_dir}"], cwd=REPO,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while len(rows(run_dir)) < epochs and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    process.send_signal(sig)
    return process.wait(timeout=600)


@pytest.mark.slow
def test_sigint_then_resume_equals_the_uninterrupted_run(data_dir, tmp_path):
    full, part, resumed = tmp_path / "full", tmp_path / "part", tmp_path / "resumed"
    assert run_train(*COMMON, f"hydra.run.dir={full}", data_dir=data_dir).returncode == 0

    assert interrupt_after(2, signal.SIGINT, part, data_dir, *COMMON) == 130
    assert [r["epoch"] for r in rows(part)] == ["1", "2"]
    state = load_training_state(part / "last.pt")
    assert state["epoch"] == 2 and len(state["history"]) == 2
    metrics = json.loads((part / "metrics.json").read_text())
    assert metrics["interrupted"] is True and metrics["interrupted_by"] == "SIGINT" and metrics["epochs"] == 2
    assert (part / "classification_report_test.txt").exists() and (part / "model.pt").exists()

    result = run_train(*COMMON, f"resume={part}", f"hydra.run.dir={resumed}", data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    # Bitwise on CPU: every loss and accuracy, every epoch, and the final metrics.
    assert [{k: r[k] for k in COMPARED} for r in rows(resumed)] == [{k: r[k] for k in COMPARED} for r in rows(full)]
    final = {name: json.loads((name / "metrics.json").read_text()) for name in (full, resumed)}
    for split in ("val", "test"):
        assert final[resumed][split] == final[full][split]
    assert (final[resumed]["best_epoch"], final[resumed]["stopped_early"]) == (final[full]["best_epoch"],
                                                                                final[full]["stopped_early"])
    assert (resumed / "best.pt").exists() and (resumed / "last.pt").exists()
    assert final[resumed]["resumed_from"] == str(part) and final[resumed]["interrupted"] is False


@pytest.mark.slow
def test_sigterm_stops_cleanly(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    assert interrupt_after(1, signal.SIGTERM, run_dir, data_dir, *COMMON[:-2], "trainer.epochs=20", "pe=true") == 143
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["interrupted"] is True and metrics["interrupted_by"] == "SIGTERM"
    assert metrics["epochs"] == len(rows(run_dir)) >= 1


@pytest.mark.slow
def test_resume_with_other_settings_says_how_to_resume(data_dir, tmp_path):
    part = tmp_path / "part"
    assert interrupt_after(1, signal.SIGINT, part, data_dir, *COMMON) == 130
    result = run_train(*COMMON[:-1], f"resume={part}", f"hydra.run.dir={tmp_path / 'again'}", data_dir=data_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 2
    assert "pe differ" in output and f"python -m train {' '.join(COMMON)} resume={part}" in output
