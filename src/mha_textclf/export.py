"""A trained run as a model you can ship: ONNX (fp32, and int8 by onnxruntime's dynamic quantization), the tokenizer,
the class names and a model card, in the run's export/ folder. mha_textclf.serving reads it without torch."""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import logging
import warnings
from pathlib import Path

import torch
import yaml
from torch import Tensor, nn

from mha_textclf.errors import UserError
from mha_textclf.model import TextClassifier
from mha_textclf.runs import files
from mha_textclf.runs.checkpoint import load_checkpoint
from mha_textclf.runs.lifecycle import FAILED, FINISHED, train_command
from mha_textclf.runs.metrics import RunMetrics, library_versions
from mha_textclf.serving import (
    EXPORT,
    EXPORT_FORMAT,
    EXPORT_JSON,
    MODEL_CARD,
    MODEL_INT8,
    MODEL_ONNX,
    TOKENIZER_JSON,
)
from mha_textclf.settings import ExportSettings
from mha_textclf.tokenizer.cache import load_tokenizer

log = logging.getLogger("export")

OPSET = 18


class LogitsFromIds(nn.Module):
    """The classifier as a service calls it: token ids (B, T) in, padded on the right with [PAD], logits
    (B, n_classes) out. The padding mask is computed inside, so the exported graph has one input."""

    def __init__(self, model: TextClassifier):
        super().__init__()
        self.model = model

    def forward(self, input_ids: Tensor) -> Tensor:
        # Padding is what follows a text's last token that is not [PAD], as training's collate masks by length: a
        # text may hold the literal "[PAD]", which the tokenizer turns into its id, and training attends to it.
        positions = torch.arange(1, input_ids.size(1) + 1, device=input_ids.device)  # (T,)
        lengths = ((input_ids != self.model.config.pad_id) * positions).amax(dim=1)  # (B, T) -> (B,)
        padding_mask = positions[None, :] > lengths[:, None]  # (1, T) vs (B, 1) -> (B, T)
        return self.model(input_ids, padding_mask)  # (B, T) -> (B, n_classes)


def exportable(model: TextClassifier) -> LogitsFromIds:
    """A copy of the model in eval mode, with the masked computation: compaction sizes its tensors by the longest
    text's visible tokens, a number a traced graph cannot hold, and the mask gives the same logits
    (tests/test_model.py). The model given keeps computing as training runs do."""
    model = copy.deepcopy(model).eval()
    model.compact = False
    return LogitsFromIds(model).eval()


def check_run(run_dir: Path) -> None:
    """A folder with a finished model to export, or the error that says what to run."""
    if not run_dir.is_dir():
        raise UserError(f"run_dir={run_dir} is not a folder; pass a training run folder such as outputs/runs/<run>.")
    state = files.read_status(run_dir).get("state")
    missing = [name for name in (files.MODEL, files.TOKENIZER, files.METRICS) if not (run_dir / name).exists()]
    if state == FAILED:  # the command that started it would fail again: what went wrong comes first
        raise UserError(f"{run_dir} holds a run that failed; what went wrong is in {run_dir / files.ERROR}. Export a "
                        "run that finished training.")
    if missing or state not in (None, FINISHED):
        why = f"lacks {', '.join(missing)}" if missing else f"is {state}, not finished"
        args = _training_overrides(run_dir)
        finish = (f"Finish it in place: {train_command(args, {'hydra.run.dir': run_dir})}" if args is not None
                  else f"Finish it with the command that started it, in its folder (hydra.run.dir={run_dir})")
        raise UserError(f"{run_dir} {why}: export a run that finished training. {finish}; or train one: "
                        "python -m train")


# What torch's ONNX exporter and the int8 quantizer import: the `export` extra (pyproject.toml).
EXPORT_MODULES = ("onnx", "onnxscript", "onnxruntime")


def require_export_extra() -> None:
    """Before anything is written: the exporter would fail deep inside torch, leaving an empty export/ behind."""
    missing = [name for name in EXPORT_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise UserError(f"python -m export needs the optional packages of the `export` extra ({', '.join(missing)} "
                        'missing here): pip install -e ".[export]"')


def export_run(settings: ExportSettings) -> Path:
    """Write `settings.run_dir`/export/ and return it: model.onnx, model.int8.onnx, tokenizer.json, export.json
    (class names, [PAD], the longest input, the calibration temperature where the run has one), MODEL_CARD.md."""
    run_dir = Path(settings.run_dir).expanduser()
    check_run(run_dir)
    require_export_extra()
    model, class_names = load_checkpoint(run_dir / files.MODEL, "cpu")
    tokenizer = load_tokenizer(run_dir / files.TOKENIZER, model.config.max_length)
    try:
        metrics = RunMetrics.read(run_dir / files.METRICS)
    except (ValueError, TypeError, KeyError) as e:
        raise UserError(f"{run_dir / files.METRICS} cannot be read ({e}): the run was written by another version; "
                        "train it again with this one, then export.") from e
    out = run_dir / EXPORT
    out.mkdir(exist_ok=True)
    (out / EXPORT_JSON).unlink(missing_ok=True)  # written last: until then the folder is not an export
    files.write_atomically(out / MODEL_ONNX, lambda tmp: to_onnx(model, tmp))
    files.write_atomically(out / MODEL_INT8, lambda tmp: quantize(out / MODEL_ONNX, tmp))
    # The tokenizer as training loaded it (transformers may adjust a saved one on load), in the tokenizers library's
    # own format: what serving reads without transformers.
    files.write_text(out / TOKENIZER_JSON, tokenizer.backend_tokenizer.to_str())
    calibration = metrics.calibration or {}
    meta = {"format": EXPORT_FORMAT, "class_names": class_names, "pad_id": model.config.pad_id,
            "max_length": model.config.max_length, "temperature": calibration.get("temperature"),
            "model": model.config.attention, "pe": model.config.pe, "pe_scale": model.position_scale(),
            "vocab_size": model.config.vocab_size,
            "bigram_buckets": model.config.bigram_buckets,
            "run_dir": str(run_dir.resolve()), "opset": OPSET, "versions": library_versions()}
    files.write_text(out / MODEL_CARD, model_card(run_dir, metrics, meta))
    files.write_json(out / EXPORT_JSON, meta)
    sizes = ", ".join(f"{name} {(out / name).stat().st_size / 1e6:.2f} MB" for name in (MODEL_ONNX, MODEL_INT8))
    log.info(f"exported {run_dir} to {out}: {sizes}")
    return out


def to_onnx(model: TextClassifier, path: Path) -> None:
    """fp32 ONNX with a dynamic batch and sequence length (up to the longest input the model was trained on)."""
    wrapper = exportable(model)
    example = torch.full((2, 8), model.config.pad_id + 1, dtype=torch.long)  # any ids: the shapes are what counts
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", min=2, max=model.config.max_length)
    with torch.no_grad(), _quiet("torch.onnx", "onnxscript", "onnx_ir"):
        program = torch.onnx.export(wrapper, (example,), dynamo=True, input_names=["input_ids"],
                                    output_names=["logits"], dynamic_shapes=({0: batch, 1: tokens},),
                                    opset_version=OPSET, verbose=False)
    program.save(str(path))


@contextlib.contextmanager
def _quiet(*loggers: str):
    """Only errors from these loggers ("" the root) while exporting: the exporter and its optimiser note every node
    they fold or deduplicate at INFO, which Hydra's runs show, and warn of torchvision ops this model has none of."""
    saved = {name: logging.getLogger(name).level for name in loggers}
    for name in loggers:
        logging.getLogger(name).setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch's own deprecations, inside the exporter
            yield
    finally:
        for name, level in saved.items():
            logging.getLogger(name).setLevel(level)


def quantize(fp32: Path, path: Path) -> None:
    """onnxruntime's dynamic quantization: int8 weights for the matrix products with a constant weight (the output
    projection, the MLP) and the embedding tables (tokens, bigrams), activations quantized per call. The key and
    value projections stay fp32: the exported graph splits their fused weight, so the quantizer does not see a
    constant."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with _quiet(""):  # the quantizer logs every tensor it leaves alone on the root logger
        quantize_dynamic(str(fp32), str(path), weight_type=QuantType.QInt8)


def _training_overrides(run_dir: Path) -> list[str] | None:
    """The overrides the run was trained with, as Hydra recorded them (None where it did not)."""
    overrides = run_dir / files.HYDRA / "overrides.yaml"
    return yaml.safe_load(overrides.read_text()) if overrides.is_file() else None


def model_card(run_dir: Path, metrics: RunMetrics, meta: dict) -> str:
    """What the model is, how well it did on each split, and what it is for."""
    args = _training_overrides(run_dir)
    command = (train_command(args, {}) if args is not None
               else "python -m train, with the settings in the run's config.yaml")
    splits = "\n".join(f"| {name} | {metrics.splits.get(name, '')} | {split.n_samples} | {split.accuracy:.4f} | "
                       f"{split.macro_f1:.4f} |" for name, split in (("val", metrics.val), ("test", metrics.test)))
    temperature = meta["temperature"]
    test = (metrics.calibration or {}).get("test") or {}
    measured = (f": expected calibration error on test {test['ece']:.4f} without it, {test['ece_calibrated']:.4f} "
                f"with it ({metrics.calibration['bins']} confidence bins)." if test else ".")
    calibration = (f"A temperature of {temperature:.3f}, fitted on the validation split, divides the logits before "
                   f"the softmax{measured}" if temperature else "None: the probabilities are the softmax of the "
                   "logits as trained, not calibrated.")
    scale = meta.get("pe_scale")
    positions = ("" if not meta["pe"] else " (+ sinusoidal positional encoding in the queries and keys" + (
        ")" if scale in (None, 1.0) else f", times the scale training learnt for it: {scale:.3g})"))
    bigrams = (f" + hashed bigram embeddings ({meta['bigram_buckets']:,} buckets)" if meta.get("bigram_buckets")
               else "")
    return f"""# Model card: {metrics.dataset} text classifier ({meta['model']}, pe={str(meta['pe']).lower()})

## Model
Token embeddings{bigrams}{positions} → one multi-head self-attention layer
({meta['model']} variant) → the [CLS] vector → MLP, {metrics.params:,} parameters, trained from scratch (no
pretrained weights) with a {meta['vocab_size']}-token WordPiece tokenizer learned on the training texts. Inputs: up
to {meta['max_length']} tokens ([CLS] first, [SEP] last); a longer text is cut.

Trained with: `{command}` (seed {metrics.seed}, {metrics.epochs} epochs, on {metrics.device}).

## Data
{metrics.dataset}: {metrics.train_samples} training texts; classes, in the order of the model's outputs:
{', '.join(meta['class_names'])}. Splits: train from {metrics.splits.get('train', '')}.

## Metrics
| split | source | texts | accuracy | macro-F1 |
|---|---|---|---|---|
{splits}

## Calibration
{calibration}

## Intended use and limits
Classifying texts like its training texts into the classes above. It knows only the words of its training corpus
(others become [UNK] pieces), reads at most {meta['max_length']} tokens of a text, and always answers with one of its
classes, even for a text of none of them: check its probabilities, and measure it on your own data before relying on
it. Not for decisions about people without human review.

## Files
`{MODEL_ONNX}` (fp32; input `input_ids` int64 (batch, tokens), output `logits` (batch, classes)), `{MODEL_INT8}`
(int8 weights), `{TOKENIZER_JSON}` (the `tokenizers` library's format), `{EXPORT_JSON}` (class names, [PAD] id
{meta['pad_id']}, the longest input). Serve it with `python -m predict run_dir={run_dir} backend=onnx` or
`mha_textclf.serving.ExportedModel` (onnxruntime, tokenizers and numpy; no torch).
"""
