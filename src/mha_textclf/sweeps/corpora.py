"""The corpora table (README, "On other corpora"): on each corpus, the model's test accuracy and macro-F1 over its
seeds beside the TF-IDF baselines' on the same splits, the stronger of the linear baselines over words and over
characters, and the gap to it. Made from a folder holding, for each corpus, a sweep of the model over seeds and one of
scripts/baseline_tfidf.py over its three feature sets and the same seeds."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from mha_textclf.runs.metrics import read_metrics
from mha_textclf.sweeps.collect import finished, setting_columns

# The baselines, by the name their runs record, and what the table calls them.
SAME_TOKENS, WORDS, CHARS = "tfidf-wordpiece", "tfidf-words", "tfidf-chars"
LINEAR = {WORDS: "words", CHARS: "chars"}  # what "the best linear baseline" is chosen from


def corpora_table(folder: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """One row per corpus, in the order the runs table lists them (`runs`: sweeps.collect.runs_table(folder))."""
    done = finished(runs)
    settings = setting_columns(runs)
    rows = []
    for dataset, group in done.groupby("dataset", sort=False):
        model = group[~group["model"].str.startswith("tfidf-")]
        if model.empty:
            raise ValueError(f"{dataset}: no finished model runs: run python -m train -m data=<corpus> seed=0,1,2 "
                             "beside the baselines' runs")
        # One variant: the same model, pe and every setting that varies in the folder (a baseline has none).
        variants = model[["model", "pe", *settings]].drop_duplicates()
        if len(variants) != 1:
            shown = "; ".join(" ".join(f"{k}={v}" for k, v in row.items()) for row in variants.to_dict("records"))
            raise ValueError(f"{dataset}: the corpora table needs the runs of one model variant, found "
                             f"{len(variants)} ({shown})")
        baseline = {name: group[group["model"] == name] for name in (SAME_TOKENS, WORDS, CHARS)}
        missing = [name for name, runs_of in baseline.items() if runs_of.empty]
        if missing:
            raise ValueError(f"{dataset}: no finished {', '.join(missing)} runs: run scripts/baseline_tfidf.py -m "
                             "data=<corpus> features=wordpiece,words,chars seed=0,1,2 beside the model's runs")
        seeds = sorted(int(seed) for seed in model["seed"])
        unpaired = [name for name, runs_of in baseline.items() if sorted(int(s) for s in runs_of["seed"]) != seeds]
        if unpaired:  # a seed carves the validation split, so other seeds would be other splits
            raise ValueError(f"{dataset}: the model ran seeds {seeds}, but {', '.join(unpaired)} other seeds: run "
                             "both over the same seeds")
        first = read_metrics(folder / model.sort_values("seed")["run_dir"].iloc[0])
        mean = {name: runs_of[["test_accuracy", "test_macro_f1"]].mean() for name, runs_of in baseline.items()}
        best = max(LINEAR, key=lambda name: mean[name]["test_accuracy"])
        accuracy, f1 = model["test_accuracy"], model["test_macro_f1"]
        vocabulary = "tokenizer.vocab_size" in first.adapted
        rows.append({
            "corpus (train texts, classes)": f"{dataset} ({first.train_samples} train, {len(first.class_names)} "
                                             "classes)",
            "vocabulary": f"{first.vocab_size}" + ("" if vocabulary else " (its config)"),
            "test accuracy": _pm(accuracy), "test macro-F1": _pm(f1),
            "TF-IDF same tokens: accuracy": f"{mean[SAME_TOKENS]['test_accuracy']:.4f}",
            "macro-F1": f"{mean[SAME_TOKENS]['test_macro_f1']:.4f}",
            "TF-IDF words": f"{mean[WORDS]['test_accuracy']:.4f}",
            "TF-IDF chars": f"{mean[CHARS]['test_accuracy']:.4f}",
            "best linear: accuracy / F1": f"{mean[best]['test_accuracy']:.4f} / {mean[best]['test_macro_f1']:.4f} "
                                          f"({LINEAR[best]})",
            "model − best linear: accuracy / F1, points": _points(accuracy.mean() - mean[best]["test_accuracy"],
                                                                   f1.mean() - mean[best]["test_macro_f1"]),
            "model − same tokens: accuracy / F1, points": _points(accuracy.mean() - mean[SAME_TOKENS]["test_accuracy"],
                                                                   f1.mean() - mean[SAME_TOKENS]["test_macro_f1"]),
            "run s": _span(model["job_seconds"]) + f" ({_span(model['train_seconds'])})",
        })
    return pd.DataFrame(rows)


def _pm(values: pd.Series) -> str:
    """mean ± std; one run has no spread: its value alone."""
    return f"{values.mean():.4f}" if len(values) == 1 else f"{values.mean():.4f} ± {values.std():.4f}"


def _points(accuracy: float, f1: float) -> str:
    return f"{100 * accuracy:+.1f} / {100 * f1:+.1f}"


def _span(seconds: pd.Series) -> str:
    """Lowest to highest, in whole seconds (one number where they round alike); blank without a job record."""
    seconds = seconds.dropna()
    if seconds.empty:
        return ""
    low, high = round(seconds.min()), round(seconds.max())
    return f"{low} s" if low == high else f"{low}–{high} s"
