"""What lets several `python -m search` processes (workers) share one Optuna study: the storage they meet in, with
heartbeats, so that the trial of a worker that was killed is failed and retried instead of staying RUNNING, and a
sampler whose draws depend on the trial's number, so that workers started together do not propose the same trials.

Imported by tuning.py once Optuna is known to be installed (the `hpo` extra).
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import optuna
from optuna.samplers import BaseSampler
from optuna.storages import JournalStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages._heartbeat import BaseHeartbeat  # what Optuna's optimize loop looks for to run heartbeats
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from mha_textclf.settings import MISSED_HEARTBEATS

# A dead worker's trial runs again once, with the same parameters; one that killed its worker twice (memory, say)
# stays failed.
RETRIES = 1
HEARTBEAT = "heartbeat"  # the trial's system attribute: when its worker was last known alive (Unix time)


def open_storage(storage: str, heartbeat_seconds: int):
    """The study's storage: an SQLAlchemy URL (anything with '://') is a database, anything else a journal file."""
    with warnings.catch_warnings():
        # Heartbeats are "experimental" in Optuna, and have been there since 2.5.
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if "://" in storage:
            if storage.startswith("sqlite:///"):
                Path(storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
            return RDBStorage(storage, heartbeat_interval=heartbeat_seconds,
                              grace_period=MISSED_HEARTBEATS * heartbeat_seconds,
                              heartbeat_stale_trial_callback=retry_once)
        Path(storage).parent.mkdir(parents=True, exist_ok=True)
        return HeartbeatJournalStorage(storage, heartbeat_seconds, retry_once)


def retry_once(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """Queue a dead worker's trial again, with its parameters, for the next worker that asks for a trial."""
    trial.system_attrs.pop(HEARTBEAT, None)  # (a copy) the retry's heartbeats start when it runs, not from these
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        RetryHeartbeatStaleTrialCallback(max_retry=RETRIES)(study, trial)


class HeartbeatJournalStorage(JournalStorage, BaseHeartbeat):
    """Optuna's journal file (one JSON line per change, appended under a lock file; safe on NFS) with the heartbeats
    Optuna gives only its database storage: while a trial runs, its worker records the time in the trial's system
    attribute HEARTBEAT every `heartbeat_seconds`, and before each trial every worker fails the RUNNING trials that
    have been silent for MISSED_HEARTBEATS of them, and retries each once (Optuna's optimize loop and
    fail_stale_trials do the work, as for a database).

    Heartbeats are the wall-clock times of the worker that wrote them: the machines sharing a journal need clocks that
    agree to well within MISSED_HEARTBEATS * heartbeat_seconds (NTP does).
    """

    def __init__(self, path: str, heartbeat_seconds: int,
                 on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None):
        super().__init__(JournalFileBackend(path))
        self.heartbeat_seconds = heartbeat_seconds
        self.on_stale = on_stale

    def record_heartbeat(self, trial_id: int) -> None:
        # Another worker may have taken this trial for dead and failed it: this worker learns so when it reports.
        with contextlib.suppress(optuna.exceptions.UpdateFinishedTrialError):
            self.set_trial_system_attr(trial_id, HEARTBEAT, time.time())

    def _get_stale_trial_ids(self, study_id: int) -> list[int]:
        now = time.time()
        # A trial killed before its first heartbeat counts from its start.
        return [trial._trial_id for trial in self.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
                if now - trial.system_attrs.get(HEARTBEAT, trial.datetime_start.timestamp())
                > MISSED_HEARTBEATS * self.heartbeat_seconds]

    def get_heartbeat_interval(self) -> int:
        return self.heartbeat_seconds

    def get_heartbeat_stale_trial_callback(self):
        return self.on_stale


def fail_stale_trials(study: optuna.Study) -> None:
    """Fail (and retry) the trials of killed workers now, rather than at the next trial a worker starts."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        optuna.storages.fail_stale_trials(study)


class TrialSeededSampler(BaseSampler):
    """`make(seed)`'s sampler, made afresh for each trial with the study's seed plus the trial's number.

    One seed per worker would have workers started together draw the same trials (TPE's first trials are random
    draws from that seed), and a resumed study its first trials again. Seeded by trial number, one worker's study is
    as reproducible as before, and each trial of a shared study gets its own draws, from everyone's results.
    """

    def __init__(self, seed: int, make: Callable[[int], BaseSampler]):
        self.seed, self.make = seed, make
        self.sampler = make(seed)

    def before_trial(self, study, trial) -> None:
        self.sampler = self.make(self.seed + trial.number)
        self.sampler.before_trial(study, trial)

    def infer_relative_search_space(self, study, trial):
        return self.sampler.infer_relative_search_space(study, trial)

    def sample_relative(self, study, trial, search_space):
        return self.sampler.sample_relative(study, trial, search_space)

    def sample_independent(self, study, trial, param_name, param_distribution):
        return self.sampler.sample_independent(study, trial, param_name, param_distribution)

    def after_trial(self, study, trial, state, values) -> None:
        self.sampler.after_trial(study, trial, state, values)
