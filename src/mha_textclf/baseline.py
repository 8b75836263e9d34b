"""A bag-of-words reference: TF-IDF features and a linear classifier, on exactly the attention models' splits.

Three feature sets: `wordpiece` uses the same tokenizer and the same truncation as the attention models (so it sees
the same information, without any order), `words` uses word uni- and bigrams of the full text (an upper reference),
`chars` character 1- to 4-grams of the full text (a reference for any script, with spaces between words or none).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.svm import LinearSVC

from mha_textclf.data.corpus import Corpus, load_corpus
from mha_textclf.pages.run import write_run_page
from mha_textclf.reports import error_rows, split_report, write_errors
from mha_textclf.runs import files
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import BaselineSettings
from mha_textclf.tokenizer.cache import get_tokenizer
from mha_textclf.tokenizer.encoding import encode
from mha_textclf.tokenizer.vocabulary import resolve_vocab_size

log = logging.getLogger(__name__)


@dataclass
class BaselineResult:
    predictions: dict[str, list[int]]  # per split: val, test
    scores: dict[str, np.ndarray]  # per split: class probabilities, or decision scores (probabilities=False)
    probabilities: bool  # whether `scores` are probabilities (logistic regression) or not (a linear SVM)
    losses: dict[str, float | None]  # log-loss where the model gives probabilities
    train_seconds: float
    params: int  # the linear model's weights and intercepts


def run_baseline(settings: BaselineSettings, run_dir: Path) -> RunMetrics:
    """Load the data as training does (same splits, same tokenizer), fit, and write a run folder that the summaries
    table next to the attention runs: config.yaml, metrics.json, classification reports, confusion matrices,
    errors.csv and report.html."""
    corpus = load_corpus(settings.data, settings.seed)
    adapted = {}
    if settings.features == "wordpiece":  # the attention runs' tokenizer: its size decided the same way
        tokenizer_settings, why = resolve_vocab_size(corpus.train.texts, settings.tokenizer)
        if why:
            settings = replace(settings, tokenizer=tokenizer_settings)
            adapted["tokenizer.vocab_size"] = f"{tokenizer_settings.vocab_size}: {why}"
            log.info(f"tokenizer.vocab_size={tokenizer_settings.vocab_size} (null: {why})")
    tokenizer = (get_tokenizer(corpus.train.texts, settings.tokenizer, settings.data.max_length)
                 if settings.features == "wordpiece" else None)
    result = tfidf_baseline(corpus, settings.features, tokenizer, settings.data.max_length, settings.seed)
    run_dir.mkdir(parents=True, exist_ok=True)
    files.write_config(run_dir, settings)
    name = f"tfidf-{settings.features}"
    splits = {split: split_report(run_dir, split, getattr(corpus, split).labels, result.predictions[split],
                                  result.losses[split], corpus.class_names, f"{name} on {corpus.name}")
              for split in ("val", "test")}
    metrics = RunMetrics(model=name, pe=None, seed=settings.seed, dataset=corpus.name, splits=corpus.sources,
                         train_samples=len(corpus.train), val=splits["val"], test=splits["test"],
                         class_names=corpus.class_names, params=result.params,
                         train_seconds=result.train_seconds, eval_seconds=0.0, epochs=0, best_epoch=None,
                         stopped_early=False, interrupted_by=None, tokens_per_second=None,
                         vocab_size=len(tokenizer) if tokenizer is not None else None, device="cpu", threads=1,
                         adapted=adapted)
    metrics.write(run_dir / files.METRICS)
    write_errors(run_dir / files.ERRORS, [
        row for split in ("val", "test")
        for row in error_rows(split, list(range(len(getattr(corpus, split)))), getattr(corpus, split).labels,
                              result.scores[split], getattr(corpus, split).texts, corpus.class_names,
                              result.probabilities)])
    write_run_page(run_dir)
    log.info(f"{name} seed {settings.seed} on {corpus.name}: val accuracy {metrics.val.accuracy:.4f}  test accuracy "
             f"{metrics.test.accuracy:.4f}  ({result.train_seconds:.1f}s)  ->  {run_dir}")
    return metrics


def tfidf_baseline(corpus: Corpus, features: str, tokenizer, max_length: int, seed: int) -> BaselineResult:
    """Fit on the training split, predict val and test."""
    if features == "wordpiece":
        def wordpieces(texts):  # ids without [CLS]/[SEP], truncated exactly as the attention models see them
            return [ids[1:-1].tolist() for ids in encode(tokenizer, texts, max_length)]

        vectorizer = TfidfVectorizer(analyzer=lambda ids: ids, sublinear_tf=True)
        classifier = LogisticRegression(C=20.0, max_iter=5000)
        prepare = wordpieces
    else:  # words or chars, over the full text, with the same linear classifier
        if features == "words":
            vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
        else:
            # `char`, not `char_wb`: n-grams across a space carry word pairs ("n of t"), and to char_wb a script
            # without spaces is one long word anyway. 1 to 4 characters: on bbc-news' validation split as good as 2
            # to 5 (0.984 and 0.980) with a third of the features; a Chinese character is a word of its own.
            vectorizer = TfidfVectorizer(analyzer="char", ngram_range=(1, 4), sublinear_tf=True, min_df=2)
        classifier = LinearSVC(C=1.0, random_state=seed)
        prepare = list
    start = time.perf_counter()
    X_train = vectorizer.fit_transform(prepare(corpus.train.texts))
    classifier.fit(X_train, corpus.train.labels)
    train_seconds = time.perf_counter() - start
    predictions, losses, scores = {}, {}, {}
    probabilities = hasattr(classifier, "predict_proba")
    for name in ("val", "test"):
        split = getattr(corpus, name)
        X = vectorizer.transform(prepare(split.texts))
        predictions[name] = classifier.predict(X).tolist()
        scores[name] = classifier.predict_proba(X) if probabilities else classifier.decision_function(X)
        if scores[name].ndim == 1:  # two classes: one decision score, the second class's
            scores[name] = np.stack([-scores[name], scores[name]], axis=1)
        losses[name] = (float(log_loss(split.labels, scores[name], labels=np.arange(len(corpus.class_names))))
                        if probabilities else None)
    # Counted from the fitted model, not as features × classes: with two classes scikit-learn fits one row of weights.
    params = classifier.coef_.size + classifier.intercept_.size
    return BaselineResult(predictions, scores, probabilities, losses, train_seconds, params)
