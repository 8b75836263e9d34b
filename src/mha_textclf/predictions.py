"""What `python -m predict` reads and writes: the texts, and one table of class probabilities, whichever backend
computed them. Imports neither torch nor the training modules, so that the ONNX backends serve without them."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mha_textclf.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from mha_textclf.settings import PredictSettings

log = logging.getLogger("predict")


def read_texts(text: str | list[str] | None, file: str | None) -> list[str]:
    texts = [text] if isinstance(text, str) else list(text or [])
    if file is not None:
        path = Path(file).expanduser()
        if not path.is_file():
            raise UserError(f"file={file} does not exist; give a text file with one text per line.")
        # Lines as an editor numbers them: newlines only (splitlines would also cut at \f or \u2028 inside a text).
        lines = path.read_text().removesuffix("\n").split("\n")
        blank = [number for number, line in enumerate(lines, start=1) if not line.strip()]
        if blank:  # the table then has fewer rows than the file lines: say so, and which
            shown = ", ".join(map(str, blank[:10])) + (", ..." if len(blank) > 10 else "")
            log.warning(f"file={file}: {len(blank)} blank line(s) skipped (line {shown}); the table has a row per "
                        "other line, in order.")
        texts += [line for line in lines if line.strip()]
    if not texts:
        raise UserError("Nothing to predict: give text='[\"first text\",\"second text\"]' or file=<path>.")
    return texts


def check_texts(texts: list[str]) -> None:
    """Every text holds a word: an empty one would be [CLS] [SEP] alone, a prediction about nothing."""
    empty = [i for i, text in enumerate(texts) if not text or not text.strip()]
    if empty:
        raise UserError(f"Text number(s) {[i + 1 for i in empty]} are empty; give at least one word per text.")


def check_out(out: str | None) -> None:
    """Before any work: `out` must be a file in an existing folder."""
    if out is None:
        return
    path = Path(out).expanduser()
    if path.is_dir() or not path.parent.is_dir():
        why = "is a folder" if path.is_dir() else f"is in {path.parent}, which does not exist"
        raise UserError(f"out={out} {why}; give a file name in an existing folder, e.g. out=predictions.csv.")


def probability_table(texts: list[str], probabilities: np.ndarray, class_names: list[str]) -> pd.DataFrame:
    """One row per text: the text, one probability column per class name, the predicted class."""
    import pandas as pd  # here: a training run, which asks the model questions too, never needs it

    table = pd.DataFrame(probabilities, columns=class_names)
    table.insert(0, "text", texts)
    table["predicted"] = [class_names[i] for i in probabilities.argmax(axis=1)]
    return table


def predict(settings: PredictSettings) -> pd.DataFrame:
    """One row per text: its class probabilities and the predicted class (written to `settings.out` too)."""
    check_out(settings.out)
    texts = read_texts(settings.text, settings.file)
    if settings.backend == "torch":
        from mha_textclf.inference import load_run, predict_proba  # here: the ONNX backends never import torch

        run = load_run(settings.run_dir, settings.device)
        temperature = run.temperature if settings.calibrated else None
        probabilities = predict_proba(run.model, run.tokenizer, texts, temperature=temperature)
        class_names = run.class_names
    else:
        from mha_textclf.serving import ExportedModel

        model = ExportedModel.load(Path(settings.run_dir), int8=settings.backend == "onnx-int8")
        if not settings.calibrated:
            model.temperature = None
        temperature = model.temperature
        probabilities, class_names = model.predict_proba(texts), model.class_names
    if temperature:
        log.info(f"logits divided by the run's calibration temperature {temperature:.3f} before the softmax "
                 "(calibrated=false: without)")
    table = probability_table(texts, probabilities, class_names)
    if settings.out is not None:
        table.to_csv(settings.out, index=False)
        log.info(f"wrote {settings.out}")
    return table
