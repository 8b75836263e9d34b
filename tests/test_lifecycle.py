"""Tests src/mha_textclf/runs/lifecycle.py: a run folder knows its state. The same command again continues,
skips or refuses; resume= continues a run into a new folder; a kill or a signal at any moment leaves a folder
that continues to the uninterrupted result, every epoch once; a sweep run again trains what is not finished."""

import csv
import dataclasses
import json
import logging
import os
import re
import shlex
import signal
import socket
import textwrap
import time

import pytest
import torch
import yaml

import commands
from conftest import REPO, fingerprint, settings_for, train_in_process
from mha_textclf import pipeline, training
from mha_textclf import pipeline as train_module
from mha_textclf.errors import RunFolderError, UserError
from mha_textclf.runs import files, lifecycle
from mha_textclf.runs.checkpoint import load_training_state
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import SCHEDULES, flat
from mha_textclf.sweeps.collect import run_row

# Dropout, token dropout, a warm-up + cosine schedule and length grouping carry RNG and schedule state across epochs:
# continuing must restore all of it for the history to match the uninterrupted run's.
COMMON = ["data.max_train_samples=40", "trainer.batch_size=8", "model.dropout=0.2", "model.token_dropout=0.5",
          "trainer.warmup_epochs=1", "data.group_by_length=true", "trainer.epochs=3", "probes.attention=[]",
          "data.max_length=128",  # a quarter of the default's compute: what these tests check does not need more
          "trainer.num_threads=1",  # in-process tests run on one thread (conftest), subprocesses must match them
          "pe=true"]
COMPARED = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr"]


def rows(run_dir) -> list[dict]:
    with (run_dir / "history.csv").open() as f:
        return [{k: r[k] for k in COMPARED} for r in csv.DictReader(f)]


@pytest.fixture(scope="module")
def uninterrupted(data_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    return run_dir, train_in_process(run_dir, *COMMON, data_dir=data_dir)


def assert_same_as_uninterrupted(run_dir, metrics, uninterrupted):
    reference_dir, reference = uninterrupted
    assert rows(run_dir) == rows(reference_dir)  # bitwise on CPU, every epoch exactly once
    assert (metrics.val, metrics.test, metrics.best_epoch) == (reference.val, reference.test, reference.best_epoch)
    assert RunMetrics.read(run_dir / "metrics.json").test == reference.test
    assert files.read_status(run_dir)["state"] == lifecycle.FINISHED
    # The run's training seconds are its own, summed from history.csv over all its attempts.
    with (run_dir / "history.csv").open() as f:
        every_attempt = sum(float(r["train_seconds"]) for r in csv.DictReader(f))
    assert metrics.train_seconds == RunMetrics.read(run_dir / "metrics.json").train_seconds
    assert metrics.train_seconds == pytest.approx(every_attempt, abs=1e-3)


# Each kill point runs the pipeline in a subprocess that SIGKILLs itself there: nothing of Python's cleanup runs.
KILLER = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, "tests")
    from conftest import train_in_process
    from mha_textclf import pipeline, training
    from mha_textclf.runs import checkpoint
    from pathlib import Path
    point, run_dir, data_dir, *overrides = sys.argv[1:]
    die = lambda: os.kill(os.getpid(), signal.SIGKILL)
    if point == "mid-epoch":  # after the first step of epoch 2
        real_epoch = training._train_epoch
        def epoch(*args):
            if args[6] == 2:
                args = list(args)
                args[9] = lambda step, values: die()
            return real_epoch(*args)
        training._train_epoch = epoch
    elif point == "mid-save":  # while last.pt of epoch 2 is being written (history.csv already has its row)
        real_save = checkpoint.atomic_save
        def save(obj, path):
            if path.name == "last.pt" and obj["epoch"] == 2:
                path.with_name(".last.pt.tmp").write_bytes(b"half a checkpoint")
                die()
            real_save(obj, path)
        checkpoint.atomic_save = save
    elif point == "mid-report":  # all epochs done, metrics.json written, probes not yet
        pipeline.write_probes = lambda *args: die()
    train_in_process(Path(run_dir), *overrides, data_dir=Path(data_dir))
""")


def stopped_in_epoch_2(run_dir, data_dir, monkeypatch) -> None:
    """A run Ctrl-C'd during its second epoch: one epoch finished, in last.pt and history.csv."""
    real_epoch = training._train_epoch

    def epoch(*args):
        if args[6] == 2:
            os.kill(os.getpid(), signal.SIGINT)
        return real_epoch(*args)

    with monkeypatch.context() as patch:
        patch.setattr(training, "_train_epoch", epoch)
        train_in_process(run_dir, *COMMON, data_dir=data_dir)


def sweep(sweep_dir, *extra, data_dir):
    """`python -m train -m` over two variants into `sweep_dir`, started in the background."""
    env = os.environ | {"BBC_NEWS_PATH": str(data_dir)}
    return commands.start(["-m", "train", "-m", "model=naive,efficient", *COMMON, *extra,
                           f"hydra.sweep.dir={sweep_dir}"], cwd=REPO, env=env, merge_stderr=True)


# Dropout (attention, embedding and token dropout draw from the global RNG), a warm-up + cosine schedule, early
# stopping and length grouping all carry state across epochs: resuming must restore each of them (RNG, scheduler,
# best epoch, sampler generator), not just the weights. (The resume= tests' own settings: COMMON
# above is the in-place tests', and the command a resume= test checks is made of these.)
RESUME_COMMON = ["data.max_train_samples=40", "trainer.batch_size=8", "model.dropout=0.2",
                 "model.embedding_dropout=0.1", "model.token_dropout=0.5", "trainer.schedule=cosine",
                 "trainer.warmup_epochs=1", "trainer.patience=2", "data.group_by_length=true", "trainer.epochs=3",
                 "probes.attention=[]", "data.max_length=128", "pe=true"]


def interrupt_after_epoch(epochs: int, monkeypatch) -> None:
    """Send this process SIGINT as soon as `epochs` epochs are in history.csv (as Ctrl-C would)."""
    real = files.append_history

    def append_then_interrupt(path, row):
        real(path, row)
        if row["epoch"] == epochs:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(files, "append_history", append_then_interrupt)


@pytest.mark.slow
def test_the_same_command_on_a_finished_folder_trains_nothing(data_dir, tmp_path, uninterrupted, monkeypatch):
    run_dir = tmp_path / "run"
    first = train_in_process(run_dir, *COMMON, data_dir=data_dir)
    before = fingerprint(run_dir)
    monkeypatch.setattr(training, "_train_epoch", lambda *a, **k: pytest.fail("trained again"))
    # Not the training: where the data is now, the device, threads, the tokenizer cache and what is reported.
    moved = tmp_path / "moved"
    moved.symlink_to(data_dir)
    elsewhere = [o for o in COMMON if not o.startswith("trainer.num_threads")] + [
        "trainer.num_threads=2", "device=cpu", f"tokenizer.cache_dir={tmp_path / 'cache'}", "probes.order=[]",
        "time_to_accuracy=[0.5]"]
    assert settings_for(*COMMON).device == "auto"  # (so that device=cpu differs)
    again = train_in_process(run_dir, *elsewhere, data_dir=moved)
    assert again == first
    assert fingerprint(run_dir) == before
    assert lifecycle.folder_state(run_dir) == lifecycle.FINISHED


@pytest.mark.slow
def test_the_same_command_on_other_data_at_the_same_path_is_refused(data_dir, tmp_path):
    """data.path may move, but the texts may not change under a run: found finished, its results would be for data it
    did not train on; continued, it would train on two corpora. The same command is refused, the folder unchanged."""
    from mha_textclf.data.corpus import source_fingerprint

    data = tmp_path / "data"
    data.mkdir()
    for name in ("train.jsonl", "test.jsonl"):
        (data / name).write_bytes((data_dir / name).read_bytes())
    run_dir = tmp_path / "run"
    train_in_process(run_dir, *COMMON, "trainer.epochs=1", data_dir=data)
    assert files.read_status(run_dir)["data"] == source_fingerprint(str(data))
    lines = (data / "test.jsonl").read_text().splitlines(keepends=True)
    (data / "test.jsonl").write_text("".join(lines[:-1]))  # one test article fewer
    before = fingerprint(run_dir)
    with pytest.raises(RunFolderError, match=re.escape(f"{run_dir} holds a run trained on other data: the files at "
                                                       f"data.path={data} differ from those it read; nothing was "
                                                       "changed.")):
        train_in_process(run_dir, *COMMON, "trainer.epochs=1", data_dir=data)
    assert fingerprint(run_dir) == before
    # Stopped before it finished, the run is refused the same way rather than continued on the new texts.
    lifecycle.mark(run_dir, lifecycle.INTERRUPTED)
    with pytest.raises(RunFolderError, match="trained on other data"):
        train_in_process(run_dir, *COMMON, "trainer.epochs=1", data_dir=data)
    # Nor does resume= carry it into a new folder on the new texts.
    with pytest.raises(UserError, match=re.escape(f"resume={run_dir} continues a run trained on other data: the files "
                                                  f"at data.path={data} differ from those it read.")):
        train_in_process(tmp_path / "elsewhere", *COMMON, "trainer.epochs=1", f"resume={run_dir}", data_dir=data)
    # Stopped before its first epoch, it trained on nothing: it starts afresh on the data there now.
    (run_dir / files.LAST).unlink()
    train_in_process(run_dir, *COMMON, "trainer.epochs=1", data_dir=data)
    assert files.read_status(run_dir)["data"] == source_fingerprint(str(data))
    assert lifecycle.folder_state(run_dir) == lifecycle.FINISHED


@pytest.mark.slow
def test_other_settings_are_refused_before_anything_changes_and_overwrite_starts_afresh(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    # The first run draws a heatmap for a probe sentence that the run replacing it does not have.
    probed = [o for o in COMMON if not o.startswith("probes.attention=")] + ["probes.attention=[an old probe]"]
    train_in_process(run_dir, *probed, data_dir=data_dir)
    assert (run_dir / "attention_an_old_probe.png").exists()
    before = fingerprint(run_dir)
    with pytest.raises(RunFolderError, match=r"pe=true there, false now.*overwrite=true"):
        train_in_process(run_dir, *COMMON[:-1], "pe=false", data_dir=data_dir)
    # More epochs under a decaying schedule are another run: its learning rate was laid out over the first three.
    assert settings_for(*COMMON).trainer.schedule == "cosine"
    with pytest.raises(RunFolderError, match=r"trainer\.epochs=3 there, 4 now"):
        train_in_process(run_dir, *COMMON, "trainer.epochs=4", data_dir=data_dir)
    assert fingerprint(run_dir) == before
    (run_dir / "stale.txt").write_text("not the run's")
    an_hour_ago = time.time_ns() - 3600 * 10**9  # what the folder holds is marked as older than anything written now
    for path in run_dir.rglob("*"):
        os.utime(path, ns=(an_hour_ago, an_hour_ago))
    metrics = train_in_process(run_dir, *COMMON[:-1], "pe=false", "overwrite=true", data_dir=data_dir)
    assert metrics.pe is False and yaml.safe_load((run_dir / "config.yaml").read_text())["pe"] is False
    assert len(rows(run_dir)) == 3 and (run_dir / "stale.txt").exists()  # only the run's own files are replaced
    # ...every one of them (overwrite=true deletes the run's own files, then starts afresh): what the folder holds now
    # is the new run's, written since it started, and the old run's heatmap went with the rest.
    older = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                   if p.is_file() and p.stat().st_mtime_ns <= an_hour_ago)
    assert older == [".lock", "stale.txt"]


def test_the_same_run_may_differ_in_what_watches_it_and_a_refusal_names_every_difference(tmp_path):
    """The data's place, the device, threads, loggers, probes (and the tokenizer cache and the reported accuracy levels)
    may differ for the same run; other training settings are refused, each difference named, the folder as it was."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files.write_config(run_dir, settings_for(*COMMON))
    saved = flat(dataclasses.asdict(settings_for(*COMMON)))
    watched = settings_for(*COMMON, "logger=many", "logger.mlflow.experiment=elsewhere", "device=cpu",
                           "trainer.num_threads=2", "probes.order=[]", "probes.attention=[0]", "time_to_accuracy=[0.5]",
                           f"tokenizer.cache_dir={tmp_path / 'cache'}", f"data.path={tmp_path / 'moved'}")
    assert lifecycle.changed_settings(saved, flat(dataclasses.asdict(watched))) == []
    (run_dir / ".lock").touch()  # (as a run that held the folder left it)
    before = fingerprint(run_dir)
    other = settings_for(*COMMON[:-1], "pe=false", "model.d_model=32", "trainer.lr=0.01")
    with pytest.raises(RunFolderError) as refused, lifecycle.claim(run_dir, other, []):
        pytest.fail("claimed a folder holding other settings")
    assert (f"{run_dir} holds a run with other training settings (model.d_model=64 there, 32 now; pe=true there, "
            "false now; trainer.lr=0.003 there, 0.01 now); nothing was changed.") in str(refused.value)
    assert fingerprint(run_dir) == before


def test_a_refusal_gives_both_ways_out_another_folder_for_a_run_or_a_sweep_or_overwrite(tmp_path):
    """The same command on a folder holding other training settings is refused before anything in the folder
    changes, naming each difference, with the ways out: the run's own values (a default may have moved), another
    folder, as a run and as a sweep choose it (hydra.run.dir=, hydra.sweep.dir=), or overwrite=true, which deletes the
    results."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files.write_config(run_dir, settings_for(*COMMON))
    other = settings_for(*COMMON[:-1], "pe=false")
    with pytest.raises(RunFolderError) as refused, lifecycle.claim(run_dir, other, []):
        pytest.fail("claimed a folder holding other settings")
    ways_out = str(refused.value).split("nothing was changed. ", 1)[1]
    assert ways_out == ("To continue it, give the run's value of each (a default may have moved since it was saved). "
                        "Choose another folder (hydra.run.dir=<folder>, or hydra.sweep.dir=<folder> for a sweep), or "
                        "start afresh in this one with overwrite=true (its results are deleted).")


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_only_a_constant_learning_rate_may_train_longer_than_the_run_it_continues(schedule):
    """The same run may differ in trainer.epochs when trainer.schedule=constant (to train longer): linear and cosine
    decay are laid out over the epochs the run started with (both reach 0 at its last epoch), so more epochs with either
    are other training settings; a constant rate trains on."""
    saved = flat(dataclasses.asdict(settings_for(*COMMON, f"trainer.schedule={schedule}")))
    longer = saved | {"trainer.epochs": saved["trainer.epochs"] + 2}
    assert lifecycle.changed_settings(saved, longer) == ([] if schedule == "constant" else ["trainer.epochs"])


def test_overwrite_deletes_the_loggers_files_with_the_rest_of_the_run(tmp_path):
    """overwrite=true deletes the run's own files, then starts afresh; TensorBoard's event files, written into the
    run folder, are the run's too, or the new run's curves would be drawn beside the old one's. A file that is not the
    run's stays."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files.write_config(run_dir, settings_for(*COMMON))
    written = ["tensorboard/events.out.tfevents.1.host", "metrics.json", "history.csv", "model.pt", "best.pt",
               "last.pt", "error.txt", "order_probe.json", "tokenizer/tokenizer.json", "loss_curve.png",
               "classification_report_val.txt", "confusion_matrix_test.png", "attention_an_old_probe.png",
               ".hydra/config.yaml", "notes.txt"]
    for name in written:
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text("the old run's")
    with lifecycle.claim(run_dir, settings_for(*COMMON[:-1], "pe=false", "overwrite=true"), []) as start:
        assert start.state is None and start.finished is None  # afresh
        left = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    assert left == [".lock", "config.yaml", "notes.txt", "status.json"]
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["pe"] is False


def test_overwrite_deletes_the_event_files_in_the_folder_the_settings_name_and_nothing_outside_the_run(tmp_path):
    """logger.tensorboard.subdir is "the event files' folder inside the run folder": overwrite=true deletes the one the
    replaced run wrote (its config.yaml says which) and the one the new run will write, but a subdir naming the run
    folder itself or a folder outside it deletes nothing beyond the run's own files."""
    run_dir = tmp_path / "runs" / "run"
    run_dir.mkdir(parents=True)
    old = settings_for(*COMMON, "logger=tensorboard", "logger.tensorboard.subdir=tb_old")
    files.write_config(run_dir, old)
    for name in ("tb_old/events.out.tfevents.1.host", "tb_new/events.out.tfevents.2.host", "notes.txt",
                 "../beside/notes.txt"):
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text("kept unless the run's")
    new = settings_for(*COMMON, "logger=tensorboard", "logger.tensorboard.subdir=tb_new", "overwrite=true")
    with lifecycle.claim(run_dir, new, []):
        pass
    assert sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()) == [
        ".lock", "config.yaml", "notes.txt", "status.json"]
    for subdir in (".", "..", "../beside", str(tmp_path)):
        files.write_config(run_dir, settings_for(*COMMON, "logger=tensorboard",
                                                      f"logger.tensorboard.subdir={subdir}"))
        with lifecycle.claim(run_dir, settings_for(*COMMON, "overwrite=true"), []):
            pass
        assert (run_dir / "notes.txt").exists() and (tmp_path / "runs" / "beside" / "notes.txt").exists(), subdir


@pytest.mark.slow
@pytest.mark.parametrize("point", ["mid-epoch", "mid-save", "mid-report"])
def test_a_sigkill_anywhere_then_the_same_command_ends_as_the_uninterrupted_run(point, data_dir, tmp_path,
                                                                                uninterrupted):
    run_dir = tmp_path / "run"
    killed = commands.run(["-c", KILLER, point, str(run_dir), str(data_dir), *COMMON], cwd=REPO, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert files.read_status(run_dir)["state"] == lifecycle.RUNNING
    assert lifecycle.folder_state(run_dir) == lifecycle.INTERRUPTED  # nobody holds its lock: it was killed
    row = run_row(run_dir, tmp_path)  # a summary says so, even where an earlier metrics.json is there (mid-report)
    assert row["status"] == "interrupted" and "run the same command again" in row["error"]
    metrics = train_in_process(run_dir, *COMMON, data_dir=data_dir)
    assert_same_as_uninterrupted(run_dir, metrics, uninterrupted)
    assert files.read_status(run_dir)["attempt"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_then_the_same_command_continues_in_place(signum, data_dir, tmp_path, uninterrupted):
    """Ctrl-C (SIGINT) or a kill (SIGTERM): the run stops after its step, reports what it trained, and exits with the
    shell's 128 + the signal's number (130, 143); the same command then continues in place."""
    run_dir = tmp_path / "run"
    env = os.environ | {"BBC_NEWS_PATH": str(data_dir)}
    command = ["-m", "train", *COMMON[:-1], "trainer.epochs=3", "pe=true", f"hydra.run.dir={run_dir}"]
    process = commands.start(command, cwd=REPO, env=env)
    deadline = time.monotonic() + 300
    while not (run_dir / "last.pt").exists() and process.poll() is None:
        assert time.monotonic() < deadline, "no epoch finished within 300 s"
        time.sleep(0.01)
    process.send_signal(signum)
    assert process.wait(timeout=600) == 128 + signum
    assert files.read_status(run_dir)["state"] == lifecycle.INTERRUPTED
    stopped = RunMetrics.read(run_dir / "metrics.json")  # what was trained is reported, and why it stopped
    assert stopped.interrupted_by == signal.Signals(signum).name and stopped.epochs == len(rows(run_dir)) >= 1
    done = commands.run(command, cwd=REPO, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    assert "continuing the run in" in done.stdout
    assert_same_as_uninterrupted(run_dir, RunMetrics.read(run_dir / "metrics.json"), uninterrupted)
    assert "pe=true" in yaml.safe_load((run_dir / ".hydra" / "overrides.yaml").read_text())
    # train.log, Hydra's log of both starts: one line per finished epoch, each epoch once, with its numbers: the
    # losses, validation accuracy, learning rate, and the training and validation seconds.
    logged = re.findall(r"epoch (\d+)/3: train_loss (\S+)  val_loss (\S+)  val_accuracy (\S+)  lr (\S+)  "
                        r"\(train (\S+)s, val (\S+)s\)", (run_dir / "train.log").read_text())
    with (run_dir / "history.csv").open() as f:
        history = list(csv.DictReader(f))
    assert [tuple(map(float, line)) for line in logged] == [
        (int(r["epoch"]), *(round(float(r[c]), 4) for c in ("train_loss", "val_loss", "val_accuracy")),
         float(f"{float(r['lr']):.2e}"), *(round(float(r[c]), 1) for c in ("train_seconds", "eval_seconds")))
        for r in history]


@pytest.mark.slow
def test_the_preemption_signal_stops_after_the_step_then_hands_over_to_the_launcher(data_dir, tmp_path,
                                                                                     uninterrupted, monkeypatch):
    """As under submitit: a handler is installed for SIGUSR2 (it requeues the job and exits). The run stops after
    the current step, writes its folder, and only then calls that handler; the requeued job continues in place."""
    run_dir, handed_over = tmp_path / "run", []
    real_epoch = training._train_epoch

    def epoch(*args):
        if args[6] == 2:  # during epoch 2, after its first step
            args = list(args)
            args[9] = lambda step, values: os.kill(os.getpid(), signal.SIGUSR2)
        return real_epoch(*args)

    def launcher_handler(signum, frame):
        handed_over.append((signum, files.read_status(run_dir)["state"]))

    previous = signal.signal(signal.SIGUSR2, launcher_handler)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(training, "_train_epoch", epoch)
            metrics = train_in_process(run_dir, *COMMON, data_dir=data_dir)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert handed_over == [(signal.SIGUSR2, lifecycle.INTERRUPTED)]  # once, after the folder was written
    assert metrics.interrupted_by == "SIGUSR2" and metrics.epochs == 1 and len(rows(run_dir)) == 1
    assert json.loads((run_dir / "metrics.json").read_text())["interrupted_by"] == "SIGUSR2"
    metrics = train_in_process(run_dir, *COMMON, data_dir=data_dir)
    assert_same_as_uninterrupted(run_dir, metrics, uninterrupted)


@pytest.mark.unit
def test_without_a_handler_for_it_sigusr2_is_not_caught():
    """Outside a launcher that listens for it, SIGUSR2 keeps its default: no run pretends to be requeued."""
    assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
    with training.StopOnSignal():
        assert signal.getsignal(signal.SIGUSR2) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGTERM) != signal.SIG_DFL


@pytest.mark.unit
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_second_signal_goes_to_the_handler_from_before_the_run(signum):
    """Ctrl-C twice aborts at once: the first signal is only noted (the run stops after its step and reports), the
    second reaches the handler that was there before the run (Python's raises KeyboardInterrupt; SIGTERM's default
    ends the process). A recording handler stands in for it here."""
    reached = []
    previous = signal.signal(signum, lambda number, frame: reached.append(number))
    try:
        with training.StopOnSignal() as stop:
            os.kill(os.getpid(), signum)
            assert stop.signal == signal.Signals(signum).name and reached == []
            os.kill(os.getpid(), signum)
            assert reached == [signum]
    finally:
        signal.signal(signum, previous)


@pytest.mark.slow
def test_a_folder_held_by_a_live_process_is_refused(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    with lifecycle._lock(run_dir), pytest.raises(RunFolderError, match=r"Another process .* is running in"):
        train_in_process(run_dir, *COMMON, data_dir=data_dir)
    assert list(run_dir.iterdir()) == [run_dir / ".lock"]


def test_a_run_saved_before_a_setting_existed_had_the_value_that_adds_nothing(tmp_path):
    """A run folder whose config.yaml predates model.bigram_buckets (and model.pe_gate): the same command with the
    value the run had (no bigrams; the gate, which a pe=false run does not use, at the default) finds its run; asking
    for bigrams is other settings, refused before anything in the folder changes."""
    run_dir = tmp_path / "run"
    settings = settings_for("experiment=smoke", "model.bigram_buckets=0")
    assert settings.pe is False and settings.model.pe_gate

    def saved_before_bigrams():
        config = yaml.safe_load((run_dir / files.CONFIG).read_text())
        del config["model"]["bigram_buckets"], config["model"]["pe_gate"]
        (run_dir / files.CONFIG).write_text(yaml.safe_dump(config))

    with lifecycle.claim(run_dir, settings, []):
        pass
    saved_before_bigrams()
    with lifecycle.claim(run_dir, settings, []):
        pass
    saved_before_bigrams()
    before = fingerprint(run_dir)
    with pytest.raises(RunFolderError, match=r"model\.bigram_buckets=0 there, 65536 now"), \
            lifecycle.claim(run_dir, settings_for("experiment=smoke", "model.bigram_buckets=65536"), []):
        pytest.fail("a run without bigrams was continued with them")
    assert fingerprint(run_dir) == before


def test_a_pe_run_saved_before_the_gate_existed_is_the_encoding_added_whole(tmp_path):
    """model.pe_gate, added since: a pe=true run saved without it added the encoding whole, so the same command (now
    gated) is other settings, refused naming the gate; with model.pe_gate=false it finds its run."""
    run_dir = tmp_path / "run"
    whole = settings_for("experiment=smoke", "pe=true", "model.pe_gate=false")
    with lifecycle.claim(run_dir, whole, []):
        pass
    config = yaml.safe_load((run_dir / files.CONFIG).read_text())
    del config["model"]["pe_gate"]
    (run_dir / files.CONFIG).write_text(yaml.safe_dump(config))
    before = fingerprint(run_dir)
    with pytest.raises(RunFolderError, match=r"model\.pe_gate=false there, true now"), \
            lifecycle.claim(run_dir, settings_for("experiment=smoke", "pe=true"), []):
        pytest.fail("a run with the encoding added whole was continued gated")
    assert fingerprint(run_dir) == before
    with lifecycle.claim(run_dir, whole, []):
        pass


def test_status_json_names_the_attempt_pid_and_host_and_a_second_start_is_refused_naming_them(tmp_path):
    """status.json holds the state, the attempt, pid and host; a second start while the first holds the folder is
    refused naming them: "Another process (pid ... on <host>) is running in ...". (The lock is an flock on an open file,
    so a second claim in this very process is refused as another process's would be.)"""
    run_dir = tmp_path / "run"
    settings = settings_for("experiment=smoke")
    with lifecycle.claim(run_dir, settings, []):
        status = files.read_status(run_dir)
        assert (status["state"], status["attempt"], status["pid"], status["host"]) == (
            lifecycle.RUNNING, 1, os.getpid(), socket.gethostname())
        expected = f"Another process (pid {os.getpid()} on {socket.gethostname()}) is running in {run_dir}."
        with pytest.raises(RunFolderError, match=re.escape(expected)), lifecycle.claim(run_dir, settings, []):
            pytest.fail("a second start got the folder")
        assert lifecycle.folder_state(run_dir) == lifecycle.RUNNING  # held: running, not killed


def test_a_requeued_slurm_job_waits_for_its_previous_attempt_to_let_go_of_the_folder(tmp_path, monkeypatch):
    """Slurm can start a requeued job while the attempt it killed is still exiting: the new attempt (status.json
    names the same job) waits for the folder instead of refusing it; a start by another job is refused as before."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    files.write_json(run_dir / files.STATUS, {"state": lifecycle.RUNNING, "launch": "slurm 7"})
    # Held past the 1.4 s another job waits before it is refused, and let go before the same job's poll at about
    # 2.7 s (1.4 s, then 0.1 + 0.3 + 0.9 s of backoff); held 4 s, the test waited for the next poll, at 5.4 s.
    hold = "import fcntl, sys, time; f = open(sys.argv[1], 'a'); fcntl.flock(f, fcntl.LOCK_EX); print('held', " \
           "flush=True); time.sleep(2.5)"
    holder = commands.start(["-c", hold, str(run_dir / files.LOCK)], cwd=tmp_path, fresh=True)
    try:
        assert holder.stdout.readline() == "held\n"
        monkeypatch.delenv("SLURM_ARRAY_JOB_ID", raising=False)
        monkeypatch.setenv("SLURM_JOB_ID", "8")
        with pytest.raises(RunFolderError, match="Another process"), lifecycle._lock(run_dir):
            pytest.fail("another job got the folder")
        monkeypatch.setenv("SLURM_JOB_ID", "7")
        with lifecycle._lock(run_dir):
            # Only once the previous attempt let go, as it exited: it ends now, not after the rest of its sleep. (It
            # lets go when its file closes, a few ms before it is gone, so poll() could still find it running.)
            assert holder.wait(timeout=0.5) == 0
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.slow
def test_resume_naming_its_own_folder_continues_in_place(data_dir, tmp_path, uninterrupted, monkeypatch):
    run_dir = tmp_path / "run"
    stopped_in_epoch_2(run_dir, data_dir, monkeypatch)
    metrics = train_in_process(run_dir, *COMMON, f"resume={run_dir}", data_dir=data_dir)
    assert_same_as_uninterrupted(run_dir, metrics, uninterrupted)


@pytest.mark.slow
def test_continuing_in_place_keeps_the_tokenizer_the_run_was_trained_with(data_dir, tmp_path, uninterrupted,
                                                                          monkeypatch):
    """Continuing in place keeps the tokenizer the run was trained with: the folder's tokenizer/ is read, not learned
    again nor taken from a cache (the cache may have moved: tokenizer.cache_dir is no training setting), and not written
    again, so a kill cannot leave it half-written."""
    run_dir = tmp_path / "run"
    stopped_in_epoch_2(run_dir, data_dir, monkeypatch)
    files = sorted(p for p in (run_dir / "tokenizer").rglob("*") if p.is_file())
    before = {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files}
    monkeypatch.setattr(pipeline, "get_tokenizer", lambda *args: pytest.fail("the tokenizer was learned again"))
    metrics = train_in_process(run_dir, *COMMON, f"tokenizer.cache_dir={tmp_path / 'moved-cache'}", data_dir=data_dir)
    assert {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in files} == before
    assert sorted(p for p in (run_dir / "tokenizer").rglob("*") if p.is_file()) == files
    assert_same_as_uninterrupted(run_dir, metrics, uninterrupted)


@pytest.mark.slow
def test_a_sweep_run_again_trains_only_what_is_not_finished(data_dir, tmp_path):
    sweep_dir = tmp_path / "sweep"
    first = sweep(sweep_dir, data_dir=data_dir)
    # Job 0 finished, and its job.json written (after the run, by the sweep's callback: a kill while it is written
    # leaves its temporary file, which the next start replaces).
    while not any(files.read_status(job).get("state") == lifecycle.FINISHED and (job / "job.json").exists()
                  for job in sweep_dir.glob("0_*")) and first.poll() is None:
        time.sleep(0.01)
    (job0,) = sweep_dir.glob("0_*")
    first.kill()  # a crashed laptop: job 1 never finished, the sweep wrote no summary
    first.wait()
    before = fingerprint(job0)
    again = sweep(sweep_dir, data_dir=data_dir)
    output, _ = again.communicate(timeout=600)
    assert again.returncode == 0, output
    assert f"{job0} already holds this run, finished: nothing to train" in output
    assert fingerprint(job0) == before
    assert "nothing to train" in (job0 / "train.log").read_text().splitlines()[-1]
    (job1,) = sweep_dir.glob("1_*")
    assert [int(r["epoch"]) for r in rows(job1)] == [1, 2, 3]
    with (sweep_dir / "summary.csv").open() as f:
        summary = list(csv.DictReader(f))
    assert sorted((r["model"], r["status"]) for r in summary) == [("efficient", "ok"), ("naive", "ok")]


@pytest.mark.slow
def test_overwrite_and_resume_of_the_same_folder_are_refused_and_overwrite_holds_once_per_slurm_job(
        data_dir, tmp_path, monkeypatch):
    run_dir = tmp_path / "run"
    train_in_process(run_dir, *COMMON, data_dir=data_dir)
    before = fingerprint(run_dir)
    with pytest.raises(RunFolderError, match="overwrite=true would delete what resume="):
        train_in_process(run_dir, *COMMON, "overwrite=true", f"resume={run_dir}", data_dir=data_dir)
    assert fingerprint(run_dir) == before
    # A Slurm job started with overwrite=true starts afresh once; requeued (same job id), it continues what it began.
    monkeypatch.setenv("SLURM_JOB_ID", "41")
    train_in_process(run_dir, *COMMON[:-1], "pe=false", "overwrite=true", data_dir=data_dir)
    assert files.read_status(run_dir)["launch"] == "slurm 41"
    monkeypatch.setattr(training, "_train_epoch", lambda *a, **k: pytest.fail("the requeued job started afresh"))
    train_in_process(run_dir, *COMMON[:-1], "pe=false", "overwrite=true", data_dir=data_dir)


@pytest.mark.slow
def test_fewer_epochs_than_already_trained_are_refused(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    constant = [*COMMON, "trainer.schedule=constant", "trainer.warmup_epochs=0"]
    train_in_process(run_dir, *constant, data_dir=data_dir)
    for into in (run_dir, tmp_path / "resumed"):  # in place, and with resume= into a new folder
        resume = [f"resume={run_dir}"] if into != run_dir else []
        with pytest.raises(RunFolderError, match=r"trainer\.epochs=2, but the run to continue has already trained 3 "
                           r"epochs; give trainer\.epochs=3 or more\.$"):
            train_in_process(into, *constant, "trainer.epochs=2", *resume, data_dir=data_dir)
    longer = train_in_process(run_dir, *constant, "trainer.epochs=4", data_dir=data_dir)  # a constant lr: longer
    assert longer.epochs == 4 and [int(r["epoch"]) for r in rows(run_dir)] == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_resume_killed_before_its_first_epoch_still_resumes(data_dir, tmp_path, monkeypatch, uninterrupted):
    part, resumed = tmp_path / "part", tmp_path / "resumed"
    real_epoch = training._train_epoch
    stopped_in_epoch_2(part, data_dir, monkeypatch)
    with monkeypatch.context() as patch:  # the resumed run dies before it finishes an epoch of its own
        patch.setattr(training, "_train_epoch", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
        with pytest.raises(KeyboardInterrupt):
            train_in_process(resumed, *COMMON, f"resume={part}", data_dir=data_dir)
    assert files.read_status(resumed)["state"] == lifecycle.INTERRUPTED  # (as a second Ctrl-C: no failure)
    # The new folder's best.pt is the best epoch so far, as soon as the run starts there.
    best, best_before = (torch.load(folder / "best.pt", weights_only=True)["state_dict"] for folder in (resumed, part))
    assert best.keys() == best_before.keys() and all(torch.equal(best[k], best_before[k]) for k in best)

    def not_epoch_1(*args):
        assert args[6] != 1, "started from scratch instead of resuming"
        return real_epoch(*args)

    with monkeypatch.context() as patch:
        patch.setattr(training, "_train_epoch", not_epoch_1)
        metrics = train_in_process(resumed, *COMMON, f"resume={part}", data_dir=data_dir)
    assert_same_as_uninterrupted(resumed, metrics, uninterrupted)


def test_a_null_epoch_count_is_the_run_s_own_and_a_longer_one_with_a_decaying_schedule_is_other_settings():
    saved = flat(dataclasses.asdict(settings_for(*COMMON)))
    now = flat(dataclasses.asdict(settings_for(*COMMON, "trainer.epochs=null")))
    assert saved["trainer.epochs"] == 3 and now["trainer.epochs"] is None
    assert lifecycle.changed_settings(saved, now) == []
    assert lifecycle.changed_settings(saved, now | {"trainer.epochs": 4}) == ["trainer.epochs"]


def test_a_run_saved_before_the_dropouts_adapted_is_the_same_run_for_a_command_that_leaves_them_null():
    """Runs saved before model.embedding_dropout and model.mlp_dropout adapted to the corpus recorded them as 0.0: the
    same command, which now leaves them null, continues that run; a value of its own is other settings."""
    saved = flat(dataclasses.asdict(settings_for(*COMMON))) | {"model.embedding_dropout": 0.0, "model.mlp_dropout": 0.0}
    now = flat(dataclasses.asdict(settings_for(*COMMON, "model.embedding_dropout=null", "model.mlp_dropout=null")))
    assert now["model.embedding_dropout"] is None and now["model.mlp_dropout"] is None
    assert lifecycle.changed_settings(saved, now) == []
    assert lifecycle.changed_settings(saved, now | {"model.mlp_dropout": 0.2}) == ["model.mlp_dropout"]


@pytest.mark.unit
def test_a_failed_run_continued_in_place_no_longer_holds_the_error_of_its_failure(tmp_path):
    """The run folder holds error.txt, saying what went wrong, only when the run stopped on an error; the same
    command continues an unfinished run, a failed one among them, after the last finished epoch (last.pt), in
    place. Once it continues, the folder is a running run's again: the earlier failure's error.txt goes (the
    folder's other files, its tokenizer among them, stay), and status.json says running, the second attempt."""
    from mha_textclf.runs.checkpoint import TRAINING_STATE_FORMAT

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    settings = settings_for(*COMMON)
    files.write_config(run_dir, settings)
    row = {"epoch": 1, "train_loss": 1.5, "val_loss": 1.4, "val_accuracy": 0.5, "lr": 0.003, "train_seconds": 1.0,
           "eval_seconds": 0.5, "elapsed_train_seconds": 1.0, "train_tokens": 100}
    torch.save({"format": TRAINING_STATE_FORMAT, "epoch": 1, "history": [row]}, run_dir / "last.pt")
    (run_dir / "tokenizer").mkdir()
    (run_dir / "tokenizer" / "tokenizer.json").write_text("{}")
    lifecycle.mark(run_dir, lifecycle.FAILED, attempt=1, message="RuntimeError: CUDA out of memory")
    (run_dir / "error.txt").write_text("RuntimeError: CUDA out of memory\n")
    with lifecycle.claim(run_dir, settings, []) as start:
        assert start.in_place and start.state["epoch"] == 1 and start.attempt == 2
        assert not (run_dir / "error.txt").exists()
        assert (run_dir / "tokenizer" / "tokenizer.json").read_text() == "{}"
        status = files.read_status(run_dir)
        assert (status["state"], status["attempt"], status["message"]) == (lifecycle.RUNNING, 2, None)
        assert status["started_from_epoch"] == 1  # what this attempt trains starts after it (summaries count it)
        assert [int(r["epoch"]) for r in csv.DictReader((run_dir / "history.csv").read_text().splitlines())] == [1]


@pytest.mark.slow
def test_the_same_command_with_the_epoch_count_left_null_on_a_finished_folder_trains_nothing(smoke_run, data_dir,
                                                                                            tmp_path, caplog):
    """The same command on a folder holding the same training settings, finished, trains nothing ("already holds this
    run, finished: nothing to train"); the settings that adapt are written into the run's config.yaml, so that the same
    command continues the same run, and trainer.epochs=null means the run's own count. A finished run asked again with
    the epoch count left null is finished: its recorded metrics come back and nothing in the folder changes (it is not
    reported again)."""
    import shutil

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for name in ("config.yaml", "status.json", "metrics.json", "last.pt"):
        shutil.copy(smoke_run.dir / name, run_dir / name)
    assert files.read_status(run_dir)["state"] == lifecycle.FINISHED
    (run_dir / ".lock").touch()  # (as the run that held the folder left it)
    before = fingerprint(run_dir)
    settings = settings_for(f"data.path={data_dir}", "model=efficient", "pe=true", "experiment=smoke",
                            "trainer.epochs=null")
    assert settings.trainer.epochs is None
    with caplog.at_level(logging.INFO, logger="train"), lifecycle.claim(run_dir, settings, []) as start:
        assert start.finished == RunMetrics.read(run_dir / "metrics.json") and start.state is None
    assert f"{run_dir} already holds this run, finished: nothing to train" in caplog.text
    assert fingerprint(run_dir) == before


@pytest.mark.unit
def test_an_unreadable_last_pt_is_refused_with_its_path_and_the_way_to_start_afresh(tmp_path):
    """An unreadable last.pt in the folder to continue is refused with "Cannot continue the run in <folder>: ... To
    start it afresh instead: overwrite=true.", before anything in the folder changes."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    settings = settings_for(*COMMON)
    files.write_config(run_dir, settings)
    (run_dir / "last.pt").write_bytes(b"cut short by a full disk")
    lifecycle.mark(run_dir, lifecycle.INTERRUPTED, attempt=1)
    before = fingerprint(run_dir)
    with pytest.raises(UserError) as info, lifecycle.claim(run_dir, settings, []):
        pass
    message = str(info.value)
    assert message.startswith(f"Cannot continue the run in {run_dir}: ") and str(run_dir / "last.pt") in message
    assert message.endswith("To start it afresh instead: overwrite=true.")
    after = {name: digest for name, digest in fingerprint(run_dir).items() if name != ".lock"}  # the claim's own
    assert after == before and files.read_status(run_dir)["state"] == lifecycle.INTERRUPTED


@pytest.mark.slow
@pytest.mark.parametrize("table", [["model.bigram_buckets=0"], ["model.bigram_buckets=4096", "trainer.rdrop=1"]],
                         ids=["plain", "lazy-bigram-table-and-r-drop"])
def test_sigint_then_resume_equals_the_uninterrupted_run(table, data_dir, tmp_path, monkeypatch):
    """(With a bigram table too, whose lazy Adam's state last.pt carries beside AdamW's, and R-Drop's two passes.)"""
    full, part, resumed = tmp_path / "full", tmp_path / "part", tmp_path / "resumed"
    settings = [*RESUME_COMMON, *table]
    train_in_process(full, *settings, data_dir=data_dir)

    with monkeypatch.context() as patch:
        interrupt_after_epoch(2, patch)
        metrics = train_in_process(part, *settings, data_dir=data_dir)
    assert [r["epoch"] for r in rows(part)] == ["1", "2"]
    state = load_training_state(part / "last.pt")
    assert state["epoch"] == 2 and len(state["history"]) == 2
    assert (state["table_optimizer"] is not None) == (table != ["model.bigram_buckets=0"])
    assert metrics.interrupted_by == "SIGINT" and metrics.epochs == 2
    assert (part / "classification_report_test.txt").exists() and (part / "model.pt").exists()

    before = fingerprint(part)
    final = train_in_process(resumed, *settings, f"resume={part}", data_dir=data_dir)
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
        train_in_process(part, *RESUME_COMMON, data_dir=data_dir)
    # The interrupted run prints the exact command that resumes it into a new folder: every setting it was given.
    # And the command that continues it in place, in its own folder (without it, Hydra would date a new one).
    (in_place, printed) = re.findall(r"continue in place: (python -m train .*), or into a new folder: "
                                     r"(python -m train .*)$", caplog.text, re.MULTILINE)[0]
    assert printed == f"python -m train {shlex.join(RESUME_COMMON)} resume={part}"
    assert in_place == f"python -m train {shlex.join(RESUME_COMMON)} hydra.run.dir={part}"
    with pytest.raises(UserError, match="pe=true then, false now") as info:
        train_in_process(tmp_path / "again", *RESUME_COMMON[:-1], f"resume={part}", data_dir=data_dir)
    assert f"python -m train {shlex.join(RESUME_COMMON)} resume={part}" in str(info.value)
    with pytest.raises(UserError, match=r"No training state \(last.pt\)"):
        train_in_process(tmp_path / "again", *RESUME_COMMON, f"resume={tmp_path}", data_dir=data_dir)
    # A resumed run interrupted in turn prints the command that resumes it: its settings and its own folder, not
    # the folder it was resumed from as well (a command with two resume= is not the exact command).
    resumed = tmp_path / "resumed"
    caplog.clear()
    with monkeypatch.context() as patch, caplog.at_level(logging.INFO, logger="train"):
        interrupt_after_epoch(2, patch)
        train_in_process(resumed, *RESUME_COMMON, f"resume={part}", data_dir=data_dir)
    (in_place, printed) = re.findall(r"continue in place: (python -m train .*), or into a new folder: "
                                     r"(python -m train .*)$", caplog.text, re.MULTILINE)[0]
    assert printed == f"python -m train {shlex.join(RESUME_COMMON)} resume={resumed}"
    # In place, the command as given: had it stopped before an epoch of its own, only resume= would bring back part's.
    assert in_place == f"python -m train {shlex.join(RESUME_COMMON)} resume={part} hydra.run.dir={resumed}"


@pytest.mark.unit
@pytest.mark.parametrize("path", ["/runs/2026-11-21_17-40-02-123456_naive_pe-True", "/my runs/a", "/w/a(b", "/x,y",
                                  "/it's", '/say "hi"', "/a~b", "/[x]", "/a=b", "/back\\slash", "/end\\", "/a#b&c"])
def test_a_printed_command_gives_hydra_the_folder_as_it_is(path):
    """Shell quoting alone leaves a path that holds Hydra's syntax (a space, a comma, brackets, ~) to be misread."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    command = shlex.split(lifecycle.train_command(["model=naive", "probes.attention=[]"], {"hydra.run.dir": path}))
    assert command[:5] == ["python", "-m", "train", "model=naive", "probes.attention=[]"]
    (folder,) = OverridesParser.create().parse_overrides(command[5:])
    assert folder.key_or_group == "hydra.run.dir" and folder.value() == path and not folder.is_sweep_override()


@pytest.mark.slow
def test_a_default_that_moved_since_is_in_the_command_to_resume_and_loggers_may_change(data_dir, tmp_path,
                                                                                        monkeypatch):
    import torch

    part = tmp_path / "part"
    with monkeypatch.context() as patch:
        interrupt_after_epoch(1, patch)
        train_in_process(part, *RESUME_COMMON, data_dir=data_dir)
    # As if the run had been made when group_by_length was off by default: its state says so, its command line not.
    state = torch.load(part / "last.pt", weights_only=True)
    state["metadata"]["config"]["data"]["group_by_length"] = False
    state["metadata"]["overrides"] = [o for o in RESUME_COMMON if not o.startswith("data.group_by_length")]
    torch.save(state, part / "last.pt")
    with pytest.raises(UserError, match=r"data\.group_by_length=false then, true now") as info:
        train_in_process(tmp_path / "again", *state["metadata"]["overrides"], f"resume={part}", data_dir=data_dir)
    command = shlex.split(str(info.value).split("python -m train ", 1)[1])
    assert "data.group_by_length=false" in command
    # The command it gives resumes; a logger may be added on the way (where it logs is no training setting).
    resumed = train_in_process(tmp_path / "again", *command[:-1], "logger=tensorboard", f"resume={part}",
                               data_dir=data_dir)
    assert resumed.epochs == 3


@pytest.mark.slow
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
