"""What a run prepares before it trains (the corpus, the tokenizer, the encoded splits), kept in memory for the next
run in the same process that would prepare the same thing: the trials of a search mostly change the model and the
optimiser, and need not load and encode the data again.

Each product is keyed by exactly the settings that decide it, so a run gets either what it would have built itself
or a fresh build:
- the corpus: the data settings that choose texts, labels and splits (all but `max_length` and `group_by_length`,
  which act later), and `seed` (it draws the validation split and any subsample);
- the tokenizer: the corpus's key (its training texts), the tokenizer settings (all but `cache_dir`, which only says
  where the disk cache lives), `data.max_length` (the tokenizer carries it and saves it into the run folder) and
  `resume` (a resumed run takes the tokenizer of the run it continues);
- the encodings: the tokenizer's key, which already holds everything they depend on (texts, tokenizer, max_length).

Batches are not kept: a loader's shuffling generator is consumed by training, and building one is cheap.
`pipeline.train` takes an `InputCache`; without one, each run builds everything afresh.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import asdict
from typing import TypeVar

from mha_textclf.settings import TrainSettings, deciding, flat

log = logging.getLogger(__name__)
T = TypeVar("T")


def corpus_key(settings: TrainSettings) -> str:
    values = flat(asdict(settings))
    return json.dumps({key: values[key] for key in deciding("corpus")}, sort_keys=True, default=str)


def tokenizer_key(settings: TrainSettings) -> str:
    # `resume` decides nothing trained, but where the tokenizer comes from: a resumed run takes its run's.
    values = flat(asdict(settings))
    return json.dumps({key: values[key] for key in [*deciding("tokenizer"), "resume"]}, sort_keys=True, default=str)


KEYS: dict[str, Callable[[TrainSettings], str]] = {
    "corpus": corpus_key,
    "tokenizer": tokenizer_key,
    "encodings": tokenizer_key,
}


class InputCache:
    """Products of earlier runs in this process, by the settings that decided them: `get(product, settings, build)`
    returns the kept one or builds (and keeps) it.

    The `size` most recently used of each product are kept (a search over data.max_length alternates between two
    encodings; more distinct data settings than that are rebuilt). Callers must not modify what they get.
    """

    def __init__(self, size: int = 4):
        self.size = size
        self.kept: dict[str, OrderedDict[str, object]] = {product: OrderedDict() for product in KEYS}

    def get(self, product: str, settings: TrainSettings, build: Callable[[], T]) -> T:
        key, kept = KEYS[product](settings), self.kept[product]
        if key in kept:
            kept.move_to_end(key)
            log.info(f"{product}: reused from an earlier run in this process")
            return kept[key]
        kept[key] = value = build()
        if len(kept) > self.size:
            kept.popitem(last=False)
        return value
