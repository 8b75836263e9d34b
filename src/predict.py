"""Class probabilities for new texts from a trained run.

    python -m predict run_dir=outputs/runs/<run> text='["how are you","you how are"]'
    python -m predict run_dir=outputs/runs/<run> file=texts.txt out=predictions.csv

`main` checks the command line against the schema (PredictSettings), Hydra composes configs/predict.yaml, and
`mha_textclf.predictions.predict` does the work with typed settings (backend=onnx: without torch).
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from mha_textclf import cli
from mha_textclf.errors import UserError

log = logging.getLogger("predict")


def main() -> None:
    """`python -m predict ...`: every mistake on the command line in one message (exit 2), else Hydra's run."""
    cli.check_command_line("predict", sys.argv[1:])  # also registers the schema Hydra composes with
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="predict")
def hydra_main(cfg: DictConfig) -> None:
    """Print a table of text, probability per class and predicted class; optionally write it as CSV."""
    import pandas as pd  # here, not above: `main` answers a mistake without importing torch

    from mha_textclf.predictions import predict

    try:
        table = predict(cli.to_settings(cfg))
    except UserError as e:
        log.error(str(e))
        sys.exit(2)
    with pd.option_context("display.max_colwidth", 60, "display.width", 200, "display.float_format", "{:.4f}".format):
        print(table.to_string(index=False))


if __name__ == "__main__":
    main()
