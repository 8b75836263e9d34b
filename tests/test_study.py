"""search/study.py: a tiny study interrupted and resumed, its best trial reproducible from the command it reports;
the median pruner, a resumed study, failing trials and timeouts, the reports every worker writes (best.json,
trials.csv, the plots), and search() composing each trial (its threads, its train.log)."""

import contextlib
import csv
import json
import logging
import math
import os
import re
import shlex
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import capture_figures, optional, settings_for
from mha_textclf import pipeline as train_module
from mha_textclf.errors import UserError
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import flat
from search_fakes import fake_trainer, study_settings

optuna = optional("optuna", "hpo")

from mha_textclf.search.space import as_override  # noqa: E402  (after the check that Optuna is there)
from mha_textclf.search.study import InterruptedStudyError, search  # noqa: E402


@contextlib.contextmanager
def optuna_records():
    """What Optuna logs meanwhile: its own logger does not propagate to the root, so caplog does not see it."""
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("optuna").addHandler(handler)
    try:
        yield records
    finally:
        logging.getLogger("optuna").removeHandler(handler)


def tiny(tmp_path, data_dir, *extra):
    settings = settings_for("study=tiny", f"storage=sqlite:///{tmp_path / 'optuna.db'}", "n_trials=3",
                            "startup_trials=1", "warmup_epochs=1", *extra, app="search")
    settings.train = [f"data.path={data_dir}", "experiment=smoke", "data.max_train_samples=32", "trainer.epochs=3",
                      "probes.attention=[]"]
    settings.params = {"trainer.lr": "tag(log, interval(1e-3, 3e-2))", "model.token_dropout": "interval(0.3, 0.8)"}
    return settings


@pytest.mark.slow
def test_a_study_interrupted_then_resumed_finishes_with_its_best_trial(data_dir, tmp_path, monkeypatch):
    study_dir = tmp_path / "tiny"
    real_train = train_module.train
    calls = []

    def train_interrupting_the_second_trial(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # Ctrl-C during the second trial's first epoch
            on_epoch_end = kwargs["on_epoch_end"]

            def interrupt(row):
                os.kill(os.getpid(), signal.SIGINT)
                return on_epoch_end(row)

            kwargs["on_epoch_end"] = interrupt
        return real_train(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr("mha_textclf.search.study.train", train_interrupting_the_second_trial)
        with pytest.raises(InterruptedStudyError, match="SIGINT"):
            search(tiny(tmp_path, data_dir), study_dir)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "FAIL"]

    search(tiny(tmp_path, data_dir), study_dir)  # the same command again: resumes
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    finished = [t for t in study.trials if t.state.name in ("COMPLETE", "PRUNED")]
    assert len(finished) == 3 and len(study.trials) == 4  # the interrupted trial stays failed, not counted
    # The median pruner gets each epoch's validation loss: what each trial reported, epoch by epoch, is minus its
    # history.csv's val_loss (the fake trainers above hand over nothing else to report).
    for trial in finished:
        with open(study_dir / f"trial_{trial.number:03d}" / "history.csv", newline="") as f:
            history = {int(row["epoch"]): -float(row["val_loss"]) for row in csv.DictReader(f)}
        assert trial.intermediate_values == pytest.approx(history, rel=1e-6) and len(history) >= 1, trial.number
    best = json.loads((study_dir / "best.json").read_text())
    assert best["best_trial"] == study.best_trial.number and best["val_accuracy"] == study.best_value
    assert (study_dir / "optimization_history.png").stat().st_size > 0
    assert (study_dir / "param_importances.png").stat().st_size > 0
    assert sorted(p.name for p in study_dir.glob("trial_*")) == ["trial_000", "trial_001", "trial_002", "trial_003"]
    # The reported command reproduces the best trial's settings exactly: every sampled value, every shared setting.
    command = shlex.split(best["command"])
    assert command[:3] == ["python", "-m", "train"]
    trial_config = yaml.safe_load((study_dir / f"trial_{best['best_trial']:03d}" / "config.yaml").read_text())
    assert asdict(settings_for(*command[3:])) == trial_config
    assert {key: flat(trial_config)[key] for key in best["params"]} == best["params"]
    trial_metrics = RunMetrics.read(study_dir / f"trial_{best['best_trial']:03d}" / "metrics.json")
    assert (best["val_accuracy"], best["test_accuracy"]) == (trial_metrics.val.accuracy, trial_metrics.test.accuracy)

    search(tiny(tmp_path, data_dir, "n_trials=4"), study_dir)  # a larger n_trials extends the study by one
    assert len(optuna.load_study(study_name="tiny", storage=f"sqlite:///{tmp_path / 'optuna.db'}").trials) == 5


@pytest.mark.slow
def test_search_without_optuna_names_its_extra(tmp_path, data_dir, monkeypatch):
    """`python -m search` without its extra says which one to install, before any study exists."""
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    with pytest.raises(UserError, match=r'python -m search needs Optuna, the `hpo` extra: pip install -e "\.\[hpo\]"'):
        search(tiny(tmp_path, data_dir), tmp_path / "study")
    assert not (tmp_path / "study").exists()


@pytest.mark.slow
def test_a_mistake_in_the_shared_settings_or_the_space_stops_before_any_trial(tmp_path, data_dir):
    settings = tiny(tmp_path, data_dir)
    settings.train = ["trainer.epoch=3"]
    with pytest.raises(UserError, match=r"did you mean trainer\.epochs"):
        search(settings, tmp_path / "study")
    settings = tiny(tmp_path, data_dir)
    settings.params = {"trainer.learning_rate": "interval(1e-3, 1e-2)"}
    with pytest.raises(UserError, match=r"params: trainer\.learning_rate is not a setting"):
        search(settings, tmp_path / "study")
    assert not (tmp_path / "study").exists()


def test_a_space_that_reaches_values_a_setting_refuses_stops_before_any_trial_naming_each(tmp_path, monkeypatch):
    """Every end of an interval or range and every choice is checked against its setting's bounds and choices, so
    that no trial is spent on a value every run refuses; the trainer is never called."""
    settings = study_settings(tmp_path, n_trials=2, pruning=False)
    settings.params = {"model.token_dropout": "interval(0.5, 1.5)", "trainer.epochs": "range(0, 8, 4)",
                       "model.n_heads": "choice(2, 4)", "trainer.lr": "tag(log, interval(1e-4, 1e-2))",
                       "data.group_by_length": "choice(true, false)", "model": "choice(naive, efficient)",
                       "data.text_column": "choice([title, body], title)"}  # a choice of lists: checked, no crash
    monkeypatch.setattr("mha_textclf.search.study.train", lambda *a, **k: pytest.fail("a trial ran"))
    shared = settings_for()  # composed before compose_settings is replaced
    monkeypatch.setattr("mha_textclf.cli.compose_settings", lambda app, overrides: shared)
    with pytest.raises(UserError) as info:
        search(settings, tmp_path / "study")
    assert str(info.value).splitlines() == [
        "The search space reaches values the settings refuse:",
        "  params.model.token_dropout=interval(0.5, 1.5): 1.5 must be < 1.",
        "  params.trainer.epochs=range(0, 8, 4): 0 must be > 0."]
    assert not (tmp_path / "study").exists()


def test_a_trial_worse_than_the_median_is_pruned_and_one_at_its_last_epoch_is_not(tmp_path):
    from mha_textclf.search.study import run_search

    def losses(overrides):  # low learning rates learn; high ones stall far above the median
        lr = float(overrides[-1].split("=")[1])
        return [0.5, 0.4, 0.3, 0.2] if lr < 1e-2 else [2.0, 2.0, 2.0, 2.0]

    settings = study_settings(tmp_path, n_trials=12, startup_trials=2, warmup_epochs=1, seed=3)
    study = run_search(settings, tmp_path / "study", fake_trainer(losses))
    for trial in study.trials:
        lr = trial.params["trainer.lr"]
        assert trial.state.name == ("COMPLETE" if lr < 1e-2 or trial.number < 2 else "PRUNED"), trial
        if trial.state.name == "PRUNED":
            assert max(trial.intermediate_values) == 2  # stopped at the first epoch after warm-up, not trained on
    assert any(t.state.name == "PRUNED" for t in study.trials)
    # best.json counts the trials by state, the pruned too: a study's pruned count, and scripts/measure_search.py's
    # "finished trials (pruned)", are read from it (round 24: leaving the pruned out passed).
    best = json.loads((tmp_path / "study" / "best.json").read_text())
    states = [t.state.name.lower() for t in study.trials]
    assert best["trials"] == {state: states.count(state) for state in ("complete", "pruned")}
    # trials.csv's value is a completed trial's validation accuracy; a pruned one has none (not minus its loss).
    with open(tmp_path / "study" / "trials.csv") as f:
        values = {row["state"]: row["value"] for row in csv.DictReader(f)}
    assert values["PRUNED"] == "" and 0 < float(values["COMPLETE"]) <= 1
    settings.warmup_epochs = 3  # now the first verdict falls on the last epoch: too late to prune
    settings.study, settings.n_trials = "late", 6
    late = run_search(settings, tmp_path / "late", fake_trainer(losses))
    assert {t.state.name for t in late.trials} == {"COMPLETE"}


def test_the_pruner_stops_a_trial_below_the_median_of_the_completed_trials_and_pruning_false_stops_none(tmp_path):
    """A median pruner gets each epoch's validation loss and stops a trial that is worse than the median of the earlier
    completed trials at the same epoch (pruned ones left out; after warmup_epochs, once startup_trials have completed);
    `python -m search study=accuracy_unpruned pruning=false` searches the same space without pruning. Each trial's state
    against that rule written out: the validation loss, the same at every epoch, grows with the distance of the sampled
    learning rate from 1e-2, so every trial has its own."""
    from mha_textclf.search.study import run_search

    def losses(overrides):
        return [abs(math.log10(float(overrides[-1].split("=")[1])) + 2)] * 4

    settings = study_settings(tmp_path, n_trials=12, startup_trials=3, warmup_epochs=1, seed=1)
    study = run_search(settings, tmp_path / "study", fake_trainer(losses))
    completed, would_prune = [], []
    for trial in sorted(study.trials, key=lambda t: t.number):
        value = -losses([f"trainer.lr={trial.params['trainer.lr']}"])[0]  # what the pruner sees: minus the loss
        below = len(completed) >= 3 and value < np.median([t.intermediate_values[2] for t in completed])
        assert trial.state.name == ("PRUNED" if below else "COMPLETE"), (trial.number, value)
        if below:  # judged at the first epoch after the warm-up, and stopped there
            assert list(trial.intermediate_values) == [1, 2]
            would_prune.append(trial.params)
        else:
            completed.append(trial)
    assert 2 <= len(would_prune) <= 7  # (neither rule stops every trial, or none)
    settings.study, settings.pruning = "unpruned", False
    unpruned = run_search(settings, tmp_path / "unpruned", fake_trainer(losses))
    assert [t.params for t in unpruned.trials][:10] == [t.params for t in study.trials][:10]  # TPE's random start...
    assert {t.state.name for t in unpruned.trials} == {"COMPLETE"}  # ...none stopped
    assert all(list(t.intermediate_values) == [1, 2, 3, 4] for t in unpruned.trials)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # ask() without optimize(), as here
def test_the_study_s_pruner_cuts_at_the_median_itself_not_a_percentile_beside_it(tmp_path):
    """The accuracy study's median pruner stops a trial that is worse than the median of the earlier completed trials at
    the same epoch (pruned ones left out; after warmup_epochs). The study python -m search opens, shown ten completed
    trials of 0, ..., 9 at the first epoch it judges (numpy's median: 4.5; other epochs far off, five pruned trials far
    below): a trial at 4.49 is stopped, one at 4.51 goes on (round 24: a pruner at the 40th percentile passed, no tested
    trial lay between the two)."""
    from optuna.distributions import FloatDistribution

    from mha_textclf.search.study import _open_study

    settings = settings_for(app="search")  # the defaults: warmup_epochs=2, startup_trials=5
    study = _open_study(settings, str(tmp_path / "journal.log"))
    judged = settings.warmup_epochs + 1  # epochs count from 1
    values = [float(v) for v in range(10)]
    for value, state in [(v, "COMPLETE") for v in values] + [(-100.0, "PRUNED")] * 5:
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState[state], value=value if state == "COMPLETE" else None,
            params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
            intermediate_values={judged - 1: value - 50, judged: value, judged + 1: value + 50}))
    median = float(np.median(values))
    for offset, stopped in ((-0.01, True), (0.01, False)):
        trial = study.ask()
        trial.report(median + offset, judged)
        assert bool(trial.should_prune()) is stopped, offset


def test_a_resumed_study_draws_new_trials_and_keeps_its_space(tmp_path, monkeypatch):
    from mha_textclf.search.study import run_search

    calls = []
    settings = study_settings(tmp_path, n_trials=3, pruning=False)
    run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls, seconds=0.1))
    time.sleep(0.5)  # a pause between the two sessions
    settings.n_trials = 6
    study = run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls, seconds=0.1))
    assert len(calls) == 6 and len({tuple(c) for c in calls}) == 6  # no trial drawn twice
    # best.json: the study's time from its first trial's start to its last one's end, the pause included.
    best = json.loads((tmp_path / "study" / "best.json").read_text())
    span = max(t.datetime_complete for t in study.trials) - min(t.datetime_start for t in study.trials)
    assert best["study_seconds"] == round(span.total_seconds(), 1) >= 1.1
    assert best["trials"] == {"complete": 6} and best["best_trial"] == study.best_trial.number
    space = settings.params
    settings.params = {"trainer.lr": "interval(0.1, 0.2)"}
    with pytest.raises(UserError, match="was started with another space"):
        run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5]))
    # Every worker of a study must be given the same search settings: a worker whose shared training settings differ
    # is refused as well, though its space is the same (round 24: comparing only the space passed).
    settings.params, settings.train = space, ["trainer.epochs=3"]
    with pytest.raises(UserError, match="was started with another space or shared settings"):
        run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5]))
    # Every worker, when it stops, writes best.json, trials.csv and the plots from the storage: one that finds the
    # study finished, and trains nothing, too (round 24: writing them only after trials passed).
    from optuna.visualization import matplotlib as plots

    for plot in ("plot_optimization_history", "plot_param_importances"):  # (drawing: read elsewhere)
        monkeypatch.setattr(plots, plot, lambda study: (_ for _ in ()).throw(ValueError("not drawn here")))
    settings.train = []
    (tmp_path / "study" / "best.json").unlink()
    run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls))
    assert len(calls) == 6 and json.loads((tmp_path / "study" / "best.json").read_text())["trials"] == {"complete": 6}


def test_a_study_resumed_after_a_default_moved_is_refused_naming_what_moved(tmp_path, monkeypatch):
    """The same command composes other settings once a default has moved, or reads other texts at the same path: the
    trials to come would train other models than the study's, so a resumed study is refused. Giving the old value in
    train=[...] resumes it; a trial's own params, where the data lies and what trains nothing may differ."""
    from mha_textclf import cli
    from mha_textclf.search.study import TrialBase, run_search
    from mha_textclf.settings import flat, show

    def resume(base):
        return run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls), base)

    shared = flat(asdict(cli.compose_settings("train", [])))
    old = shared | {"model.token_dropout": 0.5}  # the default when the study started
    settings, calls = study_settings(tmp_path, n_trials=2, pruning=False), []
    resume(TrialBase(old, data="abc"))
    settings.n_trials = 4
    then = f"model.token_dropout=0.5 then, {show(shared['model.token_dropout'])} now"
    with pytest.raises(UserError, match=re.escape(f"shared settings composed to other values ({then}): a default has")):
        resume(TrialBase(shared, data="abc"))
    # Unlike a continued run: a value that now adapts (null), and another epoch count, are other trials too.
    for key, value in (("model.d_model", None), ("trainer.epochs", 48)):
        with pytest.raises(UserError, match=re.escape(f"{key}={show(old[key])} then, {show(value)} now")):
            resume(TrialBase(old | {key: value}, data="abc"))
    with pytest.raises(UserError, match=r"was started on other data: the files at data\.path="):
        resume(TrialBase(old, data="other"))
    # A hub dataset has no fingerprint: its name is compared instead.
    with pytest.raises(UserError, match=re.escape(f"data.path={old['data.path']} then, ag_news now")):
        resume(TrialBase(old | {"data.path": "ag_news"}, data=None))
    assert len(calls) == 2  # each refused before any trial

    # As the message says: the old value given outright composes to what the study started from, and it resumes.
    settings.train = ["model.token_dropout=0.5"]
    resume(TrialBase(flat(asdict(cli.compose_settings("train", settings.train))), data="abc"))
    assert len(calls) == 4
    settings.n_trials = 6  # the data moved, threads and the trial's own learning rate differ: the same trials
    resume(TrialBase(old | {"trainer.lr": 0.1, "data.path": str(tmp_path / "moved"), "trainer.num_threads": 3},
                     data="abc"))
    assert len(calls) == 6


def test_a_study_started_before_the_record_adopts_it_and_a_config_group_among_the_params_varies_its_keys(tmp_path):
    """A study started before studies recorded what their trials start from takes this start's as its record (the
    space still compared as written), and is held to it from then on. A config group among the params (model=) sets
    its own keys in each trial: those may differ, and no other key of its group."""
    from mha_textclf import cli
    from mha_textclf.search.study import TrialBase, run_search, trial_base
    from mha_textclf.settings import flat

    settings, calls = study_settings(tmp_path, n_trials=2, pruning=False), []
    run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls))  # no record, as before
    shared = flat(asdict(cli.compose_settings("train", [])))
    settings.n_trials, settings.train = 3, ["trainer.epochs=3"]  # a start the record must not come from
    for _ in range(2):
        with pytest.raises(UserError, match="was started with another space or shared settings"):
            run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls),
                       TrialBase(shared | {"trainer.epochs": 3}))
    settings.train = []
    run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls), TrialBase(shared))
    settings.n_trials = 4
    with pytest.raises(UserError, match=r"\(model\.d_model=64 then, 96 now\)"):
        run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], calls),
                   TrialBase(shared | {"model.d_model": 96}))
    assert len(calls) == 3
    # A study recorded before a setting existed had the value that adds nothing (no bigram table, here).
    settings.study, settings.n_trials = "older", 1
    before_bigrams = {k: v for k, v in shared.items() if k != "model.bigram_buckets"}
    run_search(settings, tmp_path / "older", fake_trainer(lambda o: [0.5], calls), TrialBase(before_bigrams))
    settings.n_trials = 2
    with pytest.raises(UserError, match=rf"\(model\.bigram_buckets=0 then, {shared['model.bigram_buckets']} now\)"):
        run_search(settings, tmp_path / "older", fake_trainer(lambda o: [0.5], calls), TrialBase(shared))

    settings.params = {"model": "choice(naive, efficient, torch)", "trainer.lr": "interval(1e-3, 1e-2)"}
    base = trial_base(settings, cli.compose_settings("train", []))
    assert base.varied == {"model.attention"} and base.data is not None  # bbc-news: a local folder
    settings.study, settings.n_trials = "groups", 4
    run_search(settings, tmp_path / "groups", fake_trainer(lambda o: [0.5], calls), base)
    settings.n_trials = 5
    run_search(settings, tmp_path / "groups", fake_trainer(lambda o: [0.5], calls),
               TrialBase(base.settings | {"model.attention": "torch"}, base.varied, base.data))
    with pytest.raises(UserError, match=r"model\.n_heads=8 then, 4 now"):
        run_search(settings, tmp_path / "groups", fake_trainer(lambda o: [0.5], calls),
                   TrialBase(base.settings | {"model.n_heads": 4}, base.varied, base.data))


def test_python_m_search_starts_its_trials_from_what_its_train_overrides_compose_to(tmp_path, monkeypatch):
    from mha_textclf import cli
    from mha_textclf.data.corpus import source_fingerprint
    from mha_textclf.search import study as study_module
    from mha_textclf.settings import flat

    passed = []
    monkeypatch.setattr(study_module, "run_search", lambda *args: passed.append(args[3]))
    settings = study_settings(tmp_path)
    settings.train = ["trainer.epochs=3"]
    study_module.search(settings, tmp_path / "study")
    composed = cli.compose_settings("train", ["trainer.epochs=3"])
    assert passed[0].settings == flat(asdict(composed)) and passed[0].settings["trainer.epochs"] == 3
    assert passed[0].data == source_fingerprint(composed.data.path) is not None and passed[0].varied == frozenset()


def test_a_failing_trial_does_not_end_the_study(tmp_path):
    from mha_textclf.search.study import run_search

    def losses(overrides):
        if float(overrides[-1].split("=")[1]) > 1e-2:
            raise UserError("The training loss became nan at epoch 1, step 3")
        return [0.5]

    study = run_search(study_settings(tmp_path, n_trials=8, pruning=False, seed=5), tmp_path / "study",
                       fake_trainer(losses))
    states = [t.state.name for t in study.trials]
    assert "FAIL" in states and states.count("COMPLETE") >= 1 and len(states) == 8
    # best.json counts the trials by state, and trials.csv has each trial's, the failed ones too.
    best = json.loads((tmp_path / "study" / "best.json").read_text())
    assert best["trials"] == {state.lower(): states.count(state) for state in set(states)}
    with open(tmp_path / "study" / "trials.csv") as f:
        assert [row["state"] for row in csv.DictReader(f)] == states


def test_best_json_holds_the_best_trial_s_own_metrics(tmp_path):
    """best.json holds the best trial, its parameters and metrics: its validation accuracy and loss, test accuracy,
    training seconds and epochs, each from that trial's metrics (all different here); its parameters, every one of the
    space's, as the trial was trained with them (round 24: best.json keeping only the first parameter passed, the tests'
    spaces had one, or were checked only for what best.json held)."""
    from dataclasses import replace

    from mha_textclf.search.study import run_search

    returned, trained_with = {}, {}
    fake = fake_trainer(lambda o: [0.9, 0.6, 0.7])  # 3 epochs, the best at the second

    def train_trial(overrides, run_dir, on_epoch_end):
        metrics = fake(overrides, run_dir, on_epoch_end)
        trained_with[run_dir.name] = {key: float(value) for key, value in (o.split("=") for o in overrides)}
        lr = trained_with[run_dir.name]["trainer.lr"]
        metrics = replace(metrics, val=replace(metrics.val, accuracy=lr, loss=1 - lr),
                          test=replace(metrics.test, accuracy=lr / 2, loss=9.0), train_seconds=100 * lr,
                          eval_seconds=0.5, best_epoch=2, epochs=10 + 7 * len(returned))  # each its own count
        returned[run_dir.name] = metrics
        return metrics

    settings = study_settings(tmp_path, n_trials=3, pruning=False)
    settings.params |= {"trainer.weight_decay": "interval(0, 0.1)"}
    run_search(settings, tmp_path / "study", train_trial)
    best = json.loads((tmp_path / "study" / "best.json").read_text())
    metrics = returned[f"trial_{best['best_trial']:03d}"]
    assert best["params"] == trained_with[f"trial_{best['best_trial']:03d}"]
    assert set(best["params"]) == {"trainer.lr", "trainer.weight_decay"}
    assert best["val_accuracy"] == metrics.val.accuracy == max(m.val.accuracy for m in returned.values())
    assert (best["val_loss"], best["test_accuracy"], best["train_seconds"], best["epochs"]) == (
        metrics.val.loss, metrics.test.accuracy, metrics.train_seconds, metrics.epochs)
    assert len({m.epochs for m in returned.values()}) == len(returned) == 3  # so epochs came from that trial


def test_the_plots_draw_the_study_s_trials_its_best_so_far_and_each_parameter_s_importance(tmp_path, monkeypatch):
    """optimization_history.png shows the complete trials' validation accuracy against the trial number and the best so
    far; param_importances.png a bar per parameter of the space, Optuna's importance evaluator over the complete trials.
    Read from the figures the study saved, against the study in its storage."""
    from mha_textclf.search.study import run_search

    figures = capture_figures(monkeypatch)

    def losses(overrides):  # the learning rate decides the accuracy, the weight decay barely
        values = dict(o.split("=") for o in overrides)
        return [float(values["trainer.lr"]) * 5 + float(values["trainer.weight_decay"]) / 100]

    settings = study_settings(tmp_path, n_trials=6, pruning=False)
    settings.params |= {"trainer.weight_decay": "interval(0, 0.1)"}
    study = run_search(settings, tmp_path / "study", fake_trainer(losses))
    assert {p.name for p in (tmp_path / "study").glob("*.png")} == {"optimization_history.png",
                                                                   "param_importances.png"}
    (history,) = figures["optimization_history.png"].axes
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    numbers, values = [t.number for t in complete], [t.value for t in complete]
    assert len(complete) == 6
    points = history.collections[0].get_offsets()
    assert list(points[:, 0]) == numbers and list(points[:, 1]) == pytest.approx(values)
    (best,) = [line for line in history.lines if line.get_label() == "Best Value"]
    assert list(best.get_ydata()) == pytest.approx([max(values[: i + 1]) for i in range(len(values))])
    (importances,) = figures["param_importances.png"].axes
    bars = {label.get_text(): bar.get_width()
            for label, bar in zip(importances.get_yticklabels(), importances.patches, strict=True)}
    assert bars == pytest.approx(optuna.importance.get_param_importances(study))
    assert set(bars) == {"trainer.lr", "trainer.weight_decay"}


def test_workers_finishing_together_write_the_reports_in_turn_under_reports_lock(tmp_path, monkeypatch):
    """Workers finishing together take turns under a lock file (reports.lock), each reading the storage once its turn
    comes. While another worker holds reports.lock (and finishes a trial meanwhile), this one waits and writes nothing;
    once the lock is free it writes best.json with that trial counted."""
    import threading

    from optuna.distributions import FloatDistribution
    from optuna.storages.journal import JournalFileOpenLock
    from optuna.visualization import matplotlib as plots

    from mha_textclf.search.study import write_study_reports

    for plot in ("plot_optimization_history", "plot_param_importances"):  # (a second of drawing; read elsewhere)
        monkeypatch.setattr(plots, plot, lambda study: (_ for _ in ()).throw(ValueError("not drawn here")))
    storage, study_dir = f"sqlite:///{tmp_path / 'optuna.db'}", tmp_path / "study"
    study_dir.mkdir()
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")

    def finish_a_trial(value):  # as a worker does: into the storage
        optuna.load_study(study_name="s", storage=storage).add_trial(optuna.trial.create_trial(
            value=value, params={"trainer.lr": value / 100},
            distributions={"trainer.lr": FloatDistribution(1e-4, 1e-1, log=True)}))

    finish_a_trial(0.5)
    finish_a_trial(0.6)
    other = JournalFileOpenLock(str(study_dir / "reports"))  # another worker's turn
    other.acquire()
    writer = threading.Thread(target=write_study_reports, args=(study, study_dir))
    writer.start()
    finish_a_trial(0.4)
    writer.join(timeout=0.5)
    assert writer.is_alive() and (study_dir / "reports.lock").exists() and not (study_dir / "best.json").exists()
    other.release()
    writer.join(timeout=60)
    assert not writer.is_alive()
    assert json.loads((study_dir / "best.json").read_text())["trials"] == {"complete": 3}


def test_each_report_file_is_written_whole_under_a_temporary_name_then_renamed_into_place(tmp_path, monkeypatch):
    """Each report file is written under a temporary name and renamed into place, so that a reader never sees half
    a file. best.json and trials.csv each arrive by one rename from a hidden name beside them, which held the whole
    file; the final name is never written to directly."""
    from optuna.distributions import FloatDistribution
    from optuna.visualization import matplotlib as plots

    from mha_textclf.runs import files
    from mha_textclf.search import study as tuning

    for plot in ("plot_optimization_history", "plot_param_importances"):  # (drawing: read elsewhere)
        monkeypatch.setattr(plots, plot, lambda study: (_ for _ in ()).throw(ValueError("not drawn here")))
    study = optuna.create_study(study_name="s", direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=0.5, params={"trainer.lr": 0.005},
                                              distributions={"trainer.lr": FloatDistribution(1e-4, 1e-1, log=True)}))
    study_dir = tmp_path / "study"
    study_dir.mkdir()
    renames, real_replace = {}, os.replace

    def replace(src, dst):
        assert not Path(dst).exists()  # nothing written to the final name before the rename
        renames[Path(dst).name] = (Path(src), Path(src).read_bytes())
        return real_replace(src, dst)

    monkeypatch.setattr(files.os, "replace", replace)
    tuning.write_study_reports(study, study_dir)
    assert set(renames) == {"best.json", "trials.csv"}
    for name, (src, content) in renames.items():
        assert src.parent == study_dir and src.name != name and src.name.startswith(f".{name}.")
        assert (study_dir / name).read_bytes() == content and not src.exists()
    assert sorted(p.name for p in study_dir.iterdir()) == ["best.json", "trials.csv"]  # no temporary left


def test_a_worker_stops_starting_trials_after_timeout_minutes(tmp_path, monkeypatch):
    """timeout_minutes=0.02: trials of 0.2 s start for 1.2 s, then no more (about 6 of the 50 asked for; read as
    seconds, a single trial)."""
    from optuna.visualization import matplotlib as plots

    from mha_textclf.search.study import run_search

    for plot in ("plot_optimization_history", "plot_param_importances"):  # (a second of drawing; read elsewhere)
        monkeypatch.setattr(plots, plot, lambda study: (_ for _ in ()).throw(ValueError("not drawn here")))

    settings = study_settings(tmp_path, n_trials=50, pruning=False, timeout_minutes=0.02)
    study = run_search(settings, tmp_path / "study", fake_trainer(lambda o: [0.5], seconds=0.2))
    assert 1 < len(study.trials) < 50
    # timeout_minutes applies to each worker on its own: a worker joining a study whose other worker's trial took a
    # minute still starts trials for its own 0.18 s (round 24: a timeout counted down by the study's trials passed, each
    # test's study was new).
    from datetime import datetime, timedelta

    from optuna.distributions import FloatDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    (tmp_path / "joined").mkdir()
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "joined" / "optuna-journal.log")))
    end = datetime.now()
    optuna.create_study(study_name="fake", storage=storage, direction="maximize").add_trial(optuna.trial.FrozenTrial(
        number=0, trial_id=0, state=optuna.trial.TrialState.COMPLETE, value=0.5, datetime_start=end - timedelta(
            minutes=1), datetime_complete=end, params={"trainer.lr": 1e-3}, user_attrs={}, system_attrs={},
        distributions={"trainer.lr": FloatDistribution(1e-4, 1e-1, log=True)}, intermediate_values={}))
    settings.timeout_minutes = 0.003
    joined = run_search(settings, tmp_path / "joined", fake_trainer(lambda o: [0.5], seconds=0.03))
    assert 1 < len(joined.trials) - 1 < 49


def test_num_threads_sets_the_torch_threads_of_the_worker_s_trials(tmp_path, monkeypatch):
    """`num_threads` sets the torch threads of one worker's trials: python -m search hands it to train as the launcher's
    share, which train applies (trainer.num_threads wins there: test_pipeline.py)."""
    seen = []

    def train_recording_threads(settings, run_dir, overrides, threads=None, on_epoch_end=None, **kwargs):
        seen.append(threads)
        return fake_trainer(lambda o: [0.5])(overrides, run_dir, on_epoch_end)

    monkeypatch.setattr("mha_textclf.search.study.train", train_recording_threads)
    search(study_settings(tmp_path, n_trials=2, pruning=False, num_threads=2), tmp_path / "study")
    assert seen == [2, 2]


def test_without_num_threads_a_worker_s_trials_keep_torch_s_default_threads(tmp_path, monkeypatch):
    """search --help: num_threads "null: torch's default, all cores", the default: a worker alone on a machine uses
    all of it, so its trials are handed no launcher's share (None), which train leaves to torch (test_pipeline.py)."""
    seen = []

    def train_recording_threads(settings, run_dir, overrides, threads=None, on_epoch_end=None, **kwargs):
        seen.append(threads)
        return fake_trainer(lambda o: [0.5])(overrides, run_dir, on_epoch_end)

    monkeypatch.setattr("mha_textclf.search.study.train", train_recording_threads)
    settings = settings_for("study=fake", f"storage=sqlite:///{tmp_path / 'optuna.db'}", "n_trials=2",
                            "pruning=false", app="search")
    settings.train, settings.params = [], {"trainer.lr": "tag(log, interval(1e-4, 1e-1))"}
    assert settings.num_threads is None
    search(settings, tmp_path / "study")
    assert seen == [None, None]


def test_each_trial_s_folder_holds_its_own_train_log(tmp_path, monkeypatch, caplog):
    """Each trial trains into outputs/search/<study>/trial_<n>/, a run folder like any other, so with a train.log of
    its own (scripts/measure_search.py reads the trials' logs): what each trial logs lands in its own folder's
    train.log, and no other trial's."""
    import logging

    def train_logging(settings, run_dir, overrides, on_epoch_end=None, **kwargs):
        logging.getLogger("train").info(f"training {run_dir.name} with {overrides[-1]}")
        return fake_trainer(lambda o: [0.5])(overrides, run_dir, on_epoch_end)

    settings = study_settings(tmp_path, n_trials=2, pruning=False)
    monkeypatch.setattr("mha_textclf.search.study.train", train_logging)
    shared = settings_for()  # composed once, before compose_settings is replaced
    monkeypatch.setattr("mha_textclf.cli.compose_settings", lambda app, overrides: shared)
    caplog.set_level(logging.INFO)
    study = search(settings, tmp_path / "study")
    for trial in study.trials:
        folder = f"trial_{trial.number:03d}"
        log = (tmp_path / "study" / folder / "train.log").read_text()
        lr = as_override("trainer.lr", trial.params["trainer.lr"])
        assert [line.split(" - ", 1)[1] for line in log.splitlines()] == [f"training {folder} with {lr}"]


def test_a_trial_that_breaks_a_rule_says_why_in_its_own_train_log(tmp_path, monkeypatch):
    """A rule only some drawn values break (here, as composing the trial's settings would say it) fails that trial;
    its folder's train.log holds the reason, not nothing."""
    def refusing(app, overrides):
        if overrides:  # a trial's, not the shared settings' (none here)
            raise UserError(f"Invalid setting: {overrides[-1]} breaks a rule.")
        return shared

    shared = settings_for()  # composed before compose_settings is replaced

    settings = study_settings(tmp_path, n_trials=2, pruning=False)
    monkeypatch.setattr("mha_textclf.cli.compose_settings", refusing)
    nothing_completed = r"No trial of the study 'fake' completed \({'fail': 2}\); the trial folders' logs say why"
    with optuna_records() as records, pytest.raises(UserError, match=nothing_completed):
        search(settings, tmp_path / "study")
    # Optuna's line names each failed trial's parameters and error, without the traceback of a rule's refusal.
    failed = [r for r in records if "because of the following error: UserError" in r.getMessage()]
    assert len(failed) == 2 and not any(r.exc_info for r in failed)
    logs = [path.read_text() for path in sorted((tmp_path / "study").glob("trial_*/train.log"))]
    assert len(logs) == 2 and all(re.search(r"\[ERROR\] - Invalid setting: trainer\.lr=[\d.e-]+ breaks a rule\.", log)
                                  for log in logs), logs


def test_an_interrupted_study_reports_what_finished_and_says_it_once(tmp_path):
    """A signal that stops a trial stops the study: best.json and trials.csv are written for the trials that
    finished (not only once the study resumes and ends), and Optuna does not log the stopped trial as a failure with
    its traceback: the study's own log says it."""
    from mha_textclf.search.study import run_search

    trainer = fake_trainer(lambda overrides: [0.5, 0.4])

    def interrupted_second(overrides, run_dir, on_epoch_end):
        metrics = trainer(overrides, run_dir, on_epoch_end)
        if run_dir.name == "trial_001":
            metrics.interrupted_by = "SIGINT"
        return metrics

    with optuna_records() as records, pytest.raises(InterruptedStudyError, match="SIGINT"):
        run_search(study_settings(tmp_path, n_trials=3, pruning=False), tmp_path / "study", interrupted_second)
    with open(tmp_path / "study" / "trials.csv") as f:
        assert [row["state"] for row in csv.DictReader(f)] == ["COMPLETE", "FAIL"]
    best = json.loads((tmp_path / "study" / "best.json").read_text())
    assert best["best_trial"] == 0 and best["trials"] == {"complete": 1, "fail": 1}
    assert not [r.getMessage() for r in records if r.getMessage().startswith("Trial 1 ")]
