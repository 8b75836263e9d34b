"""Sweeps on a real Slurm cluster: the single-node one of scripts/slurm_up.sh (the `slurm_cluster` fixture).

Skipped where it cannot run (not root, not Debian/Ubuntu); CI runs them."""

import subprocess

import pandas as pd
import pytest

from conftest import run_train
from mha_textclf.reports import RunMetrics

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

# A run in seconds: every stage, on a sliver of the data.
TINY = ["trainer.epochs=1", "data.max_train_samples=100", "data.max_eval_samples=50", "data.max_length=128",
        "probes.attention=[]"]


def slurm(*command: str, env: dict[str, str]) -> str:
    return subprocess.run(command, env=env, capture_output=True, text=True, check=True, timeout=60).stdout


def test_a_three_variant_sweep_runs_as_slurm_jobs(slurm_cluster, data_dir, tmp_path):
    sweep = tmp_path / "sweep"
    result = run_train("-m", "hydra/launcher=slurm", f"hydra.launcher.partition={slurm_cluster.partition}",
                       "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1", "model=naive,efficient,torch",
                       *TINY, f"hydra.sweep.dir={sweep}", data_dir=data_dir, env=slurm_cluster.env, timeout=600)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    runs = pd.read_csv(sweep / "summary.csv")
    assert sorted(runs["model"]) == ["efficient", "naive", "torch"] and set(runs["status"]) == {"ok"}
    assert (sweep / "summary.md").read_text().count("| ok |") == 3

    # They ran as Slurm jobs: one job array, whose submitit files stay in the sweep folder (the launcher's default
    # submitit_folder), and whose three tasks Slurm's accounting records as COMPLETED.
    env = slurm_cluster.env
    array_id = next(p.name for p in (sweep / ".submitit").iterdir() if p.is_dir() and p.name.isdigit())
    states = slurm("sacct", "--jobs", array_id, "--allocations", "--noheader", "--parsable2",
                   "--format=JobID,State", env=env)
    assert sorted(states.split()) == [f"{array_id}_{task}|COMPLETED" for task in range(3)]
    # Each job trained with the CPUs Slurm gave it, not with all the machine's.
    assert {RunMetrics.read(sweep / d / "metrics.json").threads for d in runs["run_dir"]} == {1}

    # The cluster is still up and its node still takes jobs.
    assert "is UP" in slurm("scontrol", "ping", env=env)
    node_state = slurm("sinfo", "--noheader", "--Node", "--format=%T", env=env).strip()
    assert node_state in {"idle", "mixed", "allocated", "completing"}, node_state
