"""Shared by the search tests (test_study.py, test_workers.py, and test_slurm.py's Slurm array): a stand-in for
training and a study's settings for run_search, and the command line of a `python -m search` worker on a tiny
study with what to read back from it."""

import csv
import json
import re
import time

from conftest import optional, settings_for

optuna = optional("optuna", "hpo")


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


# A study of tiny trials run by `python -m search` workers: the real command line, in subprocesses.
TINY_PARAMS = 'params={trainer.lr:"tag(log, interval(1e-3, 3e-2))"}'  # merged into the accuracy space


def worker_command(study_dir, data_dir, n_trials, epochs=3, *extra):
    train = [f"data.path={data_dir}", "experiment=smoke", "data.max_train_samples=32", f"trainer.epochs={epochs}",
             "probes.attention=[]"]
    return ["-m", "search", "study=tiny", f"n_trials={n_trials}", "num_threads=1", f"hydra.run.dir={study_dir}",
            f"train={json.dumps(train)}", TINY_PARAMS, *extra]


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
