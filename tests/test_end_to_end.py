"""End to end: the real command lines, `python -m train ...` (src/train.py) through Hydra. A multirun compares the
variants, the same command in two processes with cold caches gives the same numbers, relative paths are read
from the folder the command runs in; and what src/train.py hands on: the launcher's share of the cores to each
job, the validation accuracy to the sweeper."""

import os
import re
from pathlib import Path

import pandas as pd
import pytest

import commands
from conftest import REPO, optional, run_cli, settings_for
from mha_textclf import pipeline as train_module
from mha_textclf.predictions import predict
from mha_textclf.runs.metrics import RunMetrics
from run_fakes import SMOKE, history

TIMES = {"train_seconds", "eval_seconds", "elapsed_train_seconds"}


@pytest.mark.parametrize(("launcher", "expected"), [
    ({"n_jobs": 2}, lambda cores: max(1, cores // 2)),  # joblib: the cores shared among its jobs
    ({"n_jobs": -1}, lambda cores: 1),  # joblib's default: as many jobs as cores, one thread each
    ({"n_jobs": None}, lambda cores: 1),
    ({"cpus_per_task": 3}, lambda cores: 3),  # submitit
    ({}, lambda cores: None),  # the basic launcher, one job at a time: torch's default
])
def test_parallel_jobs_share_the_cores(launcher, expected):
    from omegaconf import OmegaConf

    from train import launcher_threads

    assert launcher_threads(OmegaConf.create(launcher)) == expected(os.cpu_count() or 1)


@pytest.mark.parametrize(("cores", "n_jobs", "threads"), [
    (16, 3, 5), (16, 4, 4), (6, 4, 1), (16, 32, 1),  # cores // n_jobs, rounded down, at least one
    (16, -1, 1), (16, -15, 8), (16, -16, 16),  # joblib's negatives: -1 as many jobs as cores, -2 all but one, ...
])
def test_joblib_jobs_take_the_cores_divided_among_them_rounded_down(cores, n_jobs, threads, monkeypatch):
    """Under the joblib launcher each job uses `cores // n_jobs` torch threads (`n_jobs=-1`, joblib's default, means
    one thread per job), rounded down, so that the jobs never take more threads than the machine has cores. Asked of
    machines larger than this one (a patched os.cpu_count), where the rounding shows."""
    from omegaconf import OmegaConf

    from train import launcher_threads

    monkeypatch.setattr(os, "cpu_count", lambda: cores)
    assert launcher_threads(OmegaConf.create({"n_jobs": n_jobs})) == threads


def test_a_run_and_a_sweep_job_hand_their_sweeper_the_validation_accuracy_not_the_test_accuracy(monkeypatch):
    """src/train.py, hydra_main: "One run (or sweep job): returns validation accuracy, for sweepers": what a Hydra
    sweeper optimises is the validation split's accuracy, so that choosing settings never looks at the test split.
    Asked of hydra_main itself, for a single run and a sweep job, with the job patched to report a validation and a
    test accuracy that differ (no training needed)."""
    from types import SimpleNamespace

    from hydra.types import RunMode
    from omegaconf import OmegaConf

    import train
    from mha_textclf import cli

    metrics = SimpleNamespace(val=SimpleNamespace(accuracy=0.75), test=SimpleNamespace(accuracy=0.5),
                              interrupted_by=None)
    monkeypatch.setattr(cli, "run_job", lambda job, cfg: metrics)
    for mode in (RunMode.RUN, RunMode.MULTIRUN):
        hydra_cfg = OmegaConf.create({"overrides": {"task": ["seed=1"]}, "launcher": {},
                                      "sweep": {"dir": "outputs/multirun/sweep"}, "mode": mode})
        monkeypatch.setattr(train.HydraConfig, "get", staticmethod(lambda cfg=hydra_cfg: cfg))
        assert train.hydra_main.__wrapped__(OmegaConf.create({})) == 0.75


@pytest.mark.slow
def test_multirun_variants_agree(data_dir, tmp_path, monkeypatch):
    """Same seed, three variants, with and without PE: the same training trajectory (one function). Run from a
    folder of its own: the sweep lands in its outputs/multirun/<date>_<time with µs>/, and nothing else there but
    MLflow's default store, where the jobs share one experiment named after the sweep."""
    mlflow = optional("mlflow", "tracking")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)  # the default store
    # One thread per job: the models are tiny, and the variants must agree whatever the threads.
    result = run_cli("train", "-m", "model=naive,efficient,torch", "pe=false,true", *SMOKE, "trainer.num_threads=1",
                     "logger=mlflow", data_dir=data_dir, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.listdir(tmp_path) == ["outputs"]
    assert sorted(os.listdir(tmp_path / "outputs")) == ["mlartifacts", "mlflow.db", "multirun"]
    (sweep,) = (tmp_path / "outputs" / "multirun").iterdir()
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d-\d{6}", sweep.name)
    jobs = {p.name: p for p in sweep.iterdir() if p.is_dir()}
    assert sorted(int(name.split("_")[0]) for name in jobs) == list(range(6))  # one folder per job, numbered
    assert "0_experiment-smoke_logger-mlflow_model-naive_pe-False_trainer.num_threads-1" in jobs
    assert not any("=" in name or "," in name for name in jobs)  # passed back unquoted as run_dir= or resume=
    client = mlflow.MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name != "Default"]
    assert experiment.name == f"sweep {sweep.name}"
    tracked = client.search_runs([experiment.experiment_id])
    assert sorted(r.info.run_name for r in tracked) == sorted(jobs)
    assert {(r.data.tags["model"], r.data.tags["pe"]) for r in tracked} == {
        (m, pe) for m in ("naive", "efficient", "torch") for pe in ("False", "True")}
    assert {r.data.tags["sweep"] for r in tracked} == {experiment.name}  # a sweep's jobs are tagged with it

    def job(model: str, pe: str) -> Path:
        (name,) = [n for n in jobs if f"_model-{model}_pe-{pe}_" in n]
        return jobs[name]

    for pe in ("False", "True"):
        runs = {m: job(m, pe) for m in ("naive", "efficient", "torch")}
        histories = {m: history(d) for m, d in runs.items()}
        metrics = {m: RunMetrics.read(d / "metrics.json") for m, d in runs.items()}
        assert len(histories["efficient"]) == 2
        for m in ("naive", "torch"):
            for mine, theirs in zip(histories[m], histories["efficient"], strict=True):
                for column in ("train_loss", "val_loss"):
                    assert mine[column] == pytest.approx(theirs[column], rel=1e-4), (m, pe, column)
            assert metrics[m].val.accuracy == pytest.approx(metrics["efficient"].val.accuracy, abs=1e-9)
            assert metrics[m].params == metrics["efficient"].params
    # The end-of-sweep hook summarised it: one row per job, the grouped table, both plots.
    summary = pd.read_csv(sweep / "summary.csv")
    assert len(summary) == 6 and set(summary["status"]) == {"ok"}
    assert sorted(zip(summary["model"], summary["pe"], strict=True)) == sorted(
        (m, pe) for m in ("naive", "efficient", "torch") for pe in (False, True))
    assert "## By dataset, model, pe" in (sweep / "summary.md").read_text()
    assert (sweep / "loss_curves.png").stat().st_size > 0 and (sweep / "accuracy_vs_time.png").stat().st_size > 0


@pytest.mark.slow
def test_relative_paths_are_read_from_the_folder_the_command_runs_in(data_dir, minilm_dir, tmp_path, monkeypatch):
    """data.path (here through BBC_NEWS_PATH), tokenizer.base, resume= and predict's run_dir=, each relative (as in
    `export BBC_NEWS_PATH=../shared/data/bbc-news`), in folders that exist only from there."""
    (tmp_path / "corpora").mkdir()
    (tmp_path / "corpora" / "bbc-news").symlink_to(data_dir)
    (tmp_path / "tokenizers").mkdir()
    (tmp_path / "tokenizers" / "minilm").symlink_to(minilm_dir)
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    monkeypatch.setenv("BBC_NEWS_PATH", "../corpora/bbc-news")
    tiny = [*SMOKE, "trainer.epochs=1", "probes.attention=[]", "tokenizer.base=../tokenizers/minilm"]
    settings = settings_for(*tiny)
    assert settings.data.path == "../corpora/bbc-news"  # as given: read from here, wherever that is
    metrics = train_module.train(settings, Path("run"))
    assert metrics.dataset == "bbc-news" and metrics.train_samples == 48
    assert (tmp_path / "project" / "run" / "metrics.json").is_file()
    resumed = train_module.train(settings_for(*tiny, "resume=run"), Path("resumed"))
    assert resumed.epochs == 1 and [r["epoch"] for r in history(tmp_path / "project" / "resumed")] == [1]
    table = predict(settings_for("run_dir=run", "text=the striker scored twice", app="predict"))
    assert table["predicted"].tolist()[0] in metrics.class_names


@pytest.mark.slow
def test_the_same_command_in_two_processes_with_cold_caches_gives_the_same_numbers(data_dir, tmp_path):
    """Each process trains its own tokenizer into its own empty cache: same ids, so the same run, digit for digit.
    One is a fresh interpreter, the other forked from the tests' preloaded one (tests/commands.py): two hash seeds,
    two histories of imports."""
    processes = {}
    for name in ("a", "b"):
        env = os.environ | {"BBC_NEWS_PATH": str(data_dir), "MHA_TEXTCLF_CACHE": str(tmp_path / f"cache-{name}")}
        processes[name] = commands.start(["-m", "train", *SMOKE, "trainer.num_threads=1", "probes.attention=[]",
                                          f"hydra.run.dir={tmp_path / name}"], cwd=REPO, env=env, fresh=name == "a")
    for process in processes.values():
        _, stderr = process.communicate(timeout=600)
        assert process.returncode == 0, stderr[-3000:]
    tables = {name: pd.read_csv(tmp_path / name / "history.csv", dtype=str) for name in processes}
    assert len(tables["a"]) == 2
    pd.testing.assert_frame_equal(tables["a"].drop(columns=list(TIMES)), tables["b"].drop(columns=list(TIMES)))
    metrics = {name: RunMetrics.read(tmp_path / name / "metrics.json") for name in processes}
    assert (metrics["a"].val, metrics["a"].test) == (metrics["b"].val, metrics["b"].test)
    tokenizers = [(tmp_path / name / "tokenizer" / "tokenizer.json").read_bytes() for name in processes]
    assert tokenizers[0] == tokenizers[1]
