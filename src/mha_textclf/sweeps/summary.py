"""A sweep's summary, written into its folder: summary.csv (a row per run), summary.md, the plots and summary.html.
Used by the end-of-sweep callback and by scripts/summarize.py, for any folder that contains run folders."""

from __future__ import annotations

import logging
from pathlib import Path

from mha_textclf.runs import files
from mha_textclf.sweeps.collect import groups_table, runs_table
from mha_textclf.sweeps.markdown import REFERENCE, answers, summary_markdown
from mha_textclf.sweeps.plots import plot_accuracy_vs_time, plot_loss_curves, plot_memory

log = logging.getLogger(__name__)


def write_summary(folder: str | Path, reference: str = REFERENCE) -> dict[str, Path]:
    """Write summary.csv, summary.md, the plots (loss_curves.png, accuracy_vs_time.png, memory.png) and summary.html
    into `folder`; return their paths."""
    from mha_textclf.pages.run import write_run_page  # here: jinja2 only when a summary is written
    from mha_textclf.pages.sweep import write_sweep_page

    folder = Path(folder)
    runs = runs_table(folder)
    groups = groups_table(runs)
    found = answers(folder, runs, groups, reference)  # computed once, shown by summary.md and summary.html
    names = (files.SUMMARY_CSV, files.SUMMARY_MD, "loss_curves.png", "accuracy_vs_time.png", "memory.png")
    paths = {name: folder / name for name in names}
    files.write_atomically(paths[files.SUMMARY_CSV], lambda tmp: runs.to_csv(tmp, index=False))
    files.write_text(paths[files.SUMMARY_MD], summary_markdown(folder, runs, groups, reference, found))
    files.write_figure(paths["loss_curves.png"], plot_loss_curves(folder, runs), dpi=110)
    files.write_figure(paths["accuracy_vs_time.png"], plot_accuracy_vs_time(runs), dpi=110)
    files.write_figure(paths["memory.png"], plot_memory(runs), dpi=110)
    # The page links each run's report.html: a run without one (killed outright, or older) gets it now.
    for run_dir in runs["run_dir"]:
        if not (folder / run_dir / files.REPORT_PAGE).exists():
            write_run_page(folder / run_dir)
    try:
        paths[files.SUMMARY_PAGE] = write_sweep_page(folder, runs, groups, found)
    except Exception as e:  # the Markdown summary and the sweep's exit status must not depend on the page
        log.warning(f"could not write {folder / files.SUMMARY_PAGE}: {type(e).__name__}: {e}")
    return paths
