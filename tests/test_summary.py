"""sweeps/summary.py: write_summary (summary.csv, summary.md, the plots) and scripts/summarize.py, which writes them
for any folder of runs."""

import pandas as pd
import pytest

from conftest import capture_figures, load_script, png_size
from mha_textclf.sweeps.collect import runs_table
from mha_textclf.sweeps.summary import write_summary
from sweep_fakes import fake_run, md_table


def test_summary_csv_holds_the_runs_table_s_columns_and_nothing_else(tmp_path):
    """summary.csv is the per-run table: one column per column of the runs table (pandas' row index is no column of
    it), and one row per run, each value the table's; read back, it is the runs table."""
    for i, dropout in enumerate([0.1, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, model__dropout=dropout)
    write_summary(tmp_path)
    expected = runs_table(tmp_path)
    with (tmp_path / "summary.csv").open() as f:
        header = f.readline().rstrip("\n").split(",")
    assert header == list(expected.columns) and header[0] == "dataset"
    written = pd.read_csv(tmp_path / "summary.csv")
    assert written["run_dir"].tolist() == ["0_run", "1_run"] and written["seed"].tolist() == [0, 1]
    assert (tmp_path / "summary.csv").read_text() == expected.to_csv(index=False)


def test_summarize_without_a_reference_writes_the_hooks_summary_against_efficient(tmp_path):
    """`python scripts/summarize.py <folder>` writes the same summary as the end-of-sweep hook, whose reference is
    efficient; `--reference torch` is what compares against another variant."""
    for model, seconds in (("torch", 2.0), ("efficient", 2.5), ("naive", 3.0)):
        fake_run(tmp_path / model, model=model, epoch_times=[seconds] * 6)
    write_summary(tmp_path)  # what SweepSummary writes at the end of a sweep
    hooks = (tmp_path / "summary.md").read_text()
    (tmp_path / "summary.md").unlink()
    assert load_script("summarize").main([str(tmp_path)]) == 0
    assert (tmp_path / "summary.md").read_text() == hooks
    against = md_table(hooks, "### Against efficient (the reference)")
    assert [(r["model"], r["epoch time"]) for r in against] == [("naive", "slower by 1.20× (95% CI 1.20–1.20×)"),
                                                                ("torch", "faster by 1.25× (95% CI 1.25–1.25×)")]


def test_summarize_compares_against_the_reference_it_is_given(tmp_path, capsys):
    """scripts/summarize.py <folder> --reference naive: the heading names it, and the others are paired with it."""

    for model, seconds in (("torch", 2.0), ("naive", 3.0)):
        fake_run(tmp_path / model, model=model, epoch_times=[seconds] * 6)
    summarize = load_script("summarize")
    assert summarize.main([str(tmp_path), "--reference", "naive"]) == 0
    against = md_table((tmp_path / "summary.md").read_text(), "### Against naive (the reference)")
    assert [(r["model"], r["epoch time"]) for r in against] == [("torch", "faster by 1.50× (95% CI 1.50–1.50×)")]
    assert "### Against naive (the reference)" in capsys.readouterr().out  # and prints summary.md


def test_summarize_writes_the_summary_and_each_plot_into_the_folder_and_no_sweep_record(tmp_path, monkeypatch):
    """`python scripts/summarize.py <folder>` writes the same files as the sweep's hook (summary.md, summary.csv,
    accuracy_vs_time.png, memory.png, loss_curves.png, summary.html) except sweep.json, which only the sweep itself
    can measure: each plot into its own file, read back as a PNG; and each run's report.html."""
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_run", seed=seed, stages={"fit": {"peak_memory_mb": 600.0}})
    saved = capture_figures(monkeypatch)
    assert load_script("summarize").main([str(tmp_path)]) == 0
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == [
        "accuracy_vs_time.png", "loss_curves.png", "memory.png", "summary.csv", "summary.html", "summary.md"]
    assert all((tmp_path / f"{seed}_run" / "report.html").is_file() for seed in (0, 1))
    assert all(min(png_size(tmp_path / name)) > 100 for name in saved)  # rendered, whole
    # Each file holds its own plot.
    assert saved["accuracy_vs_time.png"].axes[0].get_ylabel() == "test accuracy"
    assert saved["memory.png"].axes[0].get_title() == "CPU: peak RSS of the process while training, MB"
    assert saved["loss_curves.png"].get_suptitle().startswith("loss per epoch")


def test_summarize_finds_the_run_folders_at_any_depth_of_outputs(tmp_path):
    """`python scripts/summarize.py <folder>` summarises any folder that holds run folders, at any depth, so
    `scripts/summarize.py outputs` puts the baseline's runs in the same table as the trained ones. outputs/ as the
    configs lay it out: a single run in runs/<stamp>/, a sweep's jobs in multirun/<stamp>/<job>/, a baseline sweep's
    in baselines/multirun/<stamp>/<job>/."""
    outputs = tmp_path / "outputs"
    runs = {"runs/2026-01-01_10-00-00-000000_efficient_pe-False": ("efficient", 2),
            "multirun/2026-01-01_11-00-00-000000/0_seed-0": ("efficient", 0),
            "multirun/2026-01-01_11-00-00-000000/1_seed-1": ("efficient", 1),
            "baselines/multirun/2026-01-01_12-00-00-000000/0_features-words_seed-0": ("tfidf-words", 0)}
    for folder, (model, seed) in runs.items():
        fake_run(outputs / folder, model=model, seed=seed, pe=None if model.startswith("tfidf") else False)
    assert load_script("summarize").main([str(outputs)]) == 0
    table = pd.read_csv(outputs / "summary.csv")
    assert {row.run_dir: (row.model, row.seed) for row in table.itertuples()} == runs


@pytest.mark.unit
def test_summarize_refuses_a_folder_without_runs_and_a_path_that_is_no_folder(tmp_path, capsys):
    """scripts/summarize.py: usage errors exit with 2 (argparse's), saying what is wrong, and write nothing."""
    summarize = load_script("summarize")
    (tmp_path / "empty" / "nested").mkdir(parents=True)
    (tmp_path / "file.txt").write_text("not a folder")
    for path, message in ((tmp_path / "empty", "no run folders (with metrics.json, config.yaml, error.txt or "
                                               ".hydra/) below"),
                          (tmp_path / "file.txt", "is not a folder"), (tmp_path / "nowhere", "is not a folder")):
        with pytest.raises(SystemExit) as exit:
            summarize.main([str(path)])
        assert exit.value.code == 2 and message in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["empty", "file.txt", "nested"]
