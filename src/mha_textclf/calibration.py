"""Whether a model's probabilities can be trusted: expected calibration error, the reliability diagram's bins, and
temperature scaling (Guo et al., 2017, "On Calibration of Modern Neural Networks").

A model is calibrated when, of the texts it classifies with confidence 0.9, nine in ten are right. Expected
calibration error (ECE) measures how far it is: the texts are put into equal-width bins by their confidence (the top
probability), and ECE is the gap |accuracy - mean confidence| of each bin, weighted by the bin's share of the texts.

Temperature scaling fixes most of the gap with one scalar T fitted on the validation split: softmax(logits / T).
T > 1 softens overconfident probabilities, T < 1 sharpens timid ones; dividing every logit by the same positive
number never changes which class is largest, so accuracy stays exactly the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

BINS = 15  # equal-width confidence bins, as in Guo et al.
# The search interval for T: wide enough for any model that learned something, bounded so that a validation split
# the model classifies perfectly (whose likelihood only improves as T shrinks) gets a finite, reported answer.
TEMPERATURE_RANGE = (0.05, 20.0)


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    """Class probabilities (N, C) from logits (N, C) divided by `temperature`."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    scaled -= scaled.max(axis=1, keepdims=True)  # softmax without overflow
    exp = np.exp(scaled)
    return exp / exp.sum(axis=1, keepdims=True)


def negative_log_likelihood(logits: np.ndarray, labels: np.ndarray, temperature: float = 1.0) -> float:
    """Mean -log p(true class) under softmax(logits / temperature)."""
    scaled = np.asarray(logits, dtype=np.float64) / temperature
    top = scaled.max(axis=1, keepdims=True)
    log_normaliser = top[:, 0] + np.log(np.exp(scaled - top).sum(axis=1))
    return float(np.mean(log_normaliser - scaled[np.arange(len(labels)), labels]))


def fit_temperature(logits: np.ndarray, labels: np.ndarray) -> float:
    """The T in TEMPERATURE_RANGE that minimises the negative log-likelihood of `labels` (validation's).

    The likelihood is smooth and has one minimum in log T (it is convex in 1/T), so a bounded scalar search on log T
    finds it (tests check it against a fine grid). Where validation is classified right with a wide margin, the
    likelihood is nearly flat towards small T, and any T there is about as good: the number is then a rough one."""
    from scipy.optimize import minimize_scalar  # here: only the reports fit a temperature

    labels = np.asarray(labels)
    low, high = (math.log(t) for t in TEMPERATURE_RANGE)
    found = minimize_scalar(lambda log_t: negative_log_likelihood(logits, labels, math.exp(log_t)),
                            bounds=(low, high), method="bounded", options={"xatol": 1e-6})
    return float(math.exp(found.x))


@dataclass
class Reliability:
    """The reliability diagram's bins: bin b holds the texts whose confidence lies in (edges[b], edges[b + 1]]."""

    edges: np.ndarray  # (BINS + 1,)
    counts: np.ndarray  # (BINS,) texts per bin
    confidence: np.ndarray  # (BINS,) mean confidence of the bin's texts (nan where empty)
    accuracy: np.ndarray  # (BINS,) share of the bin's texts classified right (nan where empty)

    @property
    def ece(self) -> float:
        """Expected calibration error: sum over bins of |accuracy - confidence| × the bin's share of the texts."""
        filled = self.counts > 0
        gaps = np.abs(self.accuracy[filled] - self.confidence[filled])
        return float(np.sum(gaps * self.counts[filled]) / max(self.counts.sum(), 1))


def reliability(probabilities: np.ndarray, labels: np.ndarray, bins: int = BINS) -> Reliability:
    """Bin the texts by confidence (the top probability) and compare each bin's accuracy with its confidence."""
    probabilities, labels = np.asarray(probabilities), np.asarray(labels)
    confidence = probabilities.max(axis=1)
    right = probabilities.argmax(axis=1) == labels
    edges = np.linspace(0.0, 1.0, bins + 1)
    # Bins are closed on the right, (lower, upper]: a confidence of exactly 1 falls in the last bin.
    which = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, bins - 1)
    counts = np.bincount(which, minlength=bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_confidence = np.bincount(which, weights=confidence, minlength=bins) / counts
        accuracy = np.bincount(which, weights=right.astype(float), minlength=bins) / counts
    return Reliability(edges, counts, mean_confidence, accuracy)


def expected_calibration_error(probabilities: np.ndarray, labels: np.ndarray, bins: int = BINS) -> float:
    return reliability(probabilities, labels, bins).ece
