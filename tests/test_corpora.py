"""sweeps/corpora.py: the corpora table, the model over its seeds against the TF-IDF baselines on each corpus."""

import pytest

from mha_textclf.sweeps.collect import runs_table
from mha_textclf.sweeps.corpora import corpora_table
from sweep_fakes import edit_metrics, fake_run

pytestmark = pytest.mark.unit


def corpus(folder, dataset, model_accuracies, baselines):
    for seed, accuracy in enumerate(model_accuracies):
        fake_run(folder / f"{dataset}-model-{seed}", dataset=dataset, seed=seed, test_accuracy=accuracy)
    for name, accuracies in baselines.items():
        for seed, accuracy in enumerate(accuracies):
            fake_run(folder / f"{dataset}-{name}-{seed}", model=name, pe=None, dataset=dataset, seed=seed,
                     test_accuracy=accuracy)


def test_each_corpus_is_set_against_the_stronger_linear_baseline_and_the_gap_is_in_points(tmp_path):
    corpus(tmp_path, "news", [0.90, 0.92, 0.94], {"tfidf-wordpiece": [0.91, 0.91, 0.91],
                                                  "tfidf-words": [0.93, 0.93, 0.93], "tfidf-chars": [0.95, 0.94, 0.93]})
    corpus(tmp_path, "tweets", [0.80, 0.80, 0.80],
           {"tfidf-wordpiece": [0.70] * 3, "tfidf-words": [0.78] * 3, "tfidf-chars": [0.75] * 3})
    table = corpora_table(tmp_path, runs_table(tmp_path)).set_index("corpus (train texts, classes)")
    news, tweets = table.loc["news (20 train, 2 classes)"], table.loc["tweets (20 train, 2 classes)"]
    assert news["test accuracy"] == "0.9200 ± 0.0200"
    assert news["test macro-F1"] == "0.8200 ± 0.0200"  # the fakes' macro-F1: accuracy − 0.1
    # chars (mean 0.94) beat words (0.93): the model is 2 points below it, in accuracy and in macro-F1.
    assert news["best linear: accuracy / F1"] == "0.9400 / 0.8400 (chars)"
    assert news["model − best linear: accuracy / F1, points"] == "-2.0 / -2.0"
    assert news["model − same tokens: accuracy / F1, points"] == "+1.0 / +1.0"
    assert tweets["best linear: accuracy / F1"] == "0.7800 / 0.6800 (words)"
    assert tweets["model − best linear: accuracy / F1, points"] == "+2.0 / +2.0"
    assert news["vocabulary"] == "100 (its config)"


def test_a_corpus_without_its_baselines_or_model_or_with_two_variants_or_other_seeds_is_a_clear_error(tmp_path):
    corpus(tmp_path, "news", [0.9], {"tfidf-wordpiece": [0.9], "tfidf-words": [0.9]})
    with pytest.raises(ValueError, match=r"no finished tfidf-chars runs: run scripts/baseline_tfidf\.py"):
        corpora_table(tmp_path, runs_table(tmp_path))
    fake_run(tmp_path / "news-chars-1", model="tfidf-chars", pe=None, dataset="news", seed=1)
    with pytest.raises(ValueError, match=r"the model ran seeds \[0\], but tfidf-chars other seeds"):
        corpora_table(tmp_path, runs_table(tmp_path))
    fake_run(tmp_path / "news-naive", model="naive", dataset="news")
    with pytest.raises(ValueError, match="needs the runs of one model variant, found 2"):
        corpora_table(tmp_path, runs_table(tmp_path))
    baselines_only = tmp_path / "baselines"
    corpus(baselines_only, "tweets", [], {"tfidf-wordpiece": [0.9], "tfidf-words": [0.9], "tfidf-chars": [0.9]})
    with pytest.raises(ValueError, match="no finished model runs: run python -m train"):
        corpora_table(baselines_only, runs_table(baselines_only))


def test_a_vocabulary_the_corpus_decided_is_shown_without_its_config_and_one_seed_without_a_spread(tmp_path):
    corpus(tmp_path, "news", [0.9], {"tfidf-wordpiece": [0.8], "tfidf-words": [0.8], "tfidf-chars": [0.8]})
    edit_metrics(tmp_path / "news-model-0", adapted={"tokenizer.vocab_size": "2100: the words of the corpus"})
    [row] = corpora_table(tmp_path, runs_table(tmp_path)).to_dict("records")
    assert row["vocabulary"] == "100" and row["test accuracy"] == "0.9000"
