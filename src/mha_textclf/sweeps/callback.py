"""The end-of-sweep Hydra callback (configs/hydra/default.yaml): each job's job.json, the sweep's sweep.json, and the
summary at the end."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

from hydra.core.utils import JobReturn
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

log = logging.getLogger("mha_textclf.cli")


class SweepSummary(Callback):
    """A multirun's own record and its summary: each job writes job.json (its wall time) into its folder, in the
    process that runs it, so that every launcher records it (basic, joblib, submitit); at the end, the multirun
    process writes sweep.json (the sweep's wall time and every job's) and then summary.csv/.md and the plots.

    Its modules (pandas, matplotlib, scipy) are imported when a sweep needs them: this module is imported by every
    command, and a mistake on the command line should be answered in a second, not after seconds of imports."""

    def __init__(self):
        self.jobs = None  # a sweep.JobClock, made by the first job of a multirun
        self.started: tuple[str, float] | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from mha_textclf.sweeps.record import now

        self.started = (now(), time.perf_counter())

    def on_job_start(self, config: DictConfig, **kwargs) -> None:
        if config.hydra.mode == RunMode.MULTIRUN:  # a single run's folder stays as it was
            from mha_textclf.sweeps.record import JobClock

            self.jobs = self.jobs or JobClock()
            self.jobs.start(config.hydra.runtime.output_dir)

    def on_job_end(self, config: DictConfig, job_return: JobReturn, **kwargs) -> None:
        if config.hydra.mode != RunMode.MULTIRUN:  # a single run (or a search) has no job of a sweep to record
            return
        from mha_textclf.runs import files
        from mha_textclf.runs.lifecycle import FAILED

        # A run that failed recorded its error and returned, so Hydra saw the job complete: the record says failed.
        output_dir = config.hydra.runtime.output_dir
        failed = files.read_status(Path(output_dir)).get("state") == FAILED
        self.jobs.stop(output_dir, job=config.hydra.job.num, overrides=list(config.hydra.overrides.task),
                       status="FAILED" if failed else job_return.status.name)

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        import pandas as pd

        from mha_textclf.runs import files
        from mha_textclf.sweeps.record import sweep_record
        from mha_textclf.sweeps.summary import write_summary

        folder = Path(config.hydra.sweep.dir)
        if self.started is not None:
            started_at, start = self.started
            sweep_record(folder, launcher=config.hydra.launcher._target_, started_at=started_at,
                         wall_seconds=time.perf_counter() - start).write(folder)
        paths = write_summary(folder)
        runs = pd.read_csv(paths[files.SUMMARY_CSV])
        log.info(f"sweep summary: {paths[files.SUMMARY_MD]}\n{paths[files.SUMMARY_MD].read_text()}")
        failed = runs[runs["status"] == "failed"]
        if len(failed):
            log.error(f"{len(failed)} of {len(runs)} jobs failed: {', '.join(failed['run_dir'])} (see error.txt)")
            sys.exit(1)
