"""A run folder's files: their names, the one way they are written (whole or not at all), and their readers."""

from __future__ import annotations

import csv
import json
import os
from dataclasses import asdict
from pathlib import Path

import yaml

from mha_textclf.settings import TrainSettings

STATUS = "status.json"


# What a run writes here, and so what `overwrite=true` deletes; config.yaml first, so that a kill mid-way leaves a
# folder that reads as new. Hydra's log (train.log) is appended to, a journal of the folder; anything else in the
# folder is not ours to delete.
RUN_FILES = ("config.yaml", STATUS, ".hydra", "history.csv", "metrics.json", "model.pt", "best.pt", "last.pt",
             "error.txt", "order_probe.json", "tokenizer", "tensorboard", "loss_curve.png", "classification_report_*",
             "confusion_matrix_*", "attention_*.png")


def write_config(run_dir: Path, settings: TrainSettings) -> None:
    (run_dir / "config.yaml").write_text(yaml.safe_dump(asdict(settings), sort_keys=False))


def read_status(run_dir: Path) -> dict:
    try:
        return json.loads((run_dir / STATUS).read_text())
    except (OSError, ValueError):
        return {}


# Per epoch: train_seconds is the training pass alone, eval_seconds the validation after it (timed apart);
# elapsed_train_seconds adds up the training passes so far.
HISTORY_COLUMNS = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr", "train_seconds", "eval_seconds",
                   "elapsed_train_seconds", "train_tokens"]


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


def write_json(path: Path, obj: dict) -> None:
    """Atomically (temporary file, then rename): a kill mid-write leaves the previous file, never half of one."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(obj, indent=2) + "\n")
    os.replace(tmp, path)
