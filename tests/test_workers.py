"""search/workers.py: workers that share one study, on one machine (as a Slurm array: test_slurm.py), in a journal
file or a database, each trial drawn by a sampler seeded by its number; their heartbeats, and a killed worker's trial
failed and run again. And scripts/measure_search.py, which times one worker against two."""

import csv
import json
import math
import re
import signal
import time

import pytest

import commands
from conftest import REPO, load_script, optional, settings_for
from mha_textclf.errors import UserError
from mha_textclf.settings import MISSED_HEARTBEATS
from search_fakes import (
    assert_reports_describe,
    fake_trainer,
    load_tiny_study,
    study_settings,
    trial_folders_in,
    worker_command,
)

optuna = optional("optuna", "hpo")


def start_worker(command):
    return commands.start(command, cwd=REPO, merge_stderr=True)


def test_trials_are_tpe_s_draws_seeded_by_their_number_beyond_its_random_start_too(tmp_path):
    """TPE samples, maximising the validation accuracy of the reported model, and trial n draws with the seed
    seed + n. Each trial's value, against Optuna's own TPESampler(seed + n) shown the trials before it: the first 10
    are TPE's random start (a RandomSampler of the same seed draws them too), the last two TPE's own."""
    from mha_textclf.search.study import run_search

    settings = study_settings(tmp_path, n_trials=12, pruning=False, seed=4)
    learned = fake_trainer(lambda overrides: [abs(math.log10(float(overrides[-1].split("=")[1])) + 2)])
    study = run_search(settings, tmp_path / "study", learned)
    trials = sorted(study.trials, key=lambda t: t.number)
    assert [t.number for t in trials] == list(range(12)) and {t.state.name for t in trials} == {"COMPLETE"}
    for trial in trials:
        reference = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=4 + trial.number))
        reference.add_trials(trials[: trial.number])
        drawn = reference.ask().suggest_float("trainer.lr", 1e-4, 1e-1, log=True)
        assert trial.params["trainer.lr"] == drawn, trial.number


def test_a_worker_stops_once_the_study_has_n_trials_finished_pruned_ones_by_other_workers_included(tmp_path):
    """Together the workers finish n_trials finished (complete or pruned) trials; each stops starting trials once the
    study has that many, whoever finished them. Here another worker prunes two trials while this one runs its first:
    with n_trials=3, that first trial is its last."""
    from optuna.distributions import FloatDistribution

    from mha_textclf.search.study import run_search

    settings = study_settings(tmp_path, n_trials=3, pruning=False, storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    calls, fake = [], fake_trainer(lambda o: [0.5])

    def train_trial(overrides, run_dir, on_epoch_end):
        if not calls:  # another worker's pruned trials, recorded in the shared storage meanwhile
            other = optuna.load_study(study_name=settings.study, storage=settings.storage)
            for lr in (1e-3, 1e-2):
                other.add_trial(optuna.trial.create_trial(
                    state=optuna.trial.TrialState.PRUNED, params={"trainer.lr": lr}, intermediate_values={1: 0.9},
                    distributions={"trainer.lr": FloatDistribution(1e-4, 1e-1, log=True)}))
        calls.append(overrides)
        return fake(overrides, run_dir, on_epoch_end)

    study = run_search(settings, tmp_path / "study", train_trial)
    assert len(calls) == 1
    assert sorted(t.state.name for t in study.trials) == ["COMPLETE", "PRUNED", "PRUNED"]


def test_a_storage_optuna_cannot_use_is_a_clear_error(tmp_path):
    from mha_textclf.search.study import run_search

    with pytest.raises(UserError, match="storage='foo://bar': Optuna cannot keep a study there"):
        run_search(study_settings(tmp_path, storage="foo://bar"), tmp_path / "study", fake_trainer(lambda o: [0.5]))


def test_a_journal_file_named_by_storage_holds_the_study_there(tmp_path):
    """storage=/shared/path/study.log: a path without :// is a journal file, there, and the study's folder then holds no
    journal of its own; without storage=, the journal is the study folder's optuna-journal.log."""
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from mha_textclf.search.study import run_search

    journal = tmp_path / "shared" / "path" / "study.log"
    for storage, where in ((str(journal), journal), (None, tmp_path / "default" / "optuna-journal.log")):
        study_dir = where.parent if storage is None else tmp_path / "study"
        run_search(study_settings(tmp_path, n_trials=2, pruning=False, storage=storage), study_dir,
                   fake_trainer(lambda o: [0.5]))
        loaded = optuna.load_study(study_name="fake", storage=JournalStorage(JournalFileBackend(str(where))))
        assert [t.state.name for t in loaded.trials] == ["COMPLETE", "COMPLETE"]
    assert not (tmp_path / "study" / "optuna-journal.log").exists()


def test_a_path_with_a_colon_but_no_scheme_is_a_journal_file(tmp_path):
    """A storage path without :// is a journal file; anything with :// is an SQLAlchemy URL. A folder named by a time of
    day (run at 12:00) holds the study's journal all the same (round 24: taking any path with a colon for a URL passed,
    no tested path had one; URLs: test_a_database_takes_a_trial_silent_...)."""
    from mha_textclf.search.workers import HeartbeatJournalStorage, open_storage

    journal = tmp_path / "run at 12:00" / "study.log"
    storage = open_storage(str(journal), heartbeat_seconds=20)
    assert isinstance(storage, HeartbeatJournalStorage)
    optuna.create_study(study_name="s", storage=storage)
    assert journal.is_file() and "s" in journal.read_text()


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_a_database_takes_a_trial_silent_for_three_heartbeats_for_dead_as_the_journal_does(tmp_path):
    """A trial silent for 3 heartbeats is marked failed and queued once more, whichever storage= holds the study (here
    an SQLAlchemy URL, whose heartbeats Optuna keeps itself): 25 s of silence with heartbeats of 10 s is alive, 35 s
    dead, and the dead trial's retry is the journal's."""
    from datetime import timedelta

    import sqlalchemy
    from optuna.storages._rdb import models
    from optuna.storages._rdb.storage import _create_scoped_session

    from mha_textclf.search.workers import open_storage, retry_once

    storage = open_storage(f"sqlite:///{tmp_path / 'db' / 'optuna.db'}", heartbeat_seconds=10)
    study = optuna.create_study(study_name="s", storage=storage)
    late, dead = study.ask(), study.ask()
    for trial, seconds in ((late, 25), (dead, 35)):
        storage.record_heartbeat(trial._trial_id)
        with _create_scoped_session(storage.scoped_session, True) as session:  # its last beat, that long ago
            beat = models.TrialHeartbeatModel.where_trial_id(trial._trial_id, session, True)
            beat.heartbeat = session.execute(sqlalchemy.func.now()).scalar() - timedelta(seconds=seconds)
    assert storage._get_stale_trial_ids(study._study_id) == [dead._trial_id]
    assert storage.get_heartbeat_stale_trial_callback() is retry_once


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_by_default_a_worker_beats_every_20_seconds_and_a_trial_silent_for_a_minute_is_dead(tmp_path):
    """A trial's worker records a heartbeat every heartbeat_seconds (20 by default), and a trial silent for 3
    heartbeats is marked failed: the study python -m search opens beats every 20 s; 55 s of silence is alive, 65 s
    dead."""
    from mha_textclf.search.study import _open_study
    from mha_textclf.search.workers import HEARTBEAT

    settings = settings_for(app="search")
    study = _open_study(settings, str(tmp_path / "journal.log"))
    assert settings.heartbeat_seconds == study._storage.get_heartbeat_interval() == 20
    quiet, silent = study.ask(), study.ask()
    for trial, seconds in ((quiet, 55), (silent, 65)):
        study._storage.set_trial_system_attr(trial._trial_id, HEARTBEAT, time.time() - seconds)
    assert study._storage._get_stale_trial_ids(study._study_id) == [silent._trial_id]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_a_trial_silent_for_three_heartbeats_is_failed_and_run_again_once_by_the_next_worker(tmp_path):
    from mha_textclf.search.workers import HEARTBEAT, fail_stale_trials, open_storage

    journal = str(tmp_path / "journal.log")
    study = optuna.create_study(study_name="s", storage=open_storage(journal, heartbeat_seconds=10))
    alive, dead, late = study.ask(), study.ask(), study.ask()
    for trial in (alive, dead, late):
        trial.suggest_float("x", 0, 1)
    study._storage.record_heartbeat(alive._trial_id)
    study._storage.set_trial_system_attr(dead._trial_id, HEARTBEAT, time.time() - 35)  # 3 beats of 10 s missed
    study._storage.set_trial_system_attr(late._trial_id, HEARTBEAT, time.time() - 25)  # 2 missed: alive (5 s to spare)
    # Another worker, with its own view of the journal, finds the dead trial.
    other = optuna.load_study(study_name="s", storage=open_storage(journal, heartbeat_seconds=10))
    fail_stale_trials(other)
    trials = optuna.load_study(study_name="s", storage=open_storage(journal, heartbeat_seconds=10)).trials
    assert [t.state.name for t in trials] == ["RUNNING", "FAIL", "RUNNING", "WAITING"]
    assert trials[3].params == trials[1].params and trials[3].system_attrs["failed_trial"] == 1
    assert HEARTBEAT not in trials[3].system_attrs  # the retry's heartbeats start when it runs
    # A retry that kills its worker too stays failed: no third run.
    retry = other.ask()
    assert retry.number == 3
    other._storage.set_trial_system_attr(retry._trial_id, HEARTBEAT, time.time() - 35)
    fail_stale_trials(other)
    trials = optuna.load_study(study_name="s", storage=open_storage(journal, heartbeat_seconds=10)).trials
    assert [t.state.name for t in trials] == ["RUNNING", "FAIL", "RUNNING", "FAIL"]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_a_worker_that_finishes_fails_and_requeues_a_trial_that_fell_silent_while_it_ran(tmp_path, monkeypatch):
    """A trial silent for 3 heartbeats is marked failed, and queued once more, by the next worker that starts, starts a
    trial or finishes, so that no trial stays RUNNING: while this worker runs its last trial, another worker's trial
    falls silent (its last beat 100 s ago); this worker, finishing, fails it and queues it again, and its best.json
    counts it so (round 24: no check when a worker finished passed)."""
    from optuna.visualization import matplotlib as plots

    from mha_textclf.search.study import run_search
    from mha_textclf.search.workers import HEARTBEAT, open_storage

    for plot in ("plot_optimization_history", "plot_param_importances"):  # (drawing: read elsewhere)
        monkeypatch.setattr(plots, plot, lambda study: (_ for _ in ()).throw(ValueError("not drawn here")))
    settings, study_dir = study_settings(tmp_path, n_trials=1, pruning=False), tmp_path / "study"
    fake = fake_trainer(lambda o: [0.5])

    def train_trial(overrides, run_dir, on_epoch_end):  # meanwhile another worker's trial, dead since 100 s
        other = optuna.load_study(study_name="fake", storage=open_storage(str(study_dir / "optuna-journal.log"), 20))
        silent = other.ask()
        silent.suggest_float("trainer.lr", 1e-4, 1e-1, log=True)
        other._storage.set_trial_system_attr(silent._trial_id, HEARTBEAT, time.time() - 100)
        return fake(overrides, run_dir, on_epoch_end)

    study = run_search(settings, study_dir, train_trial)
    trials = study.get_trials()
    assert [t.state.name for t in trials] == ["COMPLETE", "FAIL", "WAITING"]
    assert trials[2].params == trials[1].params and trials[2].system_attrs["failed_trial"] == 1
    best = json.loads((study_dir / "best.json").read_text())
    assert best["trials"] == {"complete": 1, "fail": 1, "waiting": 1}


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_a_journal_trial_whose_worker_keeps_beating_stays_alive_long_after_its_start(tmp_path, monkeypatch):
    """Optuna keeps heartbeats for its databases only; for the journal file, src/mha_textclf/search/workers.py records
    them in the trial itself. On a clock the test moves: two trials started 60 s ago with heartbeats of 10 s; the worker
    of one beat 5 s ago, and that time is in its trial, which is alive; the other, silent since its start, is dead."""
    from types import SimpleNamespace

    from mha_textclf.search import workers

    journal = str(tmp_path / "journal.log")
    study = optuna.create_study(study_name="s", storage=workers.open_storage(journal, heartbeat_seconds=10))
    beating, silent = study.ask(), study.ask()
    start = time.time()
    clock = SimpleNamespace(time=lambda: start + 55)
    monkeypatch.setattr(workers, "time", clock)
    study._storage.record_heartbeat(beating._trial_id)
    clock.time = lambda: start + 60
    other = workers.open_storage(journal, heartbeat_seconds=10)  # another worker's view of the journal
    assert other.get_trial(beating._trial_id).system_attrs[workers.HEARTBEAT] == start + 55
    assert other._get_stale_trial_ids(study._study_id) == [silent._trial_id]


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_workers_started_together_draw_different_trials_and_one_worker_draws_as_before(tmp_path):
    from mha_textclf.search.workers import TrialSeededSampler, open_storage

    def draw(study):
        trial = study.ask()
        return trial.suggest_float("x", 0, 1)

    def open_study(name):
        sampler = TrialSeededSampler(7, lambda seed: optuna.samplers.TPESampler(seed=seed))
        return optuna.create_study(study_name=name, storage=open_storage(str(tmp_path / "journal.log"), 20),
                                   load_if_exists=True, sampler=sampler)
    first, second = open_study("shared"), open_study("shared")  # two workers opening one study at once
    assert draw(first) != draw(second)
    alone = open_study("alone")
    assert [draw(alone) for _ in range(2)] == [t.params["x"] for t in first.trials]


@pytest.mark.slow
def test_two_workers_on_one_machine_finish_one_study_together(data_dir, tmp_path):
    study_dir, n_trials = tmp_path / "tiny", 6
    workers = [start_worker(worker_command(study_dir, data_dir, n_trials)) for _ in range(2)]
    logs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], logs
    study = load_tiny_study(study_dir)
    states = [t.state.name for t in study.trials]
    # n_trials finished between them, or one over: the other worker's trial in flight when the study had enough.
    assert states.count("COMPLETE") + states.count("PRUNED") in (n_trials, n_trials + 1) and "RUNNING" not in states
    ran = [trial_folders_in(log) for log in logs]
    assert all(ran) and not ran[0] & ran[1], ran  # both worked, never on the same trial
    assert ran[0] | ran[1] == {f"trial_{t.number:03d}" for t in study.trials}
    assert len({t.params["trainer.lr"] for t in study.trials}) == len(study.trials)  # no trial drawn twice
    assert_reports_describe(study, study_dir)


@pytest.mark.slow
def test_a_killed_worker_s_trial_is_failed_and_run_again_when_the_same_command_resumes(data_dir, tmp_path):
    study_dir = tmp_path / "tiny"
    command = worker_command(study_dir, data_dir, 2, 20, "heartbeat_seconds=1", "pruning=false")
    worker = start_worker(command)
    deadline = time.monotonic() + 300
    while not (study_dir / "trial_000" / "history.csv").exists():  # its first epoch is done: mid-trial
        assert worker.poll() is None and time.monotonic() < deadline, worker.communicate()[0]
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()
    assert [t.state.name for t in load_tiny_study(study_dir).trials] == ["RUNNING"]  # what the kill leaves
    time.sleep(MISSED_HEARTBEATS * 1 + 0.5)  # silent for 3 heartbeats by the time the same command starts again

    resumed = start_worker(command)
    log = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, log
    study = load_tiny_study(study_dir)
    assert [t.state.name for t in study.trials] == ["FAIL", "COMPLETE", "COMPLETE"]
    retry = study.trials[1]
    assert retry.system_attrs["failed_trial"] == 0 and retry.params == study.trials[0].params
    assert_reports_describe(study, study_dir)
    with open(study_dir / "trials.csv") as f:  # trials.csv names the trial each retry runs again
        rows = list(csv.DictReader(f))
    assert [(row["state"], row["system_attrs_failed_trial"] and float(row["system_attrs_failed_trial"]))
            for row in rows] == [("FAIL", ""), ("COMPLETE", 0), ("COMPLETE", "")]


def test_measure_search_answers_help_and_a_mistake_before_it_removes_or_starts_anything(monkeypatch, capsys):
    """scripts/measure_search.py removes outputs/search/measure_<n>_workers and runs studies: --help prints its usage
    and a misspelt setting gets search's one message (exit 2), neither of them after a subprocess was started."""
    script = load_script("measure_search")
    for name in ("run", "Popen"):
        monkeypatch.setattr(script.subprocess, name, lambda *a, **k: pytest.fail("started a process"))
    monkeypatch.setattr(script.shutil, "rmtree", lambda *a, **k: pytest.fail("removed a study"))
    assert script.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith(script.__doc__)
    with pytest.raises(SystemExit) as exited:
        script.main(["n_trails=3"])
    assert exited.value.code == 2 and "n_trails is not a setting; did you mean n_trials" in capsys.readouterr().err


def test_measure_search_tells_trials_that_reused_their_inputs_from_those_that_built_them(tmp_path, caplog):
    """scripts/measure_search.py reports a trial's data, tokenizer and encoding seconds, as built or as reused, told
    apart by the line the worker's input cache logs into the trial's train.log."""
    import logging

    from mha_textclf.inputs import InputCache

    script = load_script("measure_search")
    cache, settings = InputCache(), settings_for("data.path=/data")
    with caplog.at_level(logging.INFO, logger="mha_textclf.inputs"):
        for product in ("corpus", "tokenizer", "encodings", "corpus", "tokenizer", "encodings"):
            cache.get(product, settings, object)  # built once, then reused: what a second trial logs
    reused_lines = "\n".join(f"[time][mha_textclf.inputs][INFO] - {r.getMessage()}" for r in caplog.records)
    trials = {"trial_000": (1.0, "[time][train][INFO] - epoch 1"), "trial_001": (0.01, reused_lines)}
    for name, (scale, log) in trials.items():
        (tmp_path / name).mkdir()
        stages = {stage: {"seconds": scale * seconds} for stage, seconds in
                  (("data", 1.0), ("tokenizer", 2.0), ("encode", 4.0), ("fit", 100.0), ("reports", 8.0))}
        (tmp_path / name / "metrics.json").write_text(json.dumps({"stages": stages}))
        (tmp_path / name / "train.log").write_text(log + "\n")
    (tmp_path / "trial_002").mkdir()  # a failed trial: no metrics.json, not counted
    built, reused = script.preparation_seconds(tmp_path)
    assert built == pytest.approx([7.0]) and reused == pytest.approx([0.07])


def test_measure_search_runs_each_study_with_one_thread_per_worker_and_counts_pruned_trials_as_finished(
        tmp_path, monkeypatch, capsys):
    """`python scripts/measure_search.py n_trials=8` runs the same study by one worker and by two, one torch thread
    each, the tokenizer learned once beforehand, and prints a table of workers | wall | finished trials (pruned) | best
    val accuracy (trial) for 1 worker, then 2, where finished trials are complete or pruned. The workers are stand-ins
    that leave a study's best.json and trials.csv (round 17: a worker's command without num_threads=1, and finished
    trials counted without the pruned ones, both passed)."""
    script = load_script("measure_search")
    monkeypatch.chdir(tmp_path)
    started = []  # ("warm-up" | "worker", command), in order

    class Worker:  # what python -m search leaves in its study's folder
        def __init__(self, command, stdout=None):
            started.append(("worker", command))
            study = next(a.removeprefix("study=") for a in command if a.startswith("study="))
            study_dir = tmp_path / "outputs" / "search" / study
            study_dir.mkdir(parents=True, exist_ok=True)
            (study_dir / "best.json").write_text(json.dumps(
                {"best_trial": 0, "val_accuracy": 0.9642, "trials": {"complete": 5, "pruned": 3, "fail": 1}}))
            (study_dir / "trials.csv").write_text("number,state,duration\n0,COMPLETE,0 days 00:00:15.800000\n")

        def wait(self):
            return 0

    monkeypatch.setattr(script.subprocess, "run", lambda command, **kwargs: started.append(("warm-up", command)))
    monkeypatch.setattr(script.subprocess, "Popen", Worker)
    monkeypatch.setattr(script, "preparation_seconds", lambda study_dir: ([2.83], [0.0]))
    assert script.main(["n_trials=8"]) == 0
    assert [kind for kind, _ in started] == ["warm-up", "worker", "worker", "worker"]  # the tokenizer first, 1 then 2
    for _, command in started[1:]:
        assert command[1:3] == ["-m", "search"] and "num_threads=1" in command and command[-1] == "n_trials=8"
    studies = [next(a for a in command if a.startswith("study=")) for _, command in started[1:]]
    assert studies == ["study=measure_1_workers", "study=measure_2_workers", "study=measure_2_workers"]
    rows = [line for line in capsys.readouterr().out.splitlines() if re.match(r"\| [12] \|", line)]
    assert [re.sub(r"\| \d+ s \|", "| <wall> |", row) for row in rows] == [
        "| 1 | <wall> | 8 (3) | 0.9642 (0) |", "| 2 | <wall> | 8 (3) | 0.9642 (0) |"]  # 5 complete + 3 pruned


def test_measure_search_removes_an_earlier_measurement_s_study_before_its_workers_start(tmp_path, monkeypatch,
                                                                                          capsys):
    """scripts/measure_search.py: "Each study is new (outputs/search/measure_<n>_workers, removed first)": a study
    left by an earlier measurement would be resumed or extended by the workers (the same command resumes a study),
    and its trials counted again. Each worker, a stand-in, finds its study's folder without the earlier trial."""
    script = load_script("measure_search")
    monkeypatch.chdir(tmp_path)
    for workers in (1, 2):  # what an earlier measurement left
        (tmp_path / "outputs" / "search" / f"measure_{workers}_workers" / "trial_000").mkdir(parents=True)
    found = []  # per worker: the earlier trial was still there

    class Worker:  # what python -m search leaves in its study's folder
        def __init__(self, command, stdout=None):
            study = next(a.removeprefix("study=") for a in command if a.startswith("study="))
            study_dir = tmp_path / "outputs" / "search" / study
            found.append((study, (study_dir / "trial_000").exists()))
            study_dir.mkdir(parents=True, exist_ok=True)
            (study_dir / "best.json").write_text(json.dumps(
                {"best_trial": 0, "val_accuracy": 0.9, "trials": {"complete": 8}}))
            (study_dir / "trials.csv").write_text("number,state,duration\n0,COMPLETE,0 days 00:00:15.800000\n")

        def wait(self):
            return 0

    monkeypatch.setattr(script.subprocess, "run", lambda command, **kwargs: None)
    monkeypatch.setattr(script.subprocess, "Popen", Worker)
    monkeypatch.setattr(script, "preparation_seconds", lambda study_dir: ([2.0], [0.0]))
    assert script.main(["n_trials=8"]) == 0
    assert found == [("measure_1_workers", False), ("measure_2_workers", False), ("measure_2_workers", False)]
