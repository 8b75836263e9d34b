"""TensorBoard and MLflow get what the run folder has, read back with their own readers and compared with
history.csv and metrics.json."""

import sys

import pandas as pd
import pytest
import yaml

from conftest import optional, settings_for, train_in_process
from mha_textclf import pipeline
from mha_textclf.errors import UserError
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import flat
from mha_textclf.tracking import Trackers
from mha_textclf.training import lr_factor


@pytest.fixture(scope="module", autouse=True)
def tracking_extra():
    """Checked when this module's tests run, not at collection: every xdist worker collects every module, and
    importing MLflow costs a second."""
    optional("mlflow", "tracking")
    optional("tensorboard", "tracking")


SMOKE = ["experiment=smoke", "trainer.epochs=3", "probes.attention=[]"]
ONE_EPOCH = ["experiment=smoke", "trainer.epochs=1", "probes.attention=[]", "probes.order=[]"]


@pytest.fixture(scope="module")
def tracked(data_dir, tmp_path_factory):
    """One smoke run with both loggers, into a private MLflow store."""
    root = tmp_path_factory.mktemp("tracked")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    metrics = train_in_process(root / "run", *SMOKE, "logger=many", f"logger.mlflow.tracking_uri={uri}",
                               data_dir=data_dir)
    return root / "run", uri, metrics


@pytest.mark.slow
def test_tensorboard_holds_every_step_and_epoch(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir, _, metrics = tracked
    history = pd.read_csv(run_dir / "history.csv")
    events = EventAccumulator(str(run_dir / "tensorboard")).Reload()
    scalars = {tag: events.Scalars(tag) for tag in events.Tags()["scalars"]}
    assert [e.step for e in scalars["val/loss"]] == history["epoch"].tolist()
    assert [e.value for e in scalars["val/loss"]] == pytest.approx(history["val_loss"].tolist(), rel=1e-6)
    assert [e.value for e in scalars["val/accuracy"]] == pytest.approx(history["val_accuracy"].tolist(), rel=1e-6)
    for column in ("train_seconds", "eval_seconds"):
        assert [e.value for e in scalars[f"time/{column}"]] == pytest.approx(history[column].tolist())
    steps = [e.step for e in scalars["train/loss"]]
    assert steps == list(range(1, len(steps) + 1)) and len(steps) == 3 * 3  # 3 epochs of 48 texts in batches of 16
    # Each step's loss: an epoch's three (equal batches of 16) average to its train_loss in history.csv.
    losses = [e.value for e in scalars["train/loss"]]
    assert [sum(losses[i : i + 3]) / 3 for i in (0, 3, 6)] == pytest.approx(history["train_loss"].tolist(), rel=1e-5)
    # Each step's learning rate, the one it stepped with: warm-up over the first epoch, then cosine decay.
    trainer = settings_for(*SMOKE).trainer
    assert [e.step for e in scalars["train/lr"]] == steps
    assert [e.value for e in scalars["train/lr"]] == pytest.approx(
        [trainer.lr * lr_factor(step - 1, 9, 3, trainer.schedule) for step in steps], rel=1e-6)
    assert scalars["train/lr"][0].value == pytest.approx(trainer.lr / 3)  # (the reference is not the peak rate)
    assert scalars["final/test_accuracy"][0].value == pytest.approx(metrics.test.accuracy)
    # The tags (as text) and the resolved settings as flat parameters, beside the final metrics (hparams).
    (tags,) = events.Tensors("tags/text_summary")
    assert tags.tensor_proto.string_val[0].decode().split("  \n") == [
        "model: efficient", "pe: False", "seed: 0", "dataset: bbc-news"]
    from tensorboard.plugins.hparams import plugin_data_pb2

    start = plugin_data_pb2.HParamsPluginData.FromString(
        events.PluginTagToContent("hparams")["_hparams_/session_start_info"]).session_start_info
    config = flat(yaml.safe_load((run_dir / "config.yaml").read_text()))  # the settings the run used, resolved
    assert {k: v.string_value for k, v in start.hparams.items()} == {k: str(v) for k, v in config.items()}


@pytest.mark.slow
def test_mlflow_holds_params_tags_metrics_and_artifacts(tracked):
    from mlflow import MlflowClient

    run_dir, uri, metrics = tracked
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("mha-textclf").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert {k: run.data.tags[k] for k in ("model", "pe", "seed", "dataset")} == {
        "model": "efficient", "pe": "False", "seed": "0", "dataset": "bbc-news"}
    assert run.data.params["trainer.epochs"] == "3" and run.data.params["data.max_train_samples"] == "48"
    history = pd.read_csv(run_dir / "history.csv")
    val = client.get_metric_history(run.info.run_id, "val/accuracy")
    assert [m.value for m in sorted(val, key=lambda m: m.step)] == pytest.approx(history["val_accuracy"].tolist())
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 9
    assert run.data.metrics["final/val_accuracy"] == pytest.approx(metrics.val.accuracy)
    # Which epoch the final metrics describe (the last, by default), and which had the lowest validation loss.
    assert run.data.metrics["final/reported_epoch"] == metrics.reported_epoch == 3
    assert run.data.metrics["final/best_epoch"] == metrics.best_epoch
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert (run_dir.parent / "mlartifacts").is_dir()  # beside the store, not ./mlruns
    assert {"metrics.json", "history.csv", "config.yaml", "loss_curve.png", "confusion_matrix_test.png"} <= artifacts
    assert not any(a.endswith(".pt") for a in artifacts)  # reports and plots, not checkpoints
    # Every report and plot of the run folder: all its files but the checkpoints and the hidden lock
    # (classification_report_*.txt included), and not the tokenizer's or TensorBoard's folders; report.html shows the
    # run's final state, so it is written after the run is marked finished, once its trackers have closed.
    assert artifacts == {p.name for p in run_dir.iterdir()
                         if p.is_file() and p.suffix != ".pt" and not p.name.startswith(".")} - {"report.html"}


@pytest.mark.slow
def test_mlflow_holds_each_epoch_under_its_epoch_and_each_step_under_its_step(tracked):
    """Each logger records the training loss and learning rate of every step (train/loss, train/lr), and the validation
    loss and accuracy and the training and validation seconds of every epoch (val/..., time/...): in MLflow too, each
    value under its own step, the epoch's number for history.csv's rows and the optimiser step's (counted over the run,
    from 1) for every step, so that its charts draw them in order."""
    from mlflow import MlflowClient

    run_dir, uri, _ = tracked
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("mha-textclf").experiment_id])
    history = pd.read_csv(run_dir / "history.csv")

    def by_step(name):
        return {m.step: m.value for m in client.get_metric_history(run.info.run_id, name)}

    for name, column in (("val/loss", "val_loss"), ("val/accuracy", "val_accuracy"),
                         ("time/train_seconds", "train_seconds"), ("time/eval_seconds", "eval_seconds")):
        assert by_step(name) == pytest.approx(dict(zip(history["epoch"], history[column], strict=True))), name
    trainer = settings_for(*SMOKE).trainer
    assert by_step("train/lr") == pytest.approx(
        {step: trainer.lr * lr_factor(step - 1, 9, 3, trainer.schedule) for step in range(1, 10)})
    losses = by_step("train/loss")
    assert sorted(losses) == list(range(1, 10))  # 3 epochs of 48 texts in batches of 16
    assert [sum(losses[s] for s in (i + 1, i + 2, i + 3)) / 3 for i in (0, 3, 6)] == pytest.approx(
        history["train_loss"].tolist(), rel=1e-5)


@pytest.mark.slow
def test_the_store_from_the_environment_and_an_experiment_named_in_the_settings(data_dir, tmp_path, monkeypatch):
    """MLFLOW_TRACKING_URI points at the store; logger.mlflow.experiment wins over the sweep's name. (The jobs of a
    sweep in one experiment named after it, in the default store: test_end_to_end.py's multirun.)"""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(tmp_path)  # (where the default store would land)
    train_in_process(tmp_path / "run", *ONE_EPOCH, "logger=mlflow", "logger.mlflow.experiment=mine", data_dir=data_dir,
                     sweep="sweep 2026-11-22_10-00-00")
    assert not (tmp_path / "outputs").exists()
    client = MlflowClient(uri)
    assert [e.name for e in client.search_experiments() if e.name != "Default"] == ["mine"]
    (run,) = client.search_runs([client.get_experiment_by_name("mine").experiment_id])
    assert run.info.run_name == "run" and run.info.status == "FINISHED"
    assert run.data.tags["sweep"] == "sweep 2026-11-22_10-00-00"  # still tagged with its sweep


@pytest.mark.slow
def test_mlflow_holds_every_resolved_setting_as_a_flat_parameter_whole(tracked):
    """Each logger records the resolved settings as flat parameters (trainer.lr, ...): MLflow, as TensorBoard, holds
    every setting of the run's config.yaml, each value whole (the store's URI, a long one, too)."""
    from mlflow import MlflowClient

    run_dir, uri, _ = tracked
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("mha-textclf").experiment_id])
    config = flat(yaml.safe_load((run_dir / "config.yaml").read_text()))  # the settings the run used, resolved
    assert run.data.params == {k: str(v) for k, v in config.items()}
    assert run.data.params["logger.mlflow.tracking_uri"] == uri and len(uri) > 40


def test_logger_mlflow_tracking_uri_wins_over_the_environment(tmp_path, monkeypatch):
    """logger.mlflow.tracking_uri, or else MLFLOW_TRACKING_URI, points MLflow at another store (the setting's help:
    "null: $MLFLOW_TRACKING_URI"): given both, the setting's store records the run, and the environment's is not even
    created."""
    from mha_textclf.settings import LoggerSettings, MLflowSettings
    from mha_textclf.tracking import open_trackers

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'from-env.db'}")
    setting = f"sqlite:///{tmp_path / 'from-setting.db'}"
    logger = LoggerSettings(mlflow=MLflowSettings(enabled=True, tracking_uri=setting))
    (tracker,) = open_trackers(logger, tmp_path / "run", None).trackers
    assert tracker.client.get_experiment(tracker.experiment_id).name == "mha-textclf"
    assert (tmp_path / "from-setting.db").is_file() and not (tmp_path / "from-env.db").exists()


@pytest.mark.slow
def test_a_logger_without_its_packages_names_the_extra(data_dir, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    with pytest.raises(UserError, match=r'the `tracking` extra: pip install -e "\.\[tracking\]"'):
        train_in_process(tmp_path, *SMOKE, "logger=mlflow", data_dir=data_dir)
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_tensorboard_without_its_packages_names_the_extra(data_dir, tmp_path, monkeypatch):
    """A logger without its extra gets the `tracking` extra's message, TensorBoard's too (its writer imports the
    tensorboard package)."""
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    with pytest.raises(UserError, match=r'logger=tensorboard needs the optional packages of the `tracking` extra: '
                                        r'pip install -e "\.\[tracking\]"'):
        train_in_process(tmp_path, *SMOKE, "logger=tensorboard", data_dir=data_dir)
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.slow
def test_a_run_that_fails_is_recorded_as_failed(data_dir, tmp_path):
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    with pytest.raises(UserError, match="became nan"):
        train_in_process(tmp_path / "run", *SMOKE, "trainer.lr=1e30", "trainer.batch_size=4", "logger=many",
                         f"logger.mlflow.tracking_uri={uri}", data_dir=data_dir)
    client = MlflowClient(uri)
    (run,) = client.search_runs([client.get_experiment_by_name("mha-textclf").experiment_id])
    assert run.info.status == "FAILED"


def test_logger_settings_while_the_logger_is_off_are_a_mistake():
    with pytest.raises(UserError, match=r"logger\.mlflow\.experiment=foo: mlflow logging is off; add "
                                         r"logger=mlflow \(or logger=many\)\."):
        settings_for("logger.mlflow.experiment=foo")
    assert settings_for("logger=mlflow", "logger.mlflow.experiment=foo").logger.mlflow.experiment == "foo"


@pytest.mark.slow
def test_a_tracking_uri_mlflow_cannot_use_is_a_clear_error(data_dir, tmp_path):
    with pytest.raises(UserError, match="MLflow cannot record runs at 'foo://bar'"):
        train_in_process(tmp_path, *SMOKE, "logger=mlflow", "logger.mlflow.tracking_uri=foo://bar",
                         data_dir=data_dir)


class Recorder:
    """A tracker that keeps what it was given."""

    def __init__(self):
        self.logged, self.finished = [], []

    def start(self, params, tags):
        self.tags = tags

    def log(self, values, step):
        self.logged.append((step, values))

    def finish(self, final, run_dir, status):
        self.finished.append((final, status))


class FailsAtFinish(Recorder):
    def finish(self, final, run_dir, status):
        raise ConnectionError("the tracking server went away")


class FailsAtLog(Recorder):
    def log(self, values, step):
        raise ConnectionError("the tracking server went away")


def test_mlflow_holds_every_step_of_a_run_longer_than_one_batch_of_metrics(tmp_path):
    """Each logger records the training loss and learning rate of every step (train/loss, train/lr): MLflow, which gets
    them in batches, holds all 600 steps of a run (1200 values, as 12 epochs of 50 steps give: more than one batch),
    each under its step, the final metrics under step 0, and nothing twice."""
    from mlflow import MlflowClient

    from mha_textclf.tracking import MLflowTracker

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = MLflowTracker(uri, "long", "run")
    tracker.start({"trainer.epochs": "12"}, {"model": "efficient"})
    steps = range(1, 601)
    for step in steps:
        tracker.log({"train/loss": 1 / step, "train/lr": step * 1e-6}, step)
    tracker.finish({"final/val_accuracy": 0.5}, None, "FINISHED")
    client = MlflowClient(uri)
    history = {name: sorted((m.step, m.value) for m in client.get_metric_history(tracker.run_id, name))
               for name in ("train/loss", "train/lr", "final/val_accuracy")}
    assert history["train/loss"] == [(step, pytest.approx(1 / step)) for step in steps]
    assert history["train/lr"] == [(step, pytest.approx(step * 1e-6)) for step in steps]
    assert history["final/val_accuracy"] == [(0, 0.5)]
    assert client.get_run(tracker.run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_a_tracker_that_fails_only_warns_and_the_run_counts(data_dir, tmp_path, monkeypatch, caplog):
    """The run folder is the record: a tracker failing while finishing only warns (the others still finish), one
    failing while logging stops logging (the others go on), and the run ends as if nothing had happened."""
    healthy, at_finish, at_log = Recorder(), FailsAtFinish(), FailsAtLog()
    monkeypatch.setattr(pipeline, "open_trackers", lambda *args: Trackers([at_finish, at_log, healthy]))
    metrics = train_in_process(tmp_path, *SMOKE, "trainer.epochs=1", data_dir=data_dir)
    assert metrics.interrupted_by is None and RunMetrics.read(tmp_path / "metrics.json") == metrics
    assert (tmp_path / "model.pt").is_file() and (tmp_path / "order_probe.json").is_file()
    assert "FailsAtFinish could not finish: ConnectionError: the tracking server went away" in caplog.text
    assert "FailsAtLog stopped logging: ConnectionError" in caplog.text
    ((final, status),) = healthy.finished
    assert status == "FINISHED" and final["final/test_accuracy"] == metrics.test.accuracy
    assert [step for step, values in healthy.logged if "val/loss" in values] == [1]
    assert sum("train/loss" in values for _, values in healthy.logged) == 3  # 48 texts in batches of 16
