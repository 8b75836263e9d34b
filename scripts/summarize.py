"""Summarise every run folder below a folder: a sweep, outputs/runs, or any mix (failed runs are listed as failed).

    python scripts/summarize.py outputs/multirun/2026-11-21_17-26-29

Writes summary.csv, summary.md, loss_curves.png and accuracy_vs_time.png into that folder and prints summary.md.
"""

import argparse
import sys
from pathlib import Path

from mha_textclf.summary import find_runs, write_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder containing run folders (at any depth)")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    if not find_runs(args.folder):
        parser.error(f"no run folders (with metrics.json or .hydra/) below {args.folder}")
    paths = write_summary(args.folder)
    print(paths["summary.md"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
