"""sweeps/markdown.py: summary.md, the answer per dataset (each variant over its seeds, paired comparisons against
the reference and of pe=True against pe=False), the sweep's own times, the memory note and every table's cells."""

import numpy as np
import pandas as pd
from scipy import stats

from conftest import load_script
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.sweeps.collect import groups_table, runs_table
from mha_textclf.sweeps.compare import RULES
from mha_textclf.sweeps.markdown import summary_markdown
from mha_textclf.sweeps.plots import plot_memory
from mha_textclf.sweeps.record import JobRecord, SweepRecord
from mha_textclf.sweeps.summary import write_summary
from sweep_fakes import edit_metrics, fake_run, md_table


def test_a_time_to_accuracy_few_runs_reached_is_their_mean_and_says_how_many_of_the_runs(tmp_path):
    """The column "s to val acc x" is the training seconds until validation accuracy first reached x, a mean ± std
    over the runs that reached it: of 3 runs, 2 reached 0.85 (in 4 and 6 s) and 1 reached 0.9 (in 19.1 s); a level
    reached by some runs is the mean over those, and says how many of the group's runs they are ("2 of 3 runs"), not
    how many missed it: runs, not seeds (seed 0 ran twice here: 3 runs, 2 seeds)."""
    reached = [{"0.85": 4.0, "0.9": 19.1, "0.95": None}, {"0.85": 6.0, "0.9": None, "0.95": None},
               {"0.85": None, "0.9": None, "0.95": None}]
    for run, (seed, seconds) in enumerate(zip([0, 0, 1], reached, strict=True)):
        fake_run(tmp_path / f"{run}_run", seed=seed)
        metrics = RunMetrics.read(tmp_path / f"{run}_run" / "metrics.json")
        metrics.time_to_accuracy = seconds
        metrics.write(tmp_path / f"{run}_run" / "metrics.json")
    write_summary(tmp_path)
    [row] = md_table((tmp_path / "summary.md").read_text(), "## By dataset")
    assert (row["runs"], row["seeds"]) == ("3", "2")
    assert row["s to val acc 0.85"] == "5.0 ± 1.4 (2 of 3 runs)"
    assert row["s to val acc 0.9"] == "19.1 (1 of 3 runs)"
    assert row["s to val acc 0.95"] == "not reached"


def paired_sweep(folder, ratios=(1.45, 1.5, 1.55), naive_articles=(0, 0, -2), pe_points=-3.0):
    """3 seeds × (efficient, naive) × pe: naive's epochs take `ratios[seed]` times efficient's; naive is
    `naive_articles` test articles of 1000 off efficient (float-rounding drift); pe=True `pe_points` lower. Validation
    has 307 articles, test 1000, as bbc-news."""
    for seed in range(3):
        for pe in (False, True):
            base = 0.95 + 0.01 * seed + (pe_points / 100 if pe else 0)
            for model, factor, articles in (("efficient", 1.0, 0), ("naive", ratios[seed], naive_articles[seed])):
                fake_run(folder / f"{model}_{pe}_{seed}", model=model, seed=seed, pe=pe, accuracy=base,
                         test_accuracy=base + articles / 1000, n_samples=1000, val_samples=307,
                         epoch_times=[3.0 * factor] + [factor] * 11,  # a slow first epoch (warm-up)
                         stages={"fit": {"seconds": 12.0, "peak_memory_mb": 500.0 + 10 * seed}})


def test_the_speed_ratio_pairs_each_seed_with_the_reference_s_run_of_the_same_seed(tmp_path):
    """The epoch time against the reference is a ratio paired over the seeds both ran (above 1: more seconds per
    epoch): efficient's epochs take 1, 2 and 4 s at seeds 0, 1, 2 and naive's 1.5 times its own seed's, so each pair is
    exactly 1.5 and the interval has no width; paired across seeds, the ratios would spread from 0.375 to 6."""
    for seed, seconds in enumerate([1.0, 2.0, 4.0]):
        for model, factor in (("efficient", 1.0), ("naive", 1.5)):
            fake_run(tmp_path / f"{model}_{seed}", model=model, seed=seed, epoch_seconds=seconds * factor)
    runs = runs_table(tmp_path)
    (against,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### Against efficient (the reference)")
    assert (against["shared seeds"], against["epoch time"]) == ("3", "slower by 1.50× (95% CI 1.50–1.50×)")


def test_the_answer_comes_first_and_compares_against_the_reference(tmp_path):
    paired_sweep(tmp_path)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert text.index("## The answer: bbc-news") < text.index("## By dataset") < text.index("## Runs")

    variants = {(r["model"], r["pe"]): r for r in md_table(text, "## The answer: bbc-news")}
    # Rows by model, then pe=False before pe=True.
    assert list(variants) == [("efficient", "False"), ("efficient", "True"), ("naive", "False"), ("naive", "True")]
    assert [line for line in text.split("## The answer: bbc-news", 1)[1].splitlines() if line.startswith("|")][1] == (
        "|" + "---|" * len(variants["naive", "False"]))
    assert variants["naive", "False"]["runs"] == variants["naive", "False"]["seeds"] == "3"
    assert variants["efficient", "False"]["epoch time vs fastest"] == "1.00×"
    assert variants["naive", "False"]["epoch time vs fastest"] == "1.50×"  # mean of medians 1.45, 1.5, 1.55
    assert variants["efficient", "True"]["peak RSS in training, MB"] == "510 ± 10"
    assert "peak CUDA in training, MB" not in variants["efficient", "True"]  # a CPU sweep has no CUDA column
    test = np.array([0.92, 0.93, 0.94 - 0.002])  # naive, pe=True: seed 2 two articles off
    assert variants["naive", "True"]["test accuracy"] == f"{test.mean():.4f} ± {test.std(ddof=1):.4f}"
    # Every column from its own metric of its own split (naive, pe=True; macro-F1 is accuracy - 0.1 here), the
    # median epoch (the 3× warm-up epoch is no median) and tokens/s against the fastest variant's.
    val = np.array([0.92, 0.93, 0.94])
    by_split = {"val accuracy": val, "test accuracy": test, "val macro-F1": val - 0.1, "test macro-F1": test - 0.1}
    expected = {column: f"{v.mean():.4f} ± {v.std(ddof=1):.4f}" for column, v in by_split.items()}
    assert {column: variants["naive", "True"][column] for column in expected} == expected
    assert variants["naive", "True"]["median epoch s"] == "1.50 ± 0.05"  # medians 1.45, 1.5, 1.55
    assert variants["efficient", "True"]["median epoch s"] == "1.00 ± 0.00"
    assert variants["efficient", "False"]["tokens/s vs fastest"] == "1.00×"
    tokens = np.mean([1 / 1.45, 1 / 1.5, 1 / 1.55])  # the same tokens in 1.45-1.55 times the seconds, per seed
    assert variants["naive", "False"]["tokens/s vs fastest"] == f"{tokens:.2f}×"
    # The same numbers in the table of every metric, and each run's own in the runs table.
    groups = {(r["model"], r["pe"]): r for r in md_table(text, "## By dataset")}
    assert {column: groups["naive", "True"][column] for column in expected} == expected
    assert groups["naive", "True"]["median epoch s"] == "1.50 ± 0.05"
    runs = {r["run folder"]: r for r in md_table(text, "## Runs")}
    assert (runs["naive_True_2"]["val accuracy"], runs["naive_True_2"]["test accuracy"]) == ("0.9400", "0.9380")
    assert (runs["naive_True_2"]["val macro-F1"], runs["naive_True_2"]["test macro-F1"]) == ("0.8400", "0.8380")

    against = {(r["model"], r["pe"]): r for r in md_table(text, "### Against efficient (the reference)")}
    assert set(against) == {("naive", "False"), ("naive", "True")}
    logs = np.log([1.45, 1.5, 1.55])
    ci = np.exp(stats.ttest_1samp(logs, 0).confidence_interval(0.95))
    assert against["naive", "False"]["epoch time"] == (
        f"slower by {np.exp(logs.mean()):.2f}× (95% CI {ci[0]:.2f}–{ci[1]:.2f}×)")
    assert against["naive", "False"]["shared seeds"] == "3"
    assert against["naive", "False"]["val accuracy"] == "identical at all 3 seeds"
    assert against["naive", "False"]["test accuracy"].startswith("same within noise (-0.1 points, -0.7 of 1000")

    pe = {r["model"]: r for r in md_table(text, "### pe=True against pe=False")}
    # Each model against itself without PE (naive's epochs are as slow either way), each split in its own articles.
    for model in ("efficient", "naive"):
        assert pe[model]["test accuracy"] == "lower by 3.0 points (-30 of 1000 articles, 95% CI -3.0 to -3.0)"
        assert pe[model]["val accuracy"] == "lower by 3.0 points (-9.2 of 307 articles, 95% CI -3.0 to -3.0)"
        assert pe[model]["epoch time"].startswith("same speed within noise (1.00×")
    assert "**Noise rule:**" in text and "5 articles or fewer" in text


def test_a_pe_true_variant_is_compared_against_the_reference_with_pe_true_not_pe_false(tmp_path):
    """Each variant is compared against the reference variant with the same pe and settings. In
    paired_sweep naive with PE gives efficient-with-PE's validation accuracies at every seed and its test accuracies
    within two articles, while PE itself costs 3 points: put against efficient without PE, naive with PE would read
    "lower by 3.0 points"."""
    paired_sweep(tmp_path)
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    against = {(r["model"], r["pe"]): r for r in md_table(text, "### Against efficient (the reference)")}
    assert against["naive", "True"]["val accuracy"] == "identical at all 3 seeds"
    assert against["naive", "True"]["test accuracy"].startswith("same within noise (-0.1 points, -0.7 of 1000")
    logs = np.log([1.45, 1.5, 1.55])
    assert against["naive", "True"]["epoch time"].startswith(f"slower by {np.exp(logs.mean()):.2f}×")


def test_the_tables_the_docs_record_from_a_sweep_are_its_summary_s_own(tmp_path, monkeypatch):
    """scripts/render_docs.py --results NAME=<sweep> records the answer of a sweep's summary (each variant, and each
    against the reference, paired), and renders each table as summary.md shows it, cell for cell."""
    paired_sweep(tmp_path / "sweep")
    write_summary(tmp_path / "sweep")
    text = (tmp_path / "sweep" / "summary.md").read_text()
    render = load_script("render_docs", monkeypatch)
    monkeypatch.setattr(render, "RESULTS", tmp_path / "results")
    render.record_results("a-sweep", tmp_path / "sweep")
    for table, heading in (("variants", "## The answer: bbc-news"), ("against", "### Against efficient")):
        rendered = render.result_table("a-sweep", table)
        shown = [line for line in text.split(heading, 1)[1].splitlines()[1:] if line.startswith("|") or not line]
        assert rendered.splitlines() == "\n".join(shown).strip().split("\n\n")[0].splitlines(), table


def test_the_docs_give_a_recorded_sweep_s_own_wall_time_and_a_sweep_without_one_none(tmp_path, monkeypatch):
    """The sweep's time in the docs is sweep.json's, as --results recorded it; a folder without sweep.json (runs
    gathered by hand) gives no time to show."""
    paired_sweep(tmp_path / "sweep")
    render = load_script("render_docs", monkeypatch)
    monkeypatch.setattr(render, "RESULTS", tmp_path / "results")
    render.record_results("no-clock", tmp_path / "sweep")
    assert "results:no-clock:time" not in render.renderers()
    SweepRecord(launcher="BasicLauncher", started_at="a", ended_at="b", wall_seconds=237.6).write(tmp_path / "sweep")
    render.record_results("a-sweep", tmp_path / "sweep")
    runs = len(runs_table(tmp_path / "sweep"))
    assert render.renderers()["results:a-sweep:time"]() == (
        f"All {runs} runs took 238 s, one after another, by the sweep's own clock (`sweep.json`; device: cpu).")


def test_each_dataset_gets_its_own_answer_with_its_own_runs_and_comparisons(tmp_path):
    """summary.md opens with the answer, one section per dataset: each section holds the variants of its dataset
    alone, their times relative to that dataset's fastest, and the comparisons among them."""
    for dataset, accuracy, naive_seconds in (("bbc-news", 0.9, 3.0), ("r8", 0.6, 4.0)):
        for model, seconds in (("efficient", 2.0), ("naive", naive_seconds)):
            fake_run(tmp_path / f"{dataset}_{model}", model=model, dataset=dataset, accuracy=accuracy,
                     n_samples=1000, epoch_times=[seconds] * 6)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    headings = [line for line in text.splitlines() if line.startswith("## The answer")]
    assert headings == ["## The answer: bbc-news", "## The answer: r8"]
    sections = {dataset: text.split(f"## The answer: {dataset}", 1)[1].split("\n## ", 1)[0]
                for dataset in ("bbc-news", "r8")}
    for dataset, accuracy, ratio in (("bbc-news", "0.9000", "1.50×"), ("r8", "0.6000", "2.00×")):
        variants = {r["model"]: r for r in md_table(text, f"## The answer: {dataset}")}
        assert set(variants) == {"efficient", "naive"}
        assert {r["val accuracy"] for r in variants.values()} == {accuracy}
        assert variants["naive"]["epoch time vs fastest"] == ratio
        (against,) = md_table(sections[dataset], "### Against efficient (the reference)")
        assert against["epoch time"].startswith(f"slower by {ratio}")


def test_without_the_reference_the_fastest_variant_is_named_instead(tmp_path):
    for model, seconds in (("torch", 2.0), ("naive", 3.0)):
        fake_run(tmp_path / model, model=model, epoch_times=[seconds] * 6)
    text = (tmp_path / "summary.md").read_text() if write_summary(tmp_path) else ""
    heading = "### Against torch (efficient, the reference, is not in this sweep, so the fastest variant)"
    against = md_table(text, heading)
    assert [(r["model"], r["epoch time"]) for r in against] == [("naive", "slower by 1.50× (95% CI 1.50–1.50×)")]


def test_each_variant_is_paired_with_the_reference_at_the_same_settings(tmp_path):
    """A sweep over model.dropout too: naive at each dropout against efficient at that dropout, never pooled with the
    reference's runs at the other (here a dropout of 0.3 is 5 points lower and twice as slow, in both models)."""
    for model, factor in (("efficient", 1.0), ("naive", 1.5)):
        for dropout, accuracy, slower in ((0.1, 0.9, 1.0), (0.3, 0.85, 2.0)):
            fake_run(tmp_path / f"{model}_{dropout}", model=model, accuracy=accuracy, n_samples=1000,
                     epoch_times=[factor * slower] * 6, model__dropout=dropout)
    write_summary(tmp_path)
    rows = md_table((tmp_path / "summary.md").read_text(), "### Against efficient (the reference)")
    assert {(r["model"], r["model.dropout"]): (r["epoch time"], r["val accuracy"]) for r in rows} == {
        ("naive", dropout): ("slower by 1.50× (95% CI 1.50–1.50×)", "identical at the one seed")
        for dropout in ("0.1", "0.3")}


def test_repeats_of_a_seed_are_runs_not_seeds(tmp_path):
    for i, accuracy in enumerate([0.90, 0.92, 0.94]):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=0, accuracy=accuracy, n_samples=1000)
    fake_run(tmp_path / "efficient", model="efficient", seed=0, accuracy=0.92, n_samples=1000)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert (variants["naive"]["runs"], variants["naive"]["seeds"]) == ("3", "1")
    assert variants["naive"]["val accuracy"] == "0.9200 ± 0.0200"
    assert variants["efficient"]["val accuracy"] == "0.9200"  # one run: no ±
    assert "the spread between repeats" in text
    (row,) = md_table(text, "### Against efficient")
    assert row["shared seeds"] == "1" and row["val accuracy"] == "identical at the one seed"  # repeats averaged
    # The same runs at three seeds: no repeats, and no such warning (each ± is a spread between seeds).
    seeds = tmp_path / "seeds"
    for i, accuracy in enumerate([0.90, 0.92, 0.94]):
        fake_run(seeds / f"naive_{i}", model="naive", seed=i, accuracy=accuracy, n_samples=1000)
    fake_run(seeds / "efficient", model="efficient", seed=0, accuracy=0.92, n_samples=1000)
    write_summary(seeds)
    text = (seeds / "summary.md").read_text()
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert (variants["naive"]["runs"], variants["naive"]["seeds"]) == ("3", "3")
    assert "the spread between repeats" not in text


def test_one_run_beyond_the_seeds_is_already_called_a_repeat(tmp_path):
    """The answer gives how many runs and how many distinct seeds; runs beyond the seeds are repeats of a seed, and
    are called that. naive ran seed 0 twice and seed 1 once: 3 runs, 2 seeds, one repeat, and the answer says its ±
    is partly a spread between repeats; efficient, one run per seed, has none."""
    for i, seed in enumerate([0, 0, 1]):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=seed, accuracy=0.9, n_samples=1000)
    for seed in (0, 1):
        fake_run(tmp_path / f"efficient_{seed}", model="efficient", seed=seed, accuracy=0.9, n_samples=1000)
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert (variants["naive"]["runs"], variants["naive"]["seeds"]) == ("3", "2")
    assert (variants["efficient"]["runs"], variants["efficient"]["seeds"]) == ("2", "2")
    assert "Some variants ran a seed more than once" in text


def test_the_accuracy_of_a_seed_run_three_times_is_the_mean_of_its_runs_before_pairing(tmp_path):
    """A comparison pairs the seeds both variants ran, a seed's repeats with their accuracies averaged (their epochs
    pooled). naive ran seed 0 three times (0.90, 0.90, 0.99: mean 0.93, where the median or the first run says
    0.90) and seed 1 once (0.91); efficient 0.90 at both. The differences are +3 and +1 points: +2.0 points, +20 of
    1000 articles, with scipy's t interval on them."""
    for i, (seed, accuracy) in enumerate([(0, 0.90), (0, 0.90), (0, 0.99), (1, 0.91)]):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=seed, accuracy=accuracy, n_samples=1000)
    for seed in (0, 1):
        fake_run(tmp_path / f"efficient_{seed}", model="efficient", seed=seed, accuracy=0.90, n_samples=1000)
    runs = runs_table(tmp_path)
    (row,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### Against efficient")
    differences = [np.mean([0.90, 0.90, 0.99]) - 0.90, 0.91 - 0.90]
    low, high = stats.t.interval(0.95, 1, loc=np.mean(differences), scale=stats.sem(differences))
    assert row["shared seeds"] == "2"
    assert row["val accuracy"] == (f"same within noise (+2.0 points, +20 of 1000 articles, 95% CI {100 * low:+.1f} "
                                   f"to {100 * high:+.1f})")


def test_pe_true_against_pe_false_counts_and_pairs_only_the_seeds_both_ran(tmp_path):
    """pe=True against pe=False is paired over the seeds both ran, and its "shared seeds" column counts them.
    pe=True ran seeds 0, 1 and 2 (0.90, 0.90, then 0.50), pe=False only 0 and 1 (0.90 at both, its seed 2
    failed, say): 2 shared seeds, identical at both; seed 2 is in neither the count nor the difference."""
    for seed, accuracy in enumerate([0.90, 0.90, 0.50]):
        fake_run(tmp_path / f"efficient_True_{seed}", pe=True, seed=seed, accuracy=accuracy, n_samples=1000)
    for seed in (0, 1):
        fake_run(tmp_path / f"efficient_False_{seed}", pe=False, seed=seed, accuracy=0.90, n_samples=1000)
    runs = runs_table(tmp_path)
    (row,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### pe=True against pe=False")
    assert (row["shared seeds"], row["val accuracy"], row["test accuracy"]) == (
        "2", "identical at both seeds", "identical at both seeds")


def test_the_rules_are_printed_under_the_comparisons_of_a_sweep_of_one_model_too(tmp_path):
    """The rules for reading the comparisons are printed under their tables. A sweep of one model over pe has no
    table against a reference, only pe=True against pe=False: the rules follow that table, word for word
    comparison.RULES."""
    for seed in (0, 1):
        for pe in (True, False):
            fake_run(tmp_path / f"efficient_{pe}_{seed}", pe=pe, seed=seed, accuracy=0.9, n_samples=1000)
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    assert "### Against" not in text
    table, rules = text.index("### pe=True against pe=False"), text.find(f"How to read the comparisons: {RULES}")
    assert 0 < table < rules < text.index("## Runs")


def test_the_epoch_time_of_a_seed_run_twice_is_the_median_of_both_runs_epochs_pooled(tmp_path):
    """Epoch time is compared as a ratio paired over the seeds both variants ran, a seed's repeats with their epochs
    pooled. naive ran seed 0 twice, 3 epochs of 1 s then 7 of 2 s; pooled, their median
    is 2 s: twice efficient's 1 s (the first run alone says 1×, the mean of the two runs' medians 1.5×)."""
    repeats = ([1.0] * 3, [2.0] * 7)
    for i, times in enumerate(repeats):
        fake_run(tmp_path / f"naive_{i}", model="naive", seed=0, accuracy=0.9, n_samples=1000, epoch_times=times)
    fake_run(tmp_path / "efficient", model="efficient", seed=0, accuracy=0.9, n_samples=1000, epoch_times=[1.0] * 6)
    runs = runs_table(tmp_path)
    (row,) = md_table(summary_markdown(tmp_path, runs, groups_table(runs)), "### Against efficient")
    expected = np.median(np.concatenate(repeats)) / 1.0
    assert expected == 2.0 and row["epoch time"].split("×")[0].split()[-1].strip("(") == f"{expected:.2f}"


def test_cuda_peaks_get_their_column_and_panel(tmp_path):
    for seed in (0, 1):
        fake_run(tmp_path / f"run_{seed}", seed=seed,
                 stages={"fit": {"seconds": 1.0, "peak_memory_mb": 900.0, "peak_cuda_mb": 100.0 + 50 * seed}})
    runs = runs_table(tmp_path)
    text = summary_markdown(tmp_path, runs, groups_table(runs))
    (row,) = md_table(text, "## The answer: bbc-news")
    assert row["peak CUDA in training, MB"] == "125 ± 35" and row["peak RSS in training, MB"] == "900 ± 0"
    figure = plot_memory(runs)
    titles = [ax.get_title() for ax in figure.axes]
    assert titles == ["CPU: peak RSS of the process while training, MB", "CUDA: peak allocated while training, MB"]
    assert [p.get_width() for p in figure.axes[1].patches] == [125.0]


def test_memory_is_said_not_to_compare_only_when_jobs_shared_a_process(tmp_path):
    """summary.md notes when the jobs shared one process (the basic launcher; joblib's workers run
    several jobs each), since a later job's peak RSS then holds what earlier jobs left behind; jobs that each had a
    process of their own (submitit_local, Slurm), and runs without a job record, are compared as they are."""
    def sweep(name: str, pids: list[int | None]) -> str:
        folder = tmp_path / name
        for num, pid in enumerate(pids):
            fake_run(folder / f"{num}_seed-{num}", seed=num, stages={"fit": {"peak_memory_mb": 600.0 + num}})
            if pid is not None:
                JobRecord(job=num, overrides=[f"seed={num}"], started_at="2026-01-01T00:00:00.000+00:00",
                          ended_at="2026-01-01T00:00:02.000+00:00", wall_seconds=2.0, host="node", pid=pid,
                          status="COMPLETED").write(folder / f"{num}_seed-{num}")
        write_summary(folder)
        return (folder / "summary.md").read_text()

    assert "3 jobs shared one process" in sweep("basic", [7, 7, 7])
    assert "3 jobs shared 2 processes" in sweep("joblib", [7, 8, 7])
    # Summarised beside runs of their own (scripts/summarize.py outputs): the note says which of them it is about.
    assert "here 2 sweep jobs (of the 3 runs) shared one process" in sweep("mixed", [7, 7, None])
    for alone in (sweep("submitit", [7, 8, 9]), sweep("no_records", [None, None, None])):
        assert "Peak RSS is the whole process's resident memory" in alone  # what the column measures...
        assert "jobs shared" not in alone and "does not compare" not in alone  # ...and no warning against it


def test_summary_md_gives_the_answer_then_the_sweeps_record_then_every_metric_by_group_then_every_run(tmp_path):
    """summary.md opens with the answer, one section per dataset, then the sweep's own record (its wall time and the
    jobs' wall times against their training seconds), every metric by group, and one row per run: its sections in
    that order, each once."""
    for num, model in enumerate(("efficient", "naive")):
        fake_run(tmp_path / f"{num}_model-{model}", model=model, n_samples=1000, epoch_times=[1.0 + num] * 6)
        JobRecord(job=num, overrides=[f"model={model}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:00:30.000+00:00", wall_seconds=30.0, host="node", pid=num,
                  status="COMPLETED").write(tmp_path / f"{num}_model-{model}")
    write_summary(tmp_path)
    headings = [line for line in (tmp_path / "summary.md").read_text().splitlines() if line.startswith("## ")]
    assert headings == ["## The answer: bbc-news", "## The sweep",
                        "## By dataset, model, pe and varying settings: every metric (mean ± std over runs)",
                        "## Runs"]


def test_the_note_on_jobs_that_shared_a_process_says_how_to_compare_memory(tmp_path):
    """When the jobs shared one process their peak RSS does not compare variants, and the note says so and how to
    compare memory instead: run them with `hydra/launcher=submitit_local`, one fresh process per job, or use
    `scripts/benchmark.py`."""
    for num in (0, 1):
        fake_run(tmp_path / f"{num}_seed-{num}", seed=num, stages={"fit": {"peak_memory_mb": 600.0 + num}})
        JobRecord(job=num, overrides=[f"seed={num}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:00:02.000+00:00", wall_seconds=2.0, host="node", pid=7,
                  status="COMPLETED").write(tmp_path / f"{num}_seed-{num}")
    write_summary(tmp_path)
    answer = (tmp_path / "summary.md").read_text().split("## The answer: bbc-news", 1)[1].split("\n## ", 1)[0]
    (note,) = [line for line in answer.splitlines() if line.startswith("Peak RSS")]
    assert "2 jobs shared one process" in note and "does not compare variants" in note
    assert "`hydra/launcher=submitit_local`" in note and "`scripts/benchmark.py`" in note


def test_jobs_on_different_hosts_with_the_same_pid_did_not_share_a_process(tmp_path):
    """The note comes only when the jobs shared one process. A process is a pid on a host: Slurm jobs
    on two nodes may well have the same pid, each its own process (and its own peak RSS), while jobs with one pid on
    one host shared it."""
    for num, (host, pid) in enumerate([("node1", 4242), ("node2", 4242), ("node2", 4242)]):
        folder = tmp_path / f"{num}_seed-{num}"
        fake_run(folder, seed=num, stages={"fit": {"peak_memory_mb": 600.0}})
        JobRecord(job=num, overrides=[f"seed={num}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:00:02.000+00:00", wall_seconds=2.0, host=host, pid=pid,
                  status="COMPLETED").write(folder)
    write_summary(tmp_path)
    assert "3 jobs shared 2 processes" in (tmp_path / "summary.md").read_text()
    (tmp_path / "2_seed-2" / "job.json").unlink()  # the two left ran on two nodes: nothing shared
    write_summary(tmp_path)
    assert "jobs shared" not in (tmp_path / "summary.md").read_text()


def test_summary_md_shows_a_drawn_setting_to_4_significant_digits_and_summary_csv_every_digit(tmp_path):
    """summary.csv's setting columns are read from each run's config.yaml, with every digit; summary.md shows a long
    number, such as a learning rate a search drew, to 4 significant digits."""
    drawn = [0.11587950184865041, 0.0010005268542378305, 0.25]
    for i, value in enumerate(drawn):
        fake_run(tmp_path / f"{i}_run", seed=i, model__dropout=value)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    shown = ["0.1159", "0.001001", "0.25"]
    assert [r["model.dropout"] for r in md_table(text, "## Runs")] == shown
    assert sorted(r["model.dropout"] for r in md_table(text, "## By dataset")) == sorted(shown)
    assert sorted(r["model.dropout"] for r in md_table(text, "## The answer")) == sorted(shown)
    assert pd.read_csv(tmp_path / "summary.csv")["model.dropout"].tolist() == drawn


def test_the_table_by_group_gives_each_metric_its_own_column(tmp_path):
    """summary.md gives every metric by group in a column of its own: train s the runs' training seconds (all
    epochs), job s their jobs' wall times, median epoch s their median epochs, s to val acc x the times to each
    validation accuracy level, each a mean ± std over the group's runs."""
    runs = [([1.0, 2.0, 6.0], 30.0, {"0.9": 3.0}), ([2.0, 3.0, 3.0], 40.0, {"0.9": 5.0})]
    for seed, (times, wall, reached) in enumerate(runs):
        folder = tmp_path / f"{seed}_seed-{seed}"
        fake_run(folder, seed=seed, epoch_times=times)
        edit_metrics(folder, time_to_accuracy=reached)
        JobRecord(job=seed, overrides=[f"seed={seed}"], started_at="2026-01-01T00:00:00.000+00:00",
                  ended_at="2026-01-01T00:01:00.000+00:00", wall_seconds=wall, host="node", pid=seed,
                  status="COMPLETED").write(folder)
    write_summary(tmp_path)
    (row,) = md_table((tmp_path / "summary.md").read_text(), "## By dataset")

    def pm(values, digits):
        return f"{np.mean(values):.{digits}f} ± {np.std(values, ddof=1):.{digits}f}"

    assert row["train s"] == pm([sum(times) for times, _, _ in runs], 1)  # 9 and 8 s
    assert row["job s"] == pm([30.0, 40.0], 1)
    assert row["median epoch s"] == pm([np.median(times) for times, _, _ in runs], 2)
    assert row["s to val acc 0.9"] == pm([3.0, 5.0], 1)


def test_the_share_of_training_in_the_jobs_wall_time_counts_only_the_runs_that_have_one(tmp_path):
    """The sweep's own record sets the jobs' wall times against their training seconds, like against like.
    Summarised together (scripts/summarize.py on a parent folder), a sweep's job of 12 s wall time that
    trained 10 s and a single run of 100 s with no job.json: the share is 10 of 12 s, not 110 of 12 s."""
    job = tmp_path / "sweep" / "0_seed-0"
    fake_run(job, epoch_times=[5.0, 5.0])
    JobRecord(job=0, overrides=["seed=0"], started_at="2026-01-01T00:00:00.000+00:00",
              ended_at="2026-01-01T00:00:12.000+00:00", wall_seconds=12.0, host="node", pid=1,
              status="COMPLETED").write(job)
    fake_run(tmp_path / "runs" / "single", seed=1, epoch_times=[50.0, 50.0])
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert "The jobs' own wall times add up to 12.0 s; training passes took 10.0 s of them (83%)" in text
    assert "1 of the 2 runs here are sweep jobs (they have a job.json); the times below are theirs." in text
    assert "earlier attempt" not in text


def test_a_job_that_found_its_run_trained_counts_only_the_epochs_it_trained_itself(tmp_path):
    """A sweep run again: a job that found its run finished trained nothing, and one that continued its run trained
    only the epochs after those its attempt started from (status.json dates the attempt and counts them). The share
    of training in the jobs' wall time stays the jobs' own, never above 100%."""
    import json

    def job(folder, started, wall, status):
        fake_run(folder, epoch_times=[5.0, 7.0], seed=int(folder.name[0]))
        (folder / "status.json").write_text(json.dumps({"state": "finished", "attempt": 2, **status}))
        JobRecord(job=int(folder.name[0]), overrides=[], started_at=started, ended_at="2026-01-02T00:01:00.000+00:00",
                  wall_seconds=wall, host="node", pid=1, status="COMPLETED").write(folder)

    def summary() -> str:
        write_summary(tmp_path)
        return (tmp_path / "summary.md").read_text()

    # Found finished: its only attempt started the day before this job.
    job(tmp_path / "0_seed-0", "2026-01-02T00:00:00.500+00:00", 2.0,
        {"started_at": "2026-01-01T00:00:00+0000", "epochs_done": 2, "started_from_epoch": 0})
    # Continued after epoch 1, in the job's first second (status.json keeps whole seconds): its epoch 2, 7 s.
    job(tmp_path / "1_seed-1", "2026-01-02T00:00:00.500+00:00", 10.0,
        {"started_at": "2026-01-02T00:00:00+0000", "epochs_done": 2, "started_from_epoch": 1})
    text = summary()
    assert "The jobs' own wall times add up to 12.0 s; training passes took 7.0 s of them (58%)" in text
    assert "2 of the jobs found their run trained, in full or in part, by an earlier attempt" in text
    runs = {r["run folder"]: r for r in md_table(text, "## Runs")}
    assert runs["0_seed-0"]["train s"] == runs["1_seed-1"]["train s"] == "12.0"  # the whole run's, as before
    # Continued an hour after its job ended, by a command of its own: what the job trained is not recorded.
    job(tmp_path / "2_seed-2", "2026-01-02T00:00:00.500+00:00", 6.0,
        {"started_at": "2026-01-02T01:00:00+0000", "epochs_done": 2, "started_from_epoch": 1})
    text = summary()
    assert "The jobs' own wall times add up to 12.0 s; training passes took 7.0 s of them (58%)" in text
    assert "1 job(s) left out: their run was continued after the job ended" in text


def test_the_runs_table_shows_what_a_run_decided_from_its_corpus_beside_the_null_that_groups_it(tmp_path):
    """A setting left null adapts per run (a vocabulary per seed's training split): the table by group keeps it null,
    so that the seeds of one command average together, and the table of runs says the value each run trained with."""
    fake_run(tmp_path / "0_own", seed=0, model__d_model=64, adapted={"model.d_model": "64: short texts"})
    fake_run(tmp_path / "1_own", seed=1, model__d_model=64, adapted={"model.d_model": "64: short texts"})
    fake_run(tmp_path / "2_set", seed=0, model__d_model=128)
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    runs = {r["run folder"]: r["model.d_model"] for r in md_table(text, "## Runs")}
    assert runs == {"0_own": "64 (adapted)", "1_own": "64 (adapted)", "2_set": "128"}
    groups = sorted((r["model.d_model"], r["runs"]) for r in md_table(text, "## By dataset"))
    assert groups == [("128", "1"), ("None", "2")]  # the two adapted seeds are one group
