"""The TF-IDF baseline: the training runs' splits and tokenizer, the same data settings on the same command line,
and a run folder that the summaries table next to the attention runs."""

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml
from sklearn.feature_extraction.text import TfidfVectorizer

import commands
from conftest import REPO, capture_figures, settings_for, write_jsonl
from mha_textclf.baseline import run_baseline, tfidf_baseline
from mha_textclf.data.corpus import load_corpus
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.tokenizer.cache import cache_key
from mha_textclf.tokenizer.vocabulary import resolve_vocab_size


def test_wordpiece_features_are_cut_at_max_length_and_word_and_char_features_read_the_whole_text(tmp_path):
    """The class word comes after 20 words of filler: cut at 16 tokens (as the attention models would be), the
    wordpiece baseline sees no difference between the classes; with 64 it does, and word and character n-grams always
    do."""
    def rows(n):
        return [{"text": " ".join(["same"] * 20 + [colour, f"note{i}"]), "label": colour}
                for colour in ("red", "blue") for i in range(n)]

    data = write_jsonl(tmp_path / "data", {"train": rows(12), "test": rows(4)})
    accuracy, losses = {}, {}
    for features, max_length in (("wordpiece", 16), ("wordpiece", 64), ("words", 16), ("chars", 16)):
        settings = settings_for(f"data.path={data}", f"data.max_length={max_length}", f"features={features}",
                                f"tokenizer.cache_dir={tmp_path / 'cache'}", app="baseline")
        metrics = run_baseline(settings, tmp_path / f"{features}-{max_length}")
        accuracy[features, max_length] = (metrics.val.accuracy, metrics.test.accuracy)
        losses[features] = (metrics.val.loss, metrics.test.loss)
    assert accuracy == {("wordpiece", 16): (0.5, 0.5), ("wordpiece", 64): (1.0, 1.0), ("words", 16): (1.0, 1.0),
                        ("chars", 16): (1.0, 1.0)}
    # Wordpieces go to a logistic regression, whose probabilities give a log-loss; word (and character) n-grams to a
    # linear SVM, which gives none.
    assert all(loss > 0 for loss in losses["wordpiece"])
    assert losses["words"] == losses["chars"] == (None, None)
    # The TF-IDF model reads the same wordpieces a training run would: the tokenizer a training run on these data
    # learns (its cache entry: the training split's texts alone, the vocabulary size decided from them), and no other.
    corpus = load_corpus(settings.data, settings.seed)
    vocab = resolve_vocab_size(corpus.train.texts, settings.tokenizer)[0].vocab_size
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [cache_key(corpus.train.texts, vocab, None)]


def test_wordpiece_features_read_as_far_as_a_max_length_beyond_512(tmp_path, monkeypatch):
    """The wordpiece baseline reads as many tokens as data.max_length says, 1024 as well as 512 (features=wordpiece
    data.max_length=1024). The class word comes after 600 words of filler: the wordpiece baseline cut at 512 tokens sees
    no difference between the classes, cut at 1024 it does. (The confusion matrices are drawn but not saved: their
    pixels take most of a second here, and other tests read them.)"""
    capture_figures(monkeypatch, write=False)
    def rows(n):
        return [{"text": " ".join(["same"] * 600 + [colour, f"note{i}"]), "label": colour}
                for colour in ("red", "blue") for i in range(n)]

    data = write_jsonl(tmp_path / "data", {"train": rows(12), "test": rows(4)})
    settings = settings_for(f"data.path={data}", "data.max_length=1024", "features=wordpiece",
                            f"tokenizer.cache_dir={tmp_path / 'cache'}", app="baseline")
    accuracy = {}
    for max_length in (512, 1024):  # composed once (composing takes most of a second), cut at each length
        metrics = run_baseline(replace(settings, data=replace(settings.data, max_length=max_length)),
                               tmp_path / f"wordpiece-{max_length}")
        accuracy[max_length] = (metrics.val.accuracy, metrics.test.accuracy)
    assert accuracy == {512: (0.5, 0.5), 1024: (1.0, 1.0)}


def test_the_baseline_s_reports_and_confusion_matrices_are_scikit_learns_on_the_split_they_name(tmp_path, monkeypatch):
    """The baseline writes config.yaml, metrics.json, classification reports and confusion matrices into its own folder,
    as a run folder holds them (a confusion matrix titled with the model and the dataset, true classes down), and
    metrics.json's schema (`train_samples`: the training split's texts). Each text names its class's colour, which word
    features find; in the test split three texts carry another class's label, so that the confusions go one way and a
    report of predictions against labels would show."""
    from sklearn.metrics import classification_report, confusion_matrix

    drawn = capture_figures(monkeypatch)
    colours = ("red", "blue", "green")
    train = [{"text": f"{colour} note{i % 5}", "label": colour} for colour in colours for i in range(12)]
    test = [{"text": f"{colour} note{i}", "label": colour} for colour in colours for i in range(4)]
    test += [{"text": "red note7", "label": "blue"}, {"text": "red note8", "label": "blue"},
             {"text": "green note9", "label": "red"}]
    data = write_jsonl(tmp_path / "colours", {"train": train, "test": test})
    settings = settings_for(f"data.path={data}", "features=words", app="baseline")
    metrics = run_baseline(settings, tmp_path / "run")
    corpus = load_corpus(settings.data, settings.seed)
    assert metrics.train_samples == len(corpus.train) == 27 and metrics.class_names == ["blue", "green", "red"]
    ids = list(range(3))
    kwargs = {"labels": ids, "target_names": metrics.class_names, "zero_division": 0, "digits": 4}
    for split in ("val", "test"):
        data_split = getattr(corpus, split)
        # What the classifier says of each text: its colour's class.
        predictions = [metrics.class_names.index(text.split()[0]) for text in data_split.texts]
        labels = data_split.labels
        assert getattr(metrics, split).accuracy == pytest.approx(np.mean(np.array(predictions) == np.array(labels)))
        assert json.loads((tmp_path / "run" / f"classification_report_{split}.json").read_text()) == \
            classification_report(labels, predictions, output_dict=True, **kwargs)
        assert (tmp_path / "run" / f"classification_report_{split}.txt").read_text() == classification_report(
            labels, predictions, **kwargs)
        ax = drawn[f"confusion_matrix_{split}.png"].axes[0]
        matrix = confusion_matrix(labels, predictions, labels=ids, normalize="true")
        np.testing.assert_allclose(ax.images[0].get_array(), matrix)
        assert (ax.get_ylabel(), ax.get_xlabel()) == ("True label", "Predicted label")
        assert ax.get_title().startswith(f"tfidf-words on {corpus.name}: {split} ({len(labels)} texts)\n")
    assert not np.allclose(matrix, confusion_matrix(predictions, labels, labels=ids, normalize="true"))  # (so that
    # a swap of the two would show, in the test split)
    # errors.csv: exactly the texts it gets wrong, as what; a linear SVM has no probabilities, so no confidence.
    errors = pd.read_csv(tmp_path / "run" / "errors.csv", keep_default_na=False)
    wrong = [(split, i, text, metrics.class_names[label], text.split()[0])
             for split in ("val", "test") for i, (text, label) in enumerate(zip(
                 getattr(corpus, split).texts, getattr(corpus, split).labels, strict=True))
             if text.split()[0] != metrics.class_names[label]]
    assert sorted(zip(errors["split"], errors["position"], errors["text"], errors["true"], errors["predicted"],
                      strict=True)) == sorted(wrong) and len(wrong) == 3
    assert set(errors["confidence"]) == {""} and metrics.test.confused[0] == {"true": "blue", "predicted": "red",
                                                                             "count": 2}
    assert (tmp_path / "run" / "report.html").is_file()


def test_a_null_vocabulary_size_is_decided_as_training_decides_it_and_recorded(tmp_path):
    data = write_jsonl(tmp_path / "data", {"train": [{"text": f"word{i % 7} text", "label": i % 2} for i in range(40)],
                                           "test": [{"text": "word1 text", "label": 1}, {"text": "x", "label": 0}]})
    settings = settings_for(f"data.path={data}", "tokenizer.vocab_size=null", f"tokenizer.cache_dir={tmp_path}",
                            app="baseline")
    metrics = run_baseline(settings, tmp_path / "run")
    decided, why = resolve_vocab_size(load_corpus(settings.data, settings.seed).train.texts, settings.tokenizer)
    assert metrics.adapted == {"tokenizer.vocab_size": f"{decided.vocab_size}: {why}"}
    assert yaml.safe_load((tmp_path / "run" / "config.yaml").read_text())["tokenizer"]["vocab_size"] \
        == decided.vocab_size == 1000


def test_char_features_find_the_class_inside_text_without_spaces_where_word_features_cannot(tmp_path):
    """Each text is a shared first word, then one run of Chinese characters: the class's (红 or 蓝) between three drawn
    from a thousand on each side. To word n-grams the run is a word no other text has, so only the shared word is
    left and nothing tells the classes apart; character n-grams find the class's character. They span spaces too,
    so they tell word orders apart."""
    rng = np.random.default_rng(0)
    filler = [chr(0x4E00 + i) for i in range(1000)]

    def rows(n):
        return [{"text": "评论 " + "".join(rng.choice(filler, 3)) + colour + "".join(rng.choice(filler, 3)),
                 "label": colour} for colour in "红蓝" for _ in range(n)]

    data = write_jsonl(tmp_path / "data", {"train": rows(20), "test": rows(5)})
    accuracy = {}
    for features in ("words", "chars"):
        metrics = run_baseline(settings_for(f"data.path={data}", f"features={features}", app="baseline"),
                               tmp_path / features)
        accuracy[features] = (metrics.val.accuracy, metrics.test.accuracy)
    assert accuracy == {"words": (0.5, 0.5), "chars": (1.0, 1.0)}
    # ...and n-grams across a space: "cat dog" and "dog cat" have the same characters inside their words.
    order = write_jsonl(tmp_path / "order", {split: [{"text": text, "label": text} for text in ("cat dog", "dog cat")
                                                     for _ in range(n)] for split, n in (("train", 8), ("test", 2))})
    metrics = run_baseline(settings_for(f"data.path={order}", "features=chars", app="baseline"), tmp_path / "order")
    assert (metrics.val.accuracy, metrics.test.accuracy) == (1.0, 1.0)


def test_char_features_include_4_grams(tmp_path):
    """"ababba" and "abbaba" have the same characters, character pairs and triples, each as often: only their
    4-grams ("abab", "babb", "abba" against "abba", "bbab", "baba") tell them apart."""
    texts = ("ababba", "abbaba")
    order = write_jsonl(tmp_path / "order", {split: [{"text": text, "label": text} for text in texts for _ in range(n)]
                                             for split, n in (("train", 8), ("test", 2))})
    metrics = run_baseline(settings_for(f"data.path={order}", "features=chars", app="baseline"), tmp_path / "chars")
    assert (metrics.val.accuracy, metrics.test.accuracy) == (1.0, 1.0)


def test_word_features_are_bigrams_too(tmp_path):
    """"cat dog" and "dog cat" have the same words: only the bigram tells them apart (unigrams alone: chance)."""
    order = write_jsonl(tmp_path / "order", {split: [{"text": text, "label": text} for text in ("cat dog", "dog cat")
                                                     for _ in range(n)] for split, n in (("train", 8), ("test", 2))})
    metrics = run_baseline(settings_for(f"data.path={order}", "features=words", app="baseline"), tmp_path / "words")
    assert (metrics.val.accuracy, metrics.test.accuracy) == (1.0, 1.0)


@pytest.mark.parametrize("classes", [("red", "blue"), ("red", "blue", "green")])
def test_params_counts_the_weights_and_intercepts_the_classifier_has(classes, tmp_path):
    """reports.py RunMetrics: params is, for a baseline, "its linear model's weights and intercepts". With two classes
    scikit-learn fits one row of weights and one intercept, not one per class: counted against the word uni- and bigrams
    of the training split (features=words uses word uni- and bigrams), each seen in two texts or more."""
    rows = [{"text": f"{classes[i % len(classes)]} note{i % 4} word{i % 7}", "label": classes[i % len(classes)]}
            for i in range(42)]
    data = write_jsonl(tmp_path / "data", {"train": rows, "test": rows[:6]})
    settings = settings_for(f"data.path={data}", "features=words", app="baseline")
    metrics = run_baseline(settings, tmp_path / "run")
    corpus = load_corpus(settings.data, 0)
    features = len(TfidfVectorizer(ngram_range=(1, 2), min_df=2).fit(corpus.train.texts).vocabulary_)
    rows_of_weights = 1 if len(classes) == 2 else len(classes)
    assert metrics.params == rows_of_weights * (features + 1)

def test_each_seed_fits_on_the_validation_split_training_carves_with_that_seed(tmp_path):
    """The splits a seed's attention run has (validation carved with the seed): every ninth text has the other
    class's colour, so which texts land in validation shows in its accuracy."""
    rows = [{"text": f"{('red', 'blue')[(i % 2) ^ (i % 9 == 0)]} note{i % 5}", "label": ("red", "blue")[i % 2]}
            for i in range(48)]
    data = write_jsonl(tmp_path / "data", {"train": rows, "test": rows[:8]})

    def reference(seed):  # the classifier on the corpus training loads for that seed
        settings = settings_for(f"data.path={data}", "features=words", f"seed={seed}", app="baseline")
        corpus = load_corpus(settings.data, seed)
        predictions = tfidf_baseline(corpus, "words", None, settings.data.max_length, seed).predictions["val"]
        return np.mean(np.array(predictions) == np.array(corpus.val.labels))

    assert reference(1) != reference(0)  # (so that a baseline on seed 0's split would show)
    settings = settings_for(f"data.path={data}", "features=words", "seed=1", app="baseline")
    assert run_baseline(settings, tmp_path / "run").val.accuracy == pytest.approx(reference(1))


@pytest.mark.slow
def test_wordpiece_baseline_uses_the_same_splits_and_tokenizer_and_is_strong(data_dir, tmp_path):
    settings = settings_for(f"data.path={data_dir}", f"tokenizer.cache_dir={tmp_path / 'cache'}", app="baseline")
    metrics = run_baseline(settings, tmp_path / "run")
    corpus = load_corpus(settings.data, seed=0)
    assert (metrics.val.n_samples, metrics.test.n_samples) == (len(corpus.val), len(corpus.test)) == (307, 1000)
    assert metrics.splits == corpus.sources and metrics.dataset == "bbc-news"
    assert metrics.test.accuracy > 0.9  # a bag of wordpieces carries most of the signal
    assert metrics.vocab_size <= 1000 and metrics.params <= 1000 * len(corpus.class_names)


@pytest.mark.slow
def test_baseline_script_takes_training_settings_and_its_seeds_group_in_the_summary(data_dir, tmp_path):
    sweep = tmp_path / "runs"
    # A mistake, alongside (each command spends seconds importing; this machine has two cores).
    mistake = commands.start(["scripts/baseline_tfidf.py", "features=word"], cwd=REPO)
    result = commands.run(["scripts/baseline_tfidf.py", "-m", f"data.path={data_dir}", "features=words", "seed=0,1",
                           f"hydra.sweep.dir={sweep}"], cwd=REPO, timeout=600)
    _, mistake_stderr = mistake.communicate(timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = pd.read_csv(sweep / "summary.csv")  # the end-of-sweep summary, as for training sweeps
    assert runs["model"].tolist() == ["tfidf-words"] * 2 and set(runs["status"]) == {"ok"}
    metrics = RunMetrics.read(sweep / runs["run_dir"][0] / "metrics.json")
    assert metrics.val.n_samples == 307 and (sweep / runs["run_dir"][0] / "confusion_matrix_val.png").exists()
    assert "| bbc-news | tfidf-words |  | 2 |" in (sweep / "summary.md").read_text()  # one group of two seeds, no pe
    assert mistake.returncode == 2 and "features=word: must be one of wordpiece, words, chars" in mistake_stderr


def test_wordpiece_features_are_the_attention_models_tokens_cut_at_exactly_max_length(tmp_path, monkeypatch):
    """The TF-IDF baseline (scripts/baseline_tfidf.py) uses the same tokens as a training run, its own tokenizer and
    max_length: the documents the wordpiece baseline fits on and predicts are, text by text, the tokenizer's own ids
    truncated at data.max_length=16, without [CLS] and [SEP] (14 tokens for a long text, every token of a short one),
    not one more or less."""
    from mha_textclf import baseline
    from mha_textclf.tokenizer.cache import get_tokenizer

    rows = [{"text": " ".join(["same"] * n + [colour]), "label": colour}
            for colour in ("red", "blue") for n in (3, 13, 14, 15, 30)]
    settings = settings_for(f"data.path={write_jsonl(tmp_path / 'data', {'train': rows * 2, 'test': rows})}",
                            "data.max_length=16", f"tokenizer.cache_dir={tmp_path / 'cache'}", app="baseline")
    corpus = load_corpus(settings.data, settings.seed)
    tokenizer = get_tokenizer(corpus.train.texts, resolve_vocab_size(corpus.train.texts, settings.tokenizer)[0], 16)
    documents = []

    class Recorded(TfidfVectorizer):
        def fit_transform(self, raw_documents, y=None):
            documents.append(list(raw_documents))
            return super().fit_transform(raw_documents, y)

        def transform(self, raw_documents):
            documents.append(list(raw_documents))
            return super().transform(raw_documents)

    monkeypatch.setattr(baseline, "TfidfVectorizer", Recorded)
    tfidf_baseline(corpus, "wordpiece", tokenizer, 16, settings.seed)
    expected = [[tokenizer(text, truncation=True, max_length=16)["input_ids"][1:-1] for text in split.texts]
                for split in (corpus.train, corpus.val, corpus.test)]
    assert documents == expected
    assert max(map(len, documents[0])) == 14 and min(map(len, documents[0])) < 14
