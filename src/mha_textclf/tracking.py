"""Experiment tracking: what a run logs to TensorBoard and MLflow, beside its own run folder.

`open_trackers` opens the loggers the settings ask for (none by default; configs/logger/). Each gets the resolved
settings as flat parameters, tags (model, pe, seed, dataset), the training loss and learning rate of every step,
validation loss and accuracy and the seconds of every epoch, and the final validation and test metrics; MLflow also
gets the run folder's reports and plots as artifacts. The packages are an optional extra: `pip install -e
".[tracking]"`.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from mha_textclf.errors import UserError
from mha_textclf.settings import LoggerSettings

log = logging.getLogger(__name__)

DEFAULT_MLFLOW_URI = "sqlite:///outputs/mlflow.db"  # a file beside the runs; `mlflow ui --backend-store-uri` reads it
DEFAULT_EXPERIMENT = "mha-textclf"
# What MLflow gets of a run folder: reports and plots, not checkpoints or the tokenizer.
ARTIFACTS = ("*.png", "*.json", "*.txt", "*.csv", "config.yaml")


def _require(module: str, logger: str):
    try:
        return __import__(module, fromlist=["_"])
    except ImportError as e:
        raise UserError(f"logger={logger} needs the optional packages of the `tracking` extra: "
                        'pip install -e ".[tracking]" (or leave the logger out).') from e


class TensorBoardTracker:
    """Event files in the run folder: `tensorboard --logdir outputs` shows every run side by side."""

    def __init__(self, run_dir: Path, subdir: str):
        writer_module = _require("torch.utils.tensorboard", "tensorboard")
        self.writer = writer_module.SummaryWriter(log_dir=str(run_dir / subdir))

    def start(self, params: dict[str, str], tags: dict[str, str]) -> None:
        self.params = params
        self.writer.add_text("tags", "  \n".join(f"{k}: {v}" for k, v in tags.items()))

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)

    def finish(self, final: dict[str, float], run_dir: Path | None, status: str) -> None:
        if final:  # hparams with the final metrics, in this run's own folder: TensorBoard's HPARAMS tab compares runs
            self.writer.add_hparams(self.params, final, run_name=".")
        self.writer.close()


class MLflowTracker:
    """One MLflow run per training run, in an experiment shared by the jobs of one sweep."""

    def __init__(self, tracking_uri: str | None, experiment: str, run_name: str):
        mlflow = _require("mlflow", "mlflow")
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_MLFLOW_URI
        # A local SQLite store keeps its artifacts beside it (MLflow would put them in ./mlruns, wherever that is).
        database = Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None
        if database is not None:
            database.parent.mkdir(parents=True, exist_ok=True)
        self.artifacts = (database.parent / "mlartifacts").resolve().as_uri() if database is not None else None
        self.entities = __import__("mlflow.entities", fromlist=["_"])
        try:
            self.client = mlflow.MlflowClient(uri)
            self.experiment_id = self._experiment(experiment)
        except Exception as e:
            raise UserError(f"MLflow cannot record runs at {uri!r} ({type(e).__name__}: {str(e).splitlines()[0]}); "
                            "give logger.mlflow.tracking_uri (or MLFLOW_TRACKING_URI) a sqlite:///<file>.db, a "
                            "folder, or an http(s) tracking server.") from e
        self.run_name, self.run_id = run_name, None
        self.pending: list = []

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name, artifact_location=self.artifacts)
        except Exception:  # a parallel sweep job created it a moment ago
            return self.client.get_experiment_by_name(name).experiment_id

    def start(self, params: dict[str, str], tags: dict[str, str]) -> None:
        run = self.client.create_run(self.experiment_id, run_name=self.run_name, tags=tags)
        self.run_id = run.info.run_id
        items = [self.entities.Param(k, v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):  # MLflow takes at most 100 parameters per call
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def log(self, values: dict[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        self.pending += [self.entities.Metric(k, float(v), now, step) for k, v in values.items()]
        if len(self.pending) >= 500:
            self.flush()

    def flush(self) -> None:
        # Metrics go in batches: a call per training step would cost an SQLite transaction per step.
        for i in range(0, len(self.pending), 1000):
            self.client.log_batch(self.run_id, metrics=self.pending[i : i + 1000])
        self.pending = []

    def finish(self, final: dict[str, float], run_dir: Path | None, status: str) -> None:
        if self.run_id is None:  # the run failed before it started logging
            return
        self.log(final, step=0)
        self.flush()
        for pattern in ARTIFACTS if run_dir is not None else ():
            for path in sorted(run_dir.glob(pattern)):
                self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, status)


class Trackers:
    """The loggers a run writes to, as one: `log` per step and per epoch, `finish` at the end. As a context, it
    finishes them as FAILED if the run raises before it finished them itself."""

    def __init__(self, trackers: list):
        self.trackers, self.finished = trackers, False

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        if not self.finished:
            self.finish({}, None, "FAILED")

    def start(self, params: dict[str, str], tags: dict[str, str]) -> None:
        for tracker in self.trackers:
            tracker.start(params, tags)

    def log(self, values: dict[str, float], step: int) -> None:
        for tracker in list(self.trackers):
            try:
                tracker.log(values, step)
            except Exception as e:  # the run goes on, recorded in its own folder; this tracker stops
                log.warning(f"{type(tracker).__name__} stopped logging: {type(e).__name__}: {e}")
                self.trackers.remove(tracker)

    def finish(self, final: dict[str, float], run_dir: Path | None, status: str = "FINISHED") -> None:
        """status: FINISHED, KILLED (stopped by a signal) or FAILED; `run_dir`: whose reports MLflow keeps."""
        self.finished = True
        for tracker in self.trackers:
            try:
                tracker.finish(final, run_dir, status)
            except Exception as e:  # the run's own folder has everything; a tracking hiccup must not lose it
                log.warning(f"{type(tracker).__name__} could not finish: {type(e).__name__}: {e}")


def open_trackers(settings: LoggerSettings, run_dir: Path, experiment: str | None) -> Trackers:
    """The loggers the settings ask for. MLflow's experiment is logger.mlflow.experiment where it is set, else
    `experiment` (the sweep's name for the jobs of a sweep, None for a single run), else mha-textclf."""
    trackers = []
    if settings.tensorboard.enabled:
        trackers.append(TensorBoardTracker(run_dir, settings.tensorboard.subdir))
    if settings.mlflow.enabled:
        name = settings.mlflow.experiment or experiment or DEFAULT_EXPERIMENT
        trackers.append(MLflowTracker(settings.mlflow.tracking_uri, name, run_dir.name))
    return Trackers(trackers)
