"""The training loop: seeding, device choice, AdamW epochs with validation, and evaluation."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from mha_textclf.errors import UserError

log = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device


def resolve_device(name: str) -> torch.device:
    """`auto` → cuda when available, else cpu; an explicit cuda request without a GPU is an error, not a fallback."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"device={name} but PyTorch sees no CUDA GPU (torch {torch.__version__}); "
                        "use device=cpu or device=auto.")
    try:
        return torch.device(name)
    except RuntimeError as e:
        raise UserError(f"device={name!r} is not a device name; use auto, cpu, cuda or cuda:N.") from e


@dataclass
class Evaluation:
    loss: float
    labels: list[int]
    predictions: list[int]

    @property
    def accuracy(self) -> float:
        return float(np.mean(np.array(self.labels) == np.array(self.predictions)))


def _to(batch: dict[str, torch.Tensor], device: torch.device) -> dict[str, torch.Tensor]:
    return {k: v.to(device, non_blocking=True) for k, v in batch.items()}


@torch.no_grad()
def evaluate(model: nn.Module, loader: DataLoader, device: torch.device) -> Evaluation:
    """Mean cross-entropy over all samples, with labels and argmax predictions in loader order."""
    model.eval()
    total_loss, labels, predictions = 0.0, [], []
    for batch in loader:
        batch = _to(batch, device)
        logits = model(batch["input_ids"], batch["padding_mask"])
        total_loss += F.cross_entropy(logits, batch["labels"], reduction="sum").item()
        labels += batch["labels"].tolist()
        predictions += logits.argmax(-1).tolist()
    return Evaluation(total_loss / max(len(labels), 1), labels, predictions)


def fit(
    model: nn.Module, train_loader: DataLoader, val_loader: DataLoader, *, epochs: int, lr: float,
    weight_decay: float, device: torch.device, on_epoch_end: Callable[[dict], None] = lambda row: None,
) -> list[dict]:
    """Train with AdamW + cross-entropy; validate after every epoch. Returns one history row per epoch.

    `on_epoch_end(row)` runs as soon as an epoch is done, so its record is on disk before the next one starts.
    Rows hold epoch, train_loss, val_loss, val_accuracy, epoch_seconds and train_tokens (real, non-padding tokens).
    """
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    history = []
    for epoch in range(1, epochs + 1):
        model.train()
        start = time.perf_counter()
        total_loss, n_samples, n_tokens = 0.0, 0, 0
        bar = tqdm(train_loader, desc=f"epoch {epoch}/{epochs}", leave=False, dynamic_ncols=True)
        for batch in bar:
            batch = _to(batch, device)
            logits = model(batch["input_ids"], batch["padding_mask"])
            loss = F.cross_entropy(logits, batch["labels"])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            B = batch["labels"].size(0)
            total_loss += loss.item() * B
            n_samples += B
            n_tokens += int((~batch["padding_mask"]).sum())
            bar.set_postfix(loss=f"{loss.item():.4f}")
        if device.type == "cuda":
            torch.cuda.synchronize(device)  # epoch time must include the queued GPU work
        train_seconds = time.perf_counter() - start
        val = evaluate(model, val_loader, device)
        row = {"epoch": epoch, "train_loss": total_loss / n_samples, "val_loss": val.loss,
               "val_accuracy": val.accuracy, "epoch_seconds": train_seconds, "train_tokens": n_tokens}
        log.info(f"epoch {epoch}/{epochs}: train_loss {row['train_loss']:.4f}  val_loss {val.loss:.4f}  "
                 f"val_accuracy {val.accuracy:.4f}  ({train_seconds:.1f}s)")
        history.append(row)
        on_epoch_end(row)
    return history
