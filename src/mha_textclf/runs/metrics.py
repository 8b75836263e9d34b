"""metrics.json: what one run measured, one schema written by training and by the TF-IDF baseline and read by the
summaries, search and predict."""

from __future__ import annotations

import json
import platform
import time
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from mha_textclf.runs.files import METRICS, write_json

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


LIBRARIES = ["torch", "transformers", "tokenizers", "datasets", "scikit-learn", "hydra-core", "numpy", "mha-textclf"]


def library_versions() -> dict[str, str]:
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for name in LIBRARIES:
        try:
            versions[name] = version(name)
        except PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def read_metrics(run_dir: Path) -> RunMetrics:
    """A run folder's metrics.json (OSError where there is none; ValueError, TypeError or KeyError where it is not
    one this version reads)."""
    return RunMetrics.read(Path(run_dir) / METRICS)
