"""A sweep's own record: how long each job took (job.json in its folder) and the whole sweep (sweep.json in the
sweep folder), next to the training seconds its runs measured.

Each job writes its own job.json where it runs, which works under every launcher (the basic one runs the jobs in
the sweep's process, joblib in worker processes, submitit on other machines); only the multirun process sees the
sweep from start to end, and it writes sweep.json once the last job has returned (`sweeps.callback.SweepSummary`).
"""

from __future__ import annotations

import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path

from mha_textclf.runs import files
from mha_textclf.runs.files import write_json
from mha_textclf.runs.metrics import read_metrics

JOB_FORMAT = "mha-textclf-job/1"
SWEEP_FORMAT = "mha-textclf-sweep/1"


def now() -> str:
    """Wall-clock time with the UTC offset: comparable across the processes and machines of one sweep."""
    return datetime.now().astimezone().isoformat(timespec="milliseconds")


@dataclass
class JobRecord:
    """job.json: one sweep job, timed in the process that ran it (from Hydra's on_job_start to on_job_end)."""

    job: int  # Hydra's job number
    overrides: list[str]
    started_at: str
    ended_at: str
    wall_seconds: float  # the whole job: data, tokenizer, training, validation, reports
    host: str
    pid: int  # jobs that share a process (the basic launcher) share its memory too
    status: str  # COMPLETED, or FAILED: its run failed (error.txt in its folder) or the job raised
    format: str = JOB_FORMAT

    def write(self, folder: Path) -> None:
        write_json(folder / files.JOB, asdict(self))

    @classmethod
    def read(cls, folder: Path) -> JobRecord | None:
        """The job.json in `folder`, or None where there is none (a single run, or a sweep from before job.json)."""
        path = Path(folder) / files.JOB
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(**data) if isinstance(data, dict) and data.get("format") == JOB_FORMAT else None


class JobClock:
    """Times the jobs this process runs, keyed by their folder (a threaded launcher may run several at once)."""

    def __init__(self):
        self.started: dict[str, tuple[str, float]] = {}

    def start(self, folder: str) -> None:
        self.started[folder] = (now(), time.perf_counter())

    def stop(self, folder: str, job: int, overrides: list[str], status: str) -> JobRecord | None:
        if folder not in self.started:
            return None
        started_at, start = self.started.pop(folder)
        record = JobRecord(job=job, overrides=overrides, started_at=started_at, ended_at=now(),
                           wall_seconds=round(time.perf_counter() - start, 3), host=socket.gethostname(),
                           pid=os.getpid(), status=status)
        record.write(Path(folder))
        return record


@dataclass
class SweepRecord:
    """sweep.json: the sweep as the multirun process saw it, and each job beside the training seconds it measured."""

    launcher: str  # Hydra's launcher class
    started_at: str
    ended_at: str  # when the last job returned, before the summary was written
    wall_seconds: float
    jobs: list[dict] = field(default_factory=list)  # a JobRecord's fields + run_dir, train_seconds, eval_seconds
    format: str = SWEEP_FORMAT

    def write(self, folder: Path) -> None:
        write_json(folder / files.SWEEP, asdict(self))

    @classmethod
    def read(cls, folder: Path) -> SweepRecord | None:
        path = Path(folder) / files.SWEEP
        if not path.exists():
            return None
        data = json.loads(path.read_text())
        return cls(**data) if isinstance(data, dict) and data.get("format") == SWEEP_FORMAT else None


def sweep_record(folder: Path, launcher: str, started_at: str, wall_seconds: float) -> SweepRecord:
    """The record of the sweep in `folder`: its wall time, and every job.json below it with the training and
    validation seconds of its run (None where the run did not finish)."""
    folder = Path(folder)
    jobs = []
    for path in sorted(folder.rglob(files.JOB)):
        record = JobRecord.read(path.parent)
        if record is None:
            continue
        metrics = None
        if (path.parent / files.METRICS).exists():
            try:
                metrics = read_metrics(path.parent)
            except (ValueError, TypeError, KeyError):
                metrics = None
        jobs.append(asdict(record) | {"run_dir": str(path.parent.relative_to(folder)),
                                      "train_seconds": metrics.train_seconds if metrics else None,
                                      "eval_seconds": metrics.eval_seconds if metrics else None})
    jobs.sort(key=lambda j: j["job"])
    return SweepRecord(launcher=launcher, started_at=started_at, ended_at=now(), wall_seconds=round(wall_seconds, 3),
                       jobs=jobs)
