"""What a run reports besides its numbers: classification reports and confusion matrices per split, the texts it gets
wrong, the reliability diagram, the loss curve, attention heatmaps, and how fast it reached each validation accuracy.
(The run folder's files and metrics.json are runs/'s; the numbers of calibration are calibration.py's.)"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no pyplot global state, no display backend needed
from matplotlib.ticker import MaxNLocator
from sklearn.metrics import ConfusionMatrixDisplay, accuracy_score, classification_report, f1_score

from mha_textclf.calibration import Reliability
from mha_textclf.runs import files
from mha_textclf.runs.metrics import CONFUSED_PAIRS, SplitMetrics


def time_to_accuracy(history: list[dict], levels: list[float]) -> dict[str, float | None]:
    """For each level, the training seconds (elapsed_train_seconds) at the end of the first epoch whose validation
    accuracy reached it, or None if none did: how fast a variant learns, not only how fast it steps."""
    return {f"{level:g}": next((row["elapsed_train_seconds"] for row in history if row["val_accuracy"] >= level),
                               None) for level in levels}


def split_report(run_dir: Path, split: str, labels: list[int], predictions: list[int], loss: float | None,
                 class_names: list[str], source: str = "") -> SplitMetrics:
    """Write classification_report_<split>.txt/.json and confusion_matrix_<split>.png; return the split's metrics.

    `source` names the model and the data (e.g. "efficient, pe=True on bbc-news") in the plot's title.
    """
    ids = list(range(len(class_names)))  # every class listed, even one absent from a small split
    kwargs = {"labels": ids, "target_names": class_names, "zero_division": 0, "digits": 4}
    files.write_text(run_dir / files.classification_report(split, "txt"),
                     classification_report(labels, predictions, **kwargs))
    report = classification_report(labels, predictions, output_dict=True, **kwargs)
    files.write_text(run_dir / files.classification_report(split, "json"), json.dumps(report, indent=2))
    figure = plot_confusion_matrix(labels, predictions, class_names,
                                   title=f"{source}: {split} ({len(labels)} texts)".removeprefix(": "))
    files.write_figure(run_dir / files.confusion_matrix(split), figure, dpi=120)
    return SplitMetrics(accuracy=float(accuracy_score(labels, predictions)),
                        macro_f1=float(f1_score(labels, predictions, labels=ids, average="macro", zero_division=0)),
                        loss=loss, n_samples=len(labels), confused=confused_pairs(labels, predictions, class_names))


def confused_pairs(labels: list[int], predictions: list[int], class_names: list[str],
                   top: int = CONFUSED_PAIRS) -> list[dict]:
    """The (true, predicted) pairs of different classes with the most texts, most first (ties by class order)."""
    counts: dict[tuple[int, int], int] = {}
    for true, predicted in zip(labels, predictions, strict=True):
        if true != predicted:
            counts[true, predicted] = counts.get((true, predicted), 0) + 1
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:top]
    return [{"true": class_names[t], "predicted": class_names[p], "count": n} for (t, p), n in ranked]


def error_rows(split: str, positions: list[int], labels: list[int], scores: np.ndarray, texts: list[str],
               class_names: list[str], probabilities: bool = True) -> list[dict]:
    """errors.csv's rows for one split: every text whose highest-scoring class is not its own, most confident first.
    `positions[i]` is the split's text number of row i of `labels` and `scores`. `scores` are class probabilities,
    or, with `probabilities=False`, a classifier's decision scores, which rank the classes but are no confidence
    (the confidence is left blank, and rows keep the split's order)."""
    order = np.argsort(-scores, axis=1, kind="stable")  # (N, C) classes from highest to lowest score
    rows = []
    for i, (position, true) in enumerate(zip(positions, labels, strict=True)):
        predicted = int(order[i, 0])
        if predicted == true:
            continue
        rows.append({"split": split, "position": position, "text": texts[position], "true": class_names[true],
                     "predicted": class_names[predicted],
                     "confidence": round(float(scores[i, predicted]), 4) if probabilities else None,
                     "runner_up": class_names[order[i, 1]] if scores.shape[1] > 1 else ""})
    return sorted(rows, key=lambda row: (-(row["confidence"] or 0.0), row["position"]))


def write_errors(path: Path, rows: list[dict]) -> None:
    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=files.ERROR_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)

    files.write_atomically(path, write)


def plot_reliability(diagrams: dict[str, tuple[Reliability, Reliability]], temperature: float,
                     title: str = "") -> Figure:
    """One panel per split: each bin's accuracy against its mean confidence, before and after the temperature, on
    the diagonal a calibrated model would follow; the bars under it count the texts per bin."""
    fig = Figure(figsize=(4.2 * len(diagrams) + 0.6, 4.6), layout="constrained")
    axes = fig.subplots(2, len(diagrams), squeeze=False, height_ratios=[3, 1], sharex=True)
    for column, (split, (before, after)) in enumerate(diagrams.items()):
        ax, counts = axes[0, column], axes[1, column]
        ax.plot([0, 1], [0, 1], color="gray", linestyle=":", label="calibrated")
        for diagram, name, colour in ((before, f"T=1: ECE {before.ece:.3f}", "tab:red"),
                                      (after, f"T={temperature:.2f}: ECE {after.ece:.3f}", "tab:blue")):
            filled = diagram.counts > 0
            ax.plot(diagram.confidence[filled], diagram.accuracy[filled], marker="o", color=colour, label=name)
        centres = (before.edges[:-1] + before.edges[1:]) / 2
        width = before.edges[1] - before.edges[0]
        counts.bar(centres, before.counts, width=width * 0.9, color="tab:red", alpha=0.5)
        counts.bar(centres, after.counts, width=width * 0.45, color="tab:blue", alpha=0.7)
        ax.set(xlim=(0, 1), ylim=(0, 1.02), title=f"{split} ({int(before.counts.sum())} texts)",
               ylabel="accuracy" if column == 0 else None)
        counts.set(xlabel="confidence (top probability)", ylabel="texts" if column == 0 else None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title or "reliability: accuracy per confidence bin")
    return fig


def plot_confusion_matrix(labels: list[int], predictions: list[int], class_names: list[str],
                          title: str = "") -> Figure:
    """Rows are true classes, normalised to sum to 1 (each class's recall on the diagonal, so that a large class
    does not drown the small ones), class names on both axes. The figure grows with the number of classes and shows
    the numbers while they fit, so 20 or more classes stay readable."""
    n = len(class_names)
    side = max(5.0, 2.5 + 0.4 * n)
    fig = Figure(figsize=(side + 1.2, side), layout="constrained")
    ax = fig.add_subplot()
    ConfusionMatrixDisplay.from_predictions(labels, predictions, labels=list(range(n)), display_labels=class_names,
                                            normalize="true", ax=ax, colorbar=True, cmap="Blues",
                                            include_values=n <= 12, values_format=".2f",
                                            xticks_rotation=45 if n <= 8 else 90)
    ax.set_title(f"{title}\nrows: true class, normalised to 1" if title else "rows: true class, normalised to 1",
                 fontsize=10)
    return fig


def plot_loss_curve(history: list[dict], title: str = "", reported_epoch: int | None = None) -> Figure:
    """Train and val loss per epoch, with the epoch whose model the reports describe marked."""
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    epochs = [row["epoch"] for row in history]
    ax.plot(epochs, [row["train_loss"] for row in history], marker="o", label="train")
    ax.plot(epochs, [row["val_loss"] for row in history], marker="o", label="val")
    if reported_epoch is not None:
        ax.axvline(reported_epoch, color="tab:green", linestyle=":", label=f"reported model (epoch {reported_epoch})")
    ax.set(xlabel="epoch", ylabel="cross-entropy loss", title=title)
    whole_epochs(ax)
    ax.grid(alpha=0.3)
    ax.legend()
    return fig


def whole_epochs(ax) -> None:
    """Epoch ticks at whole numbers only (matplotlib would put ticks at 1.5 on a 3-epoch axis)."""
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def plot_attention(tokens: list[str], weights: np.ndarray, title: str = "") -> Figure:
    """One heatmap per head plus the mean over heads: rows are queries, columns the keys they attend to."""
    panels = [(f"head {h}", w) for h, w in enumerate(weights)] + [("mean over heads", weights.mean(axis=0))]
    cols = math.ceil(math.sqrt(len(panels)))
    rows = math.ceil(len(panels) / cols)
    side = 1.2 + 0.35 * len(tokens)
    fig = Figure(figsize=(cols * side + 1, rows * side + 0.6), layout="constrained")
    vmax = float(weights.max())  # one scale for every panel, so heads can be compared by colour
    for i, (name, w) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, i + 1)
        image = ax.imshow(w, vmin=0, vmax=vmax, cmap="viridis")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(len(tokens)), tokens, rotation=90, fontsize=8)
        ax.set_yticks(range(len(tokens)), tokens, fontsize=8)
        if i % cols == 0:
            ax.set_ylabel("query")
        if i >= len(panels) - cols:
            ax.set_xlabel("key")
    fig.colorbar(image, ax=fig.axes, shrink=0.6, label="attention weight")
    fig.suptitle(title)
    return fig


def slug(text: str, max_length: int = 40) -> str:
    """A file-name-safe version of `text`: `can you can that` -> `can_you_can_that`."""
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:max_length] or "empty"



