"""What several test modules share: the smoke experiment's override and a run folder's history.csv, read back."""

import csv
from pathlib import Path

SMOKE = ["experiment=smoke"]


def history(run_dir: Path) -> list[dict]:
    with (run_dir / "history.csv").open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]

