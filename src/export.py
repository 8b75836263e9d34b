"""A trained run as a model you can ship: ONNX (fp32 and int8), its tokenizer, class names and a model card.

    python -m export run_dir=outputs/runs/<run>        # writes outputs/runs/<run>/export/

`main` checks the command line against the schema (ExportSettings); `mha_textclf.export.export_run` does the work with
typed settings.
"""

from __future__ import annotations

import logging
import sys

import hydra
from omegaconf import DictConfig

from mha_textclf import cli
from mha_textclf.errors import UserError

log = logging.getLogger("export")


def main() -> None:
    """`python -m export ...`: every mistake on the command line in one message (exit 2), else Hydra's run."""
    cli.check_command_line("export", sys.argv[1:])  # also registers the schema Hydra composes with
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="export")
def hydra_main(cfg: DictConfig) -> None:
    from mha_textclf.export import export_run  # here, not above: `main` answers a mistake without importing torch

    try:
        export_run(cli.to_settings(cfg))
    except UserError as e:
        log.error(str(e))
        sys.exit(2)


if __name__ == "__main__":
    main()
