"""calibration.py: expected calibration error and the fitted temperature, each against a reference computed another
way (a loop over texts, a fine grid, torch's cross-entropy, a known temperature recovered)."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_textclf.calibration import (
    BINS,
    TEMPERATURE_RANGE,
    expected_calibration_error,
    fit_temperature,
    negative_log_likelihood,
    reliability,
    softmax,
)

pytestmark = pytest.mark.unit


def ece_by_loop(probabilities: np.ndarray, labels: np.ndarray, bins: int = BINS) -> float:
    """The textbook definition, text by text: bin m holds confidences in ((m - 1) / M, m / M]."""
    members = [[] for _ in range(bins)]
    for p, label in zip(probabilities, labels, strict=True):
        confidence = float(p.max())
        m = max(math.ceil(confidence * bins), 1)  # 1..M
        members[m - 1].append((confidence, int(p.argmax()) == label))
    total = 0.0
    for bin_ in members:
        if bin_:
            accuracy = sum(right for _, right in bin_) / len(bin_)
            confidence = sum(c for c, _ in bin_) / len(bin_)
            total += len(bin_) / len(labels) * abs(accuracy - confidence)
    return total


def random_case(seed: int, n: int = 400, classes: int = 4, scale: float = 3.0):
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, classes)) * scale
    labels = rng.integers(0, classes, size=n)
    return logits, labels


@settings(max_examples=30)
@given(st.integers(0, 10_000), st.integers(2, 6), st.floats(0.1, 8.0))
def test_ece_equals_the_text_by_text_definition(seed, classes, scale):
    logits, labels = random_case(seed, 300, classes, scale)
    probabilities = softmax(logits)
    assert expected_calibration_error(probabilities, labels) == pytest.approx(ece_by_loop(probabilities, labels),
                                                                            abs=1e-12)


def test_ece_of_known_cases():
    # Ten texts at confidence 0.8, eight of them right: calibrated, ECE 0; all ten right: 0.2 too timid.
    probabilities = np.tile([0.8, 0.2], (10, 1))
    assert expected_calibration_error(probabilities, np.array([0] * 8 + [1] * 2)) == pytest.approx(0.0)
    assert expected_calibration_error(probabilities, np.zeros(10, dtype=int)) == pytest.approx(0.2)
    # Bins are closed on the right: 1.0 lands in the last bin, exactly 1/15 in the first.
    assert reliability(np.array([[1.0, 0.0]]), np.array([0])).counts[-1] == 1
    assert reliability(np.full((1, 15), 1 / 15), np.array([0])).counts[0] == 1


def test_the_reliability_bins_hold_every_text_once_with_their_mean_confidence_and_accuracy():
    logits, labels = random_case(3)
    probabilities = softmax(logits)
    bins = reliability(probabilities, labels)
    assert bins.counts.sum() == len(labels) and len(bins.edges) == BINS + 1
    confidence = probabilities.max(axis=1)
    for b in np.flatnonzero(bins.counts):
        inside = (confidence > bins.edges[b]) & (confidence <= bins.edges[b + 1])
        assert inside.sum() == bins.counts[b]
        assert bins.confidence[b] == pytest.approx(confidence[inside].mean())
        assert bins.accuracy[b] == pytest.approx((probabilities.argmax(1) == labels)[inside].mean())


@given(st.integers(0, 10_000), st.floats(0.2, 5.0))
def test_the_negative_log_likelihood_is_torchs_cross_entropy(seed, temperature):
    logits, labels = random_case(seed, 50)
    expected = F.cross_entropy(torch.tensor(logits) / temperature, torch.tensor(labels)).item()
    assert negative_log_likelihood(logits, labels, temperature) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("true_temperature", [0.5, 1.0, 2.5])
def test_the_fitted_temperature_recovers_the_one_the_labels_were_drawn_with(true_temperature):
    """Labels drawn from softmax(logits / T0): the likelihood is highest near T0 (20,000 texts: within 5%)."""
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(20_000, 5)) * 3
    p = softmax(logits, true_temperature)
    labels = (p.cumsum(axis=1) > rng.random((len(p), 1))).argmax(axis=1)
    assert fit_temperature(logits, labels) == pytest.approx(true_temperature, rel=0.05)


@settings(max_examples=20)
@given(st.integers(0, 10_000), st.floats(0.3, 6.0))
def test_the_fitted_temperature_is_the_minimum_of_a_fine_grid_and_keeps_every_prediction(seed, scale):
    logits, labels = random_case(seed, 200, 3, scale)
    fitted = fit_temperature(logits, labels)
    grid = np.exp(np.linspace(*np.log(TEMPERATURE_RANGE), 1001))
    losses = [negative_log_likelihood(logits, labels, t) for t in grid]
    assert negative_log_likelihood(logits, labels, fitted) <= min(losses) + 1e-7  # flat near a bound: Brent's tolerance
    assert negative_log_likelihood(logits, labels, fitted) <= negative_log_likelihood(logits, labels) + 1e-12
    assert TEMPERATURE_RANGE[0] <= fitted <= TEMPERATURE_RANGE[1]
    assert (softmax(logits, fitted).argmax(1) == logits.argmax(1)).all()  # accuracy cannot change
