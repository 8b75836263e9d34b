"""Sweep summaries: the answer first (each variant over its seeds, then paired comparisons against a reference
variant and of pe=true against pe=false, with intervals and verdicts), the sweep's own times, every metric by group,
one row per run; and the plots that go with them.

Used by the end-of-sweep Hydra callback and by `scripts/summarize.py`, for any folder that contains run folders.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import yaml
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from mha_textclf.comparison import RULES, accuracy_verdict, paired_t, speed_ratio, speed_verdict
from mha_textclf.data import dataset_name
from mha_textclf.reports import RunMetrics, whole_epochs
from mha_textclf.run_folder import INTERRUPTED, RUNNING, folder_state, read_status
from mha_textclf.settings import COLUMNS, flat, is_training_setting
from mha_textclf.sweep import JobRecord, SweepRecord

RUN_COLUMNS = ["dataset", "model", "pe", "seed", "status", "val_accuracy", "val_macro_f1", "test_accuracy",
               "test_macro_f1", "epochs", "train_seconds", "job_seconds", "median_epoch_seconds", "tokens_per_second",
               "peak_rss_mb", "peak_cuda_mb", "params", "val_samples", "test_samples", "device", "run_dir"]
# Counts stay whole numbers even in a column with a blank (a failed run): 89605, not 89605.0.
INTEGER_COLUMNS = ["seed", "epochs", "params", "val_samples", "test_samples"]
GROUP_METRICS = ["val_accuracy", "test_accuracy", "val_macro_f1", "test_macro_f1", "train_seconds",
                 "median_epoch_seconds", "tokens_per_second", "peak_rss_mb", "peak_cuda_mb", "job_seconds"]
REFERENCE = "efficient"  # what the other variants are compared against, when the sweep has it


def find_runs(folder: Path) -> list[Path]:
    """Every run folder below `folder`: finished ones hold metrics.json, others at least config.yaml, error.txt or
    Hydra's .hydra/."""
    marked = {p.parent for name in ("metrics.json", "config.yaml", "error.txt", ".hydra") for p in folder.rglob(name)
              if p.parent.name != ".hydra"}
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
    path = run_dir / "config.yaml"
    path = path if path.exists() else run_dir / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text()) if path.exists() else {}
    # A value the run decided from its corpus (metrics.json's `adapted`: a vocabulary size per seed's training split)
    # is grouped as it was asked for, null, or the seeds of one command would never be averaged together.
    try:
        adapted = RunMetrics.read(run_dir / "metrics.json").adapted
    except (OSError, *UNREADABLE):
        adapted = {}  # no metrics.json yet, or one run_row reports as unreadable
    return {k: (None if k in adapted else v) for k, v in flat(config or {}).items()
            if k not in COLUMNS and is_training_setting(k)}


def epoch_seconds(run_dir: Path) -> np.ndarray:
    """The run's training seconds per epoch (history.csv); empty for a run without epochs (a baseline)."""
    path = run_dir / "history.csv"
    return pd.read_csv(path)["train_seconds"].to_numpy(dtype=float) if path.exists() else np.array([])


def run_row(run_dir: Path, root: Path) -> dict:
    """One row of the runs table. A folder without metrics.json is a failed run; error.txt says why, if present."""
    job = JobRecord.read(run_dir)
    row = dict.fromkeys(RUN_COLUMNS) | {"run_dir": str(run_dir.relative_to(root)) or ".",
                                        "job_seconds": job.wall_seconds if job else None}
    metrics_path = run_dir / "metrics.json"
    # status.json knows what metrics.json cannot: a run killed (or still running) since its last report.
    state = folder_state(run_dir)
    if not metrics_path.exists() or (state in (RUNNING, INTERRUPTED) and read_status(run_dir).get("state") == RUNNING):
        config_path = next((p for p in (run_dir / "config.yaml", run_dir / ".hydra" / "config.yaml") if p.exists()),
                           None)
        config = yaml.safe_load(config_path.read_text()) if config_path else {}
        error = run_dir / "error.txt"
        path = (config.get("data") or {}).get("path")
        return row | {"dataset": dataset_name(path) if path and "${" not in path else None,
                      "model": (config.get("model") or {}).get("attention"), "pe": config.get("pe"),
                      "seed": config.get("seed"), "status": state if state in (RUNNING, INTERRUPTED) else "failed",
                      "error": "running now" if state == RUNNING else
                      "killed before it finished: run the same command again to continue it" if state == INTERRUPTED
                      else " ".join(error.read_text().split()) if error.exists() else
                      "no metrics.json and no error.txt"}
    try:
        m = RunMetrics.read(metrics_path)
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


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    """The finished runs, with pe as text ("None" for baselines, so that they group too)."""
    done = runs[runs["status"] == "ok"].copy()
    done["pe"] = done["pe"].map(str)
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


def write_summary(folder: str | Path, reference: str = REFERENCE) -> dict[str, Path]:
    """Write summary.csv, summary.md and the plots (loss_curves.png, accuracy_vs_time.png, memory.png) into
    `folder`; return their paths."""
    folder = Path(folder)
    runs = runs_table(folder)
    groups = groups_table(runs)
    names = ("summary.csv", "summary.md", "loss_curves.png", "accuracy_vs_time.png", "memory.png")
    paths = {name: folder / name for name in names}
    runs.to_csv(paths["summary.csv"], index=False)
    paths["summary.md"].write_text(summary_markdown(folder, runs, groups, reference))
    plot_loss_curves(folder, runs).savefig(paths["loss_curves.png"], dpi=110)
    plot_accuracy_vs_time(runs).savefig(paths["accuracy_vs_time.png"], dpi=110)
    plot_memory(runs).savefig(paths["memory.png"], dpi=110)
    return paths


def summary_markdown(folder: Path, runs: pd.DataFrame, groups: pd.DataFrame, reference: str = REFERENCE) -> str:
    parts = ["# Sweep summary", "", _overview(runs), ""]
    if not groups.empty:
        for dataset in groups["dataset"].drop_duplicates():
            parts += answer_markdown(folder, runs, groups, dataset, reference)
    parts += sweep_markdown(folder, runs)
    if not groups.empty:
        readable = _readable_groups(groups, setting_columns(runs))
        parts += ["## By dataset, model, pe and varying settings: every metric (mean ± std over runs)", "",
                  markdown_table(readable), ""]
    parts += ["## Runs", "", markdown_table(_readable_runs(runs)), ""]
    failed = runs[runs["status"] == "failed"]
    if not failed.empty:
        parts += ["## Failed runs", ""] + [f"- `{r.run_dir}`: {r.error}" for r in failed.itertuples()] + [""]
    return "\n".join(parts)


def _overview(runs: pd.DataFrame) -> str:
    counts = runs["status"].value_counts()
    states = ", ".join(f"{counts[s]} {s}" for s in ("ok", "interrupted", "failed") if s in counts)
    return (f"{len(runs)} runs ({states}). The answer first, then the sweep's own times, every metric by group, and "
            "every run.")


def _pm(mean: float, std: float, fmt: str) -> str:
    """mean ± std; a single run has no spread to report: its value alone, not a misleading "± nan" or "± 0"."""
    if pd.isna(mean):
        return ""
    return f"{mean:{fmt}}" if pd.isna(std) else f"{mean:{fmt}} ± {std:{fmt}}"


def _times(ratio: float) -> str:
    return "" if pd.isna(ratio) else f"{ratio:.2f}×"


def _variant_label(row, settings: list[str]) -> dict[str, str]:
    return {"model": row["model"], "pe": "" if row["pe"] == "None" else row["pe"],
            **{c: setting_text(row[c]) for c in settings}}


def setting_text(value: str) -> str:
    """A setting as the Markdown tables show it: a number a search drew (0.011587950184865041) to 4 significant
    digits, anything typed short (3e-3, 0.75, 128, [title, body]) as it is. summary.csv keeps every digit."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return value
    return value if len(str(value)) <= 8 or number.is_integer() else f"{number:.4g}"


def answer_markdown(folder: Path, runs: pd.DataFrame, groups: pd.DataFrame, dataset: str,
                    reference: str = REFERENCE) -> list[str]:
    """The answer for one dataset: each variant over its runs, then the paired comparisons and their verdicts."""
    settings = setting_columns(runs)
    table = groups[groups["dataset"] == dataset].reset_index(drop=True)
    has_cuda = table["peak_cuda_mb_mean"].notna().any()
    rows = []
    for _, g in table.iterrows():
        rows.append(_variant_label(g, settings) | {
            "runs": g["runs"], "seeds": g["seeds"],
            "median epoch s": _pm(g["median_epoch_seconds_mean"], g["median_epoch_seconds_std"], ".2f"),
            "epoch time vs fastest": _times(g["epoch_time_vs_fastest"]),
            "tokens/s vs fastest": _times(g["tokens_per_second_vs_fastest"]),
            "peak RSS in training, MB": _pm(g["peak_rss_mb_mean"], g["peak_rss_mb_std"], ",.0f"),
            **({"peak CUDA in training, MB": _pm(g["peak_cuda_mb_mean"], g["peak_cuda_mb_std"], ",.0f")}
               if has_cuda else {}),
            **{name: _pm(g[f"{metric}_mean"], g[f"{metric}_std"], ".4f") for name, metric in [
                ("val accuracy", "val_accuracy"), ("test accuracy", "test_accuracy"),
                ("val macro-F1", "val_macro_f1"), ("test macro-F1", "test_macro_f1")]},
        })
    parts = [f"## The answer: {dataset}", "",
             "Each variant over its runs: mean ± std over the runs (no ± for a single run); `seeds` counts distinct "
             "seeds, and runs beyond them are repeats of a seed. Epoch time is the median training epoch (validation "
             "excluded); times and tokens/s are relative to the fastest variant on this dataset.", "",
             markdown_table(pd.DataFrame(rows)), ""]
    if (table["runs"] > table["seeds"]).any():
        parts += ["Some variants ran a seed more than once: their ± is the spread between repeats (timing, "
                  "non-determinism), not between seeds.", ""]
    parts += [_memory_note(folder, runs), ""]

    done = finished(runs)
    done = done[done["dataset"] == dataset]
    models = list(dict.fromkeys(table.loc[table["pe"] != "None", "model"]))
    if len(models) > 1:
        ref = reference if reference in models else _fastest_model(table)
        why = ("the reference" if ref == reference else
               f"{reference}, the reference, is not in this sweep, so the fastest variant")
        rows = []
        for key, variant in _variants(done, settings):
            model, pe, *rest = key
            if model == ref:
                continue
            base = _select(done, ref, pe, settings, rest)
            rows.append(_variant_label({"model": model, "pe": pe, **dict(zip(settings, rest, strict=True))}, settings)
                        | _paired(folder, variant, base))
        parts += [f"### Against {ref} ({why}), paired over shared seeds", "",
                  f"Each row: the variant against {ref} with the same pe and settings; a ratio above 1 means more "
                  f"seconds per epoch than {ref}.", "", markdown_table(pd.DataFrame(rows)), ""]
    pe_rows = []
    for key, variant in _variants(done, settings):
        model, pe, *rest = key
        if pe != "True":
            continue
        base = _select(done, model, "False", settings, rest)
        if not base.empty:
            pe_rows.append(_variant_label({"model": model, "pe": "True vs False",
                                           **dict(zip(settings, rest, strict=True))}, settings)
                           | _paired(folder, variant, base))
    if pe_rows:
        parts += ["### pe=True against pe=False, paired over shared seeds", "",
                  markdown_table(pd.DataFrame(pe_rows)), ""]
    if len(models) > 1 or pe_rows:
        parts += [f"How to read the comparisons: {RULES}", ""]
    return parts


def _fastest_model(table: pd.DataFrame) -> str:
    trained = table[table["pe"] != "None"]
    return trained.sort_values("median_epoch_seconds_mean", na_position="last")["model"].iloc[0]


def _variants(done: pd.DataFrame, settings: list[str]):
    trained = done[done["pe"] != "None"]
    yield from trained.groupby(["model", "pe", *settings], sort=True, dropna=False)


def _select(done: pd.DataFrame, model: str, pe: str, settings: list[str], values: list) -> pd.DataFrame:
    mask = (done["model"] == model) & (done["pe"] == pe)
    for column, value in zip(settings, values, strict=True):
        mask &= done[column] == value
    return done[mask]


def _paired(folder: Path, variant: pd.DataFrame, reference: pd.DataFrame) -> dict[str, str]:
    """The verdicts of `variant` against `reference` over the seeds both have (a seed's repeats pooled or averaged)."""
    shared = sorted(set(variant["seed"]) & set(reference["seed"]))
    if not shared:
        return {"shared seeds": "0", "epoch time": "no shared seed: nothing to pair", "val accuracy": "",
                "test accuracy": ""}

    def epochs(runs: pd.DataFrame, seed) -> np.ndarray:  # every epoch of the seed's runs, repeats pooled
        return np.concatenate([epoch_seconds(folder / d) for d in runs.loc[runs["seed"] == seed, "run_dir"]])

    def accuracy(runs: pd.DataFrame, split: str) -> pd.Series:
        return runs.groupby("seed")[f"{split}_accuracy"].mean()

    ratio = speed_ratio([(epochs(variant, s), epochs(reference, s)) for s in shared])
    cells = {"shared seeds": str(len(shared)), "epoch time": speed_verdict(ratio)}
    for split in ("val", "test"):
        differences = (accuracy(variant, split) - accuracy(reference, split))[shared]
        n_articles = float(pd.concat([variant, reference])[f"{split}_samples"].mean())
        cells[f"{split} accuracy"] = accuracy_verdict(paired_t(differences.tolist()), n_articles)
    return cells


def _memory_note(folder: Path, runs: pd.DataFrame) -> str:
    """What the memory column measures, and when it cannot be compared across variants."""
    note = ("Peak RSS is the whole process's resident memory at its highest while training (`stages.fit` in "
            "metrics.json)")
    jobs = [JobRecord.read(folder / d) for d in runs["run_dir"]]
    processes = {(j.host, j.pid) for j in jobs if j is not None}
    timed = sum(j is not None for j in jobs)
    if timed > len(processes):
        return (note + f": here {timed} jobs shared {_processes(len(processes))} (the basic launcher runs every "
                "job in the sweep's own process), so a later job's peak includes what earlier jobs left behind, and "
                "it does not compare variants. For that, run each job in a fresh process "
                "(`hydra/launcher=submitit_local`; joblib reuses its workers), or see `scripts/benchmark.py`.")
    return note + "."


def _processes(n: int) -> str:
    return "one process" if n == 1 else f"{n} processes"


def sweep_markdown(folder: Path, runs: pd.DataFrame) -> list[str]:
    """The sweep's own times (sweep.json, each job's job.json) beside the training seconds its runs measured."""
    sweep = SweepRecord.read(folder)
    records = [JobRecord.read(folder / d) for d in runs["run_dir"]]
    jobs = [j for j in records if j is not None]
    if sweep is None and not jobs:
        return []
    # The share compares like with like: the training seconds of the runs whose job wall time is known (a single run
    # summarised beside a sweep has no job.json).
    train = runs["train_seconds"][[j is not None for j in records]].sum()
    job_total = sum(j.wall_seconds for j in jobs)
    lines = ["## The sweep", ""]
    if sweep is not None:
        lines.append(f"Wall time {sweep.wall_seconds:,.1f} s from Hydra starting the sweep (after Python's start-up) "
                     f"to the end of its last job ({len(sweep.jobs)} jobs, {sweep.launcher.rpartition('.')[2]}; "
                     "`sweep.json` has every job).")
    else:
        span = pd.to_datetime([j.ended_at for j in jobs]).max() - pd.to_datetime([j.started_at for j in jobs]).min()
        lines.append(f"No sweep.json (the sweep did not reach its end, or this folder is not one sweep): its jobs ran "
                     f"from the first start to the last end in {span.total_seconds():,.1f} s.")
    lines += ["", f"The jobs' own wall times add up to {job_total:,.1f} s; training passes took {train:,.1f} s of "
              f"them ({train / job_total:.0%}), the rest went to loading data, the tokenizer, validation, reports "
              f"and probes. Each job's wall time is the `job s` column of the runs table, beside `train s`.", ""]
    return lines


def _readable_groups(groups: pd.DataFrame, settings: list[str]) -> pd.DataFrame:
    def pm(metric: str, fmt: str) -> pd.Series:
        return pd.Series([_pm(m, s, fmt) for m, s in zip(groups[f"{metric}_mean"], groups[f"{metric}_std"],
                                                           strict=True)])

    def reached(column: str) -> pd.Series:
        # A baseline has no epochs, so no time to an accuracy: blank, not "not reached".
        text, counts = pm(column, ".1f"), groups[f"{column}_count"]
        return pd.Series(["" if epochs == 0 else "not reached" if k == 0 else
                          text[i] + ("" if k == runs else f" ({k} of {runs} runs)")
                          for i, (k, runs, epochs) in enumerate(zip(counts, groups["runs"], groups["epochs_max"],
                                                                    strict=True))])

    levels = [c.removesuffix("_count") for c in groups.columns if c.startswith(SECONDS_TO) and c.endswith("_count")]
    times = {f"s to val acc {c.removeprefix(SECONDS_TO)}": reached(c) for c in levels}
    settings = {c: groups[c].map(setting_text) for c in settings}
    return pd.DataFrame({
        "dataset": groups["dataset"], "model": groups["model"], "pe": groups["pe"].replace("None", ""), **settings,
        "runs": groups["runs"], "seeds": groups["seeds"],
        "val accuracy": pm("val_accuracy", ".4f"), "test accuracy": pm("test_accuracy", ".4f"),
        "val macro-F1": pm("val_macro_f1", ".4f"), "test macro-F1": pm("test_macro_f1", ".4f"),
        "train s": pm("train_seconds", ".1f"),
        **({"job s": pm("job_seconds", ".1f")} if groups["job_seconds_mean"].notna().any() else {}),
        "median epoch s": pm("median_epoch_seconds", ".2f"),
        "epoch time vs fastest": groups["epoch_time_vs_fastest"].map(_times),
        **times,
    })


def _readable_runs(runs: pd.DataFrame) -> pd.DataFrame:
    shown = runs.drop(columns=["error", "val_samples", "test_samples"]).copy()
    if shown["peak_cuda_mb"].isna().all():
        shown = shown.drop(columns=["peak_cuda_mb"])
    if shown["job_seconds"].isna().all():
        shown = shown.drop(columns=["job_seconds"])

    def fmt(spec: str):
        return lambda v: "" if pd.isna(v) else f"{v:{spec}}"

    for column in ("val_accuracy", "val_macro_f1", "test_accuracy", "test_macro_f1"):
        shown[column] = shown[column].map(fmt(".4f"))
    for column in ("train_seconds", "job_seconds", "median_epoch_seconds", *time_columns(runs)):
        if column in shown:
            shown[column] = shown[column].map(fmt(".1f"))
    for column in ("tokens_per_second", "peak_rss_mb", "peak_cuda_mb"):
        if column in shown:
            shown[column] = shown[column].map(fmt(",.0f"))
    shown["pe"] = shown["pe"].map(lambda v: "" if v is None or pd.isna(v) else str(v))
    for column in setting_columns(runs):
        shown[column] = shown[column].map(setting_text)
    return shown.rename(columns={
        "val_accuracy": "val accuracy", "val_macro_f1": "val macro-F1", "test_accuracy": "test accuracy",
        "test_macro_f1": "test macro-F1", "train_seconds": "train s", "job_seconds": "job s",
        "median_epoch_seconds": "median epoch s", "tokens_per_second": "tokens/s", "peak_rss_mb": "peak RSS MB",
        "peak_cuda_mb": "peak CUDA MB", "run_dir": "run folder",
    } | {c: f"s to val acc {c.removeprefix(SECONDS_TO)}" for c in time_columns(runs)})


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown would need the tabulate package for this alone)."""
    cells = [[str(c) for c in frame.columns]] + [["" if pd.isna(v) else str(v) for v in row]
                                                 for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in frame.columns) + "|")
    return "\n".join(lines)


# Plots. One colour per model, one marker per pe, in every figure; labels name the variant and pe.
PE_MARKERS = {"True": "o", "False": "s"}
PE_STYLES = {"False": "tab:blue", "True": "tab:orange"}


def _variant_name(model: str, pe: str) -> str:
    return model if pe not in PE_MARKERS else f"{model}, pe={pe}"


def readable_axis(ax: Axes, values, axis: str = "x", log_above: float = 10.0) -> None:
    """Ticks a person reads at a glance, bracketing every value, and limits that hold every point.

    Log scale only when the values span more than `log_above`×, with ticks at 1, 2, 5 × 10^k written as plain
    numbers (matplotlib's own log ticks read 8×10⁰, 9×10⁰, 10¹); a linear scale with round steps otherwise.
    """
    values = np.asarray([v for v in values if np.isfinite(v)], dtype=float)
    if not len(values):
        return
    low, high = float(values.min()), float(values.max())
    log = low > 0 and high / low > log_above
    if log:
        exponents = range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1)
        ticks = sorted(m * 10.0 ** e for e in exponents for m in (1, 2, 5))
    else:
        if high == low:
            low, high = low - (abs(low) * 0.05 or 0.5), high + (abs(high) * 0.05 or 0.5)
        ticks = list(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]).tick_values(low, high))
    first = max(t for t in ticks if t <= low + 1e-12 * abs(low)) if any(t <= low for t in ticks) else ticks[0]
    last = min(t for t in ticks if t >= high - 1e-12 * abs(high)) if any(t >= high for t in ticks) else ticks[-1]
    ticks = [t for t in ticks if first <= t <= last]
    if log:
        pad = (last / first) ** 0.03
        limits = (first / pad, last * pad)
    else:
        pad = (last - first) * 0.03
        limits = (first - pad, last + pad)
    setter = {"x": (ax.set_xscale, ax.set_xticks, ax.set_xlim, ax.xaxis),
              "y": (ax.set_yscale, ax.set_yticks, ax.set_ylim, ax.yaxis)}[axis]
    set_scale, set_ticks, set_limits, which = setter
    set_scale("log" if log else "linear")
    set_ticks(ticks, [f"{t:g}" for t in ticks])
    which.set_minor_locator(NullLocator())
    set_limits(*limits)


def plot_accuracy_vs_time(runs: pd.DataFrame) -> Figure:
    """Test accuracy against training seconds, one point per finished run: colour by model, marker by pe."""
    fig = Figure(figsize=(7, 4.2), layout="constrained")
    ax = fig.add_subplot()
    done = finished(runs).dropna(subset=["train_seconds", "test_accuracy"])
    for i, model in enumerate(sorted(done["model"].unique())):
        for pe in sorted(done.loc[done["model"] == model, "pe"].unique()):
            subset = done[(done["model"] == model) & (done["pe"] == pe)]
            ax.scatter(subset["train_seconds"], subset["test_accuracy"], color=f"C{i}",
                       marker=PE_MARKERS.get(pe, "*"), s=40 if pe in PE_MARKERS else 120, alpha=0.8,
                       label=f"{_variant_name(model, pe)} ({_runs(len(subset))})")
    readable_axis(ax, done["train_seconds"], "x")
    readable_axis(ax, done["test_accuracy"], "y", log_above=math.inf)
    scale = " (log scale)" if ax.get_xscale() == "log" else ""
    ax.set(xlabel=f"training seconds{scale}, validation excluded", ylabel="test accuracy",
           title="one point per run")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        fig.legend(loc="outside right upper", fontsize=8)  # outside: it never hides a point
    return fig


def _runs(n: int) -> str:
    return "1 run" if n == 1 else f"{n} runs"


def plot_memory(runs: pd.DataFrame) -> Figure:
    """Peak memory while training, one bar per variant (mean over its runs, whiskers from the lowest to the highest
    run): process RSS, and CUDA's peak allocation where runs had a GPU."""
    done = finished(runs)
    kinds = [(c, t) for c, t in (("peak_rss_mb", "CPU: peak RSS of the process while training, MB"),
                                 ("peak_cuda_mb", "CUDA: peak allocated while training, MB"))
             if done[c].notna().any()]
    groups = done.groupby(["dataset", "model", "pe", *setting_columns(runs)], sort=True, dropna=False)
    several = done["dataset"].nunique() > 1
    models = sorted(done["model"].unique())
    fig = Figure(figsize=(6 * max(len(kinds), 1), 1.2 + 0.45 * max(groups.ngroups, 1)), layout="constrained")
    axes = fig.subplots(1, max(len(kinds), 1), squeeze=False)[0]
    if not kinds:
        axes[0].text(0.5, 0.5, "no memory recorded (runs older than metrics.json's stages, or baselines only)",
                     ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return fig
    for ax, (column, title) in zip(axes, kinds, strict=True):
        labels, means, lows, highs, colours, hatches = [], [], [], [], [], []
        for key, group in groups:
            dataset, model, pe, *rest = key
            values = group[column].dropna()
            if values.empty:
                continue
            extra = "".join(f", {c}={v}" for c, v in zip(setting_columns(runs), rest, strict=True))
            labels.append(f"{dataset}: " * several + _variant_name(model, pe) + extra + f" ({_runs(len(values))})")
            means.append(values.mean())
            lows.append(values.mean() - values.min())
            highs.append(values.max() - values.mean())
            colours.append(f"C{models.index(model) % 10}")  # the model's colour in accuracy_vs_time.png
            hatches.append("//" if pe == "True" else "")
        positions = np.arange(len(labels))[::-1]  # the first group on top
        bars = ax.barh(positions, means, xerr=[lows, highs], color=colours, alpha=0.8, capsize=3)
        for bar, hatch in zip(bars, hatches, strict=True):
            bar.set_hatch(hatch)
        ax.set_yticks(positions, labels, fontsize=8)
        for y, value, high in zip(positions, means, highs, strict=True):
            ax.text(value + high, y, f"  {value:,.0f}", va="center", ha="left", fontsize=8)
        ax.set_xlim(0, max(m + h for m, h in zip(means, highs, strict=True)) * 1.2)
        ax.set(title=title, xlabel="MB")
        ax.title.set_fontsize(10)
        ax.grid(axis="x", alpha=0.3)
    return fig


def plot_loss_curves(folder: Path, runs: pd.DataFrame) -> Figure:
    """Train (solid) and val (dashed) loss per epoch: one panel per model, one colour per pe (per pe and setting when
    the sweep varies another), the mean over the variant's runs as a line and the spread across them (lowest to
    highest run at each epoch) as a band."""
    done = finished(runs)
    settings = setting_columns(runs)
    several = done["dataset"].nunique() > 1
    panels = list(done.groupby(["dataset", "model"], sort=True).groups) or [("", "(no finished runs)")]
    fig = Figure(figsize=(4.5 * len(panels) + 1.5, 3.8), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    # A variant keeps its colour in every panel, the legend's: keyed by label, not by how many were drawn before.
    handles, colours = [], {}
    for ax, (dataset, model) in zip(axes, panels, strict=True):
        panel = done[(done["dataset"] == dataset) & (done["model"] == model)]
        for key, variant in panel.groupby(["pe", *settings], sort=True, dropna=False):
            pe, *rest = key
            histories = [pd.read_csv(folder / d / "history.csv").set_index("epoch")
                         for d in variant["run_dir"] if (folder / d / "history.csv").exists()]
            if not histories:
                continue
            extra = "".join(f", {c}={v}" for c, v in zip(settings, rest, strict=True))
            label = (f"pe={pe}" if pe in PE_MARKERS else "no pe") + extra
            colour = PE_STYLES.get(pe, "tab:gray") if not settings else colours.get(label, f"C{len(colours) % 10}")
            for column, style in (("train_loss", "-"), ("val_loss", "--")):
                losses = pd.concat([h[column] for h in histories], axis=1)  # (epochs, runs)
                ax.plot(losses.index, losses.mean(axis=1), color=colour, linestyle=style, gid=f"{label}|{column}")
                if len(histories) > 1:
                    ax.fill_between(losses.index, losses.min(axis=1), losses.max(axis=1), color=colour, alpha=0.2,
                                    linewidth=0, gid=f"{label}|{column}")
            if label not in colours:
                colours[label] = colour
                handles.append(axes[0].plot([], [], color=colour, label=f"{label}")[0])
        ax.set(title=f"{dataset}: {model}" if several else model, xlabel="epoch")
        whole_epochs(ax)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cross-entropy loss")
    # The legend lists the pe values this sweep has, not both whatever it ran.
    handles += [axes[0].plot([], [], color="k", label="train")[0],
                axes[0].plot([], [], color="k", linestyle="--", label="val")[0],
                axes[0].fill_between([], [], [], color="k", alpha=0.2, label="lowest to highest run")]
    fig.legend(handles=handles, loc="outside right center", fontsize=8)
    fig.suptitle("loss per epoch: the mean over each variant's runs, and their spread")
    return fig
