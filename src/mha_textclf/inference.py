"""Ask a trained model questions: class probabilities for new texts, attention maps, sensitivity to word order."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from mha_textclf.data.batches import collate
from mha_textclf.errors import UserError
from mha_textclf.model import TextClassifier
from mha_textclf.runs import files
from mha_textclf.runs.checkpoint import load_checkpoint
from mha_textclf.settings import PredictSettings
from mha_textclf.tokenizer.cache import load_tokenizer
from mha_textclf.tokenizer.encoding import encode
from mha_textclf.training import resolve_device

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger("predict")


@dataclass
class TrainedRun:
    model: TextClassifier
    tokenizer: object  # a transformers tokenizer
    class_names: list[str]


def load_run(run_dir: str | Path, device: str | torch.device = "cpu") -> TrainedRun:
    """The model (eval mode, on `device`), tokenizer and class names a training run saved in its folder."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"run_dir={run_dir} is not a folder; pass a run folder such as outputs/runs/<run>.")
    model, class_names = load_checkpoint(run_dir / files.MODEL, device)
    tokenizer = load_tokenizer(run_dir / files.TOKENIZER, model.config.max_length)
    if len(tokenizer) != model.config.vocab_size:
        raise UserError(f"{run_dir / 'tokenizer'} has {len(tokenizer)} tokens but {run_dir / 'model.pt'} was trained "
                        f"with {model.config.vocab_size}; the two files come from different runs.")
    return TrainedRun(model, tokenizer, class_names)


@torch.no_grad()
def predict_proba(model: TextClassifier, tokenizer, texts: list[str], batch_size: int = 64) -> np.ndarray:
    """Class probabilities (N, n_classes), rows in the order of `texts`."""
    empty = [i for i, text in enumerate(texts) if not text or not text.strip()]
    if empty:
        raise UserError(f"Text number(s) {[i + 1 for i in empty]} are empty; give at least one word per text.")
    model.eval()
    device = next(model.parameters()).device
    ids = encode(tokenizer, texts, model.config.max_length)
    probabilities = []
    for start in range(0, len(ids), batch_size):
        batch = collate([(seq, 0) for seq in ids[start : start + batch_size]], tokenizer.pad_token_id)
        logits = model(batch["input_ids"].to(device), batch["padding_mask"].to(device))
        probabilities.append(logits.float().softmax(dim=-1).cpu())
    return torch.cat(probabilities).numpy()


def probability_table(texts: list[str], probabilities: np.ndarray, class_names: list[str]) -> pd.DataFrame:
    """One row per text: the text, one probability column per class name, the predicted class."""
    import pandas as pd  # here: a training run, which asks the model questions too, never needs it

    table = pd.DataFrame(probabilities, columns=class_names)
    table.insert(0, "text", texts)
    table["predicted"] = [class_names[i] for i in probabilities.argmax(axis=1)]
    return table


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

    Without positional encoding attention sees a bag of tokens, so the difference is 0 up to float rounding.
    """
    probabilities = predict_proba(model, tokenizer, texts)
    return {
        "texts": texts,
        "pe": model.config.pe,
        "probabilities": {t: dict(zip(class_names, map(float, p), strict=True)) for t, p in zip(texts, probabilities,
                                                                                                  strict=True)},
        "max_abs_difference": float(np.ptp(probabilities, axis=0).max()),  # any two texts, not just the first
    }


def read_texts(text: str | list[str] | None, file: str | None) -> list[str]:
    texts = [text] if isinstance(text, str) else list(text or [])
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise UserError(f"file={file} does not exist; give a text file with one text per line.")
        texts += [line for line in path.read_text().splitlines() if line.strip()]
    if not texts:
        raise UserError("Nothing to predict: give text='[\"first text\",\"second text\"]' or file=<path>.")
    return texts


def check_out(out: str | None) -> None:
    """Before any work: `out` must be a file in an existing folder."""
    if out is None:
        return
    path = Path(out).expanduser()
    if path.is_dir() or not path.parent.is_dir():
        why = "is a folder" if path.is_dir() else f"is in {path.parent}, which does not exist"
        raise UserError(f"out={out} {why}; give a file name in an existing folder, e.g. out=predictions.csv.")


def predict(settings: PredictSettings) -> pd.DataFrame:
    """One row per text: its class probabilities and the predicted class (written to `settings.out` too)."""
    check_out(settings.out)
    texts = read_texts(settings.text, settings.file)
    run = load_run(settings.run_dir, resolve_device(settings.device))
    table = probability_table(texts, predict_proba(run.model, run.tokenizer, texts), run.class_names)
    if settings.out is not None:
        table.to_csv(settings.out, index=False)
        log.info(f"wrote {settings.out}")
    return table
