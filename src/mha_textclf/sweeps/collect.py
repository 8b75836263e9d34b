"""A sweep's runs as tables: every run folder below a folder, one row per run (its metrics, state, times and the
settings that vary), and each group of runs of the same settings over its seeds."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from mha_textclf.data.corpus import dataset_name
from mha_textclf.runs import files
from mha_textclf.runs.lifecycle import HOW_TO_CONTINUE, INTERRUPTED, RUNNING, folder_state
from mha_textclf.runs.metrics import read_metrics
from mha_textclf.settings import COLUMNS, flat, is_training_setting
from mha_textclf.sweeps.record import JobRecord

RUN_COLUMNS = ["dataset", "model", "pe", "seed", "status", "val_accuracy", "val_macro_f1", "test_accuracy",
               "test_macro_f1", "epochs", "train_seconds", "job_seconds", "median_epoch_seconds", "tokens_per_second",
               "peak_rss_mb", "peak_cuda_mb", "params", "val_samples", "test_samples", "device", "run_dir"]


# Counts stay whole numbers even in a column with a blank (a failed run): 89605, not 89605.0.
INTEGER_COLUMNS = ["seed", "epochs", "params", "val_samples", "test_samples"]


GROUP_METRICS = ["val_accuracy", "test_accuracy", "val_macro_f1", "test_macro_f1", "train_seconds",
                 "median_epoch_seconds", "tokens_per_second", "peak_rss_mb", "peak_cuda_mb", "job_seconds"]


def find_runs(folder: Path) -> list[Path]:
    """Every run folder below `folder`: finished ones hold metrics.json, others at least config.yaml, error.txt or
    Hydra's .hydra/."""
    marked = {p.parent for name in (files.METRICS, files.CONFIG, files.ERROR, files.HYDRA)
              for p in folder.rglob(name) if p.parent.name != files.HYDRA}
    # Runs do not nest: a folder above runs is a sweep or a study, even where Hydra left its .hydra/ (a study's).
    runs = {p for p in marked if not any(p in other.parents for other in marked)}
    return sorted(runs, key=lambda p: (len(p.relative_to(folder).parts), _job_number(p), str(p)))


def _job_number(run_dir: Path) -> int:
    head = run_dir.name.split("_")[0]
    return int(head) if head.isdigit() else -1


SECONDS_TO = "seconds_to_"  # + a validation accuracy level: a column of training seconds until it was first reached


# What RunMetrics.read raises on a metrics.json that is not one: a failed run in the summary, never a crash of it.
UNREADABLE = (ValueError, TypeError, KeyError)


def run_settings(run_dir: Path) -> dict[str, object]:
    """The run's resolved settings, flattened (`trainer.lr`), from the config.yaml it wrote (Hydra's unresolved
    .hydra/config.yaml for a run that failed before writing it), without the columns and what is not trained."""
    config = files.read_config(run_dir, hydra_fallback=True)
    # A value the run decided from its corpus (metrics.json's `adapted`: a vocabulary size per seed's training split)
    # is grouped as it was asked for, null, or the seeds of one command would never be averaged together.
    try:
        adapted = read_metrics(run_dir).adapted
    except (OSError, *UNREADABLE):
        adapted = {}  # no metrics.json yet, or one run_row reports as unreadable
    return {k: (None if k in adapted else v) for k, v in flat(config or {}).items()
            if k not in COLUMNS and is_training_setting(k)}


def adapted_values(run_dir: Path) -> dict[str, object]:
    """The values the run decided from its corpus (metrics.json's `adapted`), as its config.yaml holds them: what
    the tables show beside the null that groups the run with its seeds."""
    try:
        adapted = read_metrics(run_dir).adapted
    except (OSError, *UNREADABLE):
        return {}
    config = flat(files.read_config(run_dir) or {})
    return {key: config[key] for key in adapted if key in config}


def epoch_seconds(run_dir: Path) -> np.ndarray:
    """The run's training seconds per epoch (history.csv); empty for a run without epochs (a baseline)."""
    history = files.read_history(run_dir)
    return np.array([]) if history is None else history["train_seconds"].to_numpy(dtype=float)


def run_row(run_dir: Path, root: Path) -> dict:
    """One row of the runs table. A folder without metrics.json is a failed run; error.txt says why, if present."""
    job = JobRecord.read(run_dir)
    row = dict.fromkeys(RUN_COLUMNS) | {"run_dir": str(run_dir.relative_to(root)) or ".",
                                        "job_seconds": job.wall_seconds if job else None}
    # status.json knows what metrics.json cannot: a run killed (or still running) since its last report.
    state = folder_state(run_dir)
    if not (run_dir / files.METRICS).exists() or (state in (RUNNING, INTERRUPTED)
                                                   and files.read_status(run_dir).get("state") == RUNNING):
        config = files.read_config(run_dir, hydra_fallback=True) or {}
        error = run_dir / files.ERROR
        path = (config.get("data") or {}).get("path")
        return row | {"dataset": dataset_name(path) if path and "${" not in path else None,
                      "model": (config.get("model") or {}).get("attention"), "pe": config.get("pe"),
                      "seed": config.get("seed"), "status": state if state in (RUNNING, INTERRUPTED) else "failed",
                      "error": "running now" if state == RUNNING else
                      f"killed before it finished: {HOW_TO_CONTINUE}" if state == INTERRUPTED
                      else " ".join(error.read_text().split()) if error.exists() else
                      "no metrics.json and no error.txt"}
    try:
        m = read_metrics(run_dir)
    except UNREADABLE as e:
        return row | {"status": "failed", "error": f"unreadable metrics.json: {e}"}
    epochs = epoch_seconds(run_dir)
    fit = m.stages.get("fit", {})  # the training stage: epochs and their validation
    return row | {
        "dataset": m.dataset, "model": m.model, "pe": m.pe, "seed": m.seed,
        "status": "interrupted" if m.interrupted_by else "ok",
        "val_accuracy": m.val.accuracy, "val_macro_f1": m.val.macro_f1,
        "test_accuracy": m.test.accuracy, "test_macro_f1": m.test.macro_f1,
        "epochs": m.epochs, "train_seconds": m.train_seconds,
        "median_epoch_seconds": float(np.median(epochs)) if len(epochs) else math.nan,
        "tokens_per_second": m.tokens_per_second, "params": m.params, "device": m.device,
        "peak_rss_mb": fit.get("peak_memory_mb"), "peak_cuda_mb": fit.get("peak_cuda_mb"),
        "val_samples": m.val.n_samples, "test_samples": m.test.n_samples,
    } | {f"{SECONDS_TO}{level}": math.nan if seconds is None else seconds
         for level, seconds in m.time_to_accuracy.items()}


def runs_table(folder: Path) -> pd.DataFrame:
    """One row per run; every setting that differs between runs (say model.dropout=0.1,0.3) becomes a column."""
    folder = Path(folder)
    run_dirs = find_runs(folder)
    rows = [run_row(run_dir, folder) for run_dir in run_dirs]
    settings = [run_settings(run_dir) for run_dir in run_dirs]
    keys = sorted({k for s in settings for k in s})
    # A key varies when the runs that have it disagree (a baseline has no model.d_model: that is no difference).
    varying = [k for k in keys if len({str(s[k]) for s in settings if k in s}) > 1]
    levels = sorted({k for row in rows for k in row if k.startswith(SECONDS_TO)},
                    key=lambda k: float(k.removeprefix(SECONDS_TO)))
    table = pd.DataFrame(rows, columns=[*RUN_COLUMNS, *levels, "error"])
    for column in INTEGER_COLUMNS:
        table[column] = pd.to_numeric(table[column]).astype("Int64")
    for column in GROUP_METRICS:
        table[column] = pd.to_numeric(table[column]).astype(float)
    for position, key in enumerate(varying, start=RUN_COLUMNS.index("seed") + 1):
        table.insert(position, key, [str(s[key]) if key in s else "" for s in settings])
    return table


def setting_columns(runs: pd.DataFrame) -> list[str]:
    """The columns `runs_table` added for overrides that vary across runs."""
    return [c for c in runs.columns if c not in RUN_COLUMNS and c != "error" and not c.startswith(SECONDS_TO)]


def time_columns(runs: pd.DataFrame) -> list[str]:
    """The seconds_to_<level> columns, lowest level first."""
    return [c for c in runs.columns if c.startswith(SECONDS_TO)]


def setting_text(value: str) -> str:
    """A setting as the tables and plots show it: a number a search drew (0.011587950184865041) to 4 significant
    digits, anything typed short (3e-3, 0.75, 128, [title, body]) as it is. summary.csv keeps every digit."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return value if len(str(value)) <= 8 or number.is_integer() else f"{number:.4g}"


# pe as the tables and plots show it: True or False for a trained run, nothing for a baseline, which has none.
PE_TEXT = {True: "True", False: "False"}
NO_PE = ""


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs, with pe as text (PE_TEXT, and NO_PE for baselines, so that they group too)."""
    done = runs[runs["status"] == "ok"].copy()
    done["pe"] = done["pe"].map(lambda pe: PE_TEXT.get(pe, NO_PE))
    return done


def groups_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over the runs of each (dataset, model, pe, varying settings) among finished runs, how many runs
    and how many distinct seeds it has, and its median epoch time and tokens/s relative to the fastest group on its
    dataset. Runs are only averaged with runs of the same settings."""
    done = finished(runs)
    if done.empty:
        return pd.DataFrame()
    grouped = done.groupby(["dataset", "model", "pe", *setting_columns(runs)], sort=True, dropna=False)
    # Time to an accuracy: mean ± std over the runs that reached it, and how many did.
    table = grouped[GROUP_METRICS + time_columns(runs)].agg(["mean", "std", "count"])
    table.columns = [f"{metric}_{stat}" for metric, stat in table.columns]
    table = table.drop(columns=[c for c in table.columns if c.endswith("_count") and SECONDS_TO not in c])
    table.insert(0, "runs", grouped.size())
    table.insert(1, "seeds", grouped["seed"].nunique())  # repeats of a seed are runs, not seeds
    table.insert(2, "epochs_max", grouped["epochs"].max())  # 0: a baseline, which has no epochs to time
    table = table.reset_index()
    by_dataset = table.groupby("dataset", dropna=False)
    table["epoch_time_vs_fastest"] = (table["median_epoch_seconds_mean"]
                                      / by_dataset["median_epoch_seconds_mean"].transform("min"))
    table["tokens_per_second_vs_fastest"] = (table["tokens_per_second_mean"]
                                             / by_dataset["tokens_per_second_mean"].transform("max"))
    return table
