"""Ask a trained model questions: class probabilities for new texts, attention maps, sensitivity to word order."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mha_textclf.data.batches import collate
from mha_textclf.errors import UserError
from mha_textclf.model import TextClassifier
from mha_textclf.predictions import check_texts
from mha_textclf.runs import files
from mha_textclf.runs.checkpoint import load_checkpoint
from mha_textclf.runs.lifecycle import FAILED, FINISHED
from mha_textclf.runs.metrics import read_metrics
from mha_textclf.tokenizer.cache import load_tokenizer
from mha_textclf.tokenizer.encoding import encode
from mha_textclf.training import resolve_device

log = logging.getLogger(__name__)


@dataclass
class TrainedRun:
    model: TextClassifier
    tokenizer: object  # a transformers tokenizer
    class_names: list[str]
    temperature: float | None  # fitted on the run's validation split (metrics.json); None: the run has none


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> TrainedRun:
    """The model (eval mode, on `device`: a torch device, or a name predict's device setting takes), tokenizer and
    class names a training run saved in its folder."""
    run_dir = Path(run_dir)
    device = resolve_device(device) if isinstance(device, str) else device
    if not run_dir.is_dir():
        raise UserError(f"run_dir={run_dir} is not a folder; pass a run folder such as outputs/runs/<run>.")
    status = files.read_status(run_dir)
    if not (run_dir / files.MODEL).is_file() and status.get("state") == FAILED:
        raise UserError(f"{run_dir} holds a run that failed before it saved a model; what went wrong is in "
                        f"{run_dir / files.ERROR}. Predict with a run that finished.")
    if status.get("state") not in (None, FINISHED):  # interrupted; or continued in place, then failed or killed
        log.warning(f"{run_dir} is {status['state']}, not finished: its model.pt is the model an attempt reported "
                    "when it stopped, not the trained one (its train.log says what happened, and how to finish it).")
    model, class_names = load_checkpoint(run_dir / files.MODEL, device)
    tokenizer = load_tokenizer(run_dir / files.TOKENIZER, model.config.max_length)
    if len(tokenizer) != model.config.vocab_size:
        raise UserError(f"{run_dir / 'tokenizer'} has {len(tokenizer)} tokens but {run_dir / 'model.pt'} was trained "
                        f"with {model.config.vocab_size}; the two files come from different runs.")
    return TrainedRun(model, tokenizer, class_names, run_temperature(run_dir))


def run_temperature(run_dir: Path) -> float | None:
    """The calibration temperature in the run's metrics.json; None for a run without one (older than calibration,
    or stopped before its reports)."""
    try:
        calibration = read_metrics(run_dir).calibration
    except OSError:
        return None
    except (ValueError, TypeError, KeyError) as e:
        log.warning(f"{run_dir / files.METRICS} is unreadable ({e}): probabilities without its calibration")
        return None
    return (calibration or {}).get("temperature")


@torch.no_grad()
def predict_proba(model: TextClassifier, tokenizer, texts: list[str], batch_size: int = 64,
                  temperature: float | None = None) -> np.ndarray:
    """Class probabilities (N, n_classes), rows in the order of `texts`; with a calibration `temperature`, the
    softmax of the logits divided by it (the most probable class stays the same)."""
    check_texts(texts)
    model.eval()
    device = next(model.parameters()).device
    ids = encode(tokenizer, texts, model.config.max_length)
    probabilities = []
    for start in range(0, len(ids), batch_size):
        batch = collate([(seq, 0) for seq in ids[start : start + batch_size]], tokenizer.pad_token_id)
        logits = model(batch["input_ids"].to(device), batch["padding_mask"].to(device)).float()
        probabilities.append((logits / (temperature or 1.0)).softmax(dim=-1).cpu())
    return torch.cat(probabilities).numpy()


@torch.no_grad()
def attention_map(model: TextClassifier, tokenizer, text: str) -> tuple[list[str], np.ndarray]:
    """The tokens of `text` ([CLS] ... [SEP]) and the attention weights of every head, (nh, T, T)."""
    model.eval()
    ids = torch.as_tensor(encode(tokenizer, [text], model.config.max_length)[0], dtype=torch.long,
                          device=next(model.parameters()).device)[None]  # (1, T)
    _, weights = model.forward_with_weights(ids, padding_mask=None, need_weights=True)
    return tokenizer.convert_ids_to_tokens(ids[0].tolist()), weights[0].float().cpu().numpy()


def order_probe(model: TextClassifier, tokenizer, class_names: list[str], texts: list[str]) -> dict:
    """Class probabilities for texts that differ only in word order, and the largest difference between any two.

    Without positional encoding and without bigrams attention sees a bag of tokens, so the difference is 0 up to
    float rounding.
    """
    probabilities = predict_proba(model, tokenizer, texts)
    return {
        "texts": texts,
        "pe": model.config.pe,
        "pe_scale": model.position_scale(),
        "bigram_buckets": model.config.bigram_buckets,
        "probabilities": {t: dict(zip(class_names, map(float, p), strict=True)) for t, p in zip(texts, probabilities,
                                                                                                  strict=True)},
        "max_abs_difference": float(np.ptp(probabilities, axis=0).max()),  # any two texts, not just the first
    }
