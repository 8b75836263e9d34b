"""A run folder's files: their names and what each holds, the one way files are written (whole or not at all), and
the readers of the files others read (config, status, history; metrics.json's is `runs.metrics.read_metrics`).

Everything this project writes where a reader or a second writer may look (a run folder, a sweep folder, a study's
folder, the tokenizer cache) goes through `write_atomically`.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mha_textclf.serving import EXPORT  # the export's format is serving's; its folder is the run's

if TYPE_CHECKING:
    import pandas as pd

CONFIG = "config.yaml"
STATUS = "status.json"
HYDRA = ".hydra"
TRAIN_LOG = "train.log"
HISTORY = "history.csv"
METRICS = "metrics.json"
MODEL = "model.pt"
BEST = "best.pt"
LAST = "last.pt"
TOKENIZER = "tokenizer"
ORDER_PROBE = "order_probe.json"
LOSS_CURVE = "loss_curve.png"
ERRORS = "errors.csv"
RELIABILITY = "reliability.png"
REPORT_PAGE = "report.html"
JOB = "job.json"
ERROR = "error.txt"
LOCK = ".lock"
# A sweep folder's own files, beside its run folders.
SWEEP = "sweep.json"
MULTIRUN = "multirun.yaml"  # Hydra's record of a sweep's command, in its folder
SUMMARY_CSV, SUMMARY_MD, SUMMARY_PAGE = "summary.csv", "summary.md", "summary.html"


def classification_report(split: str, suffix: str) -> str:
    return f"classification_report_{split}.{suffix}"


def confusion_matrix(split: str) -> str:
    return f"confusion_matrix_{split}.png"


def attention_map(slug: str) -> str:
    return f"attention_{slug}.png"


# Per epoch: train_seconds is the training pass alone, eval_seconds the validation after it (timed apart);
# elapsed_train_seconds adds up the training passes so far.
HISTORY_COLUMNS = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr", "train_seconds", "eval_seconds",
                   "elapsed_train_seconds", "train_tokens"]

# errors.csv: `position` is the text's number in its split (0-based, the split's own order); `confidence` is the
# predicted class's probability and `runner_up` the next most probable class, both after the calibration temperature,
# as predict shows them.
ERROR_COLUMNS = ["split", "position", "text", "true", "predicted", "confidence", "runner_up"]


@dataclass(frozen=True)
class RunFile:
    name: str  # a file, a folder (ending in /) or a pattern of several (<split>, <slug>)
    holds: str
    pattern: str | None  # what `overwrite=true` deletes of it; None: not the run's to delete


# What a run folder holds, in the order docs/runs.md lists it (scripts/render_docs.py renders that list from here).
RUN_FOLDER = (
    RunFile(CONFIG, "every setting the run used, resolved (paths and ${...} filled in)", CONFIG),
    RunFile(STATUS, "running | interrupted | failed | finished, the attempt, pid and host, the data's SHA-256 "
                    "(see below)", STATUS),
    # Kept by overwrite=true: the process that overwrites holds it.
    RunFile(LOCK, "empty: a live run's lock, which keeps a second process out (see below)", None),
    RunFile(f"{HYDRA}/", "Hydra's record: config.yaml (unresolved), hydra.yaml, overrides.yaml", HYDRA),
    # Hydra's log is appended to, a journal of the folder.
    RunFile(TRAIN_LOG, "the log of every start: what was decided, a line per epoch (losses, validation accuracy, "
            "training and validation seconds), the reports", None),
    RunFile(HISTORY, f"one row per epoch: {', '.join(HISTORY_COLUMNS)}", HISTORY),
    RunFile(LOSS_CURVE, "train and val loss per epoch, the reported epoch marked", LOSS_CURVE),
    RunFile(classification_report("<split>", "txt"), "sklearn report with class names (also .json) of the reported "
            "model, for val and for test (evaluated once, at the end)", "classification_report_*"),
    RunFile(confusion_matrix("<split>"), "rows: true class, normalised; titled with the model and the dataset",
            "confusion_matrix_*"),
    RunFile(ERRORS, "one row per misclassified text, validation's then test's, each split's most confident "
            f"mistakes first: {', '.join(ERROR_COLUMNS)}", ERRORS),
    RunFile(RELIABILITY, "the reliability diagram of val and test, before and after the temperature", RELIABILITY),
    RunFile(METRICS, "what the run measured (see below)", METRICS),
    RunFile(MODEL, "the reported model (trainer.final_weights: the last finished epoch by default; metrics.json: "
            "reported_epoch): state dict + model config + class names (loads with weights_only=True)", MODEL),
    RunFile(BEST, "the same for the epoch with the lowest validation loss, saved as soon as that epoch finished "
            "(metrics.json: best_epoch)", BEST),
    RunFile(LAST, "training state after the last finished epoch (for resume=)", LAST),
    RunFile(ERROR, "only when the run stopped on an error: what went wrong", ERROR),
    RunFile(ORDER_PROBE, "the order probe's texts: their probabilities and the largest difference", ORDER_PROBE),
    RunFile(f"{TOKENIZER}/", "the exact tokenizer the run used (tokenizer.json, ...)", TOKENIZER),
    RunFile("tensorboard/", "with logger=tensorboard: the event files (logger.tensorboard.subdir)", "tensorboard"),
    RunFile(attention_map("<slug>"), "one heatmap per head + the mean, for each probe sentence", "attention_*.png"),
    RunFile(REPORT_PAGE, "the run on one page (open it in a browser): its state, headline metrics, loss curves, "
            "per-class scores, confusion matrices, reliability, worst errors, probes and settings", REPORT_PAGE),
    RunFile(JOB, "only in a sweep: the job's wall time, host and process", None),
    RunFile(f"{EXPORT}/", "only after python -m export: model.onnx, model.int8.onnx, tokenizer.json, export.json, "
            "MODEL_CARD.md (docs/predict.md)", EXPORT),
)
# What a run writes, and so what `overwrite=true` deletes; config.yaml first, so that a kill mid-way leaves a folder
# that reads as new. Anything else in the folder is not ours to delete.
RUN_FILES = tuple(f.pattern for f in RUN_FOLDER if f.pattern is not None)


def write_atomically(path: Path, write: Callable[[Path], Any]) -> None:
    """`write(temporary)`, then rename the temporary onto `path`: a reader sees the old file (or folder) or the new
    one, never half of one, and a crash or a kill mid-write leaves the old one.

    The temporary lies beside `path` under a name no other writer uses (hidden, this process's id and a random
    part), so that writers sharing a folder (workers of one study, jobs filling one cache) never write into each
    other's. A file is on disk before it is renamed. A folder cannot replace another: when `path` is already a
    folder, the rename fails with OSError and the temporary is removed (another writer finished first)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.tmp")
    try:
        write(tmp)
        if tmp.is_file():
            with tmp.open("rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)


def remove_temporaries(folder: Path) -> None:
    """What `write_atomically` left behind in `folder` when its process was killed mid-write; call it only while
    no other process writes there (a run folder under its lock)."""
    for path in folder.glob(".*.tmp"):
        shutil.rmtree(path) if path.is_dir() else path.unlink(missing_ok=True)


def write_text(path: Path, text: str) -> None:
    write_atomically(path, lambda tmp: tmp.write_text(text))


def figure_png(figure: Any, **savefig: Any) -> bytes:
    """A matplotlib figure rendered as PNG (`savefig`: dpi, bbox_inches, ...): what a figure file holds, and what a
    page inlines."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", **savefig)
    return buffer.getvalue()


def write_figure(path: Path, figure: Any, **savefig: Any) -> None:
    """A matplotlib figure as a PNG file (`savefig`: dpi, bbox_inches, ...)."""
    png = figure_png(figure, **savefig)
    write_atomically(path, lambda tmp: tmp.write_bytes(png))


def write_json(path: Path, obj: dict) -> None:
    write_text(path, json.dumps(obj, indent=2) + "\n")


def write_config(run_dir: Path, settings: Any) -> None:
    """config.yaml: every setting of a run (TrainSettings, or a baseline's), as typed on a command line."""
    write_text(run_dir / CONFIG, yaml.safe_dump(asdict(settings), sort_keys=False))


def read_config(run_dir: Path, hydra_fallback: bool = False) -> dict | None:
    """The settings config.yaml holds (nested, as written), or None where there is none or it does not parse. With
    `hydra_fallback`, Hydra's unresolved .hydra/config.yaml of a run that stopped before writing its own."""
    paths = [run_dir / CONFIG] + ([run_dir / HYDRA / CONFIG] if hydra_fallback else [])
    for path in paths:
        try:
            config = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError):
            continue
        return config if isinstance(config, dict) else None
    return None


def read_status(run_dir: Path) -> dict:
    """status.json (see lifecycle.py), or {} where there is none."""
    try:
        return json.loads((run_dir / STATUS).read_text())
    except (OSError, ValueError):
        return {}


def write_history(path: Path, rows: list[dict]) -> None:
    """history.csv holding exactly `rows` (a run that continues rewrites it from its last.pt)."""
    def write(tmp: Path) -> None:
        with tmp.open("w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=HISTORY_COLUMNS, extrasaction="ignore")
            writer.writeheader()
            writer.writerows(rows)

    write_atomically(path, write)


def append_history(path: Path, row: dict) -> None:
    """Append one epoch's row to history.csv, writing the header first when the file is new. (Appended, not
    replaced: a kill mid-row leaves a partial last line, which a continued run rewrites from its last.pt.)"""
    new = not path.exists()
    with path.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=HISTORY_COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow(row)


def read_history(run_dir: Path) -> pd.DataFrame | None:
    """history.csv, one row per finished epoch; None for a run without one (a baseline, or no epoch finished)."""
    import pandas as pd  # only summaries read histories; training writes them

    path = run_dir / HISTORY
    return pd.read_csv(path) if path.exists() else None
