"""Sweeps: failed jobs are reported and the rest summarised, parallel launchers work. (The tokenizer cache's safety
under parallel jobs: test_tokenizer.py.)"""

import importlib
import json
import os
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path

import commands
import numpy as np
import pandas as pd
import pytest
import yaml
from hydra.core.utils import JobReturn, JobStatus
from hydra.types import RunMode
from omegaconf import OmegaConf
from scipy import stats

from conftest import REPO, capture_figures, compose_config, fingerprint, load_script, require, run_train, write_jsonl
from mha_textclf.runs import files
from mha_textclf.runs.files import write_history
from mha_textclf.runs.metrics import RunMetrics, SplitMetrics
from mha_textclf.sweeps.callback import SweepSummary
from mha_textclf.sweeps.collect import groups_table, runs_table
from mha_textclf.sweeps.compare import RULES
from mha_textclf.sweeps.markdown import summary_markdown
from mha_textclf.sweeps.plots import plot_accuracy_vs_time, plot_loss_curves, plot_memory
from mha_textclf.sweeps.record import JobRecord
from mha_textclf.sweeps.summary import write_summary

TINY = ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]", "data.max_length=128"]


def require_plugin(name: str) -> None:
    try:
        importlib.import_module(f"hydra_plugins.{name}")
    except ImportError:
        require(False, f'{name} is not installed: pip install -e ".[launchers]"')


@pytest.mark.slow
def test_a_sweep_with_failed_jobs_summarises_the_rest(data_dir, tmp_path):
    """A mistake in the settings stops a sweep before it starts (test_settings.py); one that only the data reveals
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
    jobs = json.loads((sweep / "sweep.json").read_text())["jobs"]  # failed jobs are timed too
    assert [j["job"] for j in jobs] == [0, 1, 2, 3] and all(j["wall_seconds"] > 0 for j in jobs)
    assert sorted(j["train_seconds"] is None for j in jobs) == [False, False, True, True]

    # scripts/summarize.py gives the same summary for the same folder.
    (sweep / "summary.csv").unlink()
    result = commands.run(["scripts/summarize.py", str(sweep)], cwd=REPO, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "## Failed runs" in result.stdout and "has a single class" in result.stdout
    pd.testing.assert_frame_equal(pd.read_csv(sweep / "summary.csv"), runs)


def fake_run(folder, model="efficient", seed=0, accuracy=0.5, epoch_seconds=1.0, pe=False, dataset="bbc-news",
             test_accuracy=None, n_samples=10, epoch_times=None, losses=None, stages=None, adapted=None,
             val_samples=None, eval_times=None, **settings):
    """A finished run folder as train writes it: metrics.json, config.yaml (resolved settings), history.csv.

    `epoch_times` (seconds per epoch) and `losses` ((train, val) per epoch) default to two epochs of
    `epoch_seconds`, each followed by `eval_times` seconds of validation (0.1 each); history.csv has every column
    train writes. `stages` is metrics.json's record of the pipeline's stages (peak memory). Each split's macro-F1
    is its accuracy minus 0.1, so that a table showing one in place of the other shows it; `val_samples` gives
    validation a size of its own (default: `n_samples`, as test)."""
    folder.mkdir(parents=True)
    epoch_times = epoch_times or [epoch_seconds] * 2
    losses = losses or [(1.0, 1.1), (0.5, 0.9)][:len(epoch_times)] + [(0.5, 0.9)] * (len(epoch_times) - 2)
    test_accuracy = accuracy if test_accuracy is None else test_accuracy
    val = SplitMetrics(accuracy=accuracy, macro_f1=accuracy - 0.1, loss=1.0, n_samples=val_samples or n_samples)
    test = SplitMetrics(accuracy=test_accuracy, macro_f1=test_accuracy - 0.1, loss=1.0, n_samples=n_samples)
    RunMetrics(model=model, pe=pe, seed=seed, dataset=dataset, splits={}, train_samples=20, val=val, test=test,
               class_names=["a", "b"], params=10,
               train_seconds=sum(epoch_times), eval_seconds=0.1, epochs=len(epoch_times), best_epoch=2,
               stopped_early=False, interrupted_by=None, tokens_per_second=1000 / (sum(epoch_times) or 1),
               vocab_size=100, device="cpu", threads=1, stages=stages or {},
               adapted=adapted or {}).write(folder / "metrics.json")
    config = {"model": {"attention": model, "dropout": 0.0}, "seed": seed, "pe": False,
              "tokenizer": {"base": None, "cache_dir": f"/cache/of/{folder.name}"},
              "data": {"path": f"/data/{dataset}"}}
    for key, value in settings.items():
        group, name = key.split("__")
        config[group][name] = value
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    eval_times = eval_times or [0.1] * len(epoch_times)
    write_history(folder / "history.csv", [
        {"epoch": i, "train_loss": train, "val_loss": val, "val_accuracy": accuracy, "lr": 1e-3,
         "train_seconds": seconds, "eval_seconds": evaluation, "elapsed_train_seconds": sum(epoch_times[:i]),
         "train_tokens": 1000} for i, ((train, val), seconds, evaluation) in enumerate(
            zip(losses, epoch_times, eval_times, strict=True), start=1)])


def test_groups_average_over_seeds_and_compare_speed(tmp_path):
    for i, (model, seed, acc, seconds) in enumerate([("naive", 0, 0.8, 30.0), ("naive", 1, 0.9, 34.0),
                                                     ("efficient", 0, 0.7, 10.0), ("efficient", 1, 0.9, 10.0)]):
        fake_run(tmp_path / f"{i}_run", model, seed, acc, seconds)
    runs = runs_table(tmp_path)
    assert list(runs.columns[:5]) == ["dataset", "model", "pe", "seed", "status"]  # cache_dir: where, not what
    groups = groups_table(runs).set_index("model")
    assert groups.loc["naive", "val_accuracy_mean"] == pytest.approx(0.85)
    assert groups.loc["efficient", "val_accuracy_std"] == pytest.approx(0.1414, abs=1e-4)  # sample std over seeds
    assert groups.loc["naive", "epoch_time_vs_fastest"] == pytest.approx(3.2)
    assert groups.loc["efficient", "epoch_time_vs_fastest"] == 1.0


def test_epoch_time_is_relative_to_the_fastest_variant_whichever_it_is(tmp_path):
    """The "epoch time vs fastest" column is relative to the fastest variant on the dataset: here naive's epochs take
    1 s, torch's 1.5 s and efficient's 2 s, so naive is the 1.00×, not efficient, the reference, nor the first variant
    in the table's order. The ratio is of the "median epoch s" beside it, not of "train s": naive trains 6 epochs
    (6 s), the others 2 (4 s and 3 s), as a run that patience stopped trains fewer."""
    for model, seconds, epochs in (("efficient", 2.0, 2), ("naive", 1.0, 6), ("torch", 1.5, 2)):
        fake_run(tmp_path / f"{model}_run", model=model, epoch_times=[seconds] * epochs)
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    expected = {"efficient": 2.0, "naive": 1.0, "torch": 1.5}
    assert groups.set_index("model")["epoch_time_vs_fastest"].to_dict() == expected
    text = summary_markdown(tmp_path, runs, groups)
    for heading in ("## The answer: bbc-news", "## By dataset"):
        shown = {r["model"]: r["epoch time vs fastest"] for r in md_table(text, heading)}
        assert shown == {model: f"{ratio:.2f}×" for model, ratio in expected.items()}, heading


def test_datasets_are_compared_side_by_side(tmp_path):
    for i, (dataset, seconds) in enumerate([("bbc-news", 10.0), ("bbc-news", 10.0), ("r8", 4.0), ("r8", 2.0)]):
        fake_run(tmp_path / f"{i}_run", seed=i % 2, dataset=dataset, accuracy=0.9 - i / 10, epoch_seconds=seconds)
    groups = groups_table(runs_table(tmp_path)).set_index("dataset")
    assert groups["runs"].tolist() == [2, 2] and "data.path" not in groups.columns  # the name stands for the path
    assert groups.loc["r8", "val_accuracy_mean"] == pytest.approx(0.65)
    assert groups["epoch_time_vs_fastest"].tolist() == [1.0, 1.0]  # each against its own dataset's fastest


def test_tokens_per_second_vs_fastest_is_against_the_fastest_variant_on_the_same_dataset(tmp_path):
    """Tokens/s, like epoch time, is relative to the fastest variant on the same dataset: a dataset whose runs are all
    slower than another's still has its own fastest at 1.00×."""
    for i, (dataset, model, seconds) in enumerate([("bbc-news", "efficient", 10.0), ("bbc-news", "naive", 20.0),
                                                   ("r8", "efficient", 2.0), ("r8", "naive", 8.0)]):
        fake_run(tmp_path / f"{i}_run", model=model, dataset=dataset, epoch_seconds=seconds)
    groups = groups_table(runs_table(tmp_path)).set_index(["dataset", "model"])["tokens_per_second_vs_fastest"]
    # tokens/s is 1000 / the run's training seconds: against its own dataset's most tokens per second
    assert groups.to_dict() == pytest.approx({("bbc-news", "efficient"): 1.0, ("bbc-news", "naive"): 0.5,
                                              ("r8", "efficient"): 1.0, ("r8", "naive"): 0.25})


def test_tokens_per_second_vs_fastest_divides_the_runs_tokens_per_second_not_the_epoch_time_ratio(tmp_path):
    """tokens/s vs fastest is its own column, the group's mean tokens/s (metrics.json's tokens_per_second) over the
    most of its dataset, not the inverse of epoch time vs fastest (the variant fastest per epoch, at 1.00×, may read
    0.99× in tokens/s). Here naive's epochs take twice as long but it trains 1.6 times the tokens in them."""
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_efficient", model="efficient", seed=seed, epoch_seconds=10.0)  # 50 tokens/s
        fake_run(tmp_path / f"{seed}_naive", model="naive", seed=seed, epoch_seconds=20.0)
        edit_metrics(tmp_path / f"{seed}_naive", tokens_per_second=[38.0, 42.0][seed])
    groups = groups_table(runs_table(tmp_path)).set_index("model")
    assert groups["epoch_time_vs_fastest"].to_dict() == pytest.approx({"efficient": 1.0, "naive": 2.0})
    assert groups["tokens_per_second_vs_fastest"].to_dict() == pytest.approx({"efficient": 1.0, "naive": 40 / 50})


def edit_metrics(run_dir, **changes):
    metrics = RunMetrics.read(run_dir / "metrics.json")
    for key, value in changes.items():
        setattr(metrics, key, value)
    metrics.write(run_dir / "metrics.json")


def test_baselines_without_pe_form_groups_too(tmp_path):
    """A baseline groups like a variant, with blanks (not "None", "nan" or "not reached") where it has no pe and no
    epochs, also beside trained runs that have times to an accuracy."""
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_tfidf", model="tfidf-words", seed=seed, pe=None)
        (tmp_path / f"{seed}_tfidf" / "history.csv").unlink()  # a baseline has no epochs
        edit_metrics(tmp_path / f"{seed}_tfidf", epochs=0, best_epoch=None)
    fake_run(tmp_path / "2_run", seed=0)
    edit_metrics(tmp_path / "2_run", time_to_accuracy={"0.9": 4.0})
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    assert groups["model"].tolist() == ["efficient", "tfidf-words"] and groups["runs"].tolist() == [1, 2]
    group_row = summary_markdown(tmp_path, runs, groups).split("## Runs")[0].splitlines()[-2]
    assert "| tfidf-words |  | 2 | 2 |" in group_row
    assert "nan" not in group_row and "None" not in group_row and "not reached" not in group_row


def test_runs_with_different_settings_are_never_averaged_together(tmp_path):
    for i, dropout in enumerate([0.1, 0.1, 0.3, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.5 + i / 10, model__dropout=dropout)
    runs = runs_table(tmp_path)
    assert "model.dropout" in runs.columns and "tokenizer.cache_dir" not in runs.columns  # only what varies
    groups = groups_table(runs).set_index("model.dropout")
    assert groups.loc["0.1", "runs"] == groups.loc["0.3", "runs"] == 2
    assert groups.loc["0.3", "val_accuracy_mean"] == pytest.approx(0.75)


def test_summary_csv_is_the_runs_table_with_a_column_for_every_setting_that_differs(tmp_path):
    """summary.csv is the per-run table, every setting that differs between runs a column (read from each run's
    config.yaml); what is the same in every run, or only where things are, is not. Each run's own
    config.yaml, with the values it ran with, not Hydra's .hydra/config.yaml beside it, which keeps an override such
    as model.dropout=${oc.env:DROPOUT} as it was typed, the same string in every run."""
    for i, dropout in enumerate([0.1, 0.3, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, model__dropout=dropout)
        composed = yaml.safe_load((tmp_path / f"{i}_run" / "config.yaml").read_text())
        composed["model"]["dropout"] = "${oc.env:DROPOUT}"
        (tmp_path / f"{i}_run" / ".hydra").mkdir()
        (tmp_path / f"{i}_run" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(composed))
    write_summary(tmp_path)
    written = pd.read_csv(tmp_path / "summary.csv", dtype=str)
    assert written["model.dropout"].tolist() == ["0.1", "0.3", "0.3"]
    assert written.columns[written.columns.get_loc("seed") + 1] == "model.dropout"
    assert not {"tokenizer.base", "tokenizer.cache_dir"} & set(written.columns)  # the same everywhere; a location
    assert written["run_dir"].tolist() == ["0_run", "1_run", "2_run"]


def test_summary_csv_holds_the_runs_table_s_columns_and_nothing_else(tmp_path):
    """summary.csv is the per-run table: one column per column of the runs table (pandas' row index is no column of
    it), and one row per run, each value the table's; read back, it is the runs table."""
    for i, dropout in enumerate([0.1, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, model__dropout=dropout)
    write_summary(tmp_path)
    expected = runs_table(tmp_path)
    with (tmp_path / "summary.csv").open() as f:
        header = f.readline().rstrip("\n").split(",")
    assert header == list(expected.columns) and header[0] == "dataset"
    written = pd.read_csv(tmp_path / "summary.csv")
    assert written["run_dir"].tolist() == ["0_run", "1_run"] and written["seed"].tolist() == [0, 1]
    assert (tmp_path / "summary.csv").read_text() == expected.to_csv(index=False)


def test_seeds_whose_vocabulary_size_adapted_to_their_split_are_one_group(tmp_path):
    """tokenizer.vocab_size=null decides a size per training split, so seeds of one command may differ: they are one
    group; sizes that were asked for are not."""
    for i, (size, asked) in enumerate([(8500, False), (8600, False), (8500, False), (4000, True), (8000, True)]):
        fake_run(tmp_path / f"{i}_run", seed=i, tokenizer__vocab_size=size,
                 adapted=None if asked else {"tokenizer.vocab_size": f"{size}: why"})
    groups = groups_table(runs_table(tmp_path)).set_index("tokenizer.vocab_size")
    assert groups["runs"].to_dict() == {"None": 3, "4000": 1, "8000": 1}


def test_an_unreadable_metrics_json_is_a_failed_run_in_the_summary_not_a_crash(tmp_path):
    fake_run(tmp_path / "0_run", seed=0)
    fake_run(tmp_path / "1_run", seed=1)
    (tmp_path / "1_run" / "metrics.json").write_text('{"truncated')  # a disk that filled mid-write
    runs = runs_table(tmp_path).set_index("run_dir")
    assert runs.loc["0_run", "status"] == "ok" and runs.loc["1_run", "status"] == "failed"
    assert runs.loc["1_run", "error"].startswith("unreadable metrics.json")


def test_runs_with_different_tokenizers_are_different_groups(tmp_path):
    """tokenizer.base names which tokenizer was retrained: a setting of the model, not a location."""
    minilm = "../shared/tokenizers/all-MiniLM-L6-v2"
    for i, base in enumerate([None, None, minilm, minilm]):
        fake_run(tmp_path / f"{i}_run", seed=i % 2, tokenizer__base=base)
    groups = groups_table(runs_table(tmp_path))
    assert sorted(groups["tokenizer.base"]) == [minilm, "None"]
    assert groups["runs"].tolist() == [2, 2]


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


def test_the_sweep_legend_lists_only_the_values_the_sweep_has(tmp_path):
    for i, model in enumerate(["naive", "efficient"]):
        fake_run(tmp_path / f"{i}_run", model=model)  # pe=False only
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert "pe=False" in labels and "pe=True" not in labels
    assert all(float(t).is_integer() for ax in figure.axes for t in ax.get_xticks())


def test_a_failed_single_run_shows_its_error_in_the_summary(tmp_path):
    run = tmp_path / "runs" / "2026-11-22_run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("model: {attention: naive}\npe: false\nseed: 0\n")
    (run / "error.txt").write_text("The train split of 'x' has a single class; a classifier needs at least two.\n")
    runs = runs_table(tmp_path)
    assert runs["status"].tolist() == ["failed"] and "has a single class" in runs["error"].iloc[0]


def test_time_to_accuracy_per_run_and_per_group(tmp_path):
    for seed, seconds in enumerate([{"0.85": 4.0, "0.9": 8.0, "0.95": None}, {"0.85": 6.0, "0.9": None, "0.95": None}]):
        fake_run(tmp_path / f"{seed}_run", seed=seed)
        metrics = RunMetrics.read(tmp_path / f"{seed}_run" / "metrics.json")
        metrics.time_to_accuracy = seconds
        metrics.write(tmp_path / f"{seed}_run" / "metrics.json")
    runs = runs_table(tmp_path)
    assert runs["seconds_to_0.9"].isna().tolist() == [False, True]
    groups = groups_table(runs)
    assert groups["seconds_to_0.85_mean"].item() == 5.0 and groups["seconds_to_0.9_count"].item() == 1
    text = (tmp_path / "summary.md")
    write_summary(tmp_path)
    assert "| 5.0 ± 1.4 | 8.0 (1 of 2 runs) | not reached |" in text.read_text()


def test_a_time_to_accuracy_few_runs_reached_is_their_mean_and_says_how_many_of_the_runs(tmp_path):
    """The column "s to val acc x" is the training seconds until validation accuracy first reached x, a mean ± std
    over the runs that reached it: of 3 runs, 2 reached 0.85 (in 4 and 6 s) and 1 reached 0.9 (in 19.1 s); a level
    reached by some runs is the mean over those, and says how many of the group's runs they are ("2 of 3 runs"), not
    how many missed it: runs, not seeds (seed 0 ran twice here: 3 runs, 2 seeds)."""
    reached = [{"0.85": 4.0, "0.9": 19.1, "0.95": None}, {"0.85": 6.0, "0.9": None, "0.95": None},
               {"0.85": None, "0.9": None, "0.95": None}]
    for run, (seed, seconds) in enumerate(zip([0, 0, 1], reached, strict=True)):
        fake_run(tmp_path / f"{run}_run", seed=seed)
        metrics = RunMetrics.read(tmp_path / f"{run}_run" / "metrics.json")
        metrics.time_to_accuracy = seconds
        metrics.write(tmp_path / f"{run}_run" / "metrics.json")
    write_summary(tmp_path)
    [row] = md_table((tmp_path / "summary.md").read_text(), "## By dataset")
    assert (row["runs"], row["seeds"]) == ("3", "2")
    assert row["s to val acc 0.85"] == "5.0 ± 1.4 (2 of 3 runs)"
    assert row["s to val acc 0.9"] == "19.1 (1 of 3 runs)"
    assert row["s to val acc 0.95"] == "not reached"


def test_an_interrupted_run_is_listed_but_not_pooled_into_its_group_s_runs_and_means(tmp_path):
    """A group's `runs` and each mean ± std are over its runs that finished (groups_table: "among finished runs"). A
    run stopped by a signal keeps its row in the runs table, marked interrupted; its accuracy and times, from an
    unfinished training, join no mean."""
    for seed, (accuracy, seconds) in enumerate([(0.6, 4.0), (0.8, 6.0), (0.3, 1.0)]):
        fake_run(tmp_path / f"{seed}_run", seed=seed, accuracy=accuracy)
        edit_metrics(tmp_path / f"{seed}_run", time_to_accuracy={"0.5": seconds})
    edit_metrics(tmp_path / "2_run", interrupted_by="SIGINT")
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert [r["status"] for r in md_table(text, "## Runs")] == ["ok", "ok", "interrupted"]
    [row] = md_table(text, "## By dataset")
    finished = np.array([0.6, 0.8])
    assert (row["runs"], row["seeds"]) == ("2", "2")
    assert row["val accuracy"] == f"{finished.mean():.4f} ± {finished.std(ddof=1):.4f}"
    assert row["s to val acc 0.5"] == "5.0 ± 1.4"


def test_a_time_to_accuracy_three_runs_reached_is_their_mean_not_their_median(tmp_path):
    """The time columns, like the accuracies, are a mean ± std over the group's runs. Three runs reach 0.9 in 2, 3
    and 10 s: their mean, 5.0, is not their median, 3.0 (with the two runs of the other tests' levels the two read
    the same)."""
    seconds = np.array([2.0, 3.0, 10.0])
    for seed, reached in enumerate(seconds):
        fake_run(tmp_path / f"{seed}_run", seed=seed)
        edit_metrics(tmp_path / f"{seed}_run", time_to_accuracy={"0.9": float(reached)})
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    assert groups["seconds_to_0.9_mean"].item() == pytest.approx(seconds.mean())
    [row] = md_table(summary_markdown(tmp_path, runs, groups), "## By dataset")
    assert row["s to val acc 0.9"] == f"{seconds.mean():.1f} ± {seconds.std(ddof=1):.1f}" == "5.0 ± 4.4"


def md_table(text: str, heading: str) -> list[dict[str, str]]:
    """The first Markdown table after `heading` in summary.md, as one dict per row."""
    lines = text.split(heading, 1)[1].splitlines()
    rows = [line for line in lines[lines.index(next(x for x in lines if x.startswith("|"))):]]
    rows = rows[:next((i for i, x in enumerate(rows) if not x.startswith("|")), len(rows))]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    return [dict(zip(cells[0], row, strict=True)) for row in cells[2:]]


def paired_sweep(folder, ratios=(1.45, 1.5, 1.55), naive_articles=(0, 0, -2), pe_points=-3.0):
    """3 seeds × (efficient, naive) × pe: naive's epochs take `ratios[seed]` times efficient's; naive is
    `naive_articles` test articles of 1000 off efficient (float-rounding drift); pe=True `pe_points` lower. Validation
    has 307 articles, test 1000, as bbc-news."""
    for seed in range(3):
        for pe in (False, True):
            base = 0.95 + 0.01 * seed + (pe_points / 100 if pe else 0)
            for model, factor, articles in (("efficient", 1.0, 0), ("naive", ratios[seed], naive_articles[seed])):
                fake_run(folder / f"{model}_{pe}_{seed}", model=model, seed=seed, pe=pe, accuracy=base,
                         test_accuracy=base + articles / 1000, n_samples=1000, val_samples=307,
                         epoch_times=[3.0 * factor] + [factor] * 11,  # a slow first epoch (warm-up)
                         stages={"fit": {"seconds": 12.0, "peak_memory_mb": 500.0 + 10 * seed}})


def test_the_speed_ratio_pairs_each_seed_with_the_reference_s_run_of_the_same_seed(tmp_path):
    """The epoch time against the reference is a ratio paired over the seeds both ran (above 1: more seconds per
    epoch): efficient's epochs take 1, 2 and 4 s at seeds 0, 1, 2 and naive's 1.5 times its own seed's, so each pair is
    exactly 1.5 and the interval has no width; paired across seeds, the ratios would spread from 0.375 to 6."""
    for seed, seconds in enumerate([1.0, 2.0, 4.0]):
        for model, factor in (("efficient", 1.0), ("naive", 1.5)):
            fake_run(tmp_path / f"{model}_{seed}", model=model, seed=seed, epoch_seconds=seconds * factor)
    runs = runs_table(tmp_path)
    (against,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### Against efficient (the reference)")
    assert (against["shared seeds"], against["epoch time"]) == ("3", "slower by 1.50× (95% CI 1.50–1.50×)")


def test_the_answer_comes_first_and_compares_against_the_reference(tmp_path):
    paired_sweep(tmp_path)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert text.index("## The answer: bbc-news") < text.index("## By dataset") < text.index("## Runs")

    variants = {(r["model"], r["pe"]): r for r in md_table(text, "## The answer: bbc-news")}
    # Rows by model, then pe=False before pe=True.
    assert list(variants) == [("efficient", "False"), ("efficient", "True"), ("naive", "False"), ("naive", "True")]
    assert [line for line in text.split("## The answer: bbc-news", 1)[1].splitlines() if line.startswith("|")][1] == (
        "|" + "---|" * len(variants["naive", "False"]))
    assert variants["naive", "False"]["runs"] == variants["naive", "False"]["seeds"] == "3"
    assert variants["efficient", "False"]["epoch time vs fastest"] == "1.00×"
    assert variants["naive", "False"]["epoch time vs fastest"] == "1.50×"  # mean of medians 1.45, 1.5, 1.55
    assert variants["efficient", "True"]["peak RSS in training, MB"] == "510 ± 10"
    assert "peak CUDA in training, MB" not in variants["efficient", "True"]  # a CPU sweep has no CUDA column
    test = np.array([0.92, 0.93, 0.94 - 0.002])  # naive, pe=True: seed 2 two articles off
    assert variants["naive", "True"]["test accuracy"] == f"{test.mean():.4f} ± {test.std(ddof=1):.4f}"
    # Every column from its own metric of its own split (naive, pe=True; macro-F1 is accuracy - 0.1 here), the
    # median epoch (the 3× warm-up epoch is no median) and tokens/s against the fastest variant's.
    val = np.array([0.92, 0.93, 0.94])
    by_split = {"val accuracy": val, "test accuracy": test, "val macro-F1": val - 0.1, "test macro-F1": test - 0.1}
    expected = {column: f"{v.mean():.4f} ± {v.std(ddof=1):.4f}" for column, v in by_split.items()}
    assert {column: variants["naive", "True"][column] for column in expected} == expected
    assert variants["naive", "True"]["median epoch s"] == "1.50 ± 0.05"  # medians 1.45, 1.5, 1.55
    assert variants["efficient", "True"]["median epoch s"] == "1.00 ± 0.00"
    assert variants["efficient", "False"]["tokens/s vs fastest"] == "1.00×"
    tokens = np.mean([1 / 1.45, 1 / 1.5, 1 / 1.55])  # the same tokens in 1.45-1.55 times the seconds, per seed
    assert variants["naive", "False"]["tokens/s vs fastest"] == f"{tokens:.2f}×"
    # The same numbers in the table of every metric, and each run's own in the runs table.
    groups = {(r["model"], r["pe"]): r for r in md_table(text, "## By dataset")}
    assert {column: groups["naive", "True"][column] for column in expected} == expected
    assert groups["naive", "True"]["median epoch s"] == "1.50 ± 0.05"
    runs = {r["run folder"]: r for r in md_table(text, "## Runs")}
    assert (runs["naive_True_2"]["val accuracy"], runs["naive_True_2"]["test accuracy"]) == ("0.9400", "0.9380")
    assert (runs["naive_True_2"]["val macro-F1"], runs["naive_True_2"]["test macro-F1"]) == ("0.8400", "0.8380")

    against = {(r["model"], r["pe"]): r for r in md_table(text, "### Against efficient (the reference)")}
    assert set(against) == {("naive", "False"), ("naive", "True")}
    logs = np.log([1.45, 1.5, 1.55])
    ci = np.exp(stats.ttest_1samp(logs, 0).confidence_interval(0.95))
    assert against["naive", "False"]["epoch time"] == (
        f"slower by {np.exp(logs.mean()):.2f}× (95% CI {ci[0]:.2f}–{ci[1]:.2f}×)")
    assert against["naive", "False"]["shared seeds"] == "3"
    assert against["naive", "False"]["val accuracy"] == "identical at all 3 seeds"
    assert against["naive", "False"]["test accuracy"].startswith("same within noise (-0.1 points, -0.7 of 1000")

    pe = {r["model"]: r for r in md_table(text, "### pe=True against pe=False")}
    # Each model against itself without PE (naive's epochs are as slow either way), each split in its own articles.
    for model in ("efficient", "naive"):
        assert pe[model]["test accuracy"] == "lower by 3.0 points (-30 of 1000 articles, 95% CI -3.0 to -3.0)"
        assert pe[model]["val accuracy"] == "lower by 3.0 points (-9.2 of 307 articles, 95% CI -3.0 to -3.0)"
        assert pe[model]["epoch time"].startswith("same speed within noise (1.00×")
    assert "**Noise rule:**" in text and "5 articles or fewer" in text


def test_a_pe_true_variant_is_compared_against_the_reference_with_pe_true_not_pe_false(tmp_path):
    """Each variant is compared against the reference variant with the same pe and settings. In
    paired_sweep naive with PE gives efficient-with-PE's validation accuracies at every seed and its test accuracies
    within two articles, while PE itself costs 3 points: put against efficient without PE, naive with PE would read
    "lower by 3.0 points"."""
    paired_sweep(tmp_path)
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    against = {(r["model"], r["pe"]): r for r in md_table(text, "### Against efficient (the reference)")}
    assert against["naive", "True"]["val accuracy"] == "identical at all 3 seeds"
    assert against["naive", "True"]["test accuracy"].startswith("same within noise (-0.1 points, -0.7 of 1000")
    logs = np.log([1.45, 1.5, 1.55])
    assert against["naive", "True"]["epoch time"].startswith(f"slower by {np.exp(logs.mean()):.2f}×")


def test_epoch_time_is_the_median_training_epoch_the_validation_after_it_left_out(tmp_path):
    """Epoch time is the median training epoch, validation excluded: in each variant's "median epoch s", its "epoch
    time vs fastest" and the pairs' epoch time ratio; "train s" counts training passes only. history.csv times each
    epoch's validation apart (eval_seconds): here efficient trains an epoch in 1 s and validates it in 2 s, naive
    trains in 2 s and validates in 0.1 s, so counting validation would make naive the faster."""
    for seed in range(3):
        for model, train, validation in (("efficient", 1.0, 2.0), ("naive", 2.0, 0.1)):
            fake_run(tmp_path / f"{model}_{seed}", model=model, seed=seed, epoch_times=[train] * 6,
                     eval_times=[validation] * 6)
    write_summary(tmp_path)
    runs = pd.read_csv(tmp_path / "summary.csv")
    assert runs.groupby("model")["median_epoch_seconds"].agg(set).to_dict() == {"efficient": {1.0}, "naive": {2.0}}
    text = (tmp_path / "summary.md").read_text()
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert [variants[m]["median epoch s"] for m in ("efficient", "naive")] == ["1.00 ± 0.00", "2.00 ± 0.00"]
    assert [variants[m]["epoch time vs fastest"] for m in ("efficient", "naive")] == ["1.00×", "2.00×"]
    (against,) = md_table(text, "### Against efficient (the reference)")
    assert against["epoch time"].startswith("slower by 2.00×"), against


def test_peak_rss_in_training_is_the_fit_stage_s_not_the_highest_of_the_run(tmp_path):
    """Peak memory while training is the process's peak RSS in the fit stage (`stages.fit` in `metrics.json`). A
    run's other stages (loading data, the tokenizer, encoding, the reports) peak higher here, as the process's peak
    may; the table shows the training stage's alone: 500, 510 and 520 MB over the seeds."""
    for seed in range(3):
        fake_run(tmp_path / f"efficient_{seed}", seed=seed, stages={
            "data": {"seconds": 1.0, "peak_memory_mb": 900.0}, "tokenizer": {"seconds": 1.0, "peak_memory_mb": 950.0},
            "encode": {"seconds": 1.0, "peak_memory_mb": 980.0},
            "fit": {"seconds": 2.0, "peak_memory_mb": 500.0 + 10 * seed},
            "reports": {"seconds": 1.0, "peak_memory_mb": 1000.0}})
    write_summary(tmp_path)
    assert pd.read_csv(tmp_path / "summary.csv")["peak_rss_mb"].tolist() == [500.0, 510.0, 520.0]
    (variant,) = md_table((tmp_path / "summary.md").read_text(), "## The answer: bbc-news")
    assert variant["peak RSS in training, MB"] == "510 ± 10"


def test_peak_cuda_in_training_is_the_fit_stage_s_not_the_highest_of_the_run(tmp_path):
    """On a GPU, peak memory while training includes CUDA's peak allocation, and that column, too, is the training
    stage's (`stages.fit` in `metrics.json`). A GPU run's reports (the test split evaluated, the probes) peak higher
    here; summary.csv and summary.md show the fit stage's alone: 100, 120 and 140 MB over the seeds."""
    for seed in range(3):
        fake_run(tmp_path / f"efficient_{seed}", seed=seed, stages={
            "encode": {"seconds": 1.0, "peak_memory_mb": 900.0, "peak_cuda_mb": 0.0},
            "fit": {"seconds": 2.0, "peak_memory_mb": 500.0, "peak_cuda_mb": 100.0 + 20 * seed},
            "reports": {"seconds": 1.0, "peak_memory_mb": 1000.0, "peak_cuda_mb": 700.0}})
    write_summary(tmp_path)
    assert pd.read_csv(tmp_path / "summary.csv")["peak_cuda_mb"].tolist() == [100.0, 120.0, 140.0]
    (variant,) = md_table((tmp_path / "summary.md").read_text(), "## The answer: bbc-news")
    assert variant["peak CUDA in training, MB"] == "120 ± 20"


def test_the_tables_the_docs_record_from_a_sweep_are_its_summary_s_own(tmp_path, monkeypatch):
    """scripts/render_docs.py --results NAME=<sweep> records the answer of a sweep's summary (each variant, and each
    against the reference, paired), and renders each table as summary.md shows it, cell for cell."""
    paired_sweep(tmp_path / "sweep")
    write_summary(tmp_path / "sweep")
    text = (tmp_path / "sweep" / "summary.md").read_text()
    render = load_script("render_docs", monkeypatch)
    monkeypatch.setattr(render, "RESULTS", tmp_path / "results")
    render.record_results("a-sweep", tmp_path / "sweep")
    for table, heading in (("variants", "## The answer: bbc-news"), ("against", "### Against efficient")):
        rendered = render.result_table("a-sweep", table)
        shown = [line for line in text.split(heading, 1)[1].splitlines()[1:] if line.startswith("|") or not line]
        assert rendered.splitlines() == "\n".join(shown).strip().split("\n\n")[0].splitlines(), table


def test_each_dataset_gets_its_own_answer_with_its_own_runs_and_comparisons(tmp_path):
    """summary.md opens with the answer, one section per dataset: each section holds the variants of its dataset
    alone, their times relative to that dataset's fastest, and the comparisons among them."""
    for dataset, accuracy, naive_seconds in (("bbc-news", 0.9, 3.0), ("r8", 0.6, 4.0)):
        for model, seconds in (("efficient", 2.0), ("naive", naive_seconds)):
            fake_run(tmp_path / f"{dataset}_{model}", model=model, dataset=dataset, accuracy=accuracy,
                     n_samples=1000, epoch_times=[seconds] * 6)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## The answer")]
    assert headings == ["## The answer: bbc-news", "## The answer: r8"]
    sections = {dataset: text.split(f"## The answer: {dataset}", 1)[1].split("\n## ", 1)[0]
                for dataset in ("bbc-news", "r8")}
    for dataset, accuracy, ratio in (("bbc-news", "0.9000", "1.50×"), ("r8", "0.6000", "2.00×")):
        variants = {r["model"]: r for r in md_table(text, f"## The answer: {dataset}")}
        assert set(variants) == {"efficient", "naive"}
        assert {r["val accuracy"] for r in variants.values()} == {accuracy}
        assert variants["naive"]["epoch time vs fastest"] == ratio
        (against,) = md_table(sections[dataset], "### Against efficient (the reference)")
        assert against["epoch time"].startswith(f"slower by {ratio}")


def test_without_the_reference_the_fastest_variant_is_named_instead(tmp_path):
    for model, seconds in (("torch", 2.0), ("naive", 3.0)):
        fake_run(tmp_path / model, model=model, epoch_times=[seconds] * 6)
    text = (tmp_path / "summary.md").read_text() if write_summary(tmp_path) else ""
    heading = "### Against torch (efficient, the reference, is not in this sweep, so the fastest variant)"
    against = md_table(text, heading)
    assert [(r["model"], r["epoch time"]) for r in against] == [("naive", "slower by 1.50× (95% CI 1.50–1.50×)")]


def test_summarize_without_a_reference_writes_the_hooks_summary_against_efficient(tmp_path):
    """`python scripts/summarize.py <folder>` writes the same summary as the end-of-sweep hook, whose reference is
    efficient; `--reference torch` is what compares against another variant."""
    for model, seconds in (("torch", 2.0), ("efficient", 2.5), ("naive", 3.0)):
        fake_run(tmp_path / model, model=model, epoch_times=[seconds] * 6)
    write_summary(tmp_path)  # what SweepSummary writes at the end of a sweep
    hooks = (tmp_path / "summary.md").read_text()
    (tmp_path / "summary.md").unlink()
    assert load_script("summarize").main([str(tmp_path)]) == 0
    assert (tmp_path / "summary.md").read_text() == hooks
    against = md_table(hooks, "### Against efficient (the reference)")
    assert [(r["model"], r["epoch time"]) for r in against] == [("naive", "slower by 1.20× (95% CI 1.20–1.20×)"),
                                                                ("torch", "faster by 1.25× (95% CI 1.25–1.25×)")]


def test_summarize_compares_against_the_reference_it_is_given(tmp_path, capsys):
    """scripts/summarize.py <folder> --reference naive: the heading names it, and the others are paired with it."""

    for model, seconds in (("torch", 2.0), ("naive", 3.0)):
        fake_run(tmp_path / model, model=model, epoch_times=[seconds] * 6)
    summarize = load_script("summarize")
    assert summarize.main([str(tmp_path), "--reference", "naive"]) == 0
    against = md_table((tmp_path / "summary.md").read_text(), "### Against naive (the reference)")
    assert [(r["model"], r["epoch time"]) for r in against] == [("torch", "faster by 1.50× (95% CI 1.50–1.50×)")]
    assert "### Against naive (the reference)" in capsys.readouterr().out  # and prints summary.md


def test_summarize_writes_the_summary_and_each_plot_into_the_folder_and_no_sweep_record(tmp_path, monkeypatch):
    """`python scripts/summarize.py <folder>` writes the same files as the sweep's hook (summary.md, summary.csv,
    accuracy_vs_time.png, memory.png, loss_curves.png) except sweep.json, which only the sweep itself can measure:
    each plot into its own file, read back as a PNG."""
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_run", seed=seed, stages={"fit": {"peak_memory_mb": 600.0}})
    saved = capture_figures(monkeypatch)
    assert load_script("summarize").main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "accuracy_vs_time.png", "loss_curves.png", "memory.png", "summary.csv", "summary.md"]
    assert all((tmp_path / name).read_bytes().startswith(b"\x89PNG") for name in saved)
    # Each file holds its own plot.
    assert saved["accuracy_vs_time.png"].axes[0].get_ylabel() == "test accuracy"
    assert saved["memory.png"].axes[0].get_title() == "CPU: peak RSS of the process while training, MB"
    assert saved["loss_curves.png"].get_suptitle().startswith("loss per epoch")


def test_summarize_finds_the_run_folders_at_any_depth_of_outputs(tmp_path):
    """`python scripts/summarize.py <folder>` summarises any folder that holds run folders, at any depth, so
    `scripts/summarize.py outputs` puts the baseline's runs in the same table as the trained ones. outputs/ as the
    configs lay it out: a single run in runs/<stamp>/, a sweep's jobs in multirun/<stamp>/<job>/, a baseline sweep's
    in baselines/multirun/<stamp>/<job>/."""
    outputs = tmp_path / "outputs"
    runs = {"runs/2026-01-01_10-00-00-000000_efficient_pe-False": ("efficient", 2),
            "multirun/2026-01-01_11-00-00-000000/0_seed-0": ("efficient", 0),
            "multirun/2026-01-01_11-00-00-000000/1_seed-1": ("efficient", 1),
            "baselines/multirun/2026-01-01_12-00-00-000000/0_features-words_seed-0": ("tfidf-words", 0)}
    for folder, (model, seed) in runs.items():
        fake_run(outputs / folder, model=model, seed=seed, pe=None if model.startswith("tfidf") else False)
    assert load_script("summarize").main([str(outputs)]) == 0
    table = pd.read_csv(outputs / "summary.csv")
    assert {row.run_dir: (row.model, row.seed) for row in table.itertuples()} == runs


def test_summarize_refuses_a_folder_without_runs_and_a_path_that_is_no_folder(tmp_path, capsys):
    """scripts/summarize.py: usage errors exit with 2 (argparse's), saying what is wrong, and write nothing."""
    summarize = load_script("summarize")
    (tmp_path / "empty" / "nested").mkdir(parents=True)
    (tmp_path / "file.txt").write_text("not a folder")
    for path, message in ((tmp_path / "empty", "no run folders (with metrics.json or .hydra/) below"),
                          (tmp_path / "file.txt", "is not a folder"), (tmp_path / "nowhere", "is not a folder")):
        with pytest.raises(SystemExit) as exit:
            summarize.main([str(path)])
        assert exit.value.code == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["empty", "file.txt", "nested"]


def test_each_variant_is_paired_with_the_reference_at_the_same_settings(tmp_path):
    """A sweep over model.dropout too: naive at each dropout against efficient at that dropout, never pooled with the
    reference's runs at the other (here a dropout of 0.3 is 5 points lower and twice as slow, in both models)."""
    for model, factor in (("efficient", 1.0), ("naive", 1.5)):
        for dropout, accuracy, slower in ((0.1, 0.9, 1.0), (0.3, 0.85, 2.0)):
            fake_run(tmp_path / f"{model}_{dropout}", model=model, accuracy=accuracy, n_samples=1000,
                     epoch_times=[factor * slower] * 6, model__dropout=dropout)
    write_summary(tmp_path)
    rows = md_table((tmp_path / "summary.md").read_text(), "### Against efficient (the reference)")
    assert {(r["model"], r["model.dropout"]): (r["epoch time"], r["val accuracy"]) for r in rows} == {
        ("naive", dropout): ("slower by 1.50× (95% CI 1.50–1.50×)", "identical at the one seed")
        for dropout in ("0.1", "0.3")}


def test_repeats_of_a_seed_are_runs_not_seeds(tmp_path):
    for i, accuracy in enumerate([0.90, 0.92, 0.94]):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=0, accuracy=accuracy, n_samples=1000)
    fake_run(tmp_path / "efficient", model="efficient", seed=0, accuracy=0.92, n_samples=1000)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert (variants["naive"]["runs"], variants["naive"]["seeds"]) == ("3", "1")
    assert variants["naive"]["val accuracy"] == "0.9200 ± 0.0200"
    assert variants["efficient"]["val accuracy"] == "0.9200"  # one run: no ±
    assert "the spread between repeats" in text
    (row,) = md_table(text, "### Against efficient")
    assert row["shared seeds"] == "1" and row["val accuracy"] == "identical at the one seed"  # repeats averaged
    # The same runs at three seeds: no repeats, and no such warning (each ± is a spread between seeds).
    seeds = tmp_path / "seeds"
    for i, accuracy in enumerate([0.90, 0.92, 0.94]):
        fake_run(seeds / f"naive_{i}", model="naive", seed=i, accuracy=accuracy, n_samples=1000)
    fake_run(seeds / "efficient", model="efficient", seed=0, accuracy=0.92, n_samples=1000)
    write_summary(seeds)
    text = (seeds / "summary.md").read_text()
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert (variants["naive"]["runs"], variants["naive"]["seeds"]) == ("3", "3")
    assert "the spread between repeats" not in text


def test_one_run_beyond_the_seeds_is_already_called_a_repeat(tmp_path):
    """The answer gives how many runs and how many distinct seeds; runs beyond the seeds are repeats of a seed, and
    are called that. naive ran seed 0 twice and seed 1 once: 3 runs, 2 seeds, one repeat, and the answer says its ±
    is partly a spread between repeats; efficient, one run per seed, has none."""
    for i, seed in enumerate([0, 0, 1]):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=seed, accuracy=0.9, n_samples=1000)
    for seed in (0, 1):
        fake_run(tmp_path / f"efficient_{seed}", model="efficient", seed=seed, accuracy=0.9, n_samples=1000)
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert (variants["naive"]["runs"], variants["naive"]["seeds"]) == ("3", "2")
    assert (variants["efficient"]["runs"], variants["efficient"]["seeds"]) == ("2", "2")
    assert "Some variants ran a seed more than once" in text


def test_the_accuracy_of_a_seed_run_three_times_is_the_mean_of_its_runs_before_pairing(tmp_path):
    """A comparison pairs the seeds both variants ran, a seed's repeats with their accuracies averaged (their epochs
    pooled). naive ran seed 0 three times (0.90, 0.90, 0.99: mean 0.93, where the median or the first run says
    0.90) and seed 1 once (0.91); efficient 0.90 at both. The differences are +3 and +1 points: +2.0 points, +20 of
    1000 articles, with scipy's t interval on them."""
    for i, (seed, accuracy) in enumerate([(0, 0.90), (0, 0.90), (0, 0.99), (1, 0.91)]):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=seed, accuracy=accuracy, n_samples=1000)
    for seed in (0, 1):
        fake_run(tmp_path / f"efficient_{seed}", model="efficient", seed=seed, accuracy=0.90, n_samples=1000)
    runs = runs_table(tmp_path)
    (row,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### Against efficient")
    differences = [np.mean([0.90, 0.90, 0.99]) - 0.90, 0.91 - 0.90]
    low, high = stats.t.interval(0.95, 1, loc=np.mean(differences), scale=stats.sem(differences))
    assert row["shared seeds"] == "2"
    assert row["val accuracy"] == (f"same within noise (+2.0 points, +20 of 1000 articles, 95% CI {100 * low:+.1f} "
                                   f"to {100 * high:+.1f})")


def test_pe_true_against_pe_false_counts_and_pairs_only_the_seeds_both_ran(tmp_path):
    """pe=True against pe=False is paired over the seeds both ran, and its "shared seeds" column counts them.
    pe=True ran seeds 0, 1 and 2 (0.90, 0.90, then 0.50), pe=False only 0 and 1 (0.90 at both, its seed 2
    failed, say): 2 shared seeds, identical at both; seed 2 is in neither the count nor the difference."""
    for seed, accuracy in enumerate([0.90, 0.90, 0.50]):
        fake_run(tmp_path / f"efficient_True_{seed}", pe=True, seed=seed, accuracy=accuracy, n_samples=1000)
    for seed in (0, 1):
        fake_run(tmp_path / f"efficient_False_{seed}", pe=False, seed=seed, accuracy=0.90, n_samples=1000)
    runs = runs_table(tmp_path)
    (row,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### pe=True against pe=False")
    assert (row["shared seeds"], row["val accuracy"], row["test accuracy"]) == (
        "2", "identical at both seeds", "identical at both seeds")


def test_the_rules_are_printed_under_the_comparisons_of_a_sweep_of_one_model_too(tmp_path):
    """The rules for reading the comparisons are printed under their tables. A sweep of one model over pe has no
    table against a reference, only pe=True against pe=False: the rules follow that table, word for word
    comparison.RULES."""
    for seed in (0, 1):
        for pe in (True, False):
            fake_run(tmp_path / f"efficient_{pe}_{seed}", pe=pe, seed=seed, accuracy=0.9, n_samples=1000)
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    assert "### Against" not in text
    table, rules = text.index("### pe=True against pe=False"), text.find(f"How to read the comparisons: {RULES}")
    assert 0 < table < rules < text.index("## Runs")


def test_the_epoch_time_of_a_seed_run_twice_is_the_median_of_both_runs_epochs_pooled(tmp_path):
    """Epoch time is compared as a ratio paired over the seeds both variants ran, a seed's repeats with their epochs
    pooled. naive ran seed 0 twice, 3 epochs of 1 s then 7 of 2 s; pooled, their median
    is 2 s: twice efficient's 1 s (the first run alone says 1×, the mean of the two runs' medians 1.5×)."""
    repeats = ([1.0] * 3, [2.0] * 7)
    for i, times in enumerate(repeats):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=0, accuracy=0.9, n_samples=1000, epoch_times=times)
    fake_run(tmp_path / "efficient", model="efficient", seed=0, accuracy=0.9, n_samples=1000, epoch_times=[1.0] * 6)
    runs = runs_table(tmp_path)
    (row,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### Against efficient")
    expected = np.median(np.concatenate(repeats)) / 1.0
    assert expected == 2.0 and row["epoch time"].split("×")[0].split()[-1].strip("(") == f"{expected:.2f}"


def test_cuda_peaks_get_their_column_and_panel(tmp_path):
    for seed in (0, 1):
        fake_run(tmp_path / f"run_{seed}", seed=seed,
                 stages={"fit": {"seconds": 1.0, "peak_memory_mb": 900.0, "peak_cuda_mb": 100.0 + 50 * seed}})
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    (row,) = md_table(text, "## The answer: bbc-news")
    assert row["peak CUDA in training, MB"] == "125 ± 35" and row["peak RSS in training, MB"] == "900 ± 0"
    figure = plot_memory(runs)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["CPU: peak RSS of the process while training, MB", "CUDA: peak allocated while training, MB"]
    assert [p.get_width() for p in figure.axes[1].patches] == [125.0]


def test_the_memory_panel_shows_each_variant_mean_and_range(tmp_path):
    for i, (model, pe, rss) in enumerate([("naive", False, 600.0), ("naive", False, 610.0), ("naive", False, 650.0),
                                          ("torch", True, 700.0)]):
        fake_run(tmp_path / f"{i}_run", model=model, pe=pe, seed=i, stages={"fit": {"peak_memory_mb": rss}})
    (ax,) = plot_memory(runs_table(tmp_path)).axes
    label_at = {tick: label.get_text() for tick, label in zip(ax.get_yticks(), ax.get_yticklabels(), strict=True)}
    widths = {label_at[p.get_y() + p.get_height() / 2]: p.get_width() for p in ax.patches}
    assert widths == {"naive, pe=False (3 runs)": 620.0, "torch, pe=True (1 run)": 700.0}
    # Whiskers from the lowest run to the highest (not symmetric about the mean).
    (whiskers,) = [c for c in ax.collections if len(c.get_segments()) == 2]
    ranges = {label_at[segment[0, 1]]: tuple(segment[:, 0]) for segment in whiskers.get_segments()}
    assert ranges == {"naive, pe=False (3 runs)": (600.0, 650.0), "torch, pe=True (1 run)": (700.0, 700.0)}
    assert ax.get_xlim()[1] > 700.0  # the longest bar ends inside the axes


def test_memory_is_said_not_to_compare_only_when_jobs_shared_a_process(tmp_path):
    """summary.md notes when the jobs shared one process (the basic launcher; joblib's workers run
    several jobs each), since a later job's peak RSS then holds what earlier jobs left behind; jobs that each had a
    process of their own (submitit_local, Slurm), and runs without a job record, are compared as they are."""
    def sweep(name: str, pids: list[int | None]) -> str:
        folder = tmp_path / name
        for num, pid in enumerate(pids):
            fake_run(folder / f"{num}_seed-{num}", seed=num, stages={"fit": {"peak_memory_mb": 600.0 + num}})
            if pid is not None:
                JobRecord(job=num, overrides=[f"seed={num}"], started_at="2026-01-01T00:00:00.000+00:00",
                          ended_at="2026-01-01T00:00:02.000+00:00", wall_seconds=2.0, host="node", pid=pid,
                          status="COMPLETED").write(folder / f"{num}_seed-{num}")
        write_summary(folder)
        return (folder / "summary.md").read_text()

    assert "3 jobs shared one process" in sweep("basic", [7, 7, 7])
    assert "3 jobs shared 2 processes" in sweep("joblib", [7, 8, 7])
    for alone in (sweep("submitit", [7, 8, 9]), sweep("no_records", [None, None, None])):
        assert "Peak RSS is the whole process's resident memory" in alone  # what the column measures...
        assert "jobs shared" not in alone and "does not compare" not in alone  # ...and no warning against it


def test_summary_md_gives_the_answer_then_the_sweeps_record_then_every_metric_by_group_then_every_run(tmp_path):
    """summary.md opens with the answer, one section per dataset, then the sweep's own record (its wall time and the
    jobs' wall times against their training seconds), every metric by group, and one row per run: its sections in
    that order, each once."""
    for num, model in enumerate(("efficient", "naive")):
        fake_run(tmp_path / f"{num}_model-{model}", model=model, n_samples=1000, epoch_times=[1.0 + num] * 6)
        JobRecord(job=num, overrides=[f"model={model}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:00:30.000+00:00", wall_seconds=30.0, host="node", pid=num,
                  status="COMPLETED").write(tmp_path / f"{num}_model-{model}")
    write_summary(tmp_path)
    headings = [line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith("## ")]
    assert headings == ["## The answer: bbc-news", "## The sweep",
                        "## By dataset, model, pe and varying settings: every metric (mean ± std over runs)",
                        "## Runs"]


def test_the_note_on_jobs_that_shared_a_process_says_how_to_compare_memory(tmp_path):
    """When the jobs shared one process their peak RSS does not compare variants, and the note says so and how to
    compare memory instead: run them with `hydra/launcher=submitit_local`, one fresh process per job, or use
    `scripts/benchmark.py`."""
    for num in (0, 1):
        fake_run(tmp_path / f"{num}_seed-{num}", seed=num, stages={"fit": {"peak_memory_mb": 600.0 + num}})
        JobRecord(job=num, overrides=[f"seed={num}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:00:02.000+00:00", wall_seconds=2.0, host="node", pid=7,
                  status="COMPLETED").write(tmp_path / f"{num}_seed-{num}")
    write_summary(tmp_path)
    answer = (tmp_path / "summary.md").read_text().split("## The answer: bbc-news", 1)[1].split("\n## ", 1)[0]
    (note,) = [line for line in answer.splitlines() if line.startswith("Peak RSS")]
    assert "2 jobs shared one process" in note and "does not compare variants" in note
    assert "`hydra/launcher=submitit_local`" in note and "`scripts/benchmark.py`" in note


def test_jobs_on_different_hosts_with_the_same_pid_did_not_share_a_process(tmp_path):
    """The note comes only when the jobs shared one process. A process is a pid on a host: Slurm jobs
    on two nodes may well have the same pid, each its own process (and its own peak RSS), while jobs with one pid on
    one host shared it."""
    for num, (host, pid) in enumerate([("node1", 4242), ("node2", 4242), ("node2", 4242)]):
        folder = tmp_path / f"{num}_seed-{num}"
        fake_run(folder, seed=num, stages={"fit": {"peak_memory_mb": 600.0}})
        JobRecord(job=num, overrides=[f"seed={num}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:00:02.000+00:00", wall_seconds=2.0, host=host, pid=pid,
                  status="COMPLETED").write(folder)
    write_summary(tmp_path)
    assert "3 jobs shared 2 processes" in (tmp_path / "summary.md").read_text()
    (tmp_path / "2_seed-2" / "job.json").unlink()  # the two left ran on two nodes: nothing shared
    write_summary(tmp_path)
    assert "jobs shared" not in (tmp_path / "summary.md").read_text()


def scatter_points(ax) -> np.ndarray:
    return np.concatenate([c.get_offsets() for c in ax.collections])


def assert_readable(ax, points):
    for axis, values, (low, high) in (("x", points[:, 0], ax.get_xlim()), ("y", points[:, 1], ax.get_ylim())):
        labels = [t.get_text() for t in getattr(ax, f"get_{axis}ticklabels")()]
        ticks = getattr(ax, f"get_{axis}ticks")()
        assert all(float(label) == pytest.approx(tick) for label, tick in zip(labels, ticks, strict=True)), labels
        assert not getattr(ax, f"get_{axis}ticklabels")(minor=True)  # no 8×10⁰-style minor labels
        assert ticks.min() <= values.min() and values.max() <= ticks.max()  # the ticks bracket every point
        assert low < values.min() and values.max() < high  # every point strictly inside the axes


def test_accuracy_vs_time_reads_at_a_glance(tmp_path):
    """The issue's sweep: 8 to 19 training seconds, where matplotlib's log axis read 8×10⁰, 9×10⁰, 10¹ and put
    two variants past the last tick. The legend, outside the axes, names each variant, its pe and its number of runs:
    laid out, the legend's box and the axes' do not meet."""
    for i, (model, pe, seconds, accuracy) in enumerate([("efficient", True, 8.1, 0.92), ("naive", True, 12.4, 0.925),
                                                        ("torch", True, 18.9, 0.924), ("efficient", False, 8.3, 0.95)]):
        fake_run(tmp_path / f"{i}_run", model=model, pe=pe, seed=0, accuracy=accuracy, epoch_times=[seconds])
    figure = plot_accuracy_vs_time(runs_table(tmp_path))
    (ax,) = figure.axes
    assert ax.get_xscale() == "linear"
    assert_readable(ax, scatter_points(ax))
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert labels == ["efficient, pe=False (1 run)", "efficient, pe=True (1 run)", "naive, pe=True (1 run)",
                      "torch, pe=True (1 run)"]
    figure.draw_without_rendering()  # the layout as savefig makes it
    (legend,) = figure.legends
    assert not legend.get_window_extent().overlaps(ax.get_window_extent())
    # Colour by model, marker by pe: a circle for pe=True, a square for pe=False.
    from matplotlib.markers import MarkerStyle

    def marker(name):
        style = MarkerStyle(name)
        return style.get_path().transformed(style.get_transform()).vertices.tolist()

    points = {c.get_label(): c for c in ax.collections}
    assert {label: points[label].get_paths()[0].vertices.tolist() for label in labels} == {
        label: marker("o" if "pe=True" in label else "s") for label in labels}
    colours = {label: tuple(points[label].get_facecolor()[0]) for label in labels}
    assert colours["efficient, pe=False (1 run)"] == colours["efficient, pe=True (1 run)"]
    assert len({colours[label] for label in labels[1:]}) == 3


def test_accuracy_vs_time_over_decades_has_plain_log_ticks(tmp_path):
    for i, seconds in enumerate([0.3, 4.0, 180.0]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.9 + i / 100, epoch_times=[seconds])
    fake_run(tmp_path / "3_tfidf", model="tfidf-words", pe=None, accuracy=1.0, epoch_times=[0.05])
    (ax,) = plot_accuracy_vs_time(runs_table(tmp_path)).axes
    assert ax.get_xscale() == "log"
    assert_readable(ax, scatter_points(ax))
    assert [t.get_text() for t in ax.get_xticklabels()][:3] == ["0.05", "0.1", "0.2"]


@pytest.mark.parametrize(("slowest", "scale"), [(9.5, "linear"), (10.5, "log")])
def test_accuracy_vs_time_takes_a_log_axis_once_the_times_span_more_than_10x(tmp_path, slowest, scale):
    """Ticks are plain numbers that bracket every point, on a log axis with 1-2-5 ticks only when the times span more
    than 10×: 1 to 9.5 training seconds stay linear, 1 to 10.5 go on a log axis."""
    for i, seconds in enumerate([1.0, 3.0, slowest]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.9, epoch_times=[seconds])
    (ax,) = plot_accuracy_vs_time(runs_table(tmp_path)).axes
    assert ax.get_xscale() == scale
    assert_readable(ax, scatter_points(ax))
    assert ("log scale" in ax.get_xlabel()) == (scale == "log")


def test_accuracy_vs_time_plots_each_runs_test_accuracy_against_its_training_seconds(tmp_path):
    """accuracy_vs_time.png plots test accuracy against training seconds, one point per run (not validation
    accuracy, not the median epoch: runs of several epochs, and validation apart from test)."""
    runs = [("efficient", 0, [2.0, 3.0, 4.0], 0.80, 0.91), ("efficient", 1, [2.5, 2.5, 2.5], 0.82, 0.93),
            ("naive", 0, [6.0, 7.0], 0.70, 0.88)]
    for i, (model, seed, times, val, test) in enumerate(runs):
        fake_run(tmp_path / f"{i}_run", model=model, seed=seed, accuracy=val, test_accuracy=test, epoch_times=times)
    (ax,) = plot_accuracy_vs_time(runs_table(tmp_path)).axes
    points = np.array(sorted(map(tuple, scatter_points(ax).tolist())))
    expected = np.array(sorted((sum(times), test) for _, _, times, _, test in runs))
    np.testing.assert_allclose(points, expected)
    assert ax.get_ylabel() == "test accuracy" and ax.get_xlabel().startswith("training seconds")


def test_loss_curves_are_the_mean_with_the_spread_as_a_band(tmp_path):
    """Each loss curve is the mean over the variant's runs, with the lowest-to-highest run as a band: naive pe=False
    over three runs, pe=True over two (a band from two runs too), and torch's single run a line without one."""
    # Three runs, one far above the others: their mean, not their median (the two agree for two runs).
    curves = [[(1.0, 1.2), (0.6, 1.0), (0.4, 0.9)], [(1.2, 1.4), (0.8, 1.1), (0.5, 1.0)],
              [(3.0, 3.2), (2.0, 2.6), (1.5, 2.2)]]
    for seed, losses in enumerate(curves):
        fake_run(tmp_path / f"{seed}_run", model="naive", seed=seed, epoch_times=[1.0] * 3, losses=losses)
    two = [[(1.0, 1.1), (0.5, 0.9), (0.5, 0.9)], [(2.0, 2.1), (1.5, 1.9), (1.0, 1.2)]]
    for seed, losses in enumerate(two, start=3):
        fake_run(tmp_path / f"{seed}_run", model="naive", pe=True, seed=seed, epoch_times=[1.0] * 3, losses=losses)
    fake_run(tmp_path / "5_run", model="torch", epoch_times=[1.0] * 3)
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    assert not [band for band in figure.axes[1].collections if band.get_gid()]  # torch: one run, no band
    ax = figure.axes[0]
    lines = {line.get_gid(): line for line in ax.get_lines() if line.get_gid()}
    train = np.array([[t for t, _ in c] for c in curves])
    assert lines["pe=False|train_loss"].get_ydata() == pytest.approx(train.mean(axis=0))
    val = np.array([[v for _, v in c] for c in curves])
    assert lines["pe=False|val_loss"].get_ydata() == pytest.approx(val.mean(axis=0))
    assert (lines["pe=False|train_loss"].get_linestyle(), lines["pe=False|val_loss"].get_linestyle()) == ("-", "--")
    bands = {band.get_gid(): band for band in ax.collections if band.get_gid()}
    assert set(bands) == {f"pe={pe}|{column}" for pe in (False, True) for column in ("train_loss", "val_loss")}
    two_train = np.array([[t for t, _ in c] for c in two])
    for gid, runs in (("pe=False|train_loss", train), ("pe=True|train_loss", two_train)):
        vertices = bands[gid].get_paths()[0].vertices
        for epoch, (low, high) in enumerate(zip(runs.min(axis=0), runs.max(axis=0), strict=True), start=1):
            assert sorted(set(vertices[vertices[:, 0] == epoch][:, 1])) == pytest.approx([low, high])
    labels = [t.get_text() for legend in figure.legends for t in legend.get_texts()]
    assert labels[:2] == ["pe=False", "pe=True"]


def test_loss_curves_have_one_panel_per_model_each_drawing_only_its_own_runs(tmp_path):
    """loss_curves.png draws train (solid) and val (dashed) loss per epoch, one panel per model, one colour per pe:
    each panel is titled with its model and draws the mean over that model's runs alone, in the colour
    of each pe value, the same colour for a pe value in every panel."""
    curves = {("efficient", False): [(1.0, 1.2), (0.6, 1.0)], ("efficient", True): [(1.1, 1.3), (0.7, 1.1)],
              ("naive", False): [(3.0, 3.2), (2.0, 2.6)]}
    for i, ((model, pe), losses) in enumerate(curves.items()):
        fake_run(tmp_path / f"{i}_run", model=model, pe=pe, epoch_times=[1.0] * 2, losses=losses)
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    panels = {ax.get_title(): ax for ax in figure.axes}
    assert set(panels) == {"efficient", "naive"}
    drawn = {(title, line.get_gid()): line for title, ax in panels.items() for line in ax.get_lines() if line.get_gid()}
    expected = {(model, f"pe={pe}|{column}"): [row[c] for row in curve]
                for (model, pe), curve in curves.items() for c, column in enumerate(("train_loss", "val_loss"))}
    assert set(drawn) == set(expected)
    for key, line in drawn.items():
        assert line.get_ydata() == pytest.approx(expected[key]), key
    colours = {key: line.get_color() for key, line in drawn.items()}
    assert colours["efficient", "pe=False|train_loss"] == colours["naive", "pe=False|val_loss"]
    assert colours["efficient", "pe=False|train_loss"] != colours["efficient", "pe=True|train_loss"]


def test_loss_curves_keep_one_colour_per_variant_in_every_panel_when_the_sweep_varies_another_setting(tmp_path):
    """The loss curves take one colour per pe, per pe and setting when the sweep varies another setting: with two
    models at two dropouts, each dropout has one colour in both panels, the legend's, and the two colours differ (the
    second panel once drew both in a third colour, one the legend did not have)."""
    for model in ("efficient", "naive"):
        for dropout in (0.1, 0.3):
            fake_run(tmp_path / f"{model}_{dropout}", model=model, model__dropout=dropout)
    figure = plot_loss_curves(tmp_path, runs_table(tmp_path))
    drawn = {}
    for ax in figure.axes:
        for line in ax.get_lines():
            if line.get_gid():
                drawn.setdefault(line.get_gid().split("|")[0], set()).add(line.get_color())
    legend = {text.get_text(): handle.get_color()
              for text, handle in zip(figure.legends[0].get_texts(), figure.legends[0].legend_handles, strict=True)
              if "dropout" in text.get_text()}
    assert set(drawn) == set(legend) and len(legend) == 2, (drawn, legend)
    for label, colours in drawn.items():
        assert colours == {legend[label]}, label
    assert len(set(legend.values())) == 2


def test_counts_are_whole_numbers_beside_a_failed_run(tmp_path):
    fake_run(tmp_path / "0_run", epoch_times=[1.0] * 12)
    failed = tmp_path / "1_failed"
    (failed / ".hydra").mkdir(parents=True)
    (failed / ".hydra" / "config.yaml").write_text("model: {attention: naive}\npe: false\nseed: 1\n")
    (failed / "error.txt").write_text("boom\n")
    write_summary(tmp_path)
    rows = {r["status"]: r for r in md_table((tmp_path / "summary.md").read_text(), "## Runs")}
    assert (rows["ok"]["epochs"], rows["ok"]["params"], rows["ok"]["seed"]) == ("12", "10", "0")
    assert (rows["failed"]["epochs"], rows["failed"]["seed"]) == ("", "1")
    assert pd.read_csv(tmp_path / "summary.csv", dtype=str)["epochs"].tolist() == ["12", np.nan]


def test_a_study_folder_above_its_trials_is_no_run_of_its_own(tmp_path):
    """`scripts/summarize.py outputs/search/<study>` tables the study's trials. python -m search leaves
    Hydra's .hydra/ in the study folder, above its trial folders: the summary holds the trials, not the study folder
    as a failed run ("3 runs (2 ok, 1 failed)", as it once said). A failed trial beside them is still a failed run."""
    study = tmp_path / "study"
    (study / ".hydra").mkdir(parents=True)
    (study / ".hydra" / "config.yaml").write_text("n_trials: 3\n")
    fake_run(study / "trial_000", seed=0)
    fake_run(study / "trial_001", seed=1)
    (study / "trial_002").mkdir()
    (study / "trial_002" / "error.txt").write_text("boom\n")
    write_summary(study)
    rows = md_table((study / "summary.md").read_text(), "## Runs")
    assert [(r["run folder"], r["status"]) for r in rows] == [("trial_000", "ok"), ("trial_001", "ok"),
                                                            ("trial_002", "failed")]
    assert "3 runs (2 ok, 1 failed)" in (study / "summary.md").read_text()

def test_summary_md_shows_a_drawn_setting_to_4_significant_digits_and_summary_csv_every_digit(tmp_path):
    """summary.csv's setting columns are read from each run's config.yaml, with every digit; summary.md shows a long
    number, such as a learning rate a search drew, to 4 significant digits."""
    drawn = [0.11587950184865041, 0.0010005268542378305, 0.25]
    for i, value in enumerate(drawn):
        fake_run(tmp_path / f"{i}_run", seed=i, model__dropout=value)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    shown = ["0.1159", "0.001001", "0.25"]
    assert [r["model.dropout"] for r in md_table(text, "## Runs")] == shown
    assert sorted(r["model.dropout"] for r in md_table(text, "## By dataset")) == sorted(shown)
    assert sorted(r["model.dropout"] for r in md_table(text, "## The answer")) == sorted(shown)
    assert pd.read_csv(tmp_path / "summary.csv")["model.dropout"].tolist() == drawn

def multirun_config(sweep, job_dir, num, mode=RunMode.MULTIRUN):
    return OmegaConf.create({"hydra": {
        "mode": mode, "runtime": {"output_dir": str(job_dir)}, "job": {"num": num},
        "overrides": {"task": [f"seed={num}"]}, "sweep": {"dir": str(sweep)},
        "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}}})


def test_the_table_by_group_gives_each_metric_its_own_column(tmp_path):
    """summary.md gives every metric by group in a column of its own: train s the runs' training seconds (all
    epochs), job s their jobs' wall times, median epoch s their median epochs, s to val acc x the times to each
    validation accuracy level, each a mean ± std over the group's runs."""
    runs = [([1.0, 2.0, 6.0], 30.0, {"0.9": 3.0}), ([2.0, 3.0, 3.0], 40.0, {"0.9": 5.0})]
    for seed, (times, wall, reached) in enumerate(runs):
        folder = tmp_path / f"{seed}_seed-{seed}"
        fake_run(folder, seed=seed, epoch_times=times)
        edit_metrics(folder, time_to_accuracy=reached)
        JobRecord(job=seed, overrides=[f"seed={seed}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:01:00.000+00:00", wall_seconds=wall, host="node", pid=seed,
                  status="COMPLETED").write(folder)
    write_summary(tmp_path)
    (row,) = md_table((tmp_path / "summary.md").read_text(), "## By dataset")

    def pm(values, digits):
        return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"

    assert row["train s"] == pm([sum(times) for times, _, _ in runs], 1)  # 9 and 8 s
    assert row["job s"] == pm([30.0, 40.0], 1)
    assert row["median epoch s"] == pm([np.median(times) for times, _, _ in runs], 2)
    assert row["s to val acc 0.9"] == pm([3.0, 5.0], 1)


def test_the_share_of_training_in_the_jobs_wall_time_counts_only_the_runs_that_have_one(tmp_path):
    """The sweep's own record sets the jobs' wall times against their training seconds, like against like.
    Summarised together (scripts/summarize.py on a parent folder), a sweep's job of 12 s wall time that
    trained 10 s and a single run of 100 s with no job.json: the share is 10 of 12 s, not 110 of 12 s."""
    job = tmp_path / "sweep" / "0_seed-0"
    fake_run(job, epoch_times=[5.0, 5.0])
    JobRecord(job=0, overrides=["seed=0"], started_at="2026-01-01T00:00:00.000+00:00",
              ended_at="2026-01-01T00:00:12.000+00:00", wall_seconds=12.0, host="node", pid=1,
              status="COMPLETED").write(job)
    fake_run(tmp_path / "runs" / "single", seed=1, epoch_times=[50.0, 50.0])
    write_summary(tmp_path)
    assert ("The jobs' own wall times add up to 12.0 s; training passes took 10.0 s of them (83%)"
            in (tmp_path / "summary.md").read_text())


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
