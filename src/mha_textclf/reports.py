"""What a run leaves behind: history.csv, metrics.json, classification reports, confusion matrices, loss curves,
attention heatmaps."""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import re
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no pyplot global state, no display backend needed
from matplotlib.ticker import MaxNLocator
from sklearn.metrics import ConfusionMatrixDisplay, accuracy_score, classification_report, f1_score

# Per epoch: train_seconds is the training pass alone, eval_seconds the validation after it (timed apart);
# elapsed_train_seconds adds up the training passes so far.
HISTORY_COLUMNS = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr", "train_seconds", "eval_seconds",
                   "elapsed_train_seconds", "train_tokens"]
LIBRARIES = ["torch", "transformers", "tokenizers", "datasets", "scikit-learn", "hydra-core", "numpy", "mha-textclf"]


def write_history(path: Path, rows: list[dict]) -> None:
    """history.csv holding exactly `rows` (atomically: a run that continues rewrites it from its last.pt)."""
    tmp = path.with_name(f".{path.name}.tmp")
    with tmp.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HISTORY_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(tmp, path)


def append_history(path: Path, row: dict) -> None:
    """Append one epoch's row to history.csv, writing the header first when the file is new."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HISTORY_COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


METRICS_FORMAT = "mha-textclf-metrics/2"  # /2: dataset, splits, train_samples, stages, time_to_accuracy


@dataclass
class SplitMetrics:
    accuracy: float
    macro_f1: float
    loss: float | None  # mean cross-entropy; None for a classifier without probabilities
    n_samples: int


@dataclass
class RunMetrics:
    """metrics.json: what one run measured. Written by train and by the TF-IDF baseline, read by the summary.

    What the run was told to do is in config.yaml beside it, and the per-epoch numbers are in history.csv; nothing
    here repeats either, except what every table is grouped by (model, pe, seed, and the dataset, by name).
    """

    model: str  # the attention variant, or the baseline's name (tfidf-words)
    pe: bool | None  # None for a baseline
    seed: int
    dataset: str  # the dataset's short name (its folder or file name, or its hub id)
    splits: dict[str, str]  # where the train, val and test texts came from (the dataset's split, or carved)
    train_samples: int
    val: SplitMetrics  # the reported model (trainer.final_weights) on the validation split
    test: SplitMetrics  # ... and on the test split, evaluated once
    class_names: list[str]
    params: int  # learned parameters (for a baseline: its linear model's weights and intercepts)
    train_seconds: float  # training passes only, all epochs
    eval_seconds: float  # validation after each epoch, all epochs
    epochs: int  # finished epochs (0 for a baseline)
    best_epoch: int | None  # the epoch with the lowest validation loss (best.pt's)
    stopped_early: bool
    interrupted_by: str | None  # SIGINT or SIGTERM when a signal stopped training
    tokens_per_second: float | None  # real (non-padding) training tokens per training second
    vocab_size: int | None
    device: str
    threads: int
    # Training seconds (validation excluded) until validation accuracy first reached each level; None: never.
    time_to_accuracy: dict[str, float | None] = field(default_factory=dict)
    stages: dict[str, dict[str, float]] = field(default_factory=dict)  # seconds and peak memory (MB) of each stage
    # Per split (train, val, test): the share of its tokens, as the model sees them (truncated; [CLS], [SEP] and
    # [PAD] not counted), that are [UNK]. Empty for a baseline, and in files written before it was recorded.
    unk_rate: dict[str, float] = field(default_factory=dict)
    # The epoch whose weights model.pt holds and val/test describe (trainer.final_weights); absent in older files.
    reported_epoch: int | None = None
    # Settings left null that the run decided from the corpus (settings.ADAPTIVE): {key: "value: why"}.
    adapted: dict[str, str] = field(default_factory=dict)
    finished_at: str = field(default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    versions: dict[str, str] = field(default_factory=lambda: library_versions())
    format: str = METRICS_FORMAT

    def write(self, path: Path) -> None:
        write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> RunMetrics:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") != METRICS_FORMAT:
            raise ValueError(f"{path} is not a {METRICS_FORMAT} file (written by an older version?)")
        return cls(**data | {split: SplitMetrics(**data[split]) for split in ("val", "test")})


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
    (run_dir / f"classification_report_{split}.txt").write_text(classification_report(labels, predictions, **kwargs))
    report = classification_report(labels, predictions, output_dict=True, **kwargs)
    (run_dir / f"classification_report_{split}.json").write_text(json.dumps(report, indent=2))
    figure = plot_confusion_matrix(labels, predictions, class_names,
                                   title=f"{source}: {split} ({len(labels)} texts)".removeprefix(": "))
    figure.savefig(run_dir / f"confusion_matrix_{split}.png", dpi=120)
    return SplitMetrics(accuracy=float(accuracy_score(labels, predictions)),
                        macro_f1=float(f1_score(labels, predictions, labels=ids, average="macro", zero_division=0)),
                        loss=loss, n_samples=len(labels))


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


def write_json(path: Path, obj: dict) -> None:
    """Atomically (temporary file, then rename): a kill mid-write leaves the previous file, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions
