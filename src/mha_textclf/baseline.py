"""A bag-of-words reference: TF-IDF features and a linear classifier, on exactly the attention models' splits.

Two feature sets: `wordpiece` uses the same tokenizer and the same truncation as the attention models (so it sees
the same information, without any order), `words` uses word uni- and bigrams of the full text (an upper reference).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import log_loss
from sklearn.svm import LinearSVC

from mha_textclf.data import Corpus
from mha_textclf.tokenizer import encode

FEATURES = ("wordpiece", "words")


@dataclass
class BaselineResult:
    predictions: dict[str, list[int]]  # per split: val, test
    losses: dict[str, float | None]  # log-loss where the model gives probabilities
    train_seconds: float
    n_features: int


def tfidf_baseline(corpus: Corpus, features: str = "wordpiece", tokenizer=None, max_length: int = 512,
                   seed: int = 0) -> BaselineResult:
    """Fit on the training split, predict val and test."""
    if features == "wordpiece":
        def wordpieces(texts):  # ids without [CLS]/[SEP], truncated exactly as the attention models see them
            return [ids[1:-1] for ids in encode(tokenizer, texts, max_length)]

        vectorizer = TfidfVectorizer(analyzer=lambda ids: ids, sublinear_tf=True)
        classifier = LogisticRegression(C=20.0, max_iter=5000)
        prepare = wordpieces
    elif features == "words":
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
        classifier = LinearSVC(C=1.0, random_state=seed)
        prepare = list
    else:
        raise ValueError(f"features={features!r}; choose one of {FEATURES}")
    start = time.perf_counter()
    X_train = vectorizer.fit_transform(prepare(corpus.train.texts))
    classifier.fit(X_train, corpus.train.labels)
    train_seconds = time.perf_counter() - start
    predictions, losses = {}, {}
    for name in ("val", "test"):
        split = getattr(corpus, name)
        X = vectorizer.transform(prepare(split.texts))
        predictions[name] = classifier.predict(X).tolist()
        losses[name] = (float(log_loss(split.labels, classifier.predict_proba(X),
                                       labels=np.arange(len(corpus.class_names))))
                        if hasattr(classifier, "predict_proba") else None)
    return BaselineResult(predictions, losses, train_seconds, X_train.shape[1])
