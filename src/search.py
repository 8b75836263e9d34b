"""A hyperparameter search with Optuna over the training settings: each trial is a training run composed from the
real configs and trained in-process into the study's folder.

    python -m search                          # configs/hparams_search/accuracy.yaml, 40 trials
    python -m search n_trials=60              # the same study, resumed (after Ctrl-C) or extended

`main` checks the command line against the schema (SearchSettings); `search` does the work with typed settings.
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
from mha_textclf.settings import SearchSettings, TrainSettings, lookup
from mha_textclf.tuning import InterruptedStudyError, run_search
from train import train

log = logging.getLogger("search")


def main() -> None:
    """`python -m search ...`: every mistake on the command line in one message (exit 2), else Hydra's run."""
    cli.check_command_line("search", sys.argv[1:])  # also registers the schema Hydra composes with
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="search")
def hydra_main(cfg: DictConfig) -> None:
    study_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        search(cli.to_settings(cfg), study_dir)
    except InterruptedStudyError as e:
        log.error(f"interrupted by {e}; the finished trials are in the study. Run the same command to resume.")
        sys.exit(130)
    except UserError as e:
        log.error(str(e))
        sys.exit(2)


def search(settings: SearchSettings, study_dir: Path):
    """Run the study; each trial composes `settings.train` plus its sampled values as `python -m train` would."""
    cli.compose_settings("train", settings.train)  # the shared settings: every mistake now, not at the first trial
    for key in settings.params:
        found = lookup(TrainSettings, key)
        if isinstance(found, str) and not (cli.CONFIG_DIR / key).is_dir():  # a config group (model) may vary too
            raise UserError(f"params: {found}")

    def train_trial(overrides: list[str], run_dir: Path, on_epoch_end):
        run_dir.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(run_dir / "train.log")  # each trial's folder has its log, as a run's has
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        logging.getLogger().addHandler(handler)
        try:
            return train(cli.compose_settings("train", overrides), run_dir, overrides, sweep=f"study {settings.study}",
                         on_epoch_end=on_epoch_end)
        finally:
            logging.getLogger().removeHandler(handler)
            handler.close()

    return run_search(settings, study_dir, train_trial)


if __name__ == "__main__":
    main()
