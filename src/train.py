"""Train one attention classifier on bbc-news and write a self-describing run folder.

    python -m train model=efficient pe=true
    python -m train -m model=naive,efficient,torch pe=true,false

Configuration lives in configs/ (train.yaml is the root). This is the only module that sees the Hydra config: it
checks it, then calls the library with plain values: seed, data, tokenizer, model, train, report.
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from mha_textclf.data import load_corpus, make_loader
from mha_textclf.errors import UserError
from mha_textclf.inference import attention_map, order_probe
from mha_textclf.model import ModelConfig, TextClassifier, save_checkpoint
from mha_textclf.reports import (
    append_history,
    library_versions,
    plot_attention,
    plot_loss_curve,
    slug,
    split_report,
    write_json,
)
from mha_textclf.tokenizer import encode, get_tokenizer
from mha_textclf.training import evaluate, fit, resolve_device, seed_everything

log = logging.getLogger("train")


@hydra.main(version_base="1.3", config_path="../configs", config_name="train")
def main(cfg: DictConfig) -> float:
    """Train, evaluate on val and test, write the reports; returns validation accuracy (for sweepers)."""
    try:
        return train(cfg, Path(HydraConfig.get().runtime.output_dir))
    except UserError as e:
        log.error(str(e))
        sys.exit(2)


def check_config(cfg: DictConfig) -> None:
    """Fail before any expensive work, saying which setting to change."""
    problems = []
    if cfg.model.d_model % cfg.model.n_heads:
        problems.append(f"model.d_model={cfg.model.d_model} is not divisible by model.n_heads={cfg.model.n_heads}: "
                        "each head gets d_model // n_heads dimensions.")
    for key in ("trainer.epochs", "trainer.batch_size", "trainer.lr", "data.max_length", "tokenizer.vocab_size"):
        value = cfg[key.split(".")[0]][key.split(".")[1]]
        if not value > 0:
            problems.append(f"{key}={value} must be positive.")
    if not 0 < cfg.data.val_fraction < 1:
        problems.append(f"data.val_fraction={cfg.data.val_fraction} must lie strictly between 0 and 1.")
    if cfg.pe and cfg.model.d_model % 2:
        problems.append(f"pe=true needs an even model.d_model (sin/cos pairs), got {cfg.model.d_model}.")
    if problems:
        raise UserError("Invalid configuration:\n  " + "\n  ".join(problems))


def train(cfg: DictConfig, run_dir: Path) -> float:
    check_config(cfg)
    device = resolve_device(cfg.device)
    if cfg.trainer.num_threads:
        torch.set_num_threads(cfg.trainer.num_threads)
    seed_everything(cfg.seed)
    log.info(f"run folder {run_dir}  |  model={cfg.model.attention} pe={cfg.pe} seed={cfg.seed} device={device}")

    # Data: texts and class names from the dataset, validation carved from train with the seed.
    corpus = load_corpus(cfg.data.path, cfg.data.val_fraction, cfg.seed, cfg.data.max_train_samples,
                         cfg.data.max_eval_samples)
    log.info(f"data: {len(corpus.train)} train / {len(corpus.val)} val / {len(corpus.test)} test, "
             f"classes {corpus.class_names}")

    # Tokenizer: trained on the training texts only, cached, and copied into the run folder.
    tokenizer = get_tokenizer(corpus.train.texts, cfg.tokenizer.vocab_size, cfg.tokenizer.base,
                              cfg.tokenizer.cache_dir, cfg.data.max_length)
    tokenizer.save_pretrained(run_dir / "tokenizer")
    pin = device.type == "cuda"
    loaders = {
        name: make_loader(encode(tokenizer, split.texts, cfg.data.max_length), split.labels, cfg.trainer.batch_size,
                          tokenizer.pad_token_id, shuffle=name == "train", seed=cfg.seed, pin_memory=pin)
        for name, split in corpus.splits().items()
    }

    # Model: vocab size from the tokenizer, classes from the data, the rest from the config.
    model_config = ModelConfig(vocab_size=len(tokenizer), n_classes=len(corpus.class_names),
                               attention=cfg.model.attention, d_model=cfg.model.d_model, n_heads=cfg.model.n_heads,
                               mlp_hidden=cfg.model.mlp_hidden, bias=cfg.model.bias, dropout=cfg.model.dropout,
                               pe=cfg.pe, max_length=cfg.model.max_length, pad_id=tokenizer.pad_token_id)
    model = TextClassifier(model_config).to(device)
    log.info(f"model: {model.num_parameters():,} parameters, vocab {model_config.vocab_size}")

    history = fit(model, loaders["train"], loaders["val"], epochs=cfg.trainer.epochs, lr=cfg.trainer.lr,
                  weight_decay=cfg.trainer.weight_decay, device=device,
                  on_epoch_end=lambda row: append_history(run_dir / "history.csv", row))
    save_checkpoint(run_dir / "model.pt", model, corpus.class_names)

    # Reports: the last epoch's model on val, then the official test split, evaluated once.
    title = f"{cfg.model.attention}, pe={cfg.pe}, seed={cfg.seed}"
    plot_loss_curve(history, run_dir / "loss_curve.png", title=title)
    metrics = {}
    for split in ("val", "test"):
        result = evaluate(model, loaders[split], device)
        metrics[split] = split_report(run_dir, split, result.labels, result.predictions, result.loss,
                                      corpus.class_names)
    train_seconds = sum(row["epoch_seconds"] for row in history)
    metrics |= {
        "model": cfg.model.attention, "pe": cfg.pe, "seed": cfg.seed, "device": str(device),
        "params": model.num_parameters(), "epochs": len(history), "train_seconds": train_seconds,
        "epoch_seconds": [row["epoch_seconds"] for row in history],
        "tokens_per_second": sum(row["train_tokens"] for row in history) / train_seconds,
        "class_names": corpus.class_names, "vocab_size": model_config.vocab_size,
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
    log.info(f"val accuracy {metrics['val']['accuracy']:.4f}  test accuracy {metrics['test']['accuracy']:.4f}  "
             f"train {train_seconds:.1f}s  ->  {run_dir}")
    return metrics["val"]["accuracy"]


if __name__ == "__main__":
    main()
