"""Train one attention classifier on bbc-news and write a self-describing run folder.

    python -m train model=efficient pe=true
    python -m train -m model=naive,efficient,torch pe=true,false

Configuration lives in configs/ (train.yaml is the root). This is the only module that sees the Hydra config: it
checks it, then calls the library with plain values: seed, data, tokenizer, model, train, report.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import hydra
import pandas as pd
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from mha_textclf.attention import VARIANTS
from mha_textclf.checkpoint import load_training_state, save_checkpoint
from mha_textclf.data import load_corpus, make_loader
from mha_textclf.errors import UserError
from mha_textclf.inference import attention_map, order_probe
from mha_textclf.model import ModelConfig, TextClassifier
from mha_textclf.reports import (
    append_history,
    library_versions,
    plot_attention,
    plot_loss_curve,
    slug,
    split_report,
    write_json,
)
from mha_textclf.summary import write_summary
from mha_textclf.tokenizer import encode, get_tokenizer, load_tokenizer
from mha_textclf.training import PRECISIONS, SCHEDULES, TrainConfig, evaluate, fit, resolve_device, seed_everything

log = logging.getLogger("train")


# Settings a resumed run may change: where things are and how long to train, never what is trained.
RESUMABLE_CHANGES = {"resume", "trainer.epochs", "device", "trainer.num_threads", "data.path", "tokenizer.cache_dir"}


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> float | None:
    """Train, evaluate on val and test, write the reports; returns validation accuracy (for sweepers)."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    # In a sweep a failed job must not take the others down: Hydra would re-raise only after the last job and skip
    # the end-of-sweep summary. The job records its error in its own folder instead; the summary lists it.
    in_sweep = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        metrics = train(cfg, run_dir)
    except UserError as e:
        log.error(str(e))
        if not in_sweep:
            sys.exit(2)
        (run_dir / "error.txt").write_text(str(e) + "\n")
        return None
    except Exception as e:
        if not in_sweep:
            raise
        log.exception("job failed")  # the traceback goes to this job's train.log
        (run_dir / "error.txt").write_text(f"{type(e).__name__}: {e}\n")
        return None
    if metrics["interrupted"]:
        sys.exit(128 + signal.Signals[metrics["interrupted_by"]].value)  # the shell's convention: 130 for SIGINT
    return metrics["val"]["accuracy"]


class SweepSummary(Callback):
    """At the end of a multirun, write summary.csv/.md and the comparison plots into the sweep folder."""

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        folder = Path(config.hydra.sweep.dir)
        paths = write_summary(folder)
        runs = pd.read_csv(paths["summary.csv"])
        log.info(f"sweep summary: {paths['summary.md']}\n{paths['summary.md'].read_text()}")
        failed = runs[runs["status"] == "failed"]
        if len(failed):
            log.error(f"{len(failed)} of {len(runs)} jobs failed: {', '.join(failed['run_dir'])} (see error.txt)")
            sys.exit(1)


def torch_threads(cfg: DictConfig) -> int | None:
    """Threads per job. Parallel jobs on one machine share its cores instead of each taking all of them:
    joblib with n_jobs=N gives each job cores // N threads (n_jobs=-1: one thread each); submitit gives each job
    its cpus_per_task. trainer.num_threads, when set, wins."""
    if cfg.trainer.num_threads:
        return cfg.trainer.num_threads
    launcher = HydraConfig.get().launcher
    cores = os.cpu_count() or 1
    if "n_jobs" in launcher:
        n_jobs = launcher.n_jobs or -1
        n_jobs = n_jobs if n_jobs > 0 else max(1, cores + 1 + n_jobs)  # joblib: -1 all cores, -2 all but one, ...
        return max(1, cores // n_jobs)
    if "cpus_per_task" in launcher and launcher.cpus_per_task:
        return launcher.cpus_per_task
    return None


def check_config(cfg: DictConfig) -> None:
    """Fail before any expensive work, saying which setting to change."""
    if OmegaConf.is_missing(cfg.model, "attention") or cfg.model.attention not in VARIANTS:
        raise UserError(f"Choose an attention variant: model={'|'.join(VARIANTS)} (model/base.yaml is the part "
                        "they share, not a variant).")
    problems = []
    if cfg.model.d_model % cfg.model.n_heads:
        problems.append(f"model.d_model={cfg.model.d_model} is not divisible by model.n_heads={cfg.model.n_heads}: "
                        "each head gets d_model // n_heads dimensions.")
    counts = ["trainer.epochs", "trainer.batch_size", "data.max_length", "tokenizer.vocab_size", "model.d_model",
              "model.n_heads", "model.mlp_hidden"]
    optional_counts = ["data.max_train_samples", "data.max_eval_samples", "trainer.num_threads", "trainer.patience"]
    for key in counts + optional_counts:
        value = OmegaConf.select(cfg, key)
        if value is None and key in optional_counts:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            problems.append(f"{key}={value} must be a positive whole number"
                            + (" (or null)." if key in optional_counts else "."))
    if isinstance(cfg.trainer.lr, bool) or not isinstance(cfg.trainer.lr, int | float) or not cfg.trainer.lr > 0:
        problems.append(f"trainer.lr={cfg.trainer.lr} must be a positive number.")
    if not 0 < cfg.data.val_fraction < 1:
        problems.append(f"data.val_fraction={cfg.data.val_fraction} must lie strictly between 0 and 1.")
    if cfg.trainer.precision not in PRECISIONS:
        problems.append(f"trainer.precision={cfg.trainer.precision} must be one of {', '.join(PRECISIONS)}.")
    if cfg.trainer.schedule not in SCHEDULES:
        problems.append(f"trainer.schedule={cfg.trainer.schedule} must be one of {', '.join(SCHEDULES)}.")
    if cfg.trainer.grad_clip is not None and not cfg.trainer.grad_clip > 0:
        problems.append(f"trainer.grad_clip={cfg.trainer.grad_clip} must be positive (or null for no clipping).")
    if not cfg.trainer.warmup_epochs >= 0:
        problems.append(f"trainer.warmup_epochs={cfg.trainer.warmup_epochs} must be 0 or more.")
    for key in ("model.dropout", "model.embedding_dropout", "model.token_dropout", "model.mlp_dropout",
                "trainer.label_smoothing"):
        if not 0 <= OmegaConf.select(cfg, key) < 1:
            problems.append(f"{key}={OmegaConf.select(cfg, key)} must lie in [0, 1).")
    model_fields = {f.name for f in fields(ModelConfig)}
    for key in sorted(set(cfg.model) - model_fields):  # `+model.x=...` gets past Hydra's own key check
        problems.append(f"model.{key} is not a model setting (known: {', '.join(sorted(model_fields & set(cfg.model)))}"
                        "); drop it or fix its name.")
    if cfg.pe and cfg.model.d_model % 2:
        problems.append(f"pe=true needs an even model.d_model (sin/cos pairs), got {cfg.model.d_model}.")
    if problems:
        raise UserError("Invalid configuration:\n  " + "\n  ".join(problems))


def resume_state(cfg: DictConfig) -> dict | None:
    """The training state of the run to continue, after checking that this run asks for the same training."""
    if cfg.resume is None:
        return None
    state = load_training_state(Path(cfg.resume).expanduser() / "last.pt")
    saved = _flatten(OmegaConf.to_container(OmegaConf.create(state["metadata"]["config"]), resolve=True))
    now = _flatten(OmegaConf.to_container(cfg, resolve=True))
    changed = sorted(k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k) and k not in RESUMABLE_CHANGES)
    if saved.get("trainer.epochs") != now.get("trainer.epochs") and now.get("trainer.schedule") != "constant":
        changed.append("trainer.epochs (a decaying learning-rate schedule is laid out over the original epochs)")
    if changed:
        original = shlex.join(state["metadata"]["overrides"])
        raise UserError(f"resume={cfg.resume} continues a run with other settings ({', '.join(changed)} differ). "
                        f"Repeat its overrides: python -m train {original} resume={cfg.resume}")
    log.info(f"resuming {cfg.resume} after epoch {state['epoch']}")
    return state


def _flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out |= _flatten(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def train(cfg: DictConfig, run_dir: Path) -> dict:
    check_config(cfg)
    device = resolve_device(cfg.device)
    state = resume_state(cfg)
    threads = torch_threads(cfg)
    if threads:
        torch.set_num_threads(threads)
    seed_everything(cfg.seed)
    log.info(f"run folder {run_dir}  |  model={cfg.model.attention} pe={cfg.pe} seed={cfg.seed} device={device}")

    # Data: texts and class names from the dataset, validation carved from train with the seed.
    corpus = load_corpus(cfg.data.path, cfg.data.val_fraction, cfg.seed, cfg.data.max_train_samples,
                         cfg.data.max_eval_samples)
    log.info(f"data: {len(corpus.train)} train / {len(corpus.val)} val / {len(corpus.test)} test, "
             f"classes {corpus.class_names}")

    # Tokenizer: trained on the training texts only, cached, and copied into the run folder. A resumed run keeps the
    # tokenizer it was trained with, whatever the cache holds now.
    if state:
        tokenizer = load_tokenizer(Path(cfg.resume).expanduser() / "tokenizer", cfg.data.max_length)
    else:
        tokenizer = get_tokenizer(corpus.train.texts, cfg.tokenizer.vocab_size, cfg.tokenizer.base,
                                  cfg.tokenizer.cache_dir, cfg.data.max_length)
    tokenizer.save_pretrained(run_dir / "tokenizer")
    pin = device.type == "cuda"
    loaders = {
        name: make_loader(encode(tokenizer, split.texts, cfg.data.max_length), split.labels, cfg.trainer.batch_size,
                          tokenizer.pad_token_id, shuffle=name == "train", seed=cfg.seed, pin_memory=pin,
                          group_by_length=cfg.data.group_by_length)
        for name, split in corpus.splits().items()
    }

    # Model: vocab size from the tokenizer, classes from the data, the rest from the config.
    # configs/model/ holds exactly ModelConfig's architecture fields; the rest come from the tokenizer and data.
    model_config = ModelConfig(**OmegaConf.to_container(cfg.model, resolve=True), vocab_size=len(tokenizer),
                               n_classes=len(corpus.class_names), pe=cfg.pe, pad_id=tokenizer.pad_token_id)
    model = TextClassifier(model_config).to(device)
    log.info(f"model: {model.num_parameters():,} parameters, vocab {model_config.vocab_size}")

    # Train: every finished epoch goes to history.csv and last.pt before the next starts.
    for row in state["history"] if state else []:  # a resumed run's folder tells the whole story
        append_history(run_dir / "history.csv", row)
    metadata = {"config": OmegaConf.to_container(cfg, resolve=True),
                "overrides": [o for o in HydraConfig.get().overrides.task if not o.startswith("resume=")]}
    training = TrainConfig(**{f.name: cfg.trainer[f.name] for f in fields(TrainConfig)})  # the rest: data loading
    result = fit(model, loaders["train"], loaders["val"], training, device, state_path=run_dir / "last.pt",
                 best_path=run_dir / "best.pt", resume_state=state, metadata=metadata,
                 on_epoch_end=lambda row: append_history(run_dir / "history.csv", row))
    history = result.history
    save_checkpoint(run_dir / "model.pt", model, corpus.class_names)

    # Reports: the best epoch's model (lowest validation loss) on val, then the official test split, evaluated once.
    title = f"{cfg.model.attention}, pe={cfg.pe}, seed={cfg.seed}"
    if history:
        plot_loss_curve(history, run_dir / "loss_curve.png", title=title)
    metrics = {}
    for split in ("val", "test"):
        evaluation = evaluate(model, loaders[split], device, cfg.trainer.precision)
        metrics[split] = split_report(run_dir, split, evaluation.labels, evaluation.predictions, evaluation.loss,
                                      corpus.class_names)
    train_seconds = sum(row["epoch_seconds"] for row in history)
    metrics |= {
        "model": cfg.model.attention, "pe": cfg.pe, "seed": cfg.seed, "device": str(device),
        "cls_only": cfg.model.cls_only, "group_by_length": cfg.data.group_by_length,
        "params": model.num_parameters(), "threads": torch.get_num_threads(), "epochs": len(history),
        "best_epoch": result.best_epoch, "stopped_early": result.stopped_early,
        "training": asdict(training), "regularisation": {"embedding_dropout": cfg.model.embedding_dropout,
                                                          "token_dropout": cfg.model.token_dropout,
                                                          "attention_dropout": cfg.model.dropout,
                                                          "mlp_dropout": cfg.model.mlp_dropout,
                                                          "weight_decay": cfg.trainer.weight_decay,
                                                          "label_smoothing": cfg.trainer.label_smoothing},
        "train_seconds": train_seconds,
        "epoch_seconds": [row["epoch_seconds"] for row in history],
        "tokens_per_second": sum(row["train_tokens"] for row in history) / train_seconds if history else 0.0,
        "class_names": corpus.class_names, "vocab_size": model_config.vocab_size,
        "interrupted": result.interrupted is not None, "interrupted_by": result.interrupted,
        "resumed_from": cfg.resume,
        "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "versions": library_versions(),
    }
    write_json(run_dir / "metrics.json", metrics)

    # Probes: what the heads attend to, and whether word order changes the prediction (it cannot without PE).
    for text in cfg.probes.attention:
        tokens, weights = attention_map(model, tokenizer, text)
        plot_attention(tokens, weights, title=f"{title}: {text!r}").savefig(run_dir / f"attention_{slug(text)}.png")
    probe = order_probe(model, tokenizer, corpus.class_names, list(cfg.probes.order))
    write_json(run_dir / "order_probe.json", probe)
    log.info(f"order probe {probe['texts']}: max |Δp| = {probe['max_abs_difference']:.3g}")

    status = f"INTERRUPTED by {result.interrupted} after epoch {len(history)}, " if result.interrupted else ""
    log.info(f"{status}val accuracy {metrics['val']['accuracy']:.4f}  test accuracy {metrics['test']['accuracy']:.4f}"
             f"  train {train_seconds:.1f}s  ->  {run_dir}")
    if result.interrupted:
        log.info(f"continue with: python -m train {shlex.join(metadata['overrides'])} resume={run_dir}")
    return metrics


if __name__ == "__main__":
    main()
