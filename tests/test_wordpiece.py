"""tokenizer/wordpiece.py: learning the WordPiece vocabulary (the most frequent pair, ties broken by text, the
alphabet when not every character fits), the same tokenizer whatever the order of the texts, train_tokenizer's
pipelines (BERT uncased, or a base tokenizer's own), counting words, and the progress bars."""

import io
import itertools
import json
import re
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from conftest import Terminal
from mha_textclf.errors import UserError
from mha_textclf.tokenizer import encoding, wordpiece
from tokenizer_fakes import cased_base


@pytest.mark.slow
def test_vocabulary_and_special_tokens(trained):
    assert len(trained) <= 1000
    assert trained.convert_tokens_to_ids("[PAD]") == trained.pad_token_id == 0
    for token in wordpiece.SPECIAL_TOKENS:
        assert trained.convert_tokens_to_ids(token) != trained.unk_token_id or token == "[UNK]"


@pytest.mark.slow
def test_uncased_wordpiece_with_cls_and_sep(trained):
    ids = [x.tolist() for x in encoding.encode(trained, ["The Prime Minister said", "the prime minister said"], 512)]
    assert ids[0] == ids[1]  # lowercased
    assert ids[0][0] == trained.cls_token_id and ids[0][-1] == trained.sep_token_id
    assert trained.pad_token_id not in ids[0]
    ids = encoding.encode(trained, ["unbelievably"], 64)[0]
    assert any(t.startswith("##") for t in trained.convert_ids_to_tokens(ids))


def test_a_base_tokenizer_s_own_pipeline_is_kept_and_only_its_vocabulary_learned_anew(tmp_path):
    """tokenizer.base retrains another tokenizer: its normalizer, pre-tokenizer, special tokens and templates
    (train_tokenizer's docstring), here a cased one, where the default pipeline lowercases."""
    import json

    base = cased_base(tmp_path / "cased")
    texts = ["The Minister said", "the minister said", "Café au lait"] * 10
    cased = wordpiece.train_tokenizer(texts, vocab_size=100, base=str(tmp_path / "cased"))
    spec = json.loads(cased.backend_tokenizer.to_str())
    assert spec["normalizer"] == json.loads(base.to_str())["normalizer"]
    assert spec["pre_tokenizer"] == json.loads(base.to_str())["pre_tokenizer"]
    upper, lower = (x.tolist() for x in encoding.encode(cased, ["The Minister", "the minister"], 16))
    assert upper != lower and cased.convert_ids_to_tokens(upper)[0] == "[CLS]" and "T" in cased.get_vocab()
    assert "é" in cased.get_vocab()  # accents kept, as the base keeps them
    scratch = wordpiece.train_tokenizer(texts, vocab_size=100)  # the default pipeline: BERT uncased
    assert "T" not in scratch.get_vocab() and "é" not in scratch.get_vocab()


def test_characters_that_do_not_fit_leave_the_rarest_to_unk_and_room_for_merges(caplog):
    """a and b occur 10 times, c and d 4, e to h once: 8 characters and ##a, ##b (inside "ba", "ab") need 15 tokens
    with the 5 special ones. At vocab_size=11 the alphabet may take 5 (half): a, ##a, b, ##b, then c, which ties with
    d and has the lower code point. One merge fills the vocabulary; d and every word with it are [UNK]."""
    texts = ["ab ab ab ab ab ba ba ba ba ba", "c c c c d d d d e f g h"]
    with caplog.at_level("INFO", logger="mha_textclf.tokenizer"):
        tokenizer = wordpiece.train_tokenizer(texts, vocab_size=11)
    vocab = sorted(tokenizer.get_vocab(), key=tokenizer.get_vocab().get)
    # (a, ##b) before (b, ##a): a tie, broken by the text
    assert vocab == [*wordpiece.SPECIAL_TOKENS, "a", "b", "c", "##a", "##b", "ab"]
    assert tokenizer.tokenize("ab ba c d dab h") == ["ab", "b", "##a", "c", "[UNK]", "[UNK]", "[UNK]"]
    assert "holds 3 of the 8 characters" in caplog.text
    assert wordpiece.train_tokenizer(texts, vocab_size=15).get_vocab().keys() >= set("abcdefgh")  # all fit: as before


@pytest.mark.slow
def test_a_vocab_size_without_room_for_a_character_is_a_clear_error(train_texts):
    with pytest.raises(UserError, match=r"tokenizer.vocab_size=3 leaves no room .* use tokenizer.vocab_size=\d+"):
        wordpiece.train_tokenizer(train_texts[:10], vocab_size=3)


SPECIALS = ["[PAD]", "[UNK]"]
# The worked example of the Hugging Face course (WordPiece / BPE chapter), merged by hand:
#   (##u, ##g) 20 -> ##ug; (##u, ##n) 16 -> ##un; (h, ##ug) 15 -> hug; (p, ##un) 12 -> pun;
#   then a tie at 5 between (hug, ##s) and (p, ##ug): "hug" sorts before "p" -> hugs, then pug; (b, ##un) 4 -> bun.
WORDS = {"hug": 10, "pug": 5, "pun": 12, "bun": 4, "hugs": 5}
EXPECTED = [*SPECIALS, "b", "g", "h", "n", "p", "s", "u", "##g", "##n", "##s", "##u",
            "##ug", "##un", "hug", "pun", "hugs", "pug", "bun"]


def test_learn_wordpiece_merges_the_most_frequent_pair_and_breaks_ties_by_text():
    assert wordpiece.learn_wordpiece(Counter(WORDS), len(EXPECTED), SPECIALS) == EXPECTED
    assert wordpiece.learn_wordpiece(Counter(WORDS), 15, SPECIALS) == EXPECTED[:15]  # stops at the size asked for
    # The order words arrive in (a hash map's, in the Rust trainer) changes nothing.
    reordered = Counter(dict(reversed(list(WORDS.items()))))
    assert wordpiece.learn_wordpiece(reordered, len(EXPECTED), SPECIALS) == EXPECTED


def test_merges_inside_repeated_symbols_and_words_too_long_to_keep():
    # a ##a ##a ##a: (##a, ##a) occurs twice per word -> ##aa, merged left to right: a ##aa ##a. Then a tie at 3
    # between (##aa, ##a) and (a, ##aa): "#" sorts before "a" -> ##aaa, then aaaa. No pair is left: 7 tokens, not 10.
    vocab = wordpiece.learn_wordpiece(Counter({"aaaa": 3, "x" * 101: 50}), 10, SPECIALS)
    assert vocab == [*SPECIALS, "a", "##a", "##aa", "##aaa", "aaaa"]  # nothing from the 101-character word: it


def test_progress_bars_show_on_a_terminal_and_not_in_a_redirected_log(monkeypatch):
    """Stages that take more than a couple of seconds show a progress bar on a terminal, not in a redirected log.
    Counting words, learning WordPiece and encoding, each bar asked for after a delay of a couple of seconds and shown
    here at once: on a terminal each is drawn, into a file (a redirected log) nothing is written."""
    real_tqdm = wordpiece.tqdm
    for stream in (Terminal(), io.StringIO()):
        delays = []

        def drawn(*args, stream=stream, delays=delays, **kwargs):  # the bar asked for, shown at once, on this stream
            delays.append(kwargs.pop("delay"))
            return real_tqdm(*args, file=stream, delay=0, mininterval=0, **kwargs)

        monkeypatch.setattr(wordpiece, "tqdm", drawn)
        monkeypatch.setattr(encoding, "tqdm", drawn)
        tokenizer = wordpiece.train_tokenizer(["the cat sat on the mat", "a dog and a cat"], vocab_size=40)
        encoding.encode(tokenizer, ["the cat", "a dog"], 8)
        assert len(delays) == 3 and all(1 <= delay <= 3 for delay in delays)  # "a couple of seconds"
        written = stream.getvalue()
        if stream.isatty():
            assert all(bar in written for bar in ("counting words", "learning WordPiece", "encoding")), written
        else:
            assert written == ""


def reference_wordpiece(words: Counter, vocab_size: int, specials: list[str], prefix: str = "##") -> list[str] | None:
    """The vocabulary learn_wordpiece promises, the slow obvious way: recount every pair after every merge, take the
    most frequent, ties to the pair whose tokens' text sorts first. When the characters do not all fit: the most
    frequent (ties to the lower code point) while they and their ## forms take at most half of vocab_size, and only
    the words made of them merge; None when not one character fits."""
    alphabet = sorted({c for w in words for c in w}) + sorted({prefix + c for w in words for c in w[1:]})
    if len(specials) + len(alphabet) > vocab_size:
        frequency = Counter(c for w, n in words.items() for c in w * n)
        inside = {c for w in words for c in w[1:]}
        kept = []
        for c in sorted(frequency, key=lambda c: (-frequency[c], ord(c))):
            if sum(1 + (k in inside) for k in [*kept, c]) > min(vocab_size // 2, vocab_size - len(specials)):
                break
            kept.append(c)
        if not kept:
            return None
        alphabet = sorted(kept) + sorted(prefix + c for c in kept if c in inside)
        words = Counter({w: n for w, n in words.items() if set(w) <= set(kept)})
    vocab = specials + [t for t in alphabet if t not in specials]
    pieces = {w: [w[0], *(prefix + c for c in w[1:])] for w in words}
    while len(vocab) < vocab_size:
        pairs = Counter()
        for word, n in words.items():
            for pair in itertools.pairwise(pieces[word]):
                pairs[pair] += n
        if not pairs:
            break
        a, b = min(pairs, key=lambda pair: (-pairs[pair], pair))
        token = a + b.removeprefix(prefix)
        if token not in vocab:
            vocab.append(token)
        for word, split in pieces.items():
            merged, i = [], 0
            while i < len(split):
                if split[i : i + 2] == [a, b]:
                    merged.append(token)
                    i += 2
                else:
                    merged.append(split[i])
                    i += 1
            pieces[word] = merged
    return vocab


# Few letters, so that words repeat and pairs tie often; punctuation and case for the pre-tokenizer and normalizer.
small_corpora = st.lists(st.lists(st.text("abcdAé-", min_size=1, max_size=7), min_size=1, max_size=6).map(" ".join),
                         min_size=1, max_size=10)


@settings(max_examples=60)
@given(texts=small_corpora, extra=st.integers(-20, 40), data=st.data())
def test_random_small_corpora_learn_the_reference_vocabulary_and_the_same_file_in_any_order(texts, extra, data):
    backend = Tokenizer.from_str(json.dumps(wordpiece._pipeline(None)[0]))  # the normalizer and pre-tokenizer
    words = wordpiece.count_words(texts, backend)
    # The size at which every character fits, then `extra` merges more (or, below 0, characters fewer).
    alphabet = len({c for w in words for c in w}) + len({c for w in words for c in w[1:]})
    vocab_size = max(1, len(wordpiece.SPECIAL_TOKENS) + alphabet + extra)
    expected = reference_wordpiece(words, vocab_size, wordpiece.SPECIAL_TOKENS)
    if expected is None:
        with pytest.raises(UserError, match="no room for a character"):
            wordpiece.learn_wordpiece(words, vocab_size, wordpiece.SPECIAL_TOKENS)
        return
    assert wordpiece.learn_wordpiece(words, vocab_size, wordpiece.SPECIAL_TOKENS) == expected
    # Byte-identical tokenizer.json whatever the order of the texts (and so of the words' first appearance).
    first = wordpiece.train_tokenizer(texts, vocab_size).backend_tokenizer.to_str()
    shuffled = data.draw(st.permutations(texts))
    assert wordpiece.train_tokenizer(shuffled, vocab_size).backend_tokenizer.to_str() == first


def test_the_default_pipeline_splits_punctuation_off_words_as_bert_uncased_does():
    """tokenizer.py: "Learn ... the WordPiece tokenizer (BERT-uncased style)"; train_tokenizer: "inside a BERT-uncased
    pipeline (base=None)": lowercased, and every punctuation mark a word of its own, whatever the spaces (BERT's
    pre-tokenizer), not left on the word before it. The reference is written out: words of letters, and single marks."""
    text = "Hello, World! The minister's (new) plan: tax-free; 3.5% more?"
    tokenizer = wordpiece.train_tokenizer([text] * 30, vocab_size=200)  # room for every word whole
    expected = re.findall(r"[a-z0-9]+|[^a-z0-9\s]", text.lower())
    assert expected[:4] == ["hello", ",", "world", "!"]
    assert tokenizer.tokenize(text) == expected
    assert tokenizer.tokenize("plan,world") == ["plan", ",", "world"]


def test_a_word_of_up_to_100_characters_is_split_into_pieces_and_a_longer_one_is_unk():
    """The unknown tokens of a vocabulary that holds every character are characters the training texts never have,
    and words longer than 100 characters; the [UNK] warning says "words of more than 100 characters"."""
    tokenizer = wordpiece.train_tokenizer(["ab ba abba"] * 5, vocab_size=40)
    hundred, longer = "ab" * 50, "ab" * 50 + "a"
    assert "[UNK]" not in tokenizer.tokenize(hundred) and "".join(tokenizer.tokenize(hundred)).replace("##", "") \
        == hundred
    assert tokenizer.tokenize(longer) == ["[UNK]"]
    warning = encoding.unknown_rate_warning(tokenizer, {"test": 0.5}, ["ab ba abba"])
    assert "or words of more than 100 characters" in warning
