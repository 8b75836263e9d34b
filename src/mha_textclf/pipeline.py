"""The training pipeline, without Hydra: `train(settings, run_dir)` reads top to bottom: device, data, tokenizer,
model, fit, reports, probes, and leaves a self-describing run folder (docs/runs.md, "What a run leaves behind").

The entry points (`python -m train`, `python -m search`) compose the typed settings and call `train`; tests call it
directly.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import DataLoader
from transformers import PreTrainedTokenizerBase

from mha_textclf import resolve
from mha_textclf.calibration import BINS, fit_temperature, reliability, softmax
from mha_textclf.data.batches import make_loader
from mha_textclf.data.corpus import Corpus, load_corpus
from mha_textclf.inference import attention_map, order_probe
from mha_textclf.inputs import InputCache
from mha_textclf.memory import peak_memory_mb, reset_peak_memory
from mha_textclf.model import ModelConfig, TextClassifier
from mha_textclf.pages.run import write_run_page
from mha_textclf.reports import (
    error_rows,
    plot_attention,
    plot_loss_curve,
    plot_reliability,
    slug,
    split_report,
    time_to_accuracy,
    write_errors,
)
from mha_textclf.resolve import Resolved
from mha_textclf.runs import files, lifecycle
from mha_textclf.runs.checkpoint import save_checkpoint
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import TokenizerSettings, TrainSettings, flat, show
from mha_textclf.tokenizer.cache import get_tokenizer, load_tokenizer
from mha_textclf.tokenizer.encoding import encode, unknown_rate, unknown_rate_warning
from mha_textclf.tracking import open_trackers
from mha_textclf.training import (
    FitResult,
    StopOnSignal,
    balanced_class_weights,
    evaluate,
    fit,
    resolve_device,
    seed_everything,
)

log = logging.getLogger("train")


def train(settings: TrainSettings, run_dir: Path, overrides: Sequence[str] = (), threads: int | None = None,
          sweep: str | None = None, on_epoch_end: Callable[[dict], bool | None] = lambda row: None,
          on_start: Callable[[], None] = lambda: None, inputs: InputCache | None = None) -> RunMetrics:
    """Train, evaluate on val and test, and write the run folder `run_dir` (see docs/runs.md).

    A folder that already holds this run is continued after its last finished epoch, or, finished, only reported
    (see lifecycle.py). `overrides` are the command-line settings, recorded so that an interrupted run can say how
    to resume it; `threads` is the launcher's share of the cores (trainer.num_threads wins); `sweep` names the sweep
    or study the run belongs to (MLflow puts its runs in one experiment); `on_start()` runs once the folder is this
    run's (the entry point records Hydra's config there); `on_epoch_end(row)` runs once an epoch is on disk, and
    stops training by returning true (the hyperparameter search prunes there); `inputs` holds the corpus, tokenizer
    and encodings of earlier runs in this process, to reuse where this run's settings decide them the same way (the
    search's trials share one; without it everything is built afresh).
    """
    device = resolve_device(settings.device)
    with lifecycle.claim(run_dir, settings, list(overrides)) as start:
        if start.finished is not None:
            if not (run_dir / files.REPORT_PAGE).exists():  # a run from before the pages
                write_run_page(run_dir)
            return start.finished
        on_start()
        try:
            metrics, stop = _train(settings, run_dir, start, overrides, device, threads, sweep, on_epoch_end,
                                   inputs or InputCache())
        except BaseException as e:
            # KeyboardInterrupt: a second Ctrl-C; SystemExit: a launcher's own signal handler ended the process.
            interrupted = isinstance(e, KeyboardInterrupt | SystemExit)
            lifecycle.mark(run_dir, lifecycle.INTERRUPTED if interrupted else lifecycle.FAILED,
                            message=f"{type(e).__name__}: {e}")
            write_run_page(run_dir)  # what the run has, and its state
            raise
        lifecycle.mark(run_dir, lifecycle.INTERRUPTED if metrics.interrupted_by else lifecycle.FINISHED,
                        epochs_done=metrics.epochs, interrupted_by=metrics.interrupted_by)
        write_run_page(run_dir)
    stop.pass_on()  # under Slurm, submitit's handler of the preemption signal requeues the job and exits
    return metrics


def _train(settings: TrainSettings, run_dir: Path, start: lifecycle.Start, overrides: Sequence[str],
           device: torch.device, threads: int | None, sweep: str | None,
           on_epoch_end: Callable[[dict], bool | None], inputs: InputCache) -> tuple[RunMetrics, StopOnSignal]:
    state = start.state
    if settings.trainer.num_threads or threads:
        torch.set_num_threads(settings.trainer.num_threads or threads)
    seed_everything(settings.seed)
    log.info(f"run folder {run_dir}  |  model={settings.model.attention} pe={show(settings.pe)} seed={settings.seed} "
             f"device={device}")

    # The loggers (logger=...) close with the run: FINISHED, KILLED by a signal, or FAILED on any exception.
    with open_trackers(settings.logger, run_dir, sweep) as trackers:
        stage = Stages(device)
        prepared = prepare(settings, device, stage, state, run_dir, start.in_place, inputs)
        if prepared.resolved.decisions:  # what the corpus decided, for the same command to continue with
            files.write_config(run_dir, prepared.resolved.settings)
        return _fit_and_report(prepared, run_dir, state, overrides, device, sweep, on_epoch_end, trackers, stage)


@dataclass
class Prepared:
    """What a run trains on, and the settings it trains with: resolved against its corpus."""

    corpus: Corpus
    tokenizer: PreTrainedTokenizerBase
    loaders: dict[str, DataLoader]
    resolved: Resolved

    @property
    def settings(self) -> TrainSettings:
        return self.resolved.settings


def prepare(settings: TrainSettings, device: torch.device, stage: Stages | None = None, state: dict | None = None,
            run_dir: Path | None = None, in_place: bool = False, inputs: InputCache | None = None) -> Prepared:
    """The corpus, the tokenizer and the batches, and the settings resolved against them (resolve.py), in the order
    a run needs them; `stage` times each step. With `run_dir` the tokenizer is saved there (kept there when
    continuing `in_place`); `state` is a continued run's last.pt, whose decisions it keeps."""
    stage = stage or Stages(device)
    inputs = inputs or InputCache()
    saved = flat(state["metadata"]["config"]) if state else None
    with stage("data"):
        corpus = inputs.get("corpus", settings, lambda: load_data(settings))
    with stage("tokenizer"):
        vocabulary = resolve.vocabulary(settings, corpus.train.texts, saved)
        tokenizer = prepare_tokenizer(settings, resolve.tokenizer_settings(settings, vocabulary), corpus, run_dir,
                                      state, in_place, inputs)
    with stage("encode"):
        loaders = make_loaders(settings, corpus, tokenizer, device, inputs)
    train_lengths = [len(ids) for ids in loaders["train"].dataset.input_ids]
    return Prepared(corpus, tokenizer, loaders, resolve.resolve(settings, vocabulary, train_lengths,
                                                                     len(corpus.class_names), saved))


def _fit_and_report(prepared: Prepared, run_dir: Path, state: dict | None, overrides: Sequence[str],
                    device: torch.device, sweep: str | None, on_epoch_end: Callable[[dict], bool | None],
                    trackers, stage: Stages) -> tuple[RunMetrics, StopOnSignal]:
    settings, corpus, tokenizer, loaders = prepared.settings, prepared.corpus, prepared.tokenizer, prepared.loaders
    unk_rate = unknown_tokens(tokenizer, loaders, corpus)
    model = build_model(settings, corpus, tokenizer).to(device)
    trackers.start({k: str(v) for k, v in flat(asdict(settings)).items()},
                   {"model": settings.model.attention, "pe": str(settings.pe), "seed": str(settings.seed),
                    "dataset": corpus.name} | ({"sweep": sweep} if sweep else {}))

    # Every finished epoch goes to history.csv and last.pt before the next starts. A signal stops training after
    # the current step; the reports below are still written, for the last (or best) finished epoch.
    metadata = {"config": asdict(settings), "overrides": [o for o in overrides if not o.startswith("resume=")]}
    weights = (balanced_class_weights(corpus.train.labels, len(corpus.class_names))
               if settings.trainer.class_weights == "balanced" else None)

    def epoch_done(row: dict) -> bool | None:
        files.append_history(run_dir / files.HISTORY, row)
        trackers.log({"val/loss": row["val_loss"], "val/accuracy": row["val_accuracy"],
                      "train/epoch_loss": row["train_loss"], "time/train_seconds": row["train_seconds"],
                      "time/eval_seconds": row["eval_seconds"]}, step=row["epoch"])
        return on_epoch_end(row)

    with StopOnSignal() as stop:
        with stage("fit"):
            result = fit(model, loaders["train"], loaders["val"], settings.trainer, device, stop=stop,
                         state_path=run_dir / files.LAST, best_path=run_dir / files.BEST,
                         class_names=corpus.class_names, class_weights=weights, resume_state=state,
                         metadata=metadata, on_epoch_end=epoch_done,
                         on_step=lambda step, values: trackers.log(
                             {"train/loss": values["loss"], "train/lr": values["lr"]}, step))
        with stage("reports"):
            save_checkpoint(run_dir / files.MODEL, model, corpus.class_names)
            metrics = write_reports(settings, run_dir, model, corpus, loaders, result, device, stop, weights,
                                    stage.record, unk_rate, prepared.resolved.adapted)
            write_probes(settings, run_dir, model, tokenizer, corpus.class_names)
    metrics.stages = stage.record  # now with the reports' own stage
    metrics.write(run_dir / files.METRICS)
    trackers.finish(final_values(metrics), run_dir, "KILLED" if metrics.interrupted_by else "FINISHED")

    status = f"INTERRUPTED by {metrics.interrupted_by} after epoch {metrics.epochs}, " if metrics.interrupted_by else ""
    log.info(f"{status}val accuracy {metrics.val.accuracy:.4f}  test accuracy {metrics.test.accuracy:.4f}  "
             f"train {metrics.train_seconds:.1f}s  ->  {run_dir}")
    if metrics.interrupted_by:
        # The folder is named in the command: the same command alone would start a new, dated folder. In place, the
        # command as given (a run resumed from another that finished no epoch of its own still starts from that one).
        in_place = lifecycle.train_command(overrides, {"hydra.run.dir": run_dir})
        log.info(f"continue in place: {in_place}, or into a new folder: "
                 f"{lifecycle.train_command(metadata['overrides'], {'resume': run_dir})}")
    return metrics, stop


def final_values(metrics: RunMetrics) -> dict[str, float]:
    """What trackers record of a finished run: the reported model's validation and test metrics, and its time."""
    values = {f"final/{split}_{name}": value for split in ("val", "test")
              for name, value in vars(getattr(metrics, split)).items() if isinstance(value, int | float)}
    return values | {"final/train_seconds": metrics.train_seconds, "final/best_epoch": float(metrics.best_epoch or 0),
                     "final/reported_epoch": float(metrics.reported_epoch or 0)}


class Stages:
    """Wall time and peak memory of each stage of a run, for metrics.json and the log: `with stage("data"): ...`.

    Peak memory is the process's resident set at its highest during the stage; on a GPU, also the most torch
    allocated there (peak_cuda_mb).
    """

    def __init__(self, device: torch.device):
        self.devices = [torch.device("cpu")] + ([device] if device.type == "cuda" else [])
        self.record = {}

    @contextmanager
    def __call__(self, name: str):
        for device in self.devices:
            reset_peak_memory(device)
        start = time.perf_counter()
        yield
        self.record[name] = {"seconds": round(time.perf_counter() - start, 3)} | {
            "peak_memory_mb" if device.type == "cpu" else "peak_cuda_mb": round(peak_memory_mb(device), 1)
            for device in self.devices}
        log.info(f"stage {name}: {self.record[name]['seconds']:.1f} s, peak memory "
                 f"{self.record[name]['peak_memory_mb']:,.0f} MB")


def load_data(settings: TrainSettings) -> Corpus:
    """Texts and class names from the dataset, its splits settled (see data.load_corpus)."""
    corpus = load_corpus(settings.data, settings.seed)
    shown = corpus.class_names[:10] + (["..."] if len(corpus.class_names) > 10 else [])
    log.info(f"data {corpus.name}: {len(corpus.train)} train / {len(corpus.val)} val / {len(corpus.test)} test, "
             f"{len(corpus.class_names)} classes {shown}")
    for split, source in corpus.sources.items():
        log.info(f"  {split}: {source}")
    return corpus


def prepare_tokenizer(settings: TrainSettings, tokenizer_settings: TokenizerSettings, corpus: Corpus,
                      run_dir: Path | None, state: dict | None, in_place: bool = False,
                      inputs: InputCache | None = None) -> PreTrainedTokenizerBase:
    """Learned with `tokenizer_settings` (its size decided) on the training texts only (cached), and copied into the
    run folder. A continued run keeps the tokenizer it was trained with, whatever the cache holds now (in place, it is
    already in the folder: not written again, so a kill cannot leave it half-written)."""
    if in_place:
        return load_tokenizer(run_dir / files.TOKENIZER, settings.data.max_length)
    if state:
        tokenizer = load_tokenizer(Path(settings.resume).expanduser() / files.TOKENIZER, settings.data.max_length)
    else:
        # A copy: encoding leaves its truncation settings on the tokenizer, and they would reach the next run's
        # tokenizer.json. Keyed by the settings as given: a size left null is decided from what the key holds.
        tokenizer = copy.deepcopy((inputs or InputCache()).get("tokenizer", settings, lambda: get_tokenizer(
            corpus.train.texts, tokenizer_settings, settings.data.max_length)))
        if len(tokenizer) < tokenizer_settings.vocab_size:  # config.yaml keeps the size asked; the model, this one
            log.info(f"the tokenizer learnt {len(tokenizer)} tokens of the {tokenizer_settings.vocab_size} asked: "
                     "its training texts hold no more to learn, and the model's vocabulary is that size")
    if run_dir is not None:
        tokenizer.save_pretrained(run_dir / files.TOKENIZER)
    return tokenizer


def make_loaders(settings: TrainSettings, corpus: Corpus, tokenizer, device: torch.device,
                 inputs: InputCache | None = None) -> dict:
    encodings = (inputs or InputCache()).get("encodings", settings, lambda: {
        name: encode(tokenizer, split.texts, settings.data.max_length) for name, split in corpus.splits().items()})
    return {
        name: make_loader(encodings[name], split.labels,
                          settings.trainer.batch_size, tokenizer.pad_token_id, shuffle=name == "train",
                          seed=settings.seed, pin_memory=device.type == "cuda",
                          group_by_length=settings.data.group_by_length)
        for name, split in corpus.splits().items()
    }


def unknown_tokens(tokenizer, loaders: dict, corpus: Corpus) -> dict[str, float]:
    """The share of [UNK] among each split's tokens as the model sees them (metrics.json's unk_rate), logged, with a
    warning that says what to change where it is high."""
    rates = {name: unknown_rate(tokenizer, loader.dataset.input_ids) for name, loader in loaders.items()}
    log.info("[UNK] among the tokens: " + ", ".join(f"{name} {rate:.3%}" for name, rate in rates.items()))
    warning = unknown_rate_warning(tokenizer, rates, corpus.train.texts)
    if warning:
        log.warning(warning)
    return rates


def build_model(settings: TrainSettings, corpus: Corpus, tokenizer) -> TextClassifier:
    """The chosen architecture plus what the pipeline derives: vocabulary from the tokenizer, classes from the data."""
    config = ModelConfig(**asdict(settings.model), vocab_size=len(tokenizer), n_classes=len(corpus.class_names),
                         pe=settings.pe, max_length=settings.data.max_length, pad_id=tokenizer.pad_token_id)
    model = TextClassifier(config)
    log.info(f"model: {model.num_parameters():,} parameters, vocab {config.vocab_size}")
    return model


def _title(settings: TrainSettings) -> str:
    return f"{settings.model.attention}, pe={settings.pe}, seed={settings.seed}"


def write_reports(settings: TrainSettings, run_dir: Path, model: TextClassifier, corpus: Corpus, loaders: dict,
                  result: FitResult, device: torch.device, stop: StopOnSignal,
                  class_weights: torch.Tensor | None = None, stage_record: dict | None = None,
                  unk_rate: dict[str, float] | None = None, adapted: dict[str, str] | None = None) -> RunMetrics:
    """The reported model (trainer.final_weights) on val, then on the test split, evaluated once; metrics.json.

    A signal that arrives meanwhile (`stop` caught it) lets the reports finish and is recorded in metrics.json.
    """
    history = result.history
    if history:
        figure = plot_loss_curve(history, title=_title(settings), reported_epoch=result.reported_epoch)
        files.write_figure(run_dir / files.LOSS_CURVE, figure, dpi=120)
    splits, evaluations = {}, {}
    source = f"{settings.model.attention}, pe={settings.pe} on {corpus.name}"
    for split in ("val", "test"):
        evaluation = evaluations[split] = evaluate(model, loaders[split], device, settings.trainer.precision,
                                                   class_weights)
        splits[split] = split_report(run_dir, split, evaluation.labels, evaluation.predictions, evaluation.loss,
                                     corpus.class_names, source)
    calibration = calibrate(run_dir, evaluations, _title(settings))
    write_errors(run_dir / files.ERRORS, [  # with the probabilities predict shows: calibrated
        row for split, evaluation in evaluations.items()
        for row in error_rows(split, evaluation.positions, evaluation.labels,
                              softmax(evaluation.logits, calibration["temperature"]), getattr(corpus, split).texts,
                              corpus.class_names)])
    train_seconds = sum(row["train_seconds"] for row in history)
    metrics = RunMetrics(
        model=settings.model.attention, pe=settings.pe, seed=settings.seed, dataset=corpus.name,
        splits=corpus.sources, train_samples=len(corpus.train), val=splits["val"], test=splits["test"],
        class_names=corpus.class_names, params=model.num_parameters(), train_seconds=train_seconds,
        eval_seconds=sum(row["eval_seconds"] for row in history), epochs=len(history),
        best_epoch=result.best_epoch, reported_epoch=result.reported_epoch, stopped_early=result.stopped_early,
        interrupted_by=stop.signal,
        tokens_per_second=sum(row["train_tokens"] for row in history) / train_seconds if history else None,
        vocab_size=model.config.vocab_size, device=str(device), threads=torch.get_num_threads(),
        time_to_accuracy=time_to_accuracy(history, settings.time_to_accuracy),
        stages=dict(stage_record or {}), unk_rate=dict(unk_rate or {}), calibration=calibration,
        adapted=dict(adapted or {}))
    metrics.write(run_dir / files.METRICS)
    return metrics


def calibrate(run_dir: Path, evaluations: dict, title: str) -> dict:
    """Fit the temperature on validation (calibration.py), measure the expected calibration error of each split
    before and after it, and draw the reliability diagram; return metrics.json's `calibration`."""
    temperature = fit_temperature(evaluations["val"].logits, np.asarray(evaluations["val"].labels))
    # The temperature unrounded: predict divides by exactly the number that made errors.csv's probabilities.
    calibration, diagrams = {"temperature": temperature, "bins": BINS}, {}
    for split, evaluation in evaluations.items():
        labels = np.asarray(evaluation.labels)
        before = reliability(softmax(evaluation.logits), labels)
        after = reliability(softmax(evaluation.logits, temperature), labels)
        calibration[split] = {"ece": round(before.ece, 4), "ece_calibrated": round(after.ece, 4)}
        diagrams[split] = before, after
    files.write_figure(run_dir / files.RELIABILITY, plot_reliability(diagrams, temperature, title), dpi=110)
    log.info(f"calibration: temperature {temperature:.3f}; ECE " + ", ".join(
        f"{split} {calibration[split]['ece']:.4f} -> {calibration[split]['ece_calibrated']:.4f}"
        for split in evaluations))
    return calibration


def write_probes(settings: TrainSettings, run_dir: Path, model: TextClassifier, tokenizer,
                 class_names: list[str]) -> None:
    """What the heads attend to, and whether word order changes the prediction (it cannot without PE or bigrams)."""
    for text in settings.probes.attention:
        tokens, weights = attention_map(model, tokenizer, text)
        figure = plot_attention(tokens, weights, title=f"{_title(settings)}: {text!r}")
        files.write_figure(run_dir / files.attention_map(slug(text)), figure)
    if settings.probes.order:
        probe = order_probe(model, tokenizer, class_names, settings.probes.order)
        files.write_json(run_dir / files.ORDER_PROBE, probe)
        log.info(f"order probe {probe['texts']}: max |Δp| = {probe['max_abs_difference']:.3g}")
