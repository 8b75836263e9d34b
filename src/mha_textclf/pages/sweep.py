"""summary.html: a sweep on one page, opening with its answer. The tables are summary.md's own (sweeps/markdown.py's
`Answer` and runs table), so the two never disagree; the plots are the summary's PNGs and two drawn for the page.

Order: for each dataset the answer (each variant over its seeds, the epoch-time ratios with their intervals,
accuracy per seed, loss curves with the seed spread, memory), then the paired comparisons and how to read them, then
the sweep's own times, every metric by group, and every run, each linked to its report.html.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

import pandas as pd

from mha_textclf.pages.render import png_figure, png_file, write_page
from mha_textclf.runs import files
from mha_textclf.sweeps.compare import RULES
from mha_textclf.sweeps.markdown import (
    PE_HEADING,
    REPEATS_NOTE,
    VARIANTS_NOTE,
    Answer,
    against_heading,
    against_note,
    overview,
    readable_groups,
    readable_runs,
    sweep_markdown,
)
from mha_textclf.sweeps.plots import plot_accuracy_by_seed, plot_speed_ratios

LABELS = {"dataset", "model", "pe", "run folder", "status", "device", "error"}  # columns that are not numbers


def write_sweep_page(folder: Path, runs: pd.DataFrame, groups: pd.DataFrame, found: list[Answer]) -> Path:
    """summary.html in `folder`, from the tables summary.md is made of (write it after the summary's PNGs)."""
    from mha_textclf.sweeps.collect import setting_columns

    folder = Path(folder)
    settings = set(setting_columns(runs))
    answers = []
    for each in found:
        answers.append({
            "dataset": each.dataset, "variants": _rows(each.variants),
            "numeric": [c for c in each.variants.columns if c not in LABELS | settings],
            "repeats": each.repeats, "memory_note": each.memory_note,
            "ratios": png_figure(plot_speed_ratios(each.ratios, each.dataset), "Epoch time, paired",
                                 "Each point: a variant's median epoch time over what it is compared with, "
                                 "the line its 95% interval") if each.ratios else None,
            "accuracy": png_figure(plot_accuracy_by_seed(runs, each.dataset), "Test accuracy per seed"),
            "against_heading": against_heading(each) if each.against is not None else None,
            "against_note": against_note(each) if each.against is not None else None,
            "against": _rows(each.against), "pe": _rows(each.pe),
        })
    times = [line for line in sweep_markdown(folder, runs)[1:] if line and not line.startswith("#")]
    shown = readable_runs(folder, runs)
    # The link first, where a phone shows it without scrolling.
    shown = shown[["run folder", *(c for c in shown.columns if c != "run folder")]]
    links = {d: quote(f"{d}/{files.REPORT_PAGE}") for d in runs["run_dir"]  # a folder name may hold # or %
             if (folder / d / files.REPORT_PAGE).exists()}
    failed = runs[runs["status"] == "failed"]
    return write_page(
        folder / files.SUMMARY_PAGE, "sweep.html.j2", folder=folder, name=folder.name, overview=overview(runs),
        answers=answers, variants_note=VARIANTS_NOTE, repeats_note=REPEATS_NOTE, pe_heading=PE_HEADING,
        rules=RULES, loss_curves=png_file(folder / "loss_curves.png", "Loss per epoch",
                                          "The mean over each variant's runs, and their spread"),
        memory=png_file(folder / "memory.png", "Peak memory while training"),
        accuracy_vs_time=png_file(folder / "accuracy_vs_time.png", "Test accuracy against training time"),
        times=times, groups=_rows(readable_groups(groups, sorted(settings))) if not groups.empty else [],
        runs=_rows(shown), run_numeric=[c for c in shown.columns if c not in LABELS | settings],
        links={"run folder": links}, failed=[(r.run_dir, r.error) for r in failed.itertuples()])


def _rows(frame: pd.DataFrame | None) -> list[dict]:
    if frame is None or frame.empty:
        return []
    return [{c: "" if pd.isna(v) else str(v) for c, v in row.items()} for row in frame.to_dict("records")]
