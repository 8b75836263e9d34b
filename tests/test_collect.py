"""sweeps/collect.py: the runs table (one row per run folder, a column per varying setting; failed and interrupted
runs) and the groups table (means over seeds, times against the fastest variant of a dataset)."""

import numpy as np
import pandas as pd
import pytest
import yaml

from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.sweeps.collect import groups_table, runs_table
from mha_textclf.sweeps.markdown import summary_markdown
from mha_textclf.sweeps.summary import write_summary
from sweep_fakes import edit_metrics, fake_run, md_table


@pytest.mark.unit
def test_groups_average_over_seeds_and_compare_speed(tmp_path):
    for i, (model, seed, acc, seconds) in enumerate([("naive", 0, 0.8, 30.0), ("naive", 1, 0.9, 34.0),
                                                     ("efficient", 0, 0.7, 10.0), ("efficient", 1, 0.9, 10.0)]):
        fake_run(tmp_path / f"{i}_run", model, seed, acc, seconds)
    runs = runs_table(tmp_path)
    assert list(runs.columns[:5]) == ["dataset", "model", "pe", "seed", "status"]  # cache_dir: where, not what
    groups = groups_table(runs).set_index("model")
    assert groups.loc["naive", "val_accuracy_mean"] == pytest.approx(0.85)
    assert groups.loc["efficient", "val_accuracy_std"] == pytest.approx(0.1414, abs=1e-4)  # sample std over seeds
    assert groups.loc["naive", "epoch_time_vs_fastest"] == pytest.approx(3.2)
    assert groups.loc["efficient", "epoch_time_vs_fastest"] == 1.0


def test_epoch_time_is_relative_to_the_fastest_variant_whichever_it_is(tmp_path):
    """The "epoch time vs fastest" column is relative to the fastest variant on the dataset: here naive's epochs take
    1 s, torch's 1.5 s and efficient's 2 s, so naive is the 1.00×, not efficient, the reference, nor the first variant
    in the table's order. The ratio is of the "median epoch s" beside it, not of "train s": naive trains 6 epochs
    (6 s), the others 2 (4 s and 3 s), as a run that patience stopped trains fewer."""
    for model, seconds, epochs in (("efficient", 2.0, 2), ("naive", 1.0, 6), ("torch", 1.5, 2)):
        fake_run(tmp_path / f"{model}_run", model=model, epoch_times=[seconds] * epochs)
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    expected = {"efficient": 2.0, "naive": 1.0, "torch": 1.5}
    assert groups.set_index("model")["epoch_time_vs_fastest"].to_dict() == expected
    text = summary_markdown(tmp_path, runs, groups)
    for heading in ("## The answer: bbc-news", "## By dataset"):
        shown = {r["model"]: r["epoch time vs fastest"] for r in md_table(text, heading)}
        assert shown == {model: f"{ratio:.2f}×" for model, ratio in expected.items()}, heading


@pytest.mark.unit
def test_datasets_are_compared_side_by_side(tmp_path):
    for i, (dataset, seconds) in enumerate([("bbc-news", 10.0), ("bbc-news", 10.0), ("r8", 4.0), ("r8", 2.0)]):
        fake_run(tmp_path / f"{i}_run", seed=i % 2, dataset=dataset, accuracy=0.9 - i / 10, epoch_seconds=seconds)
    groups = groups_table(runs_table(tmp_path)).set_index("dataset")
    assert groups["runs"].tolist() == [2, 2] and "data.path" not in groups.columns  # the name stands for the path
    assert groups.loc["r8", "val_accuracy_mean"] == pytest.approx(0.65)
    assert groups["epoch_time_vs_fastest"].tolist() == [1.0, 1.0]  # each against its own dataset's fastest


@pytest.mark.unit
def test_tokens_per_second_vs_fastest_is_against_the_fastest_variant_on_the_same_dataset(tmp_path):
    """Tokens/s, like epoch time, is relative to the fastest variant on the same dataset: a dataset whose runs are all
    slower than another's still has its own fastest at 1.00×."""
    for i, (dataset, model, seconds) in enumerate([("bbc-news", "efficient", 10.0), ("bbc-news", "naive", 20.0),
                                                   ("r8", "efficient", 2.0), ("r8", "naive", 8.0)]):
        fake_run(tmp_path / f"{i}_run", model=model, dataset=dataset, epoch_seconds=seconds)
    groups = groups_table(runs_table(tmp_path)).set_index(["dataset", "model"])["tokens_per_second_vs_fastest"]
    # tokens/s is 1000 / the run's training seconds: against its own dataset's most tokens per second
    assert groups.to_dict() == pytest.approx({("bbc-news", "efficient"): 1.0, ("bbc-news", "naive"): 0.5,
                                              ("r8", "efficient"): 1.0, ("r8", "naive"): 0.25})


@pytest.mark.unit
def test_tokens_per_second_vs_fastest_divides_the_runs_tokens_per_second_not_the_epoch_time_ratio(tmp_path):
    """tokens/s vs fastest is its own column, the group's mean tokens/s (metrics.json's tokens_per_second) over the
    most of its dataset, not the inverse of epoch time vs fastest (the variant fastest per epoch, at 1.00×, may read
    0.99× in tokens/s). Here naive's epochs take twice as long but it trains 1.6 times the tokens in them."""
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_efficient", model="efficient", seed=seed, epoch_seconds=10.0)  # 50 tokens/s
        fake_run(tmp_path / f"{seed}_naive", model="naive", seed=seed, epoch_seconds=20.0)
        edit_metrics(tmp_path / f"{seed}_naive", tokens_per_second=[38.0, 42.0][seed])
    groups = groups_table(runs_table(tmp_path)).set_index("model")
    assert groups["epoch_time_vs_fastest"].to_dict() == pytest.approx({"efficient": 1.0, "naive": 2.0})
    assert groups["tokens_per_second_vs_fastest"].to_dict() == pytest.approx({"efficient": 1.0, "naive": 40 / 50})


def test_baselines_without_pe_form_groups_too(tmp_path):
    """A baseline groups like a variant, with blanks (not "None", "nan" or "not reached") where it has no pe and no
    epochs, also beside trained runs that have times to an accuracy."""
    for seed in (0, 1):
        fake_run(tmp_path / f"{seed}_tfidf", model="tfidf-words", seed=seed, pe=None)
        (tmp_path / f"{seed}_tfidf" / "history.csv").unlink()  # a baseline has no epochs
        edit_metrics(tmp_path / f"{seed}_tfidf", epochs=0, best_epoch=None)
    fake_run(tmp_path / "2_run", seed=0)
    edit_metrics(tmp_path / "2_run", time_to_accuracy={"0.9": 4.0})
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    assert groups["model"].tolist() == ["efficient", "tfidf-words"] and groups["runs"].tolist() == [1, 2]
    group_row = summary_markdown(tmp_path, runs, groups).split("## Runs")[0].splitlines()[-2]
    assert "| tfidf-words |  | 2 | 2 |" in group_row
    assert "nan" not in group_row and "None" not in group_row and "not reached" not in group_row


@pytest.mark.unit
def test_runs_with_different_settings_are_never_averaged_together(tmp_path):
    for i, dropout in enumerate([0.1, 0.1, 0.3, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, accuracy=0.5 + i / 10, model__dropout=dropout)
    runs = runs_table(tmp_path)
    assert "model.dropout" in runs.columns and "tokenizer.cache_dir" not in runs.columns  # only what varies
    groups = groups_table(runs).set_index("model.dropout")
    assert groups.loc["0.1", "runs"] == groups.loc["0.3", "runs"] == 2
    assert groups.loc["0.3", "val_accuracy_mean"] == pytest.approx(0.75)


def test_summary_csv_is_the_runs_table_with_a_column_for_every_setting_that_differs(tmp_path):
    """summary.csv is the per-run table, every setting that differs between runs a column (read from each run's
    config.yaml); what is the same in every run, or only where things are, is not. Each run's own
    config.yaml, with the values it ran with, not Hydra's .hydra/config.yaml beside it, which keeps an override such
    as model.dropout=${oc.env:DROPOUT} as it was typed, the same string in every run."""
    for i, dropout in enumerate([0.1, 0.3, 0.3]):
        fake_run(tmp_path / f"{i}_run", seed=i, model__dropout=dropout)
        composed = yaml.safe_load((tmp_path / f"{i}_run" / "config.yaml").read_text())
        composed["model"]["dropout"] = "${oc.env:DROPOUT}"
        (tmp_path / f"{i}_run" / ".hydra").mkdir()
        (tmp_path / f"{i}_run" / ".hydra" / "config.yaml").write_text(yaml.safe_dump(composed))
    write_summary(tmp_path)
    written = pd.read_csv(tmp_path / "summary.csv", dtype=str)
    assert written["model.dropout"].tolist() == ["0.1", "0.3", "0.3"]
    assert written.columns[written.columns.get_loc("seed") + 1] == "model.dropout"
    assert not {"tokenizer.base", "tokenizer.cache_dir"} & set(written.columns)  # the same everywhere; a location
    assert written["run_dir"].tolist() == ["0_run", "1_run", "2_run"]


def test_seeds_whose_vocabulary_size_adapted_to_their_split_are_one_group(tmp_path):
    """tokenizer.vocab_size=null decides a size per training split, so seeds of one command may differ: they are one
    group; sizes that were asked for are not."""
    for i, (size, asked) in enumerate([(8500, False), (8600, False), (8500, False), (4000, True), (8000, True)]):
        fake_run(tmp_path / f"{i}_run", seed=i, tokenizer__vocab_size=size,
                 adapted=None if asked else {"tokenizer.vocab_size": f"{size}: why"})
    groups = groups_table(runs_table(tmp_path)).set_index("tokenizer.vocab_size")
    assert groups["runs"].to_dict() == {"None": 3, "4000": 1, "8000": 1}


@pytest.mark.unit
def test_an_unreadable_metrics_json_is_a_failed_run_in_the_summary_not_a_crash(tmp_path):
    fake_run(tmp_path / "0_run", seed=0)
    fake_run(tmp_path / "1_run", seed=1)
    (tmp_path / "1_run" / "metrics.json").write_text('{"truncated')  # a disk that filled mid-write
    runs = runs_table(tmp_path).set_index("run_dir")
    assert runs.loc["0_run", "status"] == "ok" and runs.loc["1_run", "status"] == "failed"
    assert runs.loc["1_run", "error"].startswith("unreadable metrics.json")


@pytest.mark.unit
def test_runs_with_different_tokenizers_are_different_groups(tmp_path):
    """tokenizer.base names which tokenizer was retrained: a setting of the model, not a location."""
    minilm = "../shared/tokenizers/all-MiniLM-L6-v2"
    for i, base in enumerate([None, None, minilm, minilm]):
        fake_run(tmp_path / f"{i}_run", seed=i % 2, tokenizer__base=base)
    groups = groups_table(runs_table(tmp_path))
    assert sorted(groups["tokenizer.base"]) == [minilm, "None"]
    assert groups["runs"].tolist() == [2, 2]


@pytest.mark.unit
def test_a_failed_single_run_shows_its_error_in_the_summary(tmp_path):
    run = tmp_path / "runs" / "2026-11-22_run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("model: {attention: naive}\npe: false\nseed: 0\n")
    (run / "error.txt").write_text("The train split of 'x' has a single class; a classifier needs at least two.\n")
    runs = runs_table(tmp_path)
    assert runs["status"].tolist() == ["failed"] and "has a single class" in runs["error"].iloc[0]


def test_time_to_accuracy_per_run_and_per_group(tmp_path):
    for seed, seconds in enumerate([{"0.85": 4.0, "0.9": 8.0, "0.95": None}, {"0.85": 6.0, "0.9": None, "0.95": None}]):
        fake_run(tmp_path / f"{seed}_run", seed=seed)
        metrics = RunMetrics.read(tmp_path / f"{seed}_run" / "metrics.json")
        metrics.time_to_accuracy = seconds
        metrics.write(tmp_path / f"{seed}_run" / "metrics.json")
    runs = runs_table(tmp_path)
    assert runs["seconds_to_0.9"].isna().tolist() == [False, True]
    groups = groups_table(runs)
    assert groups["seconds_to_0.85_mean"].item() == 5.0 and groups["seconds_to_0.9_count"].item() == 1
    text = (tmp_path / "summary.md")
    write_summary(tmp_path)
    assert "| 5.0 ± 1.4 | 8.0 (1 of 2 runs) | not reached |" in text.read_text()


def test_an_interrupted_run_is_listed_but_not_pooled_into_its_group_s_runs_and_means(tmp_path):
    """A group's `runs` and each mean ± std are over its runs that finished (groups_table: "among finished runs"). A
    run stopped by a signal keeps its row in the runs table, marked interrupted; its accuracy and times, from an
    unfinished training, join no mean."""
    for seed, (accuracy, seconds) in enumerate([(0.6, 4.0), (0.8, 6.0), (0.3, 1.0)]):
        fake_run(tmp_path / f"{seed}_run", seed=seed, accuracy=accuracy)
        edit_metrics(tmp_path / f"{seed}_run", time_to_accuracy={"0.5": seconds})
    edit_metrics(tmp_path / "2_run", interrupted_by="SIGINT")
    write_summary(tmp_path)
    text = (tmp_path / "summary.md").read_text()
    assert [r["status"] for r in md_table(text, "## Runs")] == ["ok", "ok", "interrupted"]
    [row] = md_table(text, "## By dataset")
    finished = np.array([0.6, 0.8])
    assert (row["runs"], row["seeds"]) == ("2", "2")
    assert row["val accuracy"] == f"{finished.mean():.4f} ± {finished.std(ddof=1):.4f}"
    assert row["s to val acc 0.5"] == "5.0 ± 1.4"


def test_a_time_to_accuracy_three_runs_reached_is_their_mean_not_their_median(tmp_path):
    """The time columns, like the accuracies, are a mean ± std over the group's runs. Three runs reach 0.9 in 2, 3
    and 10 s: their mean, 5.0, is not their median, 3.0 (with the two runs of the other tests' levels the two read
    the same)."""
    seconds = np.array([2.0, 3.0, 10.0])
    for seed, reached in enumerate(seconds):
        fake_run(tmp_path / f"{seed}_run", seed=seed)
        edit_metrics(tmp_path / f"{seed}_run", time_to_accuracy={"0.9": float(reached)})
    runs = runs_table(tmp_path)
    groups = groups_table(runs)
    assert groups["seconds_to_0.9_mean"].item() == pytest.approx(seconds.mean())
    [row] = md_table(summary_markdown(tmp_path, runs, groups), "## By dataset")
    assert row["s to val acc 0.9"] == f"{seconds.mean():.1f} ± {seconds.std(ddof=1):.1f}" == "5.0 ± 4.4"


def test_epoch_time_is_the_median_training_epoch_the_validation_after_it_left_out(tmp_path):
    """Epoch time is the median training epoch, validation excluded: in each variant's "median epoch s", its "epoch
    time vs fastest" and the pairs' epoch time ratio; "train s" counts training passes only. history.csv times each
    epoch's validation apart (eval_seconds): here efficient trains an epoch in 1 s and validates it in 2 s, naive
    trains in 2 s and validates in 0.1 s, so counting validation would make naive the faster."""
    for seed in range(3):
        for model, train, validation in (("efficient", 1.0, 2.0), ("naive", 2.0, 0.1)):
            fake_run(tmp_path / f"{model}_{seed}", model=model, seed=seed, epoch_times=[train] * 6,
                     eval_times=[validation] * 6)
    write_summary(tmp_path)
    runs = pd.read_csv(tmp_path / "summary.csv")
    assert runs.groupby("model")["median_epoch_seconds"].agg(set).to_dict() == {"efficient": {1.0}, "naive": {2.0}}
    text = (tmp_path / "summary.md").read_text()
    variants = {r["model"]: r for r in md_table(text, "## The answer: bbc-news")}
    assert [variants[m]["median epoch s"] for m in ("efficient", "naive")] == ["1.00 ± 0.00", "2.00 ± 0.00"]
    assert [variants[m]["epoch time vs fastest"] for m in ("efficient", "naive")] == ["1.00×", "2.00×"]
    (against,) = md_table(text, "### Against efficient (the reference)")
    assert against["epoch time"].startswith("slower by 2.00×"), against


def test_peak_rss_in_training_is_the_fit_stage_s_not_the_highest_of_the_run(tmp_path):
    """Peak memory while training is the process's peak RSS in the fit stage (`stages.fit` in `metrics.json`). A
    run's other stages (loading data, the tokenizer, encoding, the reports) peak higher here, as the process's peak
    may; the table shows the training stage's alone: 500, 510 and 520 MB over the seeds."""
    for seed in range(3):
        fake_run(tmp_path / f"efficient_{seed}", seed=seed, stages={
            "data": {"seconds": 1.0, "peak_memory_mb": 900.0}, "tokenizer": {"seconds": 1.0, "peak_memory_mb": 950.0},
            "encode": {"seconds": 1.0, "peak_memory_mb": 980.0},
            "fit": {"seconds": 2.0, "peak_memory_mb": 500.0 + 10 * seed},
            "reports": {"seconds": 1.0, "peak_memory_mb": 1000.0}})
    write_summary(tmp_path)
    assert pd.read_csv(tmp_path / "summary.csv")["peak_rss_mb"].tolist() == [500.0, 510.0, 520.0]
    (variant,) = md_table((tmp_path / "summary.md").read_text(), "## The answer: bbc-news")
    assert variant["peak RSS in training, MB"] == "510 ± 10"


def test_peak_cuda_in_training_is_the_fit_stage_s_not_the_highest_of_the_run(tmp_path):
    """On a GPU, peak memory while training includes CUDA's peak allocation, and that column, too, is the training
    stage's (`stages.fit` in `metrics.json`). A GPU run's reports (the test split evaluated, the probes) peak higher
    here; summary.csv and summary.md show the fit stage's alone: 100, 120 and 140 MB over the seeds."""
    for seed in range(3):
        fake_run(tmp_path / f"efficient_{seed}", seed=seed, stages={
            "encode": {"seconds": 1.0, "peak_memory_mb": 900.0, "peak_cuda_mb": 0.0},
            "fit": {"seconds": 2.0, "peak_memory_mb": 500.0, "peak_cuda_mb": 100.0 + 20 * seed},
            "reports": {"seconds": 1.0, "peak_memory_mb": 1000.0, "peak_cuda_mb": 700.0}})
    write_summary(tmp_path)
    assert pd.read_csv(tmp_path / "summary.csv")["peak_cuda_mb"].tolist() == [100.0, 120.0, 140.0]
    (variant,) = md_table((tmp_path / "summary.md").read_text(), "## The answer: bbc-news")
    assert variant["peak CUDA in training, MB"] == "120 ± 20"


def test_counts_are_whole_numbers_beside_a_failed_run(tmp_path):
    fake_run(tmp_path / "0_run", epoch_times=[1.0] * 12)
    failed = tmp_path / "1_failed"
    (failed / ".hydra").mkdir(parents=True)
    (failed / ".hydra" / "config.yaml").write_text("model: {attention: naive}\npe: false\nseed: 1\n")
    (failed / "error.txt").write_text("boom\n")
    write_summary(tmp_path)
    rows = {r["status"]: r for r in md_table((tmp_path / "summary.md").read_text(), "## Runs")}
    assert (rows["ok"]["epochs"], rows["ok"]["params"], rows["ok"]["seed"]) == ("12", "10", "0")
    assert (rows["failed"]["epochs"], rows["failed"]["seed"]) == ("", "1")
    assert pd.read_csv(tmp_path / "summary.csv", dtype=str)["epochs"].tolist() == ["12", np.nan]


def test_a_study_folder_above_its_trials_is_no_run_of_its_own(tmp_path):
    """`scripts/summarize.py outputs/search/<study>` tables the study's trials. python -m search leaves
    Hydra's .hydra/ in the study folder, above its trial folders: the summary holds the trials, not the study folder
    as a failed run ("3 runs (2 ok, 1 failed)", as it once said). A failed trial beside them is still a failed run."""
    study = tmp_path / "study"
    (study / ".hydra").mkdir(parents=True)
    (study / ".hydra" / "config.yaml").write_text("n_trials: 3\n")
    fake_run(study / "trial_000", seed=0)
    fake_run(study / "trial_001", seed=1)
    (study / "trial_002").mkdir()
    (study / "trial_002" / "error.txt").write_text("boom\n")
    write_summary(study)
    rows = md_table((study / "summary.md").read_text(), "## Runs")
    assert [(r["run folder"], r["status"]) for r in rows] == [("trial_000", "ok"), ("trial_001", "ok"),
                                                            ("trial_002", "failed")]
    assert "3 runs (2 ok, 1 failed)" in (study / "summary.md").read_text()
