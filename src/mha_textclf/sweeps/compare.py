"""Paired comparisons of two variants over the seeds they share: how much faster one is, with a 95% interval, and
whether an accuracy difference is a result or noise, in words a person can act on.

Two runs at the same seed see the same split, the same batches and the same initial weights, so the difference
between them leaves out the seed-to-seed spread, which on bbc-news (±1 point of accuracy) is larger than any
difference between the variants. Repeats of a seed are averaged before pairing: they are one seed, not several.

The rules, stated once here and in every summary.md (`RULES`):
- Speed is the ratio of median training-epoch seconds, variant / reference, per shared seed. With 3 or more seeds its
  interval is a paired t interval on the log ratios (run-to-run variation included). With 1 or 2 seeds there is no
  spread across seeds to estimate (a t interval from two values is 12.7 standard errors wide), so the interval is a
  bootstrap over the runs' epochs: it covers epoch-to-epoch variation only, and needs 5 epochs in every run (a
  median resampled from 2 epochs takes 3 values); with fewer, the ratio comes without an interval.
- An accuracy difference is the variant's accuracy minus the reference's, per shared seed, with a paired t interval
  from 2 seeds on. It is called "same within noise" when the interval contains 0, or when its size is
  `NOISE_ARTICLES` articles or fewer: an exact McNemar test cannot call a net difference of k articles between two
  classifiers on the same articles significant at 5% unless 2 · 0.5^k < 0.05, i.e. k ≥ 6, however the other articles
  fall. Variants that compute the same function up to float rounding drift apart by a few articles; this is the
  floor below which no test on these articles could tell that drift from a real difference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIDENCE = 0.95
MIN_SEEDS_FOR_T = 3  # for speed; below it, the bootstrap over epochs
MIN_EPOCHS_FOR_BOOTSTRAP = 5  # a median resampled from 2 epochs takes 3 values: no interval to speak of
BOOTSTRAP_RESAMPLES = 2000


def mcnemar_floor(alpha: float = 1 - CONFIDENCE) -> int:
    """The largest net difference k (articles) that an exact two-sided McNemar test can never call significant:
    its smallest p-value, all k discordant articles going one way, is 2 · 0.5^k."""
    k = 0
    while 2 * 0.5 ** (k + 1) >= alpha:
        k += 1
    return k


NOISE_ARTICLES = mcnemar_floor()  # 5 at 95%

RULES = (
    f"Differences are paired over the seeds two variants share (a seed's repeats: their epochs pooled, their "
    f"accuracies averaged). Speed: the ratio of median epoch seconds, with a paired t interval on the log ratios "
    f"from {MIN_SEEDS_FOR_T} seeds on, and below that a bootstrap over the runs' epochs (too few seeds to estimate a "
    f"spread across them; it covers epoch-to-epoch variation only, and needs {MIN_EPOCHS_FOR_BOOTSTRAP} epochs in "
    f"every run). Accuracy: the difference in points (1 point = 1% of the split's articles), with a paired t "
    f"interval from 2 seeds on. "
    f"**Noise rule:** an accuracy difference is \"same within noise\" when its {CONFIDENCE:.0%} interval contains 0 "
    f"or when it is {NOISE_ARTICLES} articles or fewer of the split: an exact McNemar test cannot call a net "
    f"difference of {NOISE_ARTICLES} articles significant (p ≥ {2 * 0.5 ** NOISE_ARTICLES:.4g}) however the other "
    f"articles fall, and variants that compute the same function drift apart by a few articles through float "
    f"rounding alone.")


@dataclass
class Interval:
    """An estimate over `n` shared seeds and its 95% interval (None when it cannot be had), and how it was made."""

    estimate: float
    low: float | None
    high: float | None
    n: int
    method: str

    def contains(self, value: float) -> bool:
        return self.low is not None and self.high is not None and self.low <= value <= self.high


def paired_t(differences: list[float]) -> Interval:
    """Mean of per-seed differences with a Student t interval (exact when the differences are normal)."""
    d = np.asarray(differences, dtype=float)
    n = len(d)
    if n < 2:
        return Interval(float(d.mean()) if n else math.nan, None, None, n, "one seed: no interval")
    from scipy import stats  # here: a second of imports, for the summaries that compare seeds

    half = stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1) * d.std(ddof=1) / math.sqrt(n)
    return Interval(float(d.mean()), float(d.mean() - half), float(d.mean() + half), n, f"paired t, {n} seeds")


def speed_ratio(epoch_times: list[tuple[np.ndarray, np.ndarray]], seed: int = 0) -> Interval:
    """Epoch time of a variant relative to the reference's, from (variant epochs, reference epochs) per shared seed:
    the geometric mean over seeds of the ratio of median epoch seconds (>1: the variant is slower)."""
    pairs = [(np.asarray(v, dtype=float), np.asarray(r, dtype=float)) for v, r in epoch_times if len(v) and len(r)]
    logs = [math.log(np.median(v) / np.median(r)) for v, r in pairs]
    if not logs:
        return Interval(math.nan, None, None, 0, "no epoch times")
    if len(logs) >= MIN_SEEDS_FOR_T:
        t = paired_t(logs)
        return Interval(math.exp(t.estimate), math.exp(t.low), math.exp(t.high), t.n, f"paired t, {t.n} seeds")
    seeds = "1 seed" if len(pairs) == 1 else f"{len(pairs)} seeds"
    fewest = min(min(len(v), len(r)) for v, r in pairs)
    if fewest < MIN_EPOCHS_FOR_BOOTSTRAP:
        return Interval(math.exp(float(np.mean(logs))), None, None, len(pairs),
                        f"no interval: {seeds}, and {fewest} epochs in a run")
    rng = np.random.default_rng(seed)  # a fixed generator: the same folder gives the same summary
    resampled = np.zeros(BOOTSTRAP_RESAMPLES)
    for v, r in pairs:  # mean over seeds of the log ratio of medians, each run's epochs resampled
        medians_v = np.median(rng.choice(v, (BOOTSTRAP_RESAMPLES, len(v))), axis=1)
        medians_r = np.median(rng.choice(r, (BOOTSTRAP_RESAMPLES, len(r))), axis=1)
        resampled += np.log(medians_v / medians_r) / len(pairs)
    low, high = np.quantile(resampled, [0.5 - CONFIDENCE / 2, 0.5 + CONFIDENCE / 2])
    return Interval(math.exp(float(np.mean(logs))), math.exp(float(low)), math.exp(float(high)), len(pairs),
                    f"bootstrap over epochs, {seeds}")


def speed_verdict(ratio: Interval) -> str:
    """`ratio` is variant / reference epoch time: "faster by 1.52× (95% CI 1.49–1.55×)" and the like."""
    if math.isnan(ratio.estimate):
        return ""
    if ratio.low is None:
        return f"{ratio.estimate:.2f}× the epoch time ({ratio.method})"
    ci = f"{CONFIDENCE:.0%} CI"
    if ratio.high < 1:
        return f"faster by {1 / ratio.estimate:.2f}× ({ci} {1 / ratio.high:.2f}–{1 / ratio.low:.2f}×)"
    if ratio.low > 1:
        return f"slower by {ratio.estimate:.2f}× ({ci} {ratio.low:.2f}–{ratio.high:.2f}×)"
    return f"same speed within noise ({ratio.estimate:.2f}×, {ci} {ratio.low:.2f}–{ratio.high:.2f}×)"


def is_noise(difference: Interval, n_articles: float) -> bool:
    """The noise rule (module docstring): the interval contains 0, or the difference is NOISE_ARTICLES or fewer."""
    return abs(difference.estimate) * n_articles <= NOISE_ARTICLES + 1e-9 or difference.contains(0.0)


def accuracy_verdict(difference: Interval, n_articles: float) -> str:
    """`difference` is variant − reference accuracy (a fraction) per shared seed; `n_articles` the split's size."""
    if math.isnan(difference.estimate):
        return ""
    points, articles = 100 * difference.estimate, difference.estimate * n_articles
    size = f"{points:+.1f} points, {_articles(articles)} of {n_articles:.0f} articles"
    ci = ("" if difference.low is None else
          f", {CONFIDENCE:.0%} CI {100 * difference.low:+.1f} to {100 * difference.high:+.1f}")
    if abs(articles) < 1e-6 and (difference.n == 1 or (difference.high - difference.low) * n_articles < 1e-6):
        return {1: "identical at the one seed", 2: "identical at both seeds"}.get(
            difference.n, f"identical at all {difference.n} seeds")
    if is_noise(difference, n_articles):
        return f"same within noise ({size}{ci})"
    direction = "higher" if points > 0 else "lower"
    if difference.low is None:
        return f"{direction} by {abs(points):.1f} points at one seed ({_articles(articles)} articles; no interval)"
    return f"{direction} by {abs(points):.1f} points ({_articles(articles)} of {n_articles:.0f} articles{ci})"


def _articles(value: float) -> str:
    return f"{value:+.0f}" if abs(value - round(value)) < 0.05 else f"{value:+.1f}"
