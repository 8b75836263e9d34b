"""sweeps/callback.py: the end-of-sweep Hydra callback. Real multiruns through the command line and the parallel
launchers (failed jobs reported and the rest summarised, each job's job.json, the sweep's sweep.json), the launchers'
configs, and the callback as Hydra calls it. (The tokenizer cache's safety under parallel jobs:
test_tokenizer_cache.py.)"""

import importlib
import json
import os
import shlex
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import pandas as pd
import pytest
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf

import commands
from conftest import REPO, compose_config, fingerprint, require, run_train, write_jsonl
from mha_textclf.runs import files
from mha_textclf.runs.lifecycle import sweep_command
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.sweeps.callback import SweepSummary
from mha_textclf.sweeps.record import JobRecord
from mha_textclf.sweeps.summary import write_summary
from sweep_fakes import fake_run, md_table

TINY = ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]", "data.max_length=128"]


def require_plugin(name: str) -> None:
    try:
        importlib.import_module(f"hydra_plugins.{name}")
    except ImportError:
        require(False, f'{name} is not installed: pip install -e ".[launchers]"')


@pytest.mark.slow
def test_a_sweep_with_failed_jobs_summarises_the_rest(data_dir, tmp_path):
    """A mistake in the settings stops a sweep before it starts (test_checks.py); one that only the data reveals
    fails its own jobs, and the sweep runs the rest and summarises them."""
    one_class = write_jsonl(tmp_path / "one-class", {s: [{"text": f"words {i}", "label": 0} for i in range(8)]
                                                     for s in ("train", "test")})
    sweep = tmp_path / "sweep"
    result = run_train("-m", "model=efficient,torch", f"data.path={data_dir},{one_class}", *TINY,
                       f"hydra.sweep.dir={sweep}", data_dir=data_dir)
    output = result.stdout + result.stderr
    assert result.returncode == 1  # the sweep as a whole failed...
    assert "2 of 4 jobs failed" in output
    runs = pd.read_csv(sweep / "summary.csv")  # ...but every job ran and the summary was written
    assert len(runs) == 4
    failed = runs[runs["status"] == "failed"]
    assert sorted(failed["model"]) == ["efficient", "torch"]
    assert failed["error"].str.contains("has a single class").all()
    assert (runs["status"] == "ok").sum() == 2
    assert "## Failed runs" in (sweep / "summary.md").read_text()
    jobs = json.loads((sweep / "sweep.json").read_text())["jobs"]  # failed jobs are timed too, and say so
    assert [j["job"] for j in jobs] == [0, 1, 2, 3] and all(j["wall_seconds"] > 0 for j in jobs)
    expected = {"ok": "COMPLETED", "failed": "FAILED"}
    assert {j["run_dir"]: j["status"] for j in jobs} == {
        d: expected[status] for d, status in zip(runs["run_dir"], runs["status"], strict=True)}
    assert sorted(j["train_seconds"] is None for j in jobs) == [False, False, True, True]

    # scripts/summarize.py gives the same summary for the same folder.
    (sweep / "summary.csv").unlink()
    result = commands.run(["scripts/summarize.py", str(sweep)], cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "## Failed runs" in result.stdout and "has a single class" in result.stdout
    pd.testing.assert_frame_equal(pd.read_csv(sweep / "summary.csv"), runs)


LAUNCHERS = {"joblib": ("hydra_joblib_launcher", ["hydra.launcher.n_jobs=2"]),
             "submitit_local": ("hydra_submitit_launcher", ["hydra.launcher.cpus_per_task=1"])}


@pytest.fixture(scope="module")
def launched(data_dir, tmp_path_factory):
    """A two-job sweep through each parallel launcher, both sweeps at once: most of a sweep's time is processes
    starting up, one at a time in its parent."""
    for plugin, _ in LAUNCHERS.values():
        require_plugin(plugin)
    sweeps = {launcher: tmp_path_factory.mktemp(launcher) / "sweep" for launcher in LAUNCHERS}
    with ThreadPoolExecutor(len(LAUNCHERS)) as pool:
        futures = {launcher: pool.submit(run_train, *launcher_sweep(launcher, sweeps[launcher]), data_dir=data_dir)
                   for launcher in LAUNCHERS}
        return {launcher: (future.result(), sweeps[launcher]) for launcher, future in futures.items()}


def launcher_sweep(launcher: str, sweep: Path) -> list[str]:
    return ["-m", f"hydra/launcher={launcher}", *LAUNCHERS[launcher][1], "model=efficient,torch", *TINY,
            f"hydra.sweep.dir={sweep}"]


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_parallel_launchers_run_a_two_job_sweep(launcher, launched):
    result, sweep = launched[launcher]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    runs = pd.read_csv(sweep / "summary.csv")
    assert sorted(runs["model"]) == ["efficient", "torch"] and set(runs["status"]) == {"ok"}
    # Each job timed itself in its own process, and the sweep's process timed the whole.
    record = json.loads((sweep / "sweep.json").read_text())
    assert record["launcher"].rpartition(".")[2] == {"joblib": "JoblibLauncher",
                                                     "submitit_local": "LocalLauncher"}[launcher]
    assert sorted(j["run_dir"] for j in record["jobs"]) == sorted(runs["run_dir"])
    assert all((sweep / d / "job.json").exists() for d in runs["run_dir"])
    assert all(j["wall_seconds"] > j["train_seconds"] > 0 for j in record["jobs"])
    threads = {RunMetrics.read(sweep / d / "metrics.json").threads for d in runs["run_dir"]}
    expected = max(1, (os.cpu_count() or 1) // 2) if launcher == "joblib" else 1
    assert threads == {expected}  # jobs share the cores instead of oversubscribing them


@pytest.mark.slow
def test_an_interrupted_sweep_s_advice_is_its_own_command_into_its_folder(launched):
    """What a sweep job prints when a signal stops it: the sweep's command (launcher settings included) into the
    sweep's folder, from the multirun.yaml Hydra wrote there; run again, every job continues or finds its run."""
    for launcher, (_, sweep) in launched.items():
        command = shlex.split(sweep_command(sweep))
        assert command[:4] == ["python", "-m", "train", "-m"] and command[-1] == f"hydra.sweep.dir={sweep}"
        assert sorted(command[4:-1]) == sorted(launcher_sweep(launcher, sweep)[1:-1]), launcher


@pytest.mark.slow
def test_a_finished_sweep_run_again_through_a_launcher_trains_nothing(launched, data_dir):
    """The same sweep again with submitit's local launcher (each job a process of its own, as on a cluster): every
    job finds its folder finished. (After the test above, which reads the first sweep's summary.)"""
    first, sweep = launched["submitit_local"]
    assert first.returncode == 0, first.stderr[-3000:]
    before = {job: fingerprint(job) for job in sweep.glob("[01]_*")}
    trained = {job: JobRecord.read(job) for job in before}
    again = run_train(*launcher_sweep("submitit_local", sweep), data_dir=data_dir)
    assert again.returncode == 0, again.stderr[-3000:]
    assert {job: fingerprint(job) for job in sweep.glob("[01]_*")} == before
    assert len(before) == 2 and all(files.read_status(job)["attempt"] == 1 for job in before)
    # A sweep run again records its own jobs: a job that found its run finished records the seconds it took to see
    # that (its job.json is this sweep's), while the run's training seconds stay its own.
    for job, first_time in trained.items():
        record = JobRecord.read(job)
        assert record.started_at > first_time.ended_at and record.status == "COMPLETED"
        assert record.wall_seconds < first_time.wall_seconds


def test_slurm_config_composes_over_submitit():
    require_plugin("hydra_submitit_launcher")
    cfg = compose_config(["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.partition == "gpu" and cfg.hydra.launcher.cpus_per_task == 4
    # Each job's defaults are 4 CPUs, 16 GB, 60 minutes, up to 3 requeues at the time limit, the warning signal 120 s
    # before it; and any key can be overridden on the command line.
    job = cfg.hydra.launcher
    assert (job.mem_gb, job.timeout_min, job.max_num_timeout, job.signal_delay_s) == (16, 60, 3, 120)
    assert job.gpus_per_node == 0 and job.nodes == job.tasks_per_node == 1
    cfg = compose_config(["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "hydra.launcher.mem_gb=1",
                          "hydra.launcher.timeout_min=30", "hydra.launcher.qos=high"], hydra_config=True)
    assert (cfg.hydra.launcher.mem_gb, cfg.hydra.launcher.timeout_min, cfg.hydra.launcher.qos) == (1, 30, "high")
    # No partition by default: a job goes to the cluster's default partition unless hydra.launcher.partition names
    # one, as submitit leaves --partition out of the batch script where it is null (test_slurm submits a sweep that
    # way).
    assert compose_config(["hydra/launcher=slurm"], hydra_config=True).hydra.launcher.partition is None


def test_submitit_keeps_its_own_files_in_the_sweep_folder_under_submitit_and_the_job_id():
    """submitit's own files (each job's batch script, stdout/stderr, pickles) go to
    `<sweep folder>/.submitit/<job id>/`, beside the job folders and out of their names (the Slurm tests, which need
    a cluster, look there for a job's output)."""
    require_plugin("hydra_submitit_launcher")
    cfg = compose_config(["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], hydra_config=True)
    assert OmegaConf.to_container(cfg.hydra.launcher)["submitit_folder"] == "${hydra.sweep.dir}/.submitit/%j"


def multirun_config(sweep, job_dir, num, mode=RunMode.MULTIRUN):
    return OmegaConf.create({"hydra": {
        "mode": mode, "runtime": {"output_dir": str(job_dir)}, "job": {"num": num},
        "overrides": {"task": [f"seed={num}"]}, "sweep": {"dir": str(sweep)},
        "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}}})


def test_the_sweep_records_its_own_wall_time_and_each_jobs(tmp_path):
    """The callback as Hydra calls it: each job's wall time lands in its own folder (job.json), the sweep's in
    sweep.json, and both in summary.md beside the training seconds. The sweep's wall time runs from Hydra starting
    the sweep to the end of its last job: the 0.1 s the launcher takes before the first job counts."""
    sweep = tmp_path / "sweep"
    callback = SweepSummary()
    callback.on_multirun_start(multirun_config(sweep, sweep, 0))
    time.sleep(0.1)  # the launcher at work before its first job starts (submitting, starting workers)
    for num in (0, 1):
        job_dir = sweep / f"{num}_seed-{num}"
        callback.on_job_start(multirun_config(sweep, job_dir, num))
        fake_run(job_dir, seed=num, epoch_times=[0.5, 0.5])
        time.sleep(0.2)
        job_return = JobReturn()
        job_return.status = JobStatus.COMPLETED
        callback.on_job_end(multirun_config(sweep, job_dir, num), job_return=job_return)
    callback.on_multirun_end(multirun_config(sweep, sweep, 0))

    record = json.loads((sweep / "sweep.json").read_text())
    assert record["launcher"].endswith("BasicLauncher") and record["wall_seconds"] >= 0.4
    assert [j["job"] for j in record["jobs"]] == [0, 1]
    assert [j["run_dir"] for j in record["jobs"]] == ["0_seed-0", "1_seed-1"]
    assert all(j["wall_seconds"] >= 0.2 and j["train_seconds"] == 1.0 and j["eval_seconds"] == 0.1
               for j in record["jobs"])  # beside what each run measured (fake_run: 1.0 s training, 0.1 s validation)
    assert {(j["host"], j["pid"]) for j in record["jobs"]} == {(socket.gethostname(), os.getpid())}
    assert record["wall_seconds"] >= sum(j["wall_seconds"] for j in record["jobs"]) + 0.09  # one after another
    # Its start and end bracket every job's, and are the wall time apart (two clocks, read moments apart).
    start, end = pd.Timestamp(record["started_at"]), pd.Timestamp(record["ended_at"])
    assert start <= min(pd.Timestamp(j["started_at"]) for j in record["jobs"])
    assert end >= max(pd.Timestamp(j["ended_at"]) for j in record["jobs"])
    assert (end - start).total_seconds() == pytest.approx(record["wall_seconds"], abs=1.0)
    assert json.loads((sweep / "0_seed-0" / "job.json").read_text())["overrides"] == ["seed=0"]
    # Every time carries its UTC offset, so that the jobs of a sweep on several machines compare.
    stamps = [record["started_at"], record["ended_at"],
              *(job[key] for job in record["jobs"] for key in ("started_at", "ended_at"))]
    assert all(datetime.fromisoformat(stamp).utcoffset() is not None for stamp in stamps), stamps

    text = (sweep / "summary.md").read_text()
    assert f"Wall time {record['wall_seconds']:,.1f} s" in text
    runs = {r["run folder"]: r for r in md_table(text, "## Runs")}
    assert runs["0_seed-0"]["job s"] == f"{record['jobs'][0]['wall_seconds']:.1f}"
    assert runs["0_seed-0"]["train s"] == "1.0"
    assert "2 jobs shared one process" in text  # so their memory does not compare
    jobs = sum(j["wall_seconds"] for j in record["jobs"])
    assert (f"The jobs' own wall times add up to {jobs:,.1f} s; training passes took 2.0 s of them "
            f"({2.0 / jobs:.0%})") in text
    # Without sweep.json (a sweep that never reached its end), from the first job's start to the last one's end.
    (sweep / "sweep.json").unlink()
    write_summary(sweep)
    first, last = (json.loads((sweep / name / "job.json").read_text()) for name in ("0_seed-0", "1_seed-1"))
    span = pd.Timestamp(last["ended_at"]) - pd.Timestamp(first["started_at"])
    assert f"its jobs ran from the first start to the last end in {span.total_seconds():,.1f} s" in (
        sweep / "summary.md").read_text()


def test_a_single_run_writes_no_job_record(tmp_path):
    callback = SweepSummary()
    callback.on_job_start(multirun_config(tmp_path, tmp_path, 0, mode=RunMode.RUN))
    callback.on_job_end(multirun_config(tmp_path, tmp_path, 0, mode=RunMode.RUN), job_return=JobReturn())
    assert not (tmp_path / "job.json").exists()


def test_a_single_run_or_a_search_ends_without_a_sweep_record(tmp_path):
    """Not a sweep's job: nothing to record, and no error about the job number such a run does not have."""
    from hydra.core.utils import JobReturn, JobStatus

    config = OmegaConf.create({"hydra": {"mode": "RUN", "runtime": {"output_dir": str(tmp_path)},
                                         "job": {"num": "???"}, "overrides": {"task": []}}})
    callback = SweepSummary()
    callback.on_job_start(config)
    callback.on_job_end(config, JobReturn(status=JobStatus.COMPLETED))
    assert list(tmp_path.iterdir()) == []
