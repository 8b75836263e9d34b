"""What a run leaves behind: history.csv, metrics.json, classification reports, confusion matrices, loss curves."""

from __future__ import annotations

import csv
import json
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from matplotlib.figure import Figure  # the object API: no pyplot global state, no display backend needed
from sklearn.metrics import ConfusionMatrixDisplay, accuracy_score, classification_report, f1_score

HISTORY_COLUMNS = ["epoch", "train_loss", "val_loss", "val_accuracy", "epoch_seconds"]
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


def write_metrics(path: Path, metrics: dict) -> None:
    path.write_text(json.dumps(metrics, indent=2) + "\n")


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions
