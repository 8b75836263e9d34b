"""How large a vocabulary a corpus gets when tokenizer.vocab_size is left null: counted from the words and characters
its training texts use often enough, decided once per corpus and cached beside the tokenizers."""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import replace

import numpy as np
from tokenizers import Tokenizer

from mha_textclf.runs.files import write_text
from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer.cache import cache_key, cache_root
from mha_textclf.tokenizer.wordpiece import _pipeline, count_words

log = logging.getLogger("mha_textclf.tokenizer")


# The least an automatic vocabulary holds: what bbc-news was tuned with, and room for common subwords on a small
# corpus.
AUTO_VOCAB_FLOOR = 1000


AUTO_CHARACTER_COVERAGE = 0.995


def resolve_vocab_size(texts: list[str], settings: TokenizerSettings) -> tuple[TokenizerSettings, str | None]:
    """The settings with tokenizer.vocab_size decided (unchanged when set), and why, for the log and metrics.json.

    null means: as many tokens as words that occur min_frequency times or more in the training texts (about what
    can be learnt; rarer words are better left to subwords), plus every character and `##` character
    that occurs as often (and at least the most frequent characters that make up 99.5% of all of theirs), with room
    for the characters to take no more than half the vocabulary (where each character is a word, as in Chinese, they
    are the vocabulary), rounded up to hundreds, and at least AUTO_VOCAB_FLOOR. WordPiece merges the most frequent
    pairs first, and the pieces along the way take tokens too, so many counted words stay split. 20 Newsgroups
    (8,469 training posts) gets 8,500 tokens, the Chinese reviews 5,100, tweets 1,000 (docs/own-data.md has the
    measurements).

    Counting the words takes seconds on a large corpus (7 s on 20 Newsgroups), so the decision is cached beside the
    tokenizers, keyed like them by the texts and everything the rule reads: every seed and sweep job counts once."""
    if settings.vocab_size is not None:
        return settings, None
    rule = f"auto-{settings.min_frequency}-{AUTO_VOCAB_FLOOR}-{AUTO_CHARACTER_COVERAGE}"
    memo = cache_root(settings.cache_dir) / f"{cache_key(texts, rule, settings.base)}.json"
    try:
        size, why = json.loads(memo.read_text())
        return replace(settings, vocab_size=size), why
    except (OSError, ValueError):
        pass  # not decided yet (or unreadable): decide it
    size, why = _decide_vocab_size(texts, settings)
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_text(memo, json.dumps([size, why]))  # whole or absent, for a concurrent run
    except OSError:
        pass  # an unwritable cache only costs the counting next time (get_tokenizer says what to do about it)
    return replace(settings, vocab_size=size), why


def _decide_vocab_size(texts: list[str], settings: TokenizerSettings) -> tuple[int, str]:
    spec, _ = _pipeline(settings.base)
    words = count_words(texts, Tokenizer.from_str(json.dumps(spec)))
    prefix = spec["model"]["continuing_subword_prefix"]
    characters: Counter[str] = Counter()
    for word, n in words.items():
        characters[word[0]] += n
        for c in word[1:]:
            characters[prefix + c] += n
    n = settings.min_frequency
    # Characters: those seen n times, and at least the most frequent that cover AUTO_CHARACTER_COVERAGE of the
    # characters' occurrences, so that [UNK] stays well under the 1% at which a run warns (a Chinese corpus has
    # thousands of characters seen fewer than 20 times).
    counts = sorted(characters.values(), reverse=True)
    covering = int(np.searchsorted(np.cumsum(counts), AUTO_CHARACTER_COVERAGE * sum(counts))) + 1
    alphabet = max(sum(count >= n for count in counts), min(covering, len(counts)))
    frequent = sum(count >= n and len(word) > 1 for word, count in words.items())  # one character: in the alphabet
    specials = len(spec["added_tokens"])
    size = max(AUTO_VOCAB_FLOOR, -(-max(specials + alphabet + frequent, 2 * alphabet) // 100) * 100)
    why = (f"{frequent} words occur {n} times or more in the {len(texts)} training texts (tokenizer.min_frequency="
           f"{n}), and {alphabet} characters (with their ## forms) as often or among those that make up "
           f"{AUTO_CHARACTER_COVERAGE:.1%} of all; at least {AUTO_VOCAB_FLOOR}")
    return size, why
