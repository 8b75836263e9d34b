"""Class probabilities for new texts from a trained run.

    python -m predict run_dir=outputs/runs/<run> text='["how are you","you how are"]'
    python -m predict run_dir=outputs/runs/<run> file=texts.txt out=predictions.csv

`main` checks the command line against the schema (PredictSettings), Hydra composes configs/predict.yaml, and
`predict` does the work with typed settings.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
import pandas as pd
from omegaconf import DictConfig

from mha_textclf import cli
from mha_textclf.errors import UserError
from mha_textclf.inference import load_run, predict_proba, probability_table
from mha_textclf.settings import PredictSettings
from mha_textclf.training import resolve_device

log = logging.getLogger("predict")


def main() -> None:
    """`python -m predict ...`: every mistake on the command line in one message (exit 2), else Hydra's run."""
    cli.check_command_line("predict", sys.argv[1:])  # also registers the schema Hydra composes with
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="predict")
def hydra_main(cfg: DictConfig) -> None:
    """Print a table of text, probability per class and predicted class; optionally write it as CSV."""
    try:
        table = predict(cli.to_settings(cfg))
    except UserError as e:
        log.error(str(e))
        sys.exit(2)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200, "display.float_format", "{:.4f}".format):
        print(table.to_string(index=False))


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


if __name__ == "__main__":
    main()
