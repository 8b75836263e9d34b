"""A hyperparameter search with Optuna over the training settings: each trial is a training run composed from the
real configs and trained in-process into the study's folder.

    python -m search                          # configs/hparams_search/accuracy.yaml, 40 trials
    python -m search n_trials=60              # the same study, resumed (after Ctrl-C) or extended

`main` checks the command line against the schema (SearchSettings); `mha_textclf.search.study.search` does the work with
typed settings.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from mha_textclf import cli
from mha_textclf.errors import UserError

log = logging.getLogger("search")


def main() -> None:
    """`python -m search ...`: every mistake on the command line in one message (exit 2), else Hydra's run."""
    cli.check_command_line("search", sys.argv[1:])  # also registers the schema Hydra composes with
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="search")
def hydra_main(cfg: DictConfig) -> None:
    from mha_textclf.search.study import InterruptedStudyError, search

    study_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        search(cli.to_settings(cfg), study_dir)
    except InterruptedStudyError as e:
        log.error(f"interrupted by {e}: the trial it stopped is recorded as failed, the finished ones are in the "
                  "study (its reports cover those that completed, if any). Run the same command to resume the study.")
        sys.exit(130)
    except UserError as e:
        log.error(str(e))
        sys.exit(2)


if __name__ == "__main__":
    main()
