"""metrics.json: what one run measured, one schema written by training and by the TF-IDF baseline and read by the
summaries, search and predict."""

from __future__ import annotations

import functools
import json
import platform
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from mha_textclf.runs.files import METRICS, write_json

METRICS_FORMAT = "mha-textclf-metrics/3"  # /3: each split's confused pairs, calibration
# /2 (dataset, splits, train_samples, stages, time_to_accuracy) reads as /3 without what /3 added.
READABLE_FORMATS = ("mha-textclf-metrics/2", METRICS_FORMAT)
CONFUSED_PAIRS = 5  # metrics.json names this many of each split's most confused pairs of classes


def about(meaning: str, **kwargs: Any) -> Any:
    """A field that says what it holds (docs/runs.md lists metrics.json's keys from these)."""
    return field(metadata={"about": meaning}, **kwargs)


@dataclass
class SplitMetrics:
    accuracy: float = about("the share of the split's texts classified right")
    macro_f1: float = about("F1 averaged over every class of the training split, one a small split lacks included")
    loss: float | None = about("mean cross-entropy; null for a classifier without probabilities")
    n_samples: int = about("the split's texts")
    confused: list[dict] = about(f"the most confused pairs of classes, most texts first (at most {CONFUSED_PAIRS}): "
                                 "{true, predicted, count}", default_factory=list)


@dataclass
class RunMetrics:
    """metrics.json: what one run measured. Written by train and by the TF-IDF baseline, read by the summary.

    What the run was told to do is in config.yaml beside it, and the per-epoch numbers are in history.csv; nothing
    here repeats either, except what every table is grouped by (model, pe, seed, and the dataset, by name).
    """

    model: str = about("the attention variant, or the baseline's name (tfidf-words)")
    pe: bool | None = about("positional encoding; null for a baseline")
    seed: int = about("the run's seed")
    dataset: str = about("the dataset's short name (its folder or file name, or its hub id)")
    splits: dict[str, str] = about("where the train, val and test texts came from (the dataset's split, or carved)")
    train_samples: int = about("the training split's texts")
    val: SplitMetrics = about("the reported model (trainer.final_weights) on the validation split")
    test: SplitMetrics = about("the reported model on the test split, evaluated once")
    class_names: list[str] = about("the classes, from the data, in the order of the model's outputs")
    params: int = about("learned parameters (for a baseline: its linear model's weights and intercepts)")
    train_seconds: float = about("training passes only, all epochs")
    eval_seconds: float = about("validation after each epoch, all epochs (timed apart from training)")
    epochs: int = about("finished epochs (0 for a baseline)")
    best_epoch: int | None = about("the epoch with the lowest validation loss (best.pt's)")
    stopped_early: bool = about("trainer.patience ended the run before trainer.epochs")
    interrupted_by: str | None = about("SIGINT or SIGTERM when a signal stopped training, else null")
    tokens_per_second: float | None = about("real (non-padding) training tokens per training second")
    vocab_size: int | None = about("the tokenizer's size (null for a baseline without one)")
    device: str = about("where the model trained (cpu, cuda:0)")
    threads: int = about("torch's intra-op threads")
    time_to_accuracy: dict[str, float | None] = about(
        "for each level of the setting time_to_accuracy, the training seconds (validation excluded) until validation "
        "accuracy first reached it; null: never", default_factory=dict)
    stages: dict[str, dict[str, float]] = about(
        "seconds and peak memory (MB: the process's resident set; peak_cuda_mb on a GPU) of each stage: data, "
        "tokenizer, encode, fit, reports", default_factory=dict)
    unk_rate: dict[str, float] = about(
        "per split, the share of its tokens as the model sees them (truncated; [CLS], [SEP] and [PAD] not counted) "
        "that are [UNK]; empty for a baseline", default_factory=dict)
    reported_epoch: int | None = about("the epoch whose weights model.pt holds and val/test describe "
                                       "(trainer.final_weights)", default=None)
    calibration: dict | None = about(
        "the temperature fitted on the validation split (predict divides the logits by it) and, per split, the "
        "expected calibration error (15 equal-width confidence bins) before (ece) and after (ece_calibrated): "
        "{temperature, bins, val: {ece, ece_calibrated}, test: {...}}; null for a baseline", default=None)
    adapted: dict[str, str] = about("settings left null that the run decided from its corpus: "
                                    "{key: \"value: why\"}", default_factory=dict)
    finished_at: str = about("when the reports were written",
                             default_factory=lambda: time.strftime("%Y-%m-%dT%H:%M:%S%z"))
    versions: dict[str, str] = about("Python, the platform and the libraries that trained it",
                                     default_factory=lambda: library_versions())
    format: str = about(f"{METRICS_FORMAT}: what reads it checks it", default=METRICS_FORMAT)

    def write(self, path: Path) -> None:
        write_json(path, asdict(self))

    @classmethod
    def read(cls, path: Path) -> RunMetrics:
        data = json.loads(Path(path).read_text())
        if not isinstance(data, dict) or data.get("format") not in READABLE_FORMATS:
            raise ValueError(f"{path} is not a {METRICS_FORMAT} file (written by an older version?)")
        return cls(**data | {split: SplitMetrics(**data[split]) for split in ("val", "test")})


LIBRARIES = ["torch", "transformers", "tokenizers", "datasets", "scikit-learn", "hydra-core", "numpy", "mha-textclf"]


def library_versions() -> dict[str, str]:
    return dict(_library_versions())


@functools.cache
def _library_versions() -> tuple[tuple[str, str], ...]:
    # Once per process: each lookup scans the installed distributions' metadata (about 2 ms per library).
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return tuple(versions.items())


def read_metrics(run_dir: Path) -> RunMetrics:
    """A run folder's metrics.json (OSError where there is none; ValueError, TypeError or KeyError where it is not
    one this version reads)."""
    return RunMetrics.read(Path(run_dir) / METRICS)
