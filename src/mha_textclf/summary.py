"""Sweep summaries: one table of runs, one of (model × pe) groups over seeds, and two comparison plots.

Used by the end-of-sweep Hydra callback and by `scripts/summarize.py`, for any folder that contains run folders.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.figure import Figure

from mha_textclf.data import dataset_name
from mha_textclf.reports import RunMetrics, whole_epochs
from mha_textclf.settings import flat, is_training_setting

RUN_COLUMNS = ["dataset", "model", "pe", "seed", "status", "val_accuracy", "val_macro_f1", "test_accuracy",
               "test_macro_f1", "epochs", "train_seconds", "median_epoch_seconds", "tokens_per_second", "params",
               "device", "run_dir"]
GROUP_METRICS = ["val_accuracy", "test_accuracy", "val_macro_f1", "test_macro_f1", "train_seconds",
                 "median_epoch_seconds"]


def find_runs(folder: Path) -> list[Path]:
    """Every run folder below `folder`: finished ones hold metrics.json, others at least config.yaml, error.txt or
    Hydra's .hydra/."""
    marked = {p.parent for name in ("metrics.json", "config.yaml", "error.txt", ".hydra") for p in folder.rglob(name)
              if p.parent.name != ".hydra"}
    return sorted(marked, key=lambda p: (len(p.relative_to(folder).parts), _job_number(p), str(p)))


def _job_number(run_dir: Path) -> int:
    head = run_dir.name.split("_")[0]
    return int(head) if head.isdigit() else -1


# Settings that are columns already (the dataset stands for data.path).
COLUMNS = {"model.attention", "pe", "seed", "data.path"}
SECONDS_TO = "seconds_to_"  # + a validation accuracy level: a column of training seconds until it was first reached


def run_settings(run_dir: Path) -> dict[str, object]:
    """The run's resolved settings, flattened (`trainer.lr`), from the config.yaml it wrote (Hydra's unresolved
    .hydra/config.yaml for a run that failed before writing it), without the columns and what is not trained."""
    path = run_dir / "config.yaml"
    path = path if path.exists() else run_dir / ".hydra" / "config.yaml"
    config = yaml.safe_load(path.read_text()) if path.exists() else {}
    return {k: v for k, v in flat(config or {}).items() if k not in COLUMNS and is_training_setting(k)}


def run_row(run_dir: Path, root: Path) -> dict:
    """One row of the runs table. A folder without metrics.json is a failed run; error.txt says why, if present."""
    row = dict.fromkeys(RUN_COLUMNS) | {"run_dir": str(run_dir.relative_to(root)) or "."}
    metrics_path = run_dir / "metrics.json"
    if not metrics_path.exists():
        config_path = next((p for p in (run_dir / "config.yaml", run_dir / ".hydra" / "config.yaml") if p.exists()),
                           None)
        config = yaml.safe_load(config_path.read_text()) if config_path else {}
        error = run_dir / "error.txt"
        path = (config.get("data") or {}).get("path")
        return row | {"dataset": dataset_name(path) if path and "${" not in path else None,
                      "model": (config.get("model") or {}).get("attention"), "pe": config.get("pe"),
                      "seed": config.get("seed"), "status": "failed",
                      "error": " ".join(error.read_text().split()) if error.exists() else
                      "no metrics.json and no error.txt: killed, or still running"}
    try:
        m = RunMetrics.read(metrics_path)
    except (ValueError, TypeError, KeyError) as e:
        return row | {"status": "failed", "error": f"unreadable metrics.json: {e}"}
    history_path = run_dir / "history.csv"
    epoch_seconds = pd.read_csv(history_path)["train_seconds"] if history_path.exists() else pd.Series([math.nan])
    return row | {
        "dataset": m.dataset, "model": m.model, "pe": m.pe, "seed": m.seed,
        "status": "interrupted" if m.interrupted_by else "ok",
        "val_accuracy": m.val.accuracy, "val_macro_f1": m.val.macro_f1,
        "test_accuracy": m.test.accuracy, "test_macro_f1": m.test.macro_f1,
        "epochs": m.epochs, "train_seconds": m.train_seconds, "median_epoch_seconds": epoch_seconds.median(),
        "tokens_per_second": m.tokens_per_second, "params": m.params, "device": m.device,
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
    for position, key in enumerate(varying, start=RUN_COLUMNS.index("seed") + 1):
        table.insert(position, key, [str(s[key]) if key in s else "" for s in settings])
    return table


def setting_columns(runs: pd.DataFrame) -> list[str]:
    """The columns `runs_table` added for overrides that vary across runs."""
    return [c for c in runs.columns if c not in RUN_COLUMNS and c != "error" and not c.startswith(SECONDS_TO)]


def time_columns(runs: pd.DataFrame) -> list[str]:
    """The seconds_to_<level> columns, lowest level first."""
    return [c for c in runs.columns if c.startswith(SECONDS_TO)]


def groups_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean and std over seeds for each (dataset, model, pe, varying settings) among finished runs, and each group's
    median epoch time relative to the fastest group on its dataset. Runs are only averaged with runs of the same
    settings."""
    done = runs[runs["status"] == "ok"].copy()
    if done.empty:
        return pd.DataFrame()
    done["pe"] = done["pe"].map(str)  # "None" for baselines, so that they group too
    grouped = done.groupby(["dataset", "model", "pe", *setting_columns(runs)], sort=True, dropna=False)
    # Time to an accuracy: mean ± std over the runs that reached it, and how many did.
    table = grouped[GROUP_METRICS + time_columns(runs)].agg(["mean", "std", "count"])
    table.columns = [f"{metric}_{stat}" for metric, stat in table.columns]
    table = table.drop(columns=[c for c in table.columns if c.endswith("_count") and SECONDS_TO not in c])
    table.insert(0, "runs", grouped.size())
    table = table.reset_index()
    fastest = table.groupby("dataset", dropna=False)["median_epoch_seconds_mean"].transform("min")
    table["epoch_time_vs_fastest"] = table["median_epoch_seconds_mean"] / fastest
    return table


def write_summary(folder: str | Path) -> dict[str, Path]:
    """Write summary.csv, summary.md, loss_curves.png and accuracy_vs_time.png into `folder`; return their paths."""
    folder = Path(folder)
    runs = runs_table(folder)
    groups = groups_table(runs)
    paths = {name: folder / name for name in ("summary.csv", "summary.md", "loss_curves.png", "accuracy_vs_time.png")}
    runs.to_csv(paths["summary.csv"], index=False)
    paths["summary.md"].write_text(summary_markdown(runs, groups))
    plot_loss_curves(folder, runs).savefig(paths["loss_curves.png"], dpi=110)
    plot_accuracy_vs_time(runs).savefig(paths["accuracy_vs_time.png"], dpi=110)
    return paths


def summary_markdown(runs: pd.DataFrame, groups: pd.DataFrame) -> str:
    parts = ["# Sweep summary", ""]
    if not groups.empty:
        readable = _readable_groups(groups, setting_columns(runs))
        parts += ["## By dataset, model, pe and varying settings (mean ± std over seeds)", "",
                  markdown_table(readable), ""]
    shown = runs.drop(columns=["error"]).copy()
    for column in ("val_accuracy", "val_macro_f1", "test_accuracy", "test_macro_f1"):
        shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.4f}")
    for column in ("train_seconds", "median_epoch_seconds", *time_columns(runs)):
        shown[column] = shown[column].map(lambda v: "" if pd.isna(v) else f"{v:.1f}")
    shown["tokens_per_second"] = shown["tokens_per_second"].map(lambda v: "" if pd.isna(v) else f"{v:,.0f}")
    parts += ["## Runs", "", markdown_table(shown), ""]
    failed = runs[runs["status"] == "failed"]
    if not failed.empty:
        parts += ["## Failed runs", ""] + [f"- `{r.run_dir}`: {r.error}" for r in failed.itertuples()] + [""]
    return "\n".join(parts)


def _readable_groups(groups: pd.DataFrame, settings: list[str]) -> pd.DataFrame:
    def pm(metric: str, fmt: str) -> pd.Series:
        # A single seed has no spread to report: show its value alone rather than a misleading "± 0".
        # A baseline has no epochs: its blank stays blank.
        return pd.Series(["" if pd.isna(m) else f"{m:{fmt}}" if pd.isna(s) else f"{m:{fmt}} ± {s:{fmt}}"
                          for m, s in zip(groups[f"{metric}_mean"], groups[f"{metric}_std"], strict=True)])

    def reached(column: str) -> pd.Series:
        text, counts = pm(column, ".1f"), groups[f"{column}_count"]
        return pd.Series(["not reached" if k == 0 else text[i] + ("" if k == runs else f" ({k} of {runs} runs)")
                          for i, (k, runs) in enumerate(zip(counts, groups["runs"], strict=True))])

    levels = [c.removesuffix("_count") for c in groups.columns if c.startswith(SECONDS_TO) and c.endswith("_count")]
    times = {f"s to val acc {c.removeprefix(SECONDS_TO)}": reached(c) for c in levels}
    settings = {c: groups[c] for c in settings}
    return pd.DataFrame({
        "dataset": groups["dataset"], "model": groups["model"], "pe": groups["pe"].replace("None", ""), **settings,
        "runs": groups["runs"],
        "val accuracy": pm("val_accuracy", ".4f"), "test accuracy": pm("test_accuracy", ".4f"),
        "val macro-F1": pm("val_macro_f1", ".4f"), "test macro-F1": pm("test_macro_f1", ".4f"),
        "train s": pm("train_seconds", ".1f"), "median epoch s": pm("median_epoch_seconds", ".2f"),
        "epoch time vs fastest": groups["epoch_time_vs_fastest"].map(lambda v: "" if pd.isna(v) else f"{v:.2f}×"),
        **times,
    })


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown would need the tabulate package for this alone)."""
    cells = [[str(c) for c in frame.columns]] + [["" if pd.isna(v) else str(v) for v in row]
                                                 for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in frame.columns) + "|")
    return "\n".join(lines)


def plot_loss_curves(folder: Path, runs: pd.DataFrame) -> Figure:
    """Train (solid) and val (dashed) loss per epoch for every run, one panel per model, coloured by pe."""
    models = sorted(runs["model"].dropna().unique()) or ["(none)"]
    fig = Figure(figsize=(4.5 * len(models), 3.8), layout="constrained")
    axes = fig.subplots(1, len(models), sharey=True, squeeze=False)[0]
    colours = {"True": "tab:orange", "False": "tab:blue"}
    present = {str(pe) for pe in runs["pe"]} & set(colours)
    for ax, model in zip(axes, models, strict=True):
        for run in runs[runs["model"] == model].itertuples():
            history_path = folder / run.run_dir / "history.csv"
            if not history_path.exists():
                continue
            history = pd.read_csv(history_path)
            colour = colours.get(str(run.pe), "tab:gray")
            ax.plot(history["epoch"], history["train_loss"], color=colour, alpha=0.8)
            ax.plot(history["epoch"], history["val_loss"], color=colour, alpha=0.8, linestyle="--")
        ax.set(title=model, xlabel="epoch")
        whole_epochs(ax)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("cross-entropy loss")
    # The legend lists the pe values this sweep has, not both whatever it ran.
    handles = [axes[0].plot([], [], color=c, label=f"pe={pe}")[0] for pe, c in colours.items() if pe in present]
    handles += [axes[0].plot([], [], color="k", label="train")[0],
                axes[0].plot([], [], color="k", linestyle="--", label="val")[0]]
    fig.legend(handles=handles, loc="outside right center")
    return fig


def plot_accuracy_vs_time(runs: pd.DataFrame) -> Figure:
    """Test accuracy against training seconds, one point per finished run."""
    fig = Figure(figsize=(6, 4.2), layout="constrained")
    ax = fig.add_subplot()
    done = runs[runs["status"] == "ok"]
    markers = {"True": "o", "False": "s"}
    for i, model in enumerate(sorted(done["model"].unique())):
        for pe, marker in markers.items():
            subset = done[(done["model"] == model) & (done["pe"].astype(str) == pe)]
            if not subset.empty:
                ax.scatter(subset["train_seconds"], subset["test_accuracy"], color=f"C{i}", marker=marker,
                           label=f"{model}, pe={pe}", alpha=0.8)
        baseline = done[(done["model"] == model) & ~done["pe"].astype(str).isin(markers)]
        if not baseline.empty:
            ax.scatter(baseline["train_seconds"], baseline["test_accuracy"], color=f"C{i}", marker="*", s=120,
                       label=model)
    ax.set(xscale="log", xlabel="training seconds (log scale)", ylabel="test accuracy")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig
