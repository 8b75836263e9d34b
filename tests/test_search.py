"""The hyperparameter search: Hydra's sweep syntax as Optuna's space, a tiny study interrupted and resumed, its best
trial reproducible from the command it reports; workers that share one study, on one machine or as a Slurm array,
and a killed worker's trial failed and run again."""

import csv
import json
import math
import os
import re
import shlex
import signal
import sys
import time
from dataclasses import asdict
from pathlib import Path

import commands
import numpy as np
import pytest
import yaml

from conftest import REPO, capture_figures, load_script, optional, settings_for
from mha_textclf import pipeline as train_module
from mha_textclf.errors import UserError
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import MISSED_HEARTBEATS, flat

optuna = optional("optuna", "hpo")

from mha_textclf.search.space import as_override, search_space  # noqa: E402  (after the check that Optuna is there)
from mha_textclf.search.study import InterruptedStudyError, search  # noqa: E402


def test_hydra_sweep_expressions_become_optuna_distributions():
    space = search_space({"trainer.lr": "tag(log, interval(1e-4, 1e-2))", "model.dropout": "interval(0, 0.5)",
                          "model.n_heads": "int(interval(1, 8))", "trainer.epochs": "range(8, 33, 4)",
                          "pe": "choice(true, false)", "data.max_length": "choice(512, 1024)"})
    assert space["trainer.lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert space["model.dropout"] == optuna.distributions.FloatDistribution(0, 0.5)
    assert space["model.n_heads"] == optuna.distributions.IntDistribution(1, 8)
    assert space["trainer.epochs"] == optuna.distributions.IntDistribution(8, 32, step=4)  # range's end: exclusive
    assert space["pe"] == optuna.distributions.CategoricalDistribution([True, False])
    assert space["data.max_length"].choices == (512, 1024)
    with pytest.raises(UserError, match="is a single value, not a range"):
        search_space({"trainer.lr": "0.1"})
    assert as_override("trainer.lr", 0.1234567890123) == "trainer.lr=0.1234567890123"
    assert as_override("pe", True) == "pe=true"


def test_interval_is_a_float_even_between_whole_numbers_and_only_int_interval_an_int():
    """The space is declared in Hydra's sweep syntax: interval(a,b) is a float, int(interval(a,b)) an int, and
    tag(log, interval(a,b)) on a log scale. A float however its ends are written: interval(0, 1) samples the whole
    range between them, not the two ints 0 and 1."""
    space = search_space({"model.dropout": "interval(0, 1)", "trainer.lr": "tag(log, interval(1, 100))",
                          "model.n_heads": "int(interval(1, 8))", "trainer.epochs": "int(tag(log, interval(2, 64)))"})
    assert space["model.dropout"] == optuna.distributions.FloatDistribution(0.0, 1.0)
    assert space["trainer.lr"] == optuna.distributions.FloatDistribution(1.0, 100.0, log=True)
    assert space["model.n_heads"] == optuna.distributions.IntDistribution(1, 8)
    assert space["trainer.epochs"] == optuna.distributions.IntDistribution(2, 64, log=True)



def test_range_ends_before_its_end_as_python_s_range_does_on_every_grid():
    """range(a,b,step) in the space's sweep syntax is Python's range, whose end is left out, also where the steps land
    on it exactly: range(8, 32, 4) is 8, ..., 28 as list(range(8, 32, 4)), and a float range(0, 1, 0.25) is numpy's
    arange (round 24: an end taken in when the steps reached it passed, the one tested range ended between two
    steps)."""
    for start, stop, step in ((8, 32, 4), (8, 33, 4), (1, 2, 1), (0, 10, 3)):
        grid = search_space({"trainer.epochs": f"range({start}, {stop}, {step})"})["trainer.epochs"]
        assert list(range(grid.low, grid.high + 1, grid.step)) == list(range(start, stop, step)), (start, stop, step)
    grid = search_space({"model.dropout": "range(0.0, 1.0, 0.25)"})["model.dropout"]
    assert isinstance(grid, optuna.distributions.FloatDistribution)
    assert np.arange(grid.low, grid.high + grid.step / 2, grid.step) == pytest.approx(np.arange(0.0, 1.0, 0.25))

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


def test_search_without_optuna_names_its_extra(tmp_path, data_dir, monkeypatch):
    """`python -m search` without its extra says which one to install, before any study exists."""
    monkeypatch.setitem(sys.modules, "optuna", None)  # as if not installed
    with pytest.raises(UserError, match=r'python -m search needs Optuna, the `hpo` extra: pip install -e "\.\[hpo\]"'):
        search(tiny(tmp_path, data_dir), tmp_path / "study")
    assert not (tmp_path / "study").exists()


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


def fake_trainer(losses_of, calls=None, seconds=0.0):
    """A stand-in for training: epochs whose validation loss `losses_of(overrides)` gives, reported as train would,
    stopping when asked, in `seconds` a trial; returns the metrics a run would."""
    from mha_textclf.runs.metrics import RunMetrics, SplitMetrics

    def train_trial(overrides, run_dir, on_epoch_end):
        if calls is not None:
            calls.append(overrides)
        time.sleep(seconds)
        losses = losses_of(overrides)
        epochs = 0
        for epochs, loss in enumerate(losses, start=1):
            if on_epoch_end({"epoch": epochs, "val_loss": loss}) and epochs < len(losses):
                break
        split = SplitMetrics(accuracy=1 - min(losses[:epochs]), macro_f1=0.5, loss=min(losses[:epochs]), n_samples=9)
        return RunMetrics(model="efficient", pe=False, seed=0, dataset="d", splits={}, train_samples=9, val=split,
                          test=split, class_names=["a", "b"], params=1, train_seconds=1.0, eval_seconds=0.1,
                          epochs=epochs, best_epoch=1, stopped_early=epochs < len(losses), interrupted_by=None,
                          tokens_per_second=1.0, vocab_size=10, device="cpu", threads=1)

    return train_trial


def study_settings(tmp_path, **changes):
    """A study of one learning rate in the default storage (a journal in the study's folder): composed once for every
    test, for no setting names the test's own folder."""
    settings = settings_for("study=fake", app="search")
    settings.train, settings.params = [], {"trainer.lr": "tag(log, interval(1e-4, 1e-1))"}
    for key, value in changes.items():
        setattr(settings, key, value)
    return settings


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
    settings.warmup_epochs = 3  # now the first verdict falls on the last epoch: too late to prune
    settings.study, settings.n_trials = "late", 6
    late = run_search(settings, tmp_path / "late", fake_trainer(losses))
    assert {t.state.name for t in late.trials} == {"COMPLETE"}


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
    share, which train applies (trainer.num_threads wins there: test_train.py)."""
    seen = []

    def train_recording_threads(settings, run_dir, overrides, threads=None, on_epoch_end=None, **kwargs):
        seen.append(threads)
        return fake_trainer(lambda o: [0.5])(overrides, run_dir, on_epoch_end)

    monkeypatch.setattr("mha_textclf.search.study.train", train_recording_threads)
    search(study_settings(tmp_path, n_trials=2, pruning=False, num_threads=2), tmp_path / "study")
    assert seen == [2, 2]


def test_without_num_threads_a_worker_s_trials_keep_torch_s_default_threads(tmp_path, monkeypatch):
    """search --help: num_threads "null: torch's default, all cores", the default: a worker alone on a machine uses
    all of it, so its trials are handed no launcher's share (None), which train leaves to torch (test_train.py)."""
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
    monkeypatch.setattr("mha_textclf.cli.compose_settings", lambda app, overrides: None)  # (a second each, unused)
    caplog.set_level(logging.INFO)
    study = search(settings, tmp_path / "study")
    for trial in study.trials:
        folder = f"trial_{trial.number:03d}"
        log = (tmp_path / "study" / folder / "train.log").read_text()
        lr = as_override("trainer.lr", trial.params["trainer.lr"])
        assert [line.split(" - ", 1)[1] for line in log.splitlines()] == [f"training {folder} with {lr}"]


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

def test_the_accuracy_space_is_the_documented_one():
    """A plain `python -m search` runs the accuracy study: 40 trials, pruned, over configs/hparams_search/accuracy.yaml,
    each with model.cls_only=true, 24 epochs and seed 0. Its space varies model.token_dropout, trainer.lr and
    trainer.weight_decay (both on a log scale), data.max_length (512 or 1024) and pe; study=accuracy_unpruned
    searches the same space with the same shared settings."""
    settings = settings_for(app="search")
    assert (settings.study, settings.n_trials, settings.pruning) == ("accuracy", 40, True)
    trial = settings_for(*settings.train)  # what every trial shares
    assert trial.model.cls_only is True and trial.trainer.epochs == 24 and trial.seed == 0
    space = search_space(settings.params)
    assert set(space) == {"model.token_dropout", "trainer.lr", "trainer.weight_decay", "data.max_length", "pe"}
    assert space["data.max_length"].choices == (512, 1024) and set(space["pe"].choices) == {True, False}
    assert space["trainer.lr"].log and space["trainer.weight_decay"].log
    unpruned = settings_for("study=accuracy_unpruned", "pruning=false", app="search")
    assert (unpruned.train, unpruned.params) == (settings.train, settings.params)


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


def test_a_storage_optuna_cannot_use_is_a_clear_error(tmp_path):
    from mha_textclf.search.study import run_search

    with pytest.raises(UserError, match="storage='foo://bar': Optuna cannot keep a study there"):
        run_search(study_settings(tmp_path, storage="foo://bar"), tmp_path / "study", fake_trainer(lambda o: [0.5]))


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


# A study of tiny trials run by `python -m search` workers: the real command line, in subprocesses.
TINY_PARAMS = 'params={trainer.lr:"tag(log, interval(1e-3, 3e-2))"}'  # merged into the accuracy space


def worker_command(study_dir, data_dir, n_trials, epochs=3, *extra):
    train = [f"data.path={data_dir}", "experiment=smoke", "data.max_train_samples=32", f"trainer.epochs={epochs}",
             "probes.attention=[]"]
    return ["-m", "search", "study=tiny", f"n_trials={n_trials}", "num_threads=1", f"hydra.run.dir={study_dir}",
            f"train={json.dumps(train)}", TINY_PARAMS, *extra]


def start_worker(command):
    return commands.start(command, cwd=REPO, merge_stderr=True)


def load_tiny_study(study_dir):
    from mha_textclf.search.workers import open_storage

    return optuna.load_study(study_name="tiny", storage=open_storage(str(study_dir / "optuna-journal.log"), 20))


def trial_folders_in(log: str) -> set[str]:
    return set(re.findall(r"run folder \S*(trial_\d+)", log))


def assert_reports_describe(study, study_dir):
    best = json.loads((study_dir / "best.json").read_text())
    assert sum(best["trials"].values()) == len(study.trials)
    assert best["best_trial"] == study.best_trial.number
    with open(study_dir / "trials.csv") as f:
        assert len(list(csv.DictReader(f))) == len(study.trials)


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
