"""Settings → resolved settings: every setting a run left null that adapts to its corpus (settings.ADAPTIVE) is
decided once, from the training texts, with its reason. The model and the training see only resolved settings.

Three rules, in the order a run can apply them:
- the vocabulary size (tokenizer.vocab_size), from the words and characters of the training texts, before there is
  a tokenizer (`vocabulary`);
- the settings of long texts (`by_length` in the schema: settings.BY_TEXT_LENGTH), from how many tokens the training
  texts have with that tokenizer, the epochs also from how many texts each class has (`resolve`, which also collects
  the first decision);
- R-Drop (trainer.rdrop), from how many texts each class has (`by_class_size`).

A run that continues (in place or with resume=) keeps what it decided when it started, as its last.pt records it.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from types import MappingProxyType
from typing import Any

from mha_textclf.settings import (
    ADDED_SINCE,
    BY_TEXT_LENGTH,
    CLASS_VIEWS,
    LONG_TEXT,
    MIN_EPOCHS,
    RDROP,
    RDROP_CLASS_SIZE,
    TokenizerSettings,
    TrainSettings,
    flat,
    show,
    with_values,
)
from mha_textclf.tokenizer.vocabulary import resolve_vocab_size

log = logging.getLogger("train")

CONTINUED = "decided when this run started"


@dataclass(frozen=True)
class Decision:
    value: Any
    why: str


@dataclass(frozen=True)
class Resolved:
    """The settings a run trains with, no adaptive setting left null, and what was decided for those left null."""

    settings: TrainSettings
    decisions: Mapping[str, Decision]  # read-only; the vocabulary first, then the schema's order

    @property
    def adapted(self) -> dict[str, str]:
        """metrics.json's `adapted`: {key: "value: why"}."""
        return {key: f"{show(d.value)}: {d.why}" for key, d in self.decisions.items()}


def vocabulary(settings: TrainSettings, train_texts: Sequence[str], saved: Mapping | None = None) -> Decision | None:
    """The vocabulary size of a run that left it null (None when it is set), by the rule of
    `tokenizer.vocabulary.resolve_vocab_size`; a continued run's is the one it started with (`saved`: its flattened
    config)."""
    if settings.tokenizer.vocab_size is not None:
        return None
    if saved is not None:
        return Decision(saved["tokenizer.vocab_size"], CONTINUED)
    decided, why = resolve_vocab_size(list(train_texts), settings.tokenizer)
    return Decision(decided.vocab_size, why)


def tokenizer_settings(settings: TrainSettings, vocabulary: Decision | None) -> TokenizerSettings:
    """The tokenizer settings to learn (or find in the cache) the run's tokenizer with: its size decided."""
    return settings.tokenizer if vocabulary is None else replace(settings.tokenizer, vocab_size=vocabulary.value)


def by_text_length(train_lengths: Sequence[int], n_classes: int) -> dict[str, Decision]:
    """settings.BY_TEXT_LENGTH's values for a corpus whose training texts have these token counts: its second values
    where their median is LONG_TEXT tokens or more (of an even count, the mean of the middle two). The epochs are
    then capped by the classes' size: no more passes than show each class CLASS_VIEWS training texts on average (of
    `n_classes`), and at least MIN_EPOCHS."""
    median = statistics.median(train_lengths)
    long = median >= LONG_TEXT
    why = (f"the median training text has {median:g} tokens, {'at least' if long else 'fewer than'} {LONG_TEXT}: "
           f"{'a corpus of long texts' if long else 'short texts'}")
    decided = {key: Decision(values[long], why) for key, values in BY_TEXT_LENGTH.items()}
    per_class = len(train_lengths) / n_classes
    showing = math.floor(CLASS_VIEWS / per_class + 0.5)  # rounded half up, as the docs write round()
    passes = max(MIN_EPOCHS, showing)
    if passes < decided["trainer.epochs"].value:
        decided["trainer.epochs"] = Decision(passes, f"{why}, capped: {len(train_lengths):,} training texts in "
                                                     f"{n_classes} classes, {per_class:,.0f} a class, and {showing} "
                                                     f"passes show each class about {CLASS_VIEWS:,} of them"
                                                     + (f", raised to the minimum of {MIN_EPOCHS}"
                                                        if showing < MIN_EPOCHS else ""))
    return decided


def by_class_size(n_texts: int, n_classes: int) -> Decision:
    """trainer.rdrop for a corpus of `n_texts` training texts in `n_classes` classes: RDROP where they average
    RDROP_CLASS_SIZE or more a class, else 0."""
    per_class = n_texts / n_classes
    large = per_class >= RDROP_CLASS_SIZE
    return Decision(RDROP if large else 0.0,
                    f"{n_texts:,} training texts in {n_classes} classes, {per_class:,.0f} a class, "
                    f"{'at least' if large else 'fewer than'} {RDROP_CLASS_SIZE:,}")


def resolve(settings: TrainSettings, vocabulary: Decision | None, train_lengths: Sequence[int], n_classes: int,
            saved: Mapping | None = None) -> Resolved:
    """`settings` with every adaptive setting left null decided: the vocabulary size as `vocabulary` decided it, the
    settings of long texts from `train_lengths` (the token count of each training text, as the model sees it) and
    `n_classes`, or, for a continued run, from `saved` (its flattened config). Each decision is logged once."""
    values = flat(asdict(settings))
    decisions = {"tokenizer.vocab_size": vocabulary} if vocabulary is not None else {}
    left = [key for key in BY_TEXT_LENGTH if values[key] is None]
    if left and saved is not None:
        decisions |= {key: Decision((ADDED_SINCE | saved)[key], CONTINUED) for key in left}
    elif left:
        decisions |= {key: d for key, d in by_text_length(train_lengths, n_classes).items() if key in left}
    if values["trainer.rdrop"] is None:
        decisions["trainer.rdrop"] = (Decision((ADDED_SINCE | saved)["trainer.rdrop"], CONTINUED) if saved is not None
                                      else by_class_size(len(train_lengths), n_classes))
    order = list(values)  # the vocabulary first, then the schema's order
    decisions = dict(sorted(decisions.items(), key=lambda d: (d[0] != "tokenizer.vocab_size", order.index(d[0]))))
    for key, d in decisions.items():
        log.info(f"{key}={show(d.value)} (null: {d.why})")
    resolved = with_values(settings, {key: d.value for key, d in decisions.items()})
    return Resolved(resolved, MappingProxyType(decisions))

