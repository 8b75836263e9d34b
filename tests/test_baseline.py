"""The TF-IDF baseline writes a run folder that scripts/summarize.py tables next to attention runs."""

import subprocess
import sys

import pandas as pd
import pytest

from conftest import REPO
from mha_textclf.baseline import tfidf_baseline
from mha_textclf.data import load_corpus
from mha_textclf.reports import RunMetrics
from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer import get_tokenizer


@pytest.mark.slow
def test_wordpiece_baseline_uses_the_same_splits_and_is_strong(data_dir, tmp_path):
    corpus = load_corpus(str(data_dir), 0.25, seed=0)
    tokenizer = get_tokenizer(corpus.train.texts, TokenizerSettings(cache_dir=str(tmp_path)), 512)
    result = tfidf_baseline(corpus, "wordpiece", tokenizer, 512)
    assert len(result.predictions["val"]) == 307 and len(result.predictions["test"]) == 1000
    accuracy = sum(p == y for p, y in zip(result.predictions["test"], corpus.test.labels, strict=True)) / 1000
    assert accuracy > 0.9  # a bag of wordpieces carries most of the signal
    assert result.n_features <= 1000


@pytest.mark.slow
def test_baseline_script_and_summary(data_dir, tmp_path):
    out = tmp_path / "runs" / "tfidf"
    result = subprocess.run([sys.executable, "scripts/baseline_tfidf.py", "--data-path", str(data_dir), "--features",
                             "words", "--out", str(out)], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = RunMetrics.read(out / "metrics.json")
    assert metrics.model == "tfidf-words" and metrics.val.n_samples == 307
    assert (out / "classification_report_test.txt").exists() and (out / "confusion_matrix_val.png").exists()
    result = subprocess.run([sys.executable, "scripts/summarize.py", str(tmp_path / "runs")], cwd=REPO,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = pd.read_csv(tmp_path / "runs" / "summary.csv")
    assert runs["model"].tolist() == ["tfidf-words"] and runs["status"].tolist() == ["ok"]
