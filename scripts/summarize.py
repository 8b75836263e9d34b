"""Summarise every run folder below a folder: a sweep, outputs/runs, or any mix (failed runs are listed as failed).

    python scripts/summarize.py outputs/multirun/2026-11-21_17-26-29
    python scripts/summarize.py outputs/multirun/2026-11-21_17-26-29 --reference torch

Writes summary.csv, summary.md, loss_curves.png, accuracy_vs_time.png and memory.png into that folder and prints
summary.md. A sweep's own record (sweep.json, each job's job.json) is read, never written: only the sweep itself saw
its start and end.
"""

import argparse
import sys
from pathlib import Path

from mha_textclf.sweeps.collect import find_runs
from mha_textclf.sweeps.markdown import REFERENCE
from mha_textclf.sweeps.summary import write_summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a folder containing run folders (at any depth)")
    parser.add_argument("--reference", default=REFERENCE,
                        help=f"the variant the others are compared against (default: {REFERENCE})")
    args = parser.parse_args(argv)
    if not args.folder.is_dir():
        parser.error(f"{args.folder} is not a folder")
    if not find_runs(args.folder):
        parser.error(f"no run folders (with metrics.json or .hydra/) below {args.folder}")
    paths = write_summary(args.folder, reference=args.reference)
    print(paths["summary.md"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
