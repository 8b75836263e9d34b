"""tokenizer/vocabulary.py: the size tokenizer.vocab_size=null decides (resolve_vocab_size's rule) and the
cache that remembers it."""

from collections import Counter

import pytest

from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer import vocabulary
from tokenizer_fakes import cased_base


def test_a_decided_vocabulary_size_is_cached_per_base_tokenizer(tmp_path):
    """resolve_vocab_size's cache is keyed by everything the rule reads, the base tokenizer too: its pipeline makes
    the words that are counted (cased, "Word7" and "word7" are two). Each decision from a shared cache is the one a
    fresh cache gives."""
    base = str(tmp_path / "cased")
    cased_base(base)
    texts = [" ".join(f"w{i} W{i}" for i in range(1100))]  # 1100 words uncased, 2200 cased: both above the floor
    decided = {}
    for name in (None, base):
        fresh = TokenizerSettings(vocab_size=None, min_frequency=1, base=name,
                                  cache_dir=str(tmp_path / f"fresh-{name is None}"))
        decided[name] = vocabulary.resolve_vocab_size(texts, fresh)[0].vocab_size
    assert decided[None] < decided[base]
    for name in (None, base):  # one cache for both, in turn
        shared = TokenizerSettings(vocab_size=None, min_frequency=1, base=name, cache_dir=str(tmp_path / "shared"))
        assert vocabulary.resolve_vocab_size(texts, shared)[0].vocab_size == decided[name], name


def test_a_null_vocabulary_size_is_sized_by_every_word_and_character_that_occurs_min_frequency_times():
    """Reference counts written out: words w0..w249 (w, then digits) and CJK characters, which the BERT pre-tokenizer
    makes words of one character each."""
    words = [f"w{i}" for i in range(250)]
    texts = [" ".join(words[:180])] * 20 + [" ".join(words[180:])] * 19  # 180 words 20 times, 70 words 19 times
    alphabet = 1 + 10  # "w" starts every word; "##0".."##9" follow it
    settings = TokenizerSettings(vocab_size=None)  # min_frequency at its default: 20 occurrences, as documented
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vocabulary, "AUTO_VOCAB_FLOOR", 0)  # the counts themselves, not the floor
        assert vocabulary.resolve_vocab_size(texts, settings)[0].vocab_size == 200  # 5 specials + 11 + 180 -> hundreds
        rarer = TokenizerSettings(vocab_size=None, min_frequency=19)
        assert vocabulary.resolve_vocab_size(texts, rarer)[0].vocab_size == 300  # 5 + 11 + 250
        characters = "".join(chr(0x4E00 + i) for i in range(160))  # each a word, each an alphabet entry
        # 160 characters: twice that, so that they may take their half of the vocabulary (5 + 160 alone fits 200).
        assert vocabulary.resolve_vocab_size([characters] * 20, settings)[0].vocab_size == 400
        # Seen 3 times each, none is frequent, but the alphabet still holds those that make up 99.5% of them: all.
        assert vocabulary.resolve_vocab_size([characters] * 3, settings)[0].vocab_size == 400
        # One character far more frequent than the other 159: it alone is 99.5% of them.
        skewed = [characters[0] * 200_000, characters[1:]]
        assert vocabulary.resolve_vocab_size(skewed, settings)[0].vocab_size == 100  # 5 + 1 -> hundreds
        # One character 9900 times, 100 others once: 99.5% of the 10,000 takes the frequent one and 50 of the rare
        # ones (99% would take it alone, and give 100), with room for them to take half: 2 × 51 -> 200.
        assert vocabulary.resolve_vocab_size([characters[0] * 9900, characters[1:101]], settings)[0].vocab_size == 200
    resolved, why = vocabulary.resolve_vocab_size(texts, settings)
    assert resolved.vocab_size == vocabulary.AUTO_VOCAB_FLOOR == 1000
    assert "180 words occur 20 times" in why and f"and {alphabet} characters" in why
    given = TokenizerSettings(vocab_size=700)
    assert vocabulary.resolve_vocab_size(texts, given) == (given, None)


def test_a_character_seen_exactly_min_frequency_times_is_in_the_alphabet_beyond_the_99_5_percent_coverage():
    """The vocabulary is sized for every word that occurs tokenizer.min_frequency times, and every character (and
    ## character) as frequent or among the most frequent that make up 99.5% of all: one CJK character 25,000 times
    covers 99.5% alone, and 50 others seen exactly min_frequency times (2 here) are as frequent, so they are in the
    alphabet too: 51 characters, room for them to take half, 2 × 51 -> 200. Seen once each, only the coverage holds
    them: the frequent one alone, 100."""
    characters = "".join(chr(0x4E00 + i) for i in range(51))
    settings = TokenizerSettings(vocab_size=None, min_frequency=2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vocabulary, "AUTO_VOCAB_FLOOR", 0)  # the counts themselves, not the floor
        for times, size in ((2, 200), (1, 100)):
            texts = [characters[0] * 25_000] + [characters[1:]] * times
            assert vocabulary.resolve_vocab_size(texts, settings)[0].vocab_size == size, times


def test_a_decided_vocabulary_size_is_cached_and_keyed_by_the_texts_and_the_rule(tmp_path):
    texts = [" ".join(f"w{i}" for i in range(180))] * 20
    settings = TokenizerSettings(vocab_size=None, cache_dir=str(tmp_path))
    decided = vocabulary.resolve_vocab_size(texts, settings)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vocabulary, "count_words", lambda *a: pytest.fail("counted the words again"))
        assert vocabulary.resolve_vocab_size(texts, settings) == decided  # every later seed or job: no counting
    counted = []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vocabulary, "count_words", lambda *a: counted.append(1) or Counter({"w1": 5}))
        vocabulary.resolve_vocab_size(texts[:19], settings)  # other texts
        other_rule = TokenizerSettings(vocab_size=None, min_frequency=5, cache_dir=str(tmp_path))
        vocabulary.resolve_vocab_size(texts, other_rule)
        patch.setattr(vocabulary, "AUTO_VOCAB_FLOOR", 100)  # another rule
        vocabulary.resolve_vocab_size(texts, settings)
    assert len(counted) == 3
