"""Train one attention classifier and write a self-describing run folder.

    python -m train model=efficient pe=true
    python -m train -m model=naive,efficient,torch pe=true,false

`main` is the command line: it checks the settings typed there against the schema (mha_textclf/settings.py), then
Hydra composes configs/train.yaml. `hydra_main` reads what only Hydra knows (run folder, overrides, the launcher's
share of the cores) and calls the pipeline, `mha_textclf.pipeline.train`, which takes typed settings and knows
nothing of Hydra.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from mha_textclf import cli

log = logging.getLogger("train")


def main() -> None:
    """`python -m train ...`: every mistake on the command line in one message (exit 2), else Hydra's run."""
    cli.check_command_line("train", sys.argv[1:])  # also registers the schema Hydra composes with
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def hydra_main(cfg: DictConfig) -> float | None:
    """One run (or sweep job): returns validation accuracy, for sweepers."""
    from mha_textclf.pipeline import train
    from mha_textclf.runs import lifecycle

    hydra_cfg = HydraConfig.get()
    overrides, threads = list(hydra_cfg.overrides.task), launcher_threads(hydra_cfg.launcher)
    # The jobs of one sweep share one MLflow experiment, named after the sweep's folder.
    sweep = f"sweep {Path(hydra_cfg.sweep.dir).name}" if hydra_cfg.mode == RunMode.MULTIRUN else None
    metrics = cli.run_job(lambda run_dir, record: train(cli.to_settings(cfg), run_dir, overrides, threads, sweep,
                                                        on_start=record), cfg)
    if metrics is None:
        return None
    if metrics.interrupted_by:
        if sweep and (command := lifecycle.sweep_command(Path(hydra_cfg.sweep.dir))):
            log.info(f"continue the sweep (its finished jobs train nothing again): {command}")
        sys.exit(128 + signal.Signals[metrics.interrupted_by].value)  # the shell's convention: 130 for SIGINT
    return metrics.val.accuracy


def launcher_threads(launcher: DictConfig) -> int | None:
    """Threads per job, so parallel jobs on one machine share its cores instead of each taking all of them:
    joblib with n_jobs=N gives each job cores // N threads (n_jobs=-1: one thread each); submitit gives each job
    its cpus_per_task. None: torch's default."""
    if "n_jobs" in launcher:
        cores = os.cpu_count() or 1
        n_jobs = launcher.n_jobs or -1
        n_jobs = n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)  # joblib: -1 all cores, -2 all but one, ...
        return max(1, cores // n_jobs)
    if "cpus_per_task" in launcher and launcher.cpus_per_task:
        return launcher.cpus_per_task
    return None


if __name__ == "__main__":
    main()
