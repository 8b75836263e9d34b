"""Predictions from an exported run (python -m export) with onnxruntime, tokenizers and numpy alone: no torch, no
transformers, nothing of the training stack, so that a service or a batch job can load the model in a small install
(`pip install --no-deps -e . && pip install onnxruntime tokenizers numpy`: the serve extra's three packages)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mha_textclf.errors import UserError
from mha_textclf.predictions import check_texts
from mha_textclf.tokenizer.prefix import text_prefix

# Written into export.json; a reader refuses another format rather than guess what changed.
EXPORT_FORMAT = "mha-textclf-export/1"
EXPORT = "export"  # the folder of a run that holds its export
MODEL_ONNX = "model.onnx"
MODEL_INT8 = "model.int8.onnx"
TOKENIZER_JSON = "tokenizer.json"
EXPORT_JSON = "export.json"
MODEL_CARD = "MODEL_CARD.md"
# Token positions per onnxruntime call: its intermediate tensors (a few of batch × tokens × d_model floats) stay tens of
# MB. Measured on bbc-news' test split (int8, one thread): 16 texts of 512 tokens a call serve about 1,100 texts/s at
# a 105 MB peak; 64 a call, about 850 texts/s at 160 MB (the smaller tensors stay in the CPU's caches).
MAX_TOKENS = 16 * 512


def export_dir(run_dir: Path) -> Path:
    """A run's export/ folder, given the run folder (or the export folder itself)."""
    return run_dir if (run_dir / EXPORT_JSON).is_file() else run_dir / EXPORT


@dataclass
class ExportedModel:
    """An exported classifier: texts in, class probabilities out, as the torch backend computes them."""

    session: object  # onnxruntime.InferenceSession
    tokenizer: object  # tokenizers.Tokenizer
    class_names: list[str]
    pad_id: int
    max_length: int
    temperature: float | None

    @classmethod
    def load(cls, run_dir: Path, int8: bool = False, threads: int | None = None) -> ExportedModel:
        """The export of `run_dir` (fp32, or the int8 model); `threads`: onnxruntime's intra-op threads (its default:
        one per core)."""
        folder = export_dir(Path(run_dir))
        run = folder.parent
        if not (folder / EXPORT_JSON).is_file():
            raise UserError(f"{folder} holds no export; make one with: python -m export run_dir={run}")
        meta = json.loads((folder / EXPORT_JSON).read_text())
        if meta.get("format") != EXPORT_FORMAT:
            raise UserError(f"{folder / EXPORT_JSON} is format {meta.get('format')!r}, this version reads "
                            f"{EXPORT_FORMAT!r}: export it again with python -m export run_dir={run}")
        model_file = folder / (MODEL_INT8 if int8 else MODEL_ONNX)
        missing = [p.name for p in (model_file, folder / TOKENIZER_JSON) if not p.is_file()]
        if missing:
            raise UserError(f"{folder} lacks {', '.join(missing)}; export it again with python -m export "
                            f"run_dir={run}")
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as e:
            raise UserError(f"backend=onnx needs onnxruntime and tokenizers ({e}): "
                            "pip install onnxruntime tokenizers") from e
        options = ort.SessionOptions()
        # Without the arena, memory follows the batch at hand instead of keeping the largest batch's high-water mark.
        options.enable_cpu_mem_arena = False
        if threads is not None:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        session = ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_JSON))
        # As training encoded: [CLS] first, [SEP] last, cut to max_length tokens; batches pad with [PAD] here.
        tokenizer.enable_truncation(meta["max_length"])
        tokenizer.no_padding()
        return cls(session, tokenizer, meta["class_names"], meta["pad_id"], meta["max_length"], meta.get("temperature"))

    def encode(self, texts: list[str]) -> list[np.ndarray]:
        """Token ids per text, exactly as training encoded them (unpadded).

        As in training (mha_textclf.tokenizer.encoding), a text much longer than max_length tokens is tokenized from
        a prefix cut at a space, and again whole only when the prefix falls short: the same ids, without tokenizing
        (and holding the cut-off tokens of) a whole long text."""
        prefixes = [text_prefix(text, self.max_length) for text in texts]
        ids = [np.asarray(e.ids, dtype=np.int64) for e in self.tokenizer.encode_batch(prefixes)]
        short = [i for i, (text, prefix) in enumerate(zip(texts, prefixes, strict=True))
                 if prefix is not text and len(ids[i]) < self.max_length]
        for i, encoding in zip(short, self.tokenizer.encode_batch([texts[i] for i in short]), strict=True):
            ids[i] = np.asarray(encoding.ids, dtype=np.int64)
        return ids

    def logits(self, ids: list[np.ndarray]) -> np.ndarray:
        """Logits (N, n_classes) for encoded texts, padded with [PAD] (the model masks it). One onnxruntime call
        takes at most MAX_TOKENS token positions (padding included), so that a service's memory is bounded whatever
        batches it is sent: 64 texts of 512 tokens are four calls of 16 (each text's logits are its own)."""
        out, start = [], 0
        while start < len(ids):
            width = len(ids[start])
            stop = start + 1
            while stop < len(ids) and (stop + 1 - start) * max(width, len(ids[stop])) <= MAX_TOKENS:
                width = max(width, len(ids[stop]))
                stop += 1
            batch = np.full((stop - start, width), self.pad_id, dtype=np.int64)  # (B, T)
            for i, row in enumerate(ids[start:stop]):
                batch[i, : len(row)] = row
            out.append(self.session.run(["logits"], {"input_ids": batch})[0])
            start = stop
        return np.concatenate(out)

    def predict_proba(self, texts: list[str], batch_size: int = 64) -> np.ndarray:
        """Class probabilities (N, n_classes), rows in the order of `texts`; the calibration temperature, where the
        run has one, divides the logits first (the predicted class stays the same). Texts are encoded a batch at a
        time, so memory holds one batch's tokens, not the whole input's."""
        check_texts(texts)
        logits = np.concatenate([self.logits(self.encode(texts[start : start + batch_size]))
                                 for start in range(0, len(texts), batch_size)])
        if self.temperature:
            logits = logits / self.temperature
        logits = logits - logits.max(axis=1, keepdims=True)  # softmax without overflow
        exp = np.exp(logits)
        return exp / exp.sum(axis=1, keepdims=True)

