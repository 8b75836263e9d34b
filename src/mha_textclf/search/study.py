"""Hyperparameter search with Optuna, driven in-process: each trial composes the real training configs and calls
`train`, so a trial is a run folder like any other.

The space comes in Hydra's own sweep syntax (interval, tag(log, ...), range, choice), as Hydra's Optuna sweeper
reads it; the search itself is ours, because that plugin pins Optuna 2, fails on SQLite under SQLAlchemy 2, and
cannot prune. TPE samples; a median pruner stops a trial whose validation loss, after a few epochs, is worse than
the median of the earlier trials' at the same epoch. The study lives in a storage (by default a journal file in the
study's folder), so an interrupted study resumes, and a finished one extends, when the same command runs again; and
any number of processes started with that command (workers: terminals, Slurm array tasks) share it, see workers.py.
"""

from __future__ import annotations

import logging
import shlex
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from mha_textclf import cli
from mha_textclf.checks import lookup
from mha_textclf.data.corpus import source_fingerprint
from mha_textclf.errors import UserError
from mha_textclf.inputs import InputCache
from mha_textclf.pipeline import train
from mha_textclf.runs import files
from mha_textclf.runs.lifecycle import differences
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.search.space import _optuna, as_override, search_space, space_problems, suggest
from mha_textclf.settings import ADDED_SINCE, NOT_TRAINING, SearchSettings, TrainSettings, flat

log = logging.getLogger(__name__)



class InterruptedStudyError(Exception):
    """A trial stopped by SIGINT/SIGTERM: the study stops, and the same command resumes it."""


class _QuietTrialErrors(logging.Filter):
    """Optuna logs a failed trial with the traceback of its error. A trial that a signal stopped is no failure to
    report: the study's own log says it once. One that broke a rule (a UserError) keeps Optuna's line, which names
    the trial's parameters, without the traceback: the message says what to change, and the trial's train.log too."""

    def __init__(self):
        super().__init__()
        self.trials: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()  # "Trial 3 failed with parameters: ...", then "Trial 3 failed with value None."
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, InterruptedStudyError):
            self.trials.add(message.split(" failed ", 1)[0])
            return False
        if isinstance(error, UserError):
            record.exc_info = record.exc_text = None
        return not any(message.startswith(f"{trial} failed ") for trial in self.trials)


def run_search(settings: SearchSettings, study_dir: Path, train_trial: Callable[..., RunMetrics],
               base: TrialBase | None = None):
    """Run (or resume, or extend) the study until it has `n_trials` finished trials, together with any other worker
    on it; write best.json, trials.csv and the plots of the whole study into `study_dir`; return the study.

    `train_trial(overrides, run_dir, on_epoch_end)` trains one trial with `settings.train` plus the trial's
    overrides into `run_dir` and returns its metrics (python -m search passes pipeline.train on composed settings).
    `base`: what every trial starts from (the settings `settings.train` composes to, the data); a study resumed when
    it differs from its first start's is refused.
    """
    optuna = _optuna()
    space = search_space(settings.params)
    if not space:
        raise UserError("The search space is empty: give params (e.g. in configs/hparams_search/accuracy.yaml).")
    storage = settings.storage or str(study_dir / JOURNAL)
    study = _open_study(settings, storage, base)
    study_dir.mkdir(parents=True, exist_ok=True)

    def objective(trial) -> float:
        values = {key: suggest(trial, key, distribution) for key, distribution in space.items()}
        shared = without(settings.train, values)  # the trial's values win
        overrides = [*shared, *(as_override(k, v) for k, v in values.items())]
        pruned = []

        def report(row: dict) -> bool:
            # Intermediate values in the study's direction (higher is better): minus the validation loss.
            trial.report(-row["val_loss"], row["epoch"])
            pruned.append(settings.pruning and trial.should_prune())
            return pruned[-1]

        metrics = train_trial(overrides, study_dir / f"trial_{trial.number:03d}", report)
        trial.set_user_attr("command", shlex.join(["python", "-m", "train", *overrides]))
        for key, value in (("val_loss", metrics.val.loss), ("test_accuracy", metrics.test.accuracy),
                           ("train_seconds", metrics.train_seconds), ("epochs", metrics.epochs)):
            trial.set_user_attr(key, value)
        if metrics.interrupted_by:
            raise InterruptedStudyError(metrics.interrupted_by)
        if pruned and pruned[-1] and metrics.stopped_early:  # (a prune at the last epoch comes too late to stop it)
            raise optuna.TrialPruned()
        return metrics.val.accuracy

    from mha_textclf.search.workers import fail_stale_trials

    fail_stale_trials(study)  # a killed worker's trial is neither finished nor to be waited for
    finished_states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    todo = settings.n_trials - len(study.get_trials(deepcopy=False, states=finished_states))
    log.info(f"study {settings.study} in {storage}: {settings.n_trials - todo} trials finished, {max(todo, 0)} to go "
             "(with any other worker on this study)")
    start = time.perf_counter()
    if todo > 0:
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # our own log says what each trial did
        # A trial that fails (a loss that diverges at a sampled learning rate, memory) is recorded as failed, and the
        # study goes on; an interrupted one stops it. This worker stops once the study has n_trials finished trials,
        # whoever finished them: each other worker may then still finish the one it runs, one over each.
        quiet, optuna_log = _QuietTrialErrors(), logging.getLogger("optuna.study._optimize")  # it logs each trial
        optuna_log.addFilter(quiet)
        try:
            study.optimize(objective, n_trials=todo, catch=(UserError, RuntimeError, ValueError),
                           callbacks=[optuna.study.MaxTrialsCallback(settings.n_trials, states=finished_states)],
                           timeout=settings.timeout_minutes * 60 if settings.timeout_minutes else None)
        except InterruptedStudyError:
            # What finished before the signal is reported now, not only once the study resumes and ends.
            if any(t.state == optuna.trial.TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
                write_study_reports(study, study_dir)
            raise
        finally:
            optuna_log.removeFilter(quiet)
    log.info(f"this worker's session: {time.perf_counter() - start:.0f} s")
    fail_stale_trials(study)
    write_study_reports(study, study_dir)
    return study


def without(overrides: list[str], keys) -> list[str]:
    """The overrides that set none of `keys` (+key=, ~key= included)."""
    return [o for o in overrides if o.split("=", 1)[0].lstrip("+~") not in keys]


JOURNAL = "optuna-journal.log"  # the default storage: a journal file in the study's folder


def _open_study(settings: SearchSettings, storage_name: str, base: TrialBase | None = None):
    """The study in its storage, created or loaded (by whichever worker comes first); a loaded one must have been
    started with the same space, and (`base`) its trials must still start from the same settings and data."""
    optuna = _optuna()
    from mha_textclf.search.workers import TrialSeededSampler, open_storage

    try:
        storage = open_storage(storage_name, settings.heartbeat_seconds)
        study = optuna.create_study(
            study_name=settings.study, storage=storage, load_if_exists=True, direction="maximize",
            sampler=TrialSeededSampler(settings.seed, lambda seed: optuna.samplers.TPESampler(seed=seed)),
            # Steps are epochs, counted from 1; the pruner may judge a step that is not below n_warmup_steps.
            pruner=optuna.pruners.MedianPruner(n_startup_trials=settings.startup_trials,
                                               n_warmup_steps=settings.warmup_epochs + 1))
    except Exception as e:
        raise UserError(f"storage={storage_name!r}: Optuna cannot keep a study there ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}); give a file path for a journal file, or an "
                        "SQLAlchemy URL such as sqlite:///outputs/optuna.db.") from e
    space = {"train": list(settings.train), "params": dict(settings.params)}
    recorded = base is not None and SHARED in study.user_attrs  # what this study's trials start from, known
    if "space" not in study.user_attrs:
        study.set_user_attr("space", space)
    saved = study.user_attrs  # read back: of workers that start a study together, the last to write holds
    # Once the composed settings are recorded, they are what must match: the shared overrides may then be written
    # otherwise (a moved default's old value given outright), and only the space itself is compared as written.
    if (saved["space"]["params"] != space["params"]) if recorded else (saved["space"] != space):
        raise UserError(f"The study {settings.study!r} in {storage_name} was started with another space or shared "
                        f"settings ({saved['space']}); resume it with those, or name a new study=...")
    if base is not None and not recorded:  # a new study, or one started before the record: this start's is it
        if study.get_trials(deepcopy=False):
            log.info(f"study {settings.study}: recording what its trials start from now; its earlier trials are taken "
                     "to have started from the same")
        study.set_user_attr(SHARED, base.settings)
        study.set_user_attr(DATA, base.data)
        saved = study.user_attrs
    if base is not None:
        _check_trial_base(saved, base, settings, storage_name)
    return study


# The study's record of what its trials start from (user attributes).
SHARED, DATA = "shared_settings", "data_fingerprint"


@dataclass(frozen=True)
class TrialBase:
    """What every trial of a study starts from: the training settings its shared overrides compose to (flat keys),
    those that a config group among the params sets otherwise for some option (a trial's own), and the fingerprint
    of the data (None: a hub dataset, or unreadable)."""

    settings: dict
    varied: frozenset = frozenset()
    data: str | None = None


def _check_trial_base(saved: dict, base: TrialBase, settings: SearchSettings, storage_name: str) -> None:
    """The same command composes other settings once a default has moved (a release, a config edited), and reads
    other texts once its data path holds others: the trials to come would train other models than those the study
    holds, and its best trial would compare them. Unlike a continued run, a null that was a value (or the reverse)
    differs here, for each trial decides what null means afresh, and another epoch count gives other trials, not a
    longer one."""
    then = ADDED_SINCE | saved[SHARED]  # a setting added since: the study's trials had the value that adds nothing
    now = base.settings
    # Not compared: what trains nothing, what each trial sets, how positions would enter a model that has none, and
    # where the data lies where its contents can be compared instead (below; a hub dataset is known by its name).
    trials_set = settings.params.keys() | base.varied
    no_positions = then.get("pe") is False and now.get("pe") is False and "pe" not in trials_set
    moot = {"model.pe_gate"} if no_positions else set()
    fingerprinted = None not in (saved.get(DATA), base.data)
    moot |= {"data.path"} if fingerprinted else set()
    changed = sorted(key for key in then.keys() & now.keys()
                     if then[key] != now[key] and key not in NOT_TRAINING | trials_set | moot)
    if changed:
        raise UserError(f"The study {settings.study!r} in {storage_name} was started when its shared settings composed "
                        f"to other values ({differences(then, now, changed, 'then')}): a default has moved, or "
                        "train=[...] says otherwise. Resume it with those values given in train=[...], or name a new "
                        "study=...")
    if fingerprinted and saved[DATA] != base.data:
        raise UserError(f"The study {settings.study!r} in {storage_name} was started on other data: the files at "
                        f"data.path={now.get('data.path')} differ from those its trials read. Point data.path at "
                        "those, or name a new study=...")


def write_study_reports(study, study_dir: Path) -> None:
    """best.json (the best trial: its parameters, metrics and the command that reproduces it), trials.csv, and
    Optuna's optimisation-history and parameter-importance plots, all of the whole study as the storage holds it.

    Workers finishing together each write them: under a lock file, each reads the storage once it holds the lock, so
    the last to write has read last; and each file is written whole under a temporary name, then renamed into place.
    """
    from optuna.storages.journal import JournalFileOpenLock

    lock = JournalFileOpenLock(str(study_dir / "reports"))  # reports.lock, safe on NFS (Optuna's own)
    lock.acquire()
    try:
        _write_study_reports(study, study_dir)
    finally:
        lock.release()


def _write_study_reports(study, study_dir: Path) -> None:
    import matplotlib.pyplot as plt  # Optuna's matplotlib plots draw on pyplot's figures
    from optuna.exceptions import ExperimentalWarning
    from optuna.visualization import matplotlib as plots

    from mha_textclf.search.workers import HEARTBEAT

    trials = study.get_trials(deepcopy=False)
    states = [t.state for t in trials]
    counts = {state.name.lower(): states.count(state) for state in set(states)}
    if not any(state.name == "COMPLETE" for state in states):
        if "running" in counts:  # another worker's; it writes the reports when it finishes
            log.info(f"no trial of the study completed yet ({counts}): no reports")
            return
        raise UserError(f"No trial of the study {study.study_name!r} completed ({counts}); the trial folders' logs "
                        "say why.")
    best = study.best_trial
    finished = [t.datetime_complete for t in trials if t.datetime_complete]
    summary = {"study": study.study_name, "best_trial": best.number, "val_accuracy": best.value,
               "params": best.params, **best.user_attrs, "trials": counts,
               # From the first trial's start to the last one's end, whatever the workers (and any pause between).
               "study_seconds": round((max(finished) - min(t.datetime_start for t in trials if t.datetime_start))
                                      .total_seconds(), 1)}
    files.write_json(study_dir / "best.json", summary)
    table = study.trials_dataframe()
    table = table.drop(columns=[f"system_attrs_{HEARTBEAT}"], errors="ignore")  # a liveness clock, not a result
    # Optuna gives a pruned trial its last intermediate value, minus a validation loss, under the column that holds
    # the others' validation accuracy: blank, as for a failed one (its val_loss and epochs stay in their columns).
    table.loc[table["state"] == "PRUNED", "value"] = float("nan")
    files.write_atomically(study_dir / "trials.csv", lambda path: table.to_csv(path, index=False))
    for name, plot in (("optimization_history", plots.plot_optimization_history),
                       ("param_importances", plots.plot_param_importances)):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)  # stable since Optuna 2
                axes = plot(study)
        except (ValueError, RuntimeError) as e:  # importances need two or more finished trials that differ
            log.warning(f"no {name} plot: {e}")
            continue
        figure = axes.figure
        figure.set_size_inches(8, 5)
        files.write_figure(study_dir / f"{name}.png", figure, dpi=110, bbox_inches="tight")
        plt.close(figure)
    log.info(f"best trial {best.number}: val accuracy {best.value:.4f} with {best.params}\n"
             f"reproduce it: {best.user_attrs.get('command')}\ntrials: {counts}")


def search(settings: SearchSettings, study_dir: Path):
    """Run the study; each trial composes `settings.train` plus its sampled values as `python -m train` would, and
    reuses the data, tokenizer and encodings of this worker's earlier trials where its settings leave them as they
    were."""
    shared = cli.compose_settings("train", settings.train)  # the shared settings: every mistake now, not at a trial
    for key in settings.params:
        found = lookup(TrainSettings, key)
        if isinstance(found, str) and not (cli.CONFIG_DIR / key).is_dir():  # a config group (model) may vary too
            raise UserError(f"params: {found}")
    if problems := space_problems(settings.params):  # else every trial that draws such a value fails on its own
        raise UserError("\n  ".join(["The search space reaches values the settings refuse:", *problems]))
    inputs = InputCache()

    def train_trial(overrides: list[str], run_dir: Path, on_epoch_end):
        run_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(run_dir / files.TRAIN_LOG)  # each trial's folder has its log, as a run's has
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        logging.getLogger().addHandler(handler)
        try:
            return train(cli.compose_settings("train", overrides), run_dir, overrides, threads=settings.num_threads,
                         sweep=f"study {settings.study}", on_epoch_end=on_epoch_end, inputs=inputs)
        except UserError as e:  # a rule only this trial's values break: said in its own log, then the trial fails
            log.error(str(e))
            raise
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()

    return run_search(settings, study_dir, train_trial, trial_base(settings, shared))


def trial_base(settings: SearchSettings, shared: TrainSettings) -> TrialBase:
    """What the study's trials start from: `shared` (what settings.train composes to), the keys whose values a config
    group among the params sets otherwise for one of its options, and the data's fingerprint."""
    flat_shared, varied = flat(asdict(shared)), set()
    for key, distribution in search_space(settings.params).items():
        if (cli.CONFIG_DIR / key).is_dir():  # model=...: a config group, whose options may set several keys
            train = without(settings.train, {key})  # as a trial replaces it
            for option in getattr(distribution, "choices", ()):
                option_settings = flat(asdict(cli.compose_settings("train", [*train, f"{key}={option}"])))
                varied |= {k for k, value in option_settings.items() if value != flat_shared.get(k)}
    return TrialBase(flat_shared, frozenset(varied), source_fingerprint(shared.data.path))
