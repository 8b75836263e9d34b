"""Summarise every run folder below a folder: a sweep, outputs/runs, or any mix (failed runs are listed as failed).

    python scripts/summarize.py outputs/multirun/2026-11-21_17-26-29
    python scripts/summarize.py outputs/multirun/2026-11-21_17-26-29 --reference torch

Writes each run's report.html, then summary.csv, summary.md, loss_curves.png, accuracy_vs_time.png, memory.png and
summary.html into that folder, and prints summary.md. A run folder that lacks files (from an older version, or cut
short) gets the page of what it has, and this says what is missing. A sweep's own record (sweep.json, each job's
job.json) is read, never written: only the sweep itself saw its start and end.
"""

import argparse
import sys
from pathlib import Path

from mha_textclf.pages.run import write_run_page
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
    runs = find_runs(args.folder)
    if not runs:
        parser.error(f"no run folders (with metrics.json, config.yaml, error.txt or .hydra/) below {args.folder}")
    for run in runs:  # first, so that summary.html links to every run's page
        page = write_run_page(run)
        if page is not None and page.missing:
            print(f"{page.path}: without " + "; ".join(f"{name} ({why})" for name, why in page.missing),
                  file=sys.stderr)
    paths = write_summary(args.folder, reference=args.reference)
    print(paths["summary.md"].read_text())
    print("wrote " + ", ".join(str(p) for p in paths.values()), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
