"""A sweep's plots: loss curves per variant with the seed spread, accuracy against training time, peak memory, and
for its page the epoch-time ratios with their intervals and each seed's accuracy. One colour per model, one marker
per pe, in every figure."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator, NullLocator

from mha_textclf.reports import whole_epochs
from mha_textclf.runs import files
from mha_textclf.sweeps.collect import PE_TEXT, finished, setting_columns, setting_text
from mha_textclf.sweeps.compare import Interval

# Plots. One colour per model, one marker per pe, in every figure; labels name the variant and pe.
PE_MARKERS = {PE_TEXT[True]: "o", PE_TEXT[False]: "s"}


PE_STYLES = {PE_TEXT[False]: "tab:blue", PE_TEXT[True]: "tab:orange"}


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
            extra = _settings_text(setting_columns(runs), rest)
            labels.append(f"{dataset}: " * several + _variant_name(model, pe) + extra + f" ({_runs(len(values))})")
            means.append(values.mean())
            lows.append(values.mean() - values.min())
            highs.append(values.max() - values.mean())
            colours.append(f"C{models.index(model) % 10}")  # the model's colour in accuracy_vs_time.png
            hatches.append("//" if pe == PE_TEXT[True] else "")
        positions = np.arange(len(labels))[::-1]  # the first group on top
        fig.set_figwidth(max(fig.get_figwidth(), len(kinds) * _beside(labels)))
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


def _settings_text(settings: list[str], values) -> str:
    """", key=value" for each setting a sweep varies, as the labels of every figure name a variant's."""
    return "".join(f", {c}={setting_text(v)}" for c, v in zip(settings, values, strict=True))


def _beside(labels: list[str]) -> float:
    """Inches for a panel of 4 beside its 8-point tick labels: a search's name several drawn settings each."""
    return 4 + 0.065 * max(map(len, labels), default=0)


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
            histories = [history.set_index("epoch") for d in variant["run_dir"]
                         if (history := files.read_history(folder / d)) is not None]
            if not histories:
                continue
            extra = _settings_text(settings, rest)
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
    # Wide enough for the legend beside the panels: a search's labels name several drawn settings.
    fig.set_figwidth(4.5 * len(panels) + max(1.5, _beside([h.get_label() for h in handles]) - 4))
    fig.legend(handles=handles, loc="outside right center", fontsize=8)
    fig.suptitle("loss per epoch: the mean over each variant's runs, and their spread")
    return fig


def plot_speed_ratios(ratios: list[tuple[str, str, Interval]], dataset: str = "") -> Figure:
    """Each paired comparison's epoch-time ratio (the answer's `ratios`) as a point with its 95% interval, on a log
    axis around 1 (no difference); left of 1 is faster than what it is compared with."""
    fig = Figure(figsize=(7, 1.4 + 0.42 * max(len(ratios), 1)), layout="constrained")
    ax = fig.add_subplot()
    positions = np.arange(len(ratios))[::-1]  # the first comparison on top
    for y, (_, _, ratio) in zip(positions, ratios, strict=True):
        if ratio.low is not None and ratio.high is not None:
            ax.plot([ratio.low, ratio.high], [y, y], color="tab:blue", linewidth=2)
        ax.plot([ratio.estimate], [y], "o", color="tab:blue")
        ax.annotate(f"{ratio.estimate:.2f}×", (ratio.estimate, y), textcoords="offset points", xytext=(0, 6),
                    ha="center", fontsize=8)
    ax.axvline(1.0, color="gray", linestyle=":")
    ax.set_xscale("log")
    values = [v for _, _, r in ratios for v in (r.low, r.high, r.estimate) if v is not None and v > 0] or [1.0]
    low, high = min(min(values), 1.0), max(max(values), 1.0)
    ax.set_xlim(low / 1.15, high * 1.15)
    ax.xaxis.set_minor_locator(NullLocator())
    ticks = sorted({round(t, 2) for t in np.geomspace(low, high, 5)} | {1.0})
    ax.set_xticks(ticks, [f"{t:g}×" for t in ticks])
    ax.set_yticks(positions, [f"{variant} ({comparison})" for comparison, variant, _ in ratios], fontsize=8)
    ax.set(xlabel="epoch time ratio (log scale): below 1 is faster",
           title=f"{dataset}: epoch time, paired over seeds, with 95% intervals".removeprefix(": "))
    ax.title.set_fontsize(10)
    ax.grid(axis="x", alpha=0.3)
    return fig


def plot_accuracy_by_seed(runs: pd.DataFrame, dataset: str) -> Figure:
    """Test accuracy of every finished run on `dataset`, one row per variant and one point per seed (its number
    beside it), the variant's mean as a bar: how far apart the seeds are, next to how far apart the variants are."""
    done = finished(runs)
    done = done[done["dataset"] == dataset].dropna(subset=["test_accuracy"])
    settings = setting_columns(runs)
    variants = list(done.groupby(["model", "pe", *settings], sort=True, dropna=False))
    models = sorted(done["model"].unique())
    fig = Figure(figsize=(7, 1.3 + 0.45 * max(len(variants), 1)), layout="constrained")
    ax = fig.add_subplot()
    labels = []
    for y, (key, variant) in zip(np.arange(len(variants))[::-1], variants, strict=True):
        model, pe, *rest = key
        colour = f"C{models.index(model) % 10}"
        labels.append(_variant_name(model, pe) + _settings_text(settings, rest))
        ax.scatter(variant["test_accuracy"], [y] * len(variant), color=colour, marker=PE_MARKERS.get(pe, "*"),
                   alpha=0.8, zorder=3)
        for accuracy, seed in zip(variant["test_accuracy"], variant["seed"], strict=True):
            ax.annotate(str(seed), (accuracy, y), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
        mean = variant["test_accuracy"].mean()
        ax.plot([mean, mean], [y - 0.3, y + 0.3], color=colour, linewidth=2)
    fig.set_figwidth(max(7, _beside(labels)))
    ax.set_yticks(np.arange(len(variants))[::-1], labels, fontsize=8)
    ax.set_ylim(-0.7, max(len(variants), 1) - 0.3)
    readable_axis(ax, done["test_accuracy"], "x", log_above=math.inf)
    ax.set(xlabel="test accuracy (a point per seed, its number above; the bar: the mean)",
           title=f"{dataset}: test accuracy per seed")
    ax.title.set_fontsize(10)
    ax.grid(axis="x", alpha=0.3)
    return fig
