"""No lost work: per-epoch history and last.pt, clean stop on SIGINT/SIGTERM, and exact resume."""

import csv
import logging
import os
import re
import shlex
import signal

import pytest
import yaml

from conftest import fingerprint, settings_for, train_in_process
from mha_textclf import pipeline as train_module
from mha_textclf.errors import UserError
from mha_textclf.runs import files, lifecycle
from mha_textclf.runs.checkpoint import load_training_state
from mha_textclf.runs.metrics import RunMetrics

# Dropout (attention, embedding and token dropout draw from the global RNG), a warm-up + cosine schedule, early
# stopping and length grouping all carry state across epochs: resuming must restore each of them (RNG, scheduler,
# best epoch, sampler generator), not just the weights.
COMMON = ["data.max_train_samples=40", "trainer.batch_size=8", "model.dropout=0.2", "model.embedding_dropout=0.1",
          "model.token_dropout=0.5", "trainer.schedule=cosine", "trainer.warmup_epochs=1", "trainer.patience=2",
          "data.group_by_length=true", "trainer.epochs=3", "probes.attention=[]", "data.max_length=128",
          "pe=true"]
COMPARED = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr"]


def rows(run_dir):
    path = run_dir / "history.csv"
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def interrupt_after_epoch(epochs: int, monkeypatch) -> None:
    """Send this process SIGINT as soon as `epochs` epochs are in history.csv (as Ctrl-C would)."""
    real = files.append_history

    def append_then_interrupt(path, row):
        real(path, row)
        if row["epoch"] == epochs:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(files, "append_history", append_then_interrupt)


@pytest.mark.slow
def test_sigint_then_resume_equals_the_uninterrupted_run(data_dir, tmp_path, monkeypatch):
    full, part, resumed = tmp_path / "full", tmp_path / "part", tmp_path / "resumed"
    train_in_process(full, *COMMON, data_dir=data_dir)

    with monkeypatch.context() as patch:
        interrupt_after_epoch(2, patch)
        metrics = train_in_process(part, *COMMON, data_dir=data_dir)
    assert [r["epoch"] for r in rows(part)] == ["1", "2"]
    state = load_training_state(part / "last.pt")
    assert state["epoch"] == 2 and len(state["history"]) == 2
    assert metrics.interrupted_by == "SIGINT" and metrics.epochs == 2
    assert (part / "classification_report_test.txt").exists() and (part / "model.pt").exists()

    before = fingerprint(part)
    final = train_in_process(resumed, *COMMON, f"resume={part}", data_dir=data_dir)
    # The resumed run is a new folder; the interrupted one stays as it was, and still says so.
    assert fingerprint(part) == before and files.read_status(part)["state"] == lifecycle.INTERRUPTED
    # Bitwise on CPU: every loss and accuracy, every epoch, and the final metrics.
    assert [{k: r[k] for k in COMPARED} for r in rows(resumed)] == [{k: r[k] for k in COMPARED} for r in rows(full)]
    uninterrupted = RunMetrics.read(full / "metrics.json")
    assert (final.val, final.test) == (uninterrupted.val, uninterrupted.test)
    assert (final.best_epoch, final.stopped_early) == (uninterrupted.best_epoch, uninterrupted.stopped_early)
    assert (resumed / "best.pt").exists() and (resumed / "last.pt").exists()
    assert yaml.safe_load((resumed / "config.yaml").read_text())["resume"] == str(part)
    assert final.interrupted_by is None


@pytest.mark.slow
def test_resume_with_other_settings_says_how_to_resume(data_dir, tmp_path, monkeypatch, caplog):
    part = tmp_path / "part"
    with monkeypatch.context() as patch, caplog.at_level(logging.INFO, logger="train"):
        interrupt_after_epoch(1, patch)
        train_in_process(part, *COMMON, data_dir=data_dir)
    # The interrupted run prints the exact command that resumes it into a new folder: every setting it was given.
    (printed,) = re.findall(r"into a new folder: (python -m train .*)$", caplog.text, re.MULTILINE)
    assert printed == f"python -m train {shlex.join(COMMON)} resume={part}"
    assert f"continue with the same command (it continues in {part})" in caplog.text
    with pytest.raises(UserError, match="pe=true then, false now") as info:
        train_in_process(tmp_path / "again", *COMMON[:-1], f"resume={part}", data_dir=data_dir)
    assert f"python -m train {shlex.join(COMMON)} resume={part}" in str(info.value)
    with pytest.raises(UserError, match=r"No training state \(last.pt\)"):
        train_in_process(tmp_path / "again", *COMMON, f"resume={tmp_path}", data_dir=data_dir)
    # A resumed run interrupted in turn prints the command that resumes it: its settings and its own folder, not
    # the folder it was resumed from as well (a command with two resume= is not the exact command).
    resumed = tmp_path / "resumed"
    caplog.clear()
    with monkeypatch.context() as patch, caplog.at_level(logging.INFO, logger="train"):
        interrupt_after_epoch(2, patch)
        train_in_process(resumed, *COMMON, f"resume={part}", data_dir=data_dir)
    (printed,) = re.findall(r"into a new folder: (python -m train .*)$", caplog.text, re.MULTILINE)
    assert printed == f"python -m train {shlex.join(COMMON)} resume={resumed}"


@pytest.mark.slow
def test_a_default_that_moved_since_is_in_the_command_to_resume_and_loggers_may_change(data_dir, tmp_path,
                                                                                        monkeypatch):
    import torch

    part = tmp_path / "part"
    with monkeypatch.context() as patch:
        interrupt_after_epoch(1, patch)
        train_in_process(part, *COMMON, data_dir=data_dir)
    # As if the run had been made when group_by_length was off by default: its state says so, its command line not.
    state = torch.load(part / "last.pt", weights_only=True)
    state["metadata"]["config"]["data"]["group_by_length"] = False
    state["metadata"]["overrides"] = [o for o in COMMON if not o.startswith("data.group_by_length")]
    torch.save(state, part / "last.pt")
    with pytest.raises(UserError, match=r"data\.group_by_length=false then, true now") as info:
        train_in_process(tmp_path / "again", *state["metadata"]["overrides"], f"resume={part}", data_dir=data_dir)
    command = shlex.split(str(info.value).split("python -m train ", 1)[1])
    assert "data.group_by_length=false" in command
    # The command it gives resumes; a logger may be added on the way (where it logs is no training setting).
    resumed = train_in_process(tmp_path / "again", *command[:-1], "logger=tensorboard", f"resume={part}",
                               data_dir=data_dir)
    assert resumed.epochs == 3


def test_a_run_resumed_into_a_new_folder_takes_the_tokenizer_of_the_run_it_continues(smoke_run, tmp_path,
                                                                                     monkeypatch):
    """A run resumed into a new folder (the same overrides plus resume=<run folder>) continues the weights of that
    run, whose embedding rows are its tokenizer's ids, so it takes that run's tokenizer/ into its own folder, neither
    learned again nor taken from a cache (tokenizer.cache_dir is no training setting: it may point elsewhere now,
    where another tokenizer may wait)."""
    from types import SimpleNamespace

    from mha_textclf.tokenizer.cache import load_tokenizer

    settings = settings_for("experiment=smoke", f"resume={smoke_run.dir}", f"tokenizer.cache_dir={tmp_path / 'cache'}")
    monkeypatch.setattr(train_module, "get_tokenizer", lambda *args: pytest.fail("the tokenizer was learned again"))
    corpus = SimpleNamespace(train=SimpleNamespace(texts=["texts the resumed run never learned from"]))
    state = load_training_state(smoke_run.dir / "last.pt")
    new = tmp_path / "resumed"
    tokenizer = train_module.prepare_tokenizer(settings, settings.tokenizer, corpus, new, state)
    original = load_tokenizer(smoke_run.dir / "tokenizer", settings.data.max_length)
    assert tokenizer.get_vocab() == original.get_vocab()
    assert load_tokenizer(new / "tokenizer", settings.data.max_length).get_vocab() == original.get_vocab()
    assert not (tmp_path / "cache").exists()
