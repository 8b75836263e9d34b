"""sweeps/compare.py: paired comparisons. Intervals against scipy's own, the noise floor against an exact McNemar
test, and verdicts that call float-rounding noise noise."""

import math
import re

import numpy as np
import pytest
from scipy import stats

from mha_textclf.sweeps.compare import (
    NOISE_ARTICLES,
    RULES,
    Interval,
    accuracy_verdict,
    paired_t,
    speed_ratio,
    speed_verdict,
)

pytestmark = pytest.mark.unit


def test_the_noise_floor_is_the_largest_difference_mcnemar_cannot_call_significant():
    # k discordant articles all going one way: the most significant a net difference of k can ever be.
    assert stats.binomtest(NOISE_ARTICLES, NOISE_ARTICLES).pvalue >= 0.05
    assert stats.binomtest(NOISE_ARTICLES + 1, NOISE_ARTICLES + 1).pvalue < 0.05


def test_the_rules_print_the_exact_mcnemar_p_of_the_noise_floor():
    """summary.md's rules print the bound on the noise floor's p unrounded: 0.062 would be a p that no test gives."""
    exact = stats.binomtest(NOISE_ARTICLES, NOISE_ARTICLES).pvalue
    printed = float(re.search(r"significant \(p ≥ ([0-9.]+)\)", RULES).group(1))
    assert f"difference of {NOISE_ARTICLES} articles" in RULES
    assert printed == pytest.approx(exact, abs=1e-12), (printed, exact)


def test_paired_t_matches_scipy():
    a, b = np.array([0.95, 0.93, 0.96, 0.94]), np.array([0.94, 0.93, 0.94, 0.92])
    reference = stats.ttest_rel(a, b).confidence_interval(0.95)
    interval = paired_t((a - b).tolist())
    assert interval.estimate == pytest.approx((a - b).mean())
    assert (interval.low, interval.high) == pytest.approx((reference.low, reference.high))
    assert interval.n == 4


def test_one_seed_has_no_interval():
    interval = paired_t([0.01])
    assert interval.estimate == 0.01 and interval.low is None and interval.high is None


def test_speed_from_three_seeds_is_a_t_interval_on_log_ratios():
    rng = np.random.default_rng(0)
    ratios = [1.45, 1.52, 1.58]
    pairs = [(np.full(12, r) + rng.normal(0, 0.01, 12), np.ones(12) + rng.normal(0, 0.01, 12)) for r in ratios]
    logs = [math.log(np.median(v) / np.median(r)) for v, r in pairs]
    reference = stats.ttest_1samp(logs, 0).confidence_interval(0.95)
    ratio = speed_ratio(pairs)
    assert ratio.estimate == pytest.approx(math.exp(np.mean(logs)))
    assert (ratio.low, ratio.high) == pytest.approx((math.exp(reference.low), math.exp(reference.high)))
    assert ratio.method == "paired t, 3 seeds"


def test_speed_from_one_seed_is_a_bootstrap_over_epochs():
    variant, reference = np.full(12, 1.5), np.full(12, 1.0)
    variant[0], reference[0] = 9.0, 7.0  # the first epoch's warm-up: medians ignore it
    ratio = speed_ratio([(variant, reference)])
    assert ratio.method == "bootstrap over epochs, 1 seed"
    assert ratio.estimate == pytest.approx(1.5) and ratio.low == pytest.approx(1.5) and ratio.high == pytest.approx(1.5)

    noisy = speed_ratio([(np.linspace(1.4, 1.6, 12), np.linspace(0.95, 1.05, 12))])
    assert noisy.low < 1.5 / 1.0 < noisy.high and noisy.high / noisy.low < 1.3
    assert speed_ratio([(np.linspace(1.4, 1.6, 12), np.linspace(0.95, 1.05, 12))]) == noisy  # reproducible


def test_a_bootstrap_interval_holds_the_middle_95_percent_of_the_resampled_median_ratio():
    """An epoch-time ratio such as "slower by 1.61× (95% CI 1.09–2.37×)" has, below 3 seeds, a bootstrap interval
    over the runs' epochs. Against a reference whose epochs all take 1 s, the resampled ratio is the median of 17
    draws from the variant's epochs, whose distribution is exact: it is at most the k-th smallest epoch when 9 or more
    of the 17 draws are, Binomial(17, k/17). Its 2.5% and 97.5% quantiles are the 5th and 13th epochs; a 90%
    interval would be the 6th and 12th. The reference's epochs are resampled too, so the same epochs as the
    reference's, against a variant at 1 s, give the inverse."""
    variant = 1.0 + 0.1 * np.arange(1, 18)  # 1.1, 1.2, ..., 2.7 s: 17 distinct epoch times
    cdf = [stats.binom.sf(8, 17, k / 17) for k in range(1, 18)]  # P(median of 17 draws <= the k-th smallest)
    low = next(k for k in range(17) if cdf[k] >= 0.025)  # the smallest epoch whose probability reaches 2.5%
    high = next(k for k in range(17) if cdf[k] >= 0.975)
    assert (low, high) == (4, 12) and next(k for k in range(17) if cdf[k] >= 0.05) == 5  # (95% and 90% differ)
    ratio = speed_ratio([(variant, np.ones(17))])
    assert ratio.method == "bootstrap over epochs, 1 seed" and ratio.estimate == pytest.approx(variant[8])
    assert (ratio.low, ratio.high) == pytest.approx((variant[low], variant[high]))
    inverse = speed_ratio([(np.ones(17), variant)])
    assert (inverse.low, inverse.high) == pytest.approx((1 / variant[high], 1 / variant[low]))


@pytest.mark.parametrize("epochs", [6, 2])
def test_speed_from_two_seeds_is_the_geometric_mean_of_their_ratios(epochs):
    """speed_ratio: "the geometric mean over seeds of the ratio of median epoch seconds", below 3 seeds too, where
    the interval is a bootstrap (or, under 5 epochs, there is none): seeds 1.2× and 2.0× slower give √2.4 ≈ 1.55×,
    not their arithmetic mean 1.6× (a ratio and its inverse must average to 1)."""
    pairs = [(np.full(epochs, 1.2), np.ones(epochs)), (np.full(epochs, 2.0), np.ones(epochs))]
    ratio = speed_ratio(pairs)
    assert ratio.n == 2 and ratio.estimate == pytest.approx(math.sqrt(1.2 * 2.0))
    inverse = speed_ratio([(r, v) for v, r in pairs])
    assert inverse.estimate == pytest.approx(1 / ratio.estimate)
    if epochs >= 5:
        assert ratio.low == pytest.approx(ratio.estimate) == ratio.high  # every epoch alike: no spread


def test_too_few_epochs_for_a_bootstrap_give_no_interval():
    ratio = speed_ratio([([2.0, 1.0], [1.0, 1.0]), ([1.5, 1.5], [1.0, 1.0])])
    assert ratio.estimate == pytest.approx(1.5) and ratio.low is None
    assert speed_verdict(ratio) == "1.50× the epoch time (no interval: 2 seeds, and 2 epochs in a run)"
    # The bootstrap needs 5 epochs in every run; one run of 4 is too few.
    five, four = np.full(5, 1.5), np.full(4, 1.5)
    assert speed_ratio([(five, five / 1.5)]).low == pytest.approx(1.5)
    assert speed_ratio([(five, five / 1.5), (four, five / 1.5)]).method == "no interval: 2 seeds, and 4 epochs in a run"


def test_speed_verdicts():
    assert speed_verdict(Interval(1 / 1.52, 1 / 1.55, 1 / 1.49, 1, "")) == "faster by 1.52× (95% CI 1.49–1.55×)"
    assert speed_verdict(Interval(1.52, 1.49, 1.55, 3, "")) == "slower by 1.52× (95% CI 1.49–1.55×)"
    assert speed_verdict(Interval(1.01, 0.98, 1.04, 3, "")) == "same speed within noise (1.01×, 95% CI 0.98–1.04×)"


def test_two_articles_apart_at_every_seed_is_noise_not_a_result():
    """The issue's case: variants that compute the same function, a couple of articles apart out of 1000. A constant
    difference has a zero-width t interval; the article floor still calls it noise."""
    verdict = accuracy_verdict(paired_t([-0.002, -0.002, -0.002]), 1000)
    assert verdict.startswith("same within noise (-0.2 points, -2 of 1000 articles")


def test_a_difference_above_the_floor_that_every_seed_agrees_on_is_a_result():
    verdict = accuracy_verdict(paired_t([-0.026, -0.03, -0.028]), 1000)
    assert verdict.startswith("lower by 2.8 points (-28 of 1000 articles, 95% CI")


def test_a_large_difference_whose_interval_contains_zero_is_noise():
    verdict = accuracy_verdict(paired_t([0.02, -0.015, 0.01]), 1000)
    assert verdict.startswith("same within noise (+0.5 points")


def test_a_difference_above_the_article_floor_whose_interval_contains_zero_is_still_noise():
    """The noise rule calls a difference the same within noise when its interval contains 0 or it is at most 5
    articles; either condition alone suffices. Here -2.5 points, 7.7 of 307 articles (a validation split's), above
    the floor, with an interval (scipy's t, computed here) that contains 0."""
    differences = [0.03, -0.06, -0.045]
    mean, half = np.mean(differences), stats.t.ppf(0.975, 2) * stats.sem(differences)
    assert abs(mean) * 307 > NOISE_ARTICLES and mean - half < 0 < mean + half
    assert accuracy_verdict(paired_t(differences), 307) == (
        f"same within noise (-2.5 points, -7.7 of 307 articles, 95% CI {100 * (mean - half):+.1f} to "
        f"{100 * (mean + half):+.1f})")


def test_one_seed_above_the_floor_says_it_has_no_interval():
    assert accuracy_verdict(paired_t([0.012]), 1000) == "higher by 1.2 points at one seed (+12 articles; no interval)"
    assert accuracy_verdict(paired_t([0.005]), 1000).startswith("same within noise")  # 5 articles: the floor


def test_identical_accuracies_say_so():
    assert accuracy_verdict(paired_t([0.0, 0.0]), 307) == "identical at both seeds"
    assert accuracy_verdict(paired_t([0.0, 0.0, 0.0]), 307) == "identical at all 3 seeds"
    assert accuracy_verdict(paired_t([0.0]), 307) == "identical at the one seed"


def test_differences_that_cancel_out_over_the_seeds_are_not_identical():
    """A verdict of "identical at all 3 seeds" says that every seed gave the same accuracy. One article up at one
    seed and one down at another average to 0, but the variants are not identical: that is noise, with its interval."""
    verdict = accuracy_verdict(paired_t([0.001, -0.001, 0.0]), 1000)
    assert verdict.startswith("same within noise (+0.0 points, +0 of 1000 articles, 95% CI -0.2 to +0.2")
    assert accuracy_verdict(paired_t([2 / 307, -2 / 307]), 307).startswith("same within noise (+0.0 points, +0 of 307")
