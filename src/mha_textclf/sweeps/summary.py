"""A sweep's summary, written into its folder: summary.csv (a row per run), summary.md and the plots. Used by the
end-of-sweep callback and by scripts/summarize.py, for any folder that contains run folders."""

from __future__ import annotations

from pathlib import Path

from mha_textclf.sweeps.collect import groups_table, runs_table
from mha_textclf.sweeps.markdown import REFERENCE, summary_markdown
from mha_textclf.sweeps.plots import plot_accuracy_vs_time, plot_loss_curves, plot_memory


def write_summary(folder: str | Path, reference: str = REFERENCE) -> dict[str, Path]:
    """Write summary.csv, summary.md and the plots (loss_curves.png, accuracy_vs_time.png, memory.png) into
    `folder`; return their paths."""
    folder = Path(folder)
    runs = runs_table(folder)
    groups = groups_table(runs)
    names = ("summary.csv", "summary.md", "loss_curves.png", "accuracy_vs_time.png", "memory.png")
    paths = {name: folder / name for name in names}
    runs.to_csv(paths["summary.csv"], index=False)
    paths["summary.md"].write_text(summary_markdown(folder, runs, groups, reference))
    plot_loss_curves(folder, runs).savefig(paths["loss_curves.png"], dpi=110)
    plot_accuracy_vs_time(runs).savefig(paths["accuracy_vs_time.png"], dpi=110)
    plot_memory(runs).savefig(paths["memory.png"], dpi=110)
    return paths
