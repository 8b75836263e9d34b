"""Sweeps: failed jobs are reported and the rest summarised, parallel launchers work. (The tokenizer cache's safety
under parallel jobs: test_tokenizer.py.)"""

import importlib
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest
import yaml

from conftest import REPO, compose_config, require, run_train, write_jsonl
from mha_textclf.reports import RunMetrics, SplitMetrics
from mha_textclf.summary import groups_table, plot_loss_curves, runs_table, summary_markdown, write_summary

TINY = ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]"]


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

    # scripts/summarize.py gives the same summary for the same folder.
    (sweep / "summary.csv").unlink()
    result = subprocess.run([sys.executable, "scripts/summarize.py", str(sweep)], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "## Failed runs" in result.stdout and "has a single class" in result.stdout
    pd.testing.assert_frame_equal(pd.read_csv(sweep / "summary.csv"), runs)


def fake_run(folder, model="efficient", seed=0, accuracy=0.5, epoch_seconds=1.0, pe=False, dataset="bbc-news",
             **settings):
    """A finished run folder as train writes it: metrics.json, config.yaml (resolved settings), history.csv."""
    folder.mkdir(parents=True)
    split = SplitMetrics(accuracy=accuracy, macro_f1=accuracy, loss=1.0, n_samples=10)
    RunMetrics(model=model, pe=pe, seed=seed, dataset=dataset, splits={}, train_samples=20, val=split, test=split,
               class_names=["a", "b"], params=10,
               train_seconds=2 * epoch_seconds, eval_seconds=0.1, epochs=2, best_epoch=2, stopped_early=False,
               interrupted_by=None, tokens_per_second=1.0, vocab_size=100, device="cpu",
               threads=1).write(folder / "metrics.json")
    config = {"model": {"attention": model, "dropout": 0.0}, "seed": seed, "pe": False,
              "tokenizer": {"base": None, "cache_dir": f"/cache/of/{folder.name}"},
              "data": {"path": f"/data/{dataset}"}}
    for key, value in settings.items():
        group, name = key.split("__")
        config[group][name] = value
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "history.csv").write_text(f"epoch,train_loss,val_loss,train_seconds\n1,1.0,1.1,{epoch_seconds}\n"
                                        f"2,0.5,0.9,{epoch_seconds}\n")


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


def test_datasets_are_compared_side_by_side(tmp_path):
    for i, (dataset, seconds) in enumerate([("bbc-news", 10.0), ("bbc-news", 10.0), ("r8", 4.0), ("r8", 2.0)]):
        fake_run(tmp_path / f"{i}_run", seed=i % 2, dataset=dataset, accuracy=0.9 - i / 10, epoch_seconds=seconds)
    groups = groups_table(runs_table(tmp_path)).set_index("dataset")
    assert groups["runs"].tolist() == [2, 2] and "data.path" not in groups.columns  # the name stands for the path
    assert groups.loc["r8", "val_accuracy_mean"] == pytest.approx(0.65)
    assert groups["epoch_time_vs_fastest"].tolist() == [1.0, 1.0]  # each against its own dataset's fastest


def test_baselines_without_pe_form_groups_too(tmp_path):
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_tfidf", model="tfidf-words", seed=seed, pe=None)
        (tmp_path / f"{seed}_tfidf" / "history.csv").unlink()  # a baseline has no epochs
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    assert groups["model"].tolist() == ["tfidf-words"] and groups["runs"].tolist() == [2]
    group_row = summary_markdown(runs, groups).split("## Runs")[0].splitlines()[-2]
    assert "nan" not in group_row and "None" not in group_row and "| tfidf-words |  | 2 |" in group_row


def test_runs_with_different_settings_are_never_averaged_together(tmp_path):
    for i, dropout in enumerate([0.1, 0.1, 0.3, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.5 + i / 10, model__dropout=dropout)
    runs = runs_table(tmp_path)
    assert "model.dropout" in runs.columns and "tokenizer.cache_dir" not in runs.columns  # only what varies
    groups = groups_table(runs).set_index("model.dropout")
    assert groups.loc["0.1", "runs"] == groups.loc["0.3", "runs"] == 2
    assert groups.loc["0.3", "val_accuracy_mean"] == pytest.approx(0.75)


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
        futures = {launcher: pool.submit(run_train, "-m", f"hydra/launcher={launcher}", *extra,
                                         "model=efficient,torch", *TINY, f"hydra.sweep.dir={sweeps[launcher]}",
                                         data_dir=data_dir)
                   for launcher, (_, extra) in LAUNCHERS.items()}
        return {launcher: (future.result(), sweeps[launcher]) for launcher, future in futures.items()}


@pytest.mark.slow
@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_parallel_launchers_run_a_two_job_sweep(launcher, launched):
    result, sweep = launched[launcher]
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    runs = pd.read_csv(sweep / "summary.csv")
    assert sorted(runs["model"]) == ["efficient", "torch"] and set(runs["status"]) == {"ok"}
    threads = {RunMetrics.read(sweep / d / "metrics.json").threads for d in runs["run_dir"]}
    expected = max(1, (os.cpu_count() or 1) // 2) if launcher == "joblib" else 1
    assert threads == {expected}  # jobs share the cores instead of oversubscribing them


def test_slurm_config_composes_over_submitit():
    require_plugin("hydra_submitit_launcher")
    cfg = compose_config(["hydra/launcher=slurm", "hydra.launcher.partition=gpu"], hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
    assert cfg.hydra.launcher.partition == "gpu" and cfg.hydra.launcher.cpus_per_task == 4


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
    for seed, seconds in enumerate([{"0.85": 4.0, "0.9": 8.0}, {"0.85": 6.0, "0.9": None}]):
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
    assert "| 5.0 ± 1.4 | 8.0 (1 of 2 runs) |" in text.read_text()
