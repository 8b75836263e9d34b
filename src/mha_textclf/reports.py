"""What a run leaves behind: history.csv, metrics.json, classification reports, confusion matrices, loss curves,
attention heatmaps."""

from __future__ import annotations

import csv
import json
import math
import platform
import re
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure  # the object API: no pyplot global state, no display backend needed
from sklearn.metrics import ConfusionMatrixDisplay, accuracy_score, classification_report, f1_score

HISTORY_COLUMNS = ["epoch", "train_loss", "val_loss", "val_accuracy", "epoch_seconds", "lr"]
LIBRARIES = ["torch", "transformers", "tokenizers", "datasets", "scikit-learn", "hydra-core", "numpy", "mha-textclf"]


def append_history(path: Path, row: dict) -> None:
    """Append one epoch's row to history.csv, writing the header first when the file is new."""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HISTORY_COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def split_report(run_dir: Path, split: str, labels: list[int], predictions: list[int], loss: float,
                 class_names: list[str]) -> dict:
    """Write classification_report_<split>.txt/.json and confusion_matrix_<split>.png; return the split's metrics."""
    ids = list(range(len(class_names)))  # every class listed, even one absent from a small split
    kwargs = {"labels": ids, "target_names": class_names, "zero_division": 0, "digits": 4}
    (run_dir / f"classification_report_{split}.txt").write_text(classification_report(labels, predictions, **kwargs))
    report = classification_report(labels, predictions, output_dict=True, **kwargs)
    (run_dir / f"classification_report_{split}.json").write_text(json.dumps(report, indent=2))
    plot_confusion_matrix(labels, predictions, class_names, run_dir / f"confusion_matrix_{split}.png",
                          title=f"{split} ({len(labels)} texts)")
    return {"accuracy": accuracy_score(labels, predictions),
            "macro_f1": f1_score(labels, predictions, labels=ids, average="macro", zero_division=0),
            "loss": loss, "n_samples": len(labels)}


def plot_confusion_matrix(labels: list[int], predictions: list[int], class_names: list[str], path: Path,
                          title: str = "") -> None:
    fig = Figure(figsize=(6, 5), layout="constrained")
    ax = fig.add_subplot()
    ConfusionMatrixDisplay.from_predictions(labels, predictions, labels=list(range(len(class_names))),
                                            display_labels=class_names, ax=ax, colorbar=False,
                                            xticks_rotation=45)
    ax.set_title(title)
    fig.savefig(path, dpi=120)


def plot_loss_curve(history: list[dict], path: Path, title: str = "") -> None:
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.add_subplot()
    epochs = [row["epoch"] for row in history]
    ax.plot(epochs, [row["train_loss"] for row in history], marker="o", label="train")
    ax.plot(epochs, [row["val_loss"] for row in history], marker="o", label="val")
    ax.set(xlabel="epoch", ylabel="cross-entropy loss", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.savefig(path, dpi=120)


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
    path.write_text(json.dumps(obj, indent=2) + "\n")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions
