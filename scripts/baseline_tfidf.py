"""TF-IDF + a linear classifier on the attention models' own splits: an honest reference for the summary tables.

    python scripts/baseline_tfidf.py                          # wordpiece features on bbc-news, seed 0
    python scripts/baseline_tfidf.py -m features=wordpiece,words,chars seed=0,1,2
    python scripts/baseline_tfidf.py data.path=/path/to/corpus data.text_column=Text data.label_column=Category

The same data settings and override syntax as `python -m train` (configs/baseline.yaml). Writes config.yaml,
metrics.json, classification reports and confusion matrices into outputs/baselines/<date>_<time>_tfidf-<features>_
seed-<seed>/, so scripts/summarize.py puts it in the same table as the attention runs.
"""

import sys

import hydra
from omegaconf import DictConfig

from mha_textclf import cli


def main() -> None:
    cli.check_command_line("baseline", sys.argv[1:])
    hydra_main()


@hydra.main(version_base="1.3", config_path="../configs", config_name="baseline")
def hydra_main(cfg: DictConfig) -> float | None:
    from mha_textclf.baseline import run_baseline  # here, not above: `main` answers a mistake without scikit-learn

    metrics = cli.run_job(lambda run_dir, record: run_baseline(cli.to_settings(cfg), run_dir))
    return None if metrics is None else metrics.val.accuracy


if __name__ == "__main__":
    main()
