"""The WordPiece tokenizer: size, special tokens, truncation, save/load, both training modes, the cache."""

import io
import itertools
import json
import multiprocessing as mp
import os
import re
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from conftest import Terminal
from mha_textclf.errors import UserError
from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer import cache, encoding, vocabulary, wordpiece


@pytest.fixture(scope="module", params=["scratch", "minilm"])
def trained(request, train_texts, minilm_dir):
    base = None if request.param == "scratch" else str(minilm_dir)
    return wordpiece.train_tokenizer(train_texts[:250], vocab_size=1000, base=base)  # (a 1000-token vocabulary still)


def test_vocabulary_and_special_tokens(trained):
    assert len(trained) <= 1000
    assert trained.convert_tokens_to_ids("[PAD]") == trained.pad_token_id == 0
    for token in wordpiece.SPECIAL_TOKENS:
        assert trained.convert_tokens_to_ids(token) != trained.unk_token_id or token == "[UNK]"


def test_uncased_wordpiece_with_cls_and_sep(trained):
    ids = [x.tolist() for x in encoding.encode(trained, ["The Prime Minister said", "the prime minister said"], 512)]
    assert ids[0] == ids[1]  # lowercased
    assert ids[0][0] == trained.cls_token_id and ids[0][-1] == trained.sep_token_id
    assert trained.pad_token_id not in ids[0]
    ids = encoding.encode(trained, ["unbelievably"], 64)[0]
    assert any(t.startswith("##") for t in trained.convert_ids_to_tokens(ids))


def test_truncation_at_max_length(trained, train_texts):
    ids = encoding.encode(trained, train_texts[:50], max_length=128)
    assert max(map(len, ids)) == 128  # bbc articles are far longer than 128 wordpieces
    assert all(seq[0] == trained.cls_token_id and seq[-1] == trained.sep_token_id for seq in ids)


def test_save_load_round_trip(trained, train_texts, tmp_path):
    trained.save_pretrained(tmp_path / "tokenizer")
    loaded = cache.load_tokenizer(tmp_path / "tokenizer", max_length=256)
    assert [x.tolist() for x in encoding.encode(loaded, train_texts[:20], 256)] == [
        x.tolist() for x in encoding.encode(trained, train_texts[:20], 256)]
    assert loaded.pad_token_id == 0 and len(loaded) == len(trained)


def cased_base(folder):
    """A WordPiece tokenizer folder whose pipeline keeps case and accents (the default pipeline drops both); returns
    its backend tokenizer."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    base = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(wordpiece.SPECIAL_TOKENS)}, unk_token="[UNK]"))
    base.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
    base.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    base.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]",
                                                        special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    PreTrainedTokenizerFast(tokenizer_object=base, pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                            sep_token="[SEP]", mask_token="[MASK]").save_pretrained(folder)
    return base


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


def test_cache_reuses_and_keys_by_corpus_and_settings(train_texts, tmp_path, monkeypatch):
    texts = train_texts[:200]
    settings = TokenizerSettings(vocab_size=500, cache_dir=str(tmp_path))
    first = cache.get_tokenizer(texts, settings, max_length=64)
    entries = sorted(p.name for p in tmp_path.iterdir())
    assert len(entries) == 1 and not entries[0].startswith(".")

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been reused")

    monkeypatch.setattr(cache, "train_tokenizer", no_training)
    again = cache.get_tokenizer(texts, settings, max_length=64)
    assert again.get_vocab() == first.get_vocab()
    assert cache.cache_key(texts, 500, None) != cache.cache_key(texts, 400, None)
    assert cache.cache_key(texts, 500, None) != cache.cache_key(texts[1:], 500, None)


def test_the_cache_key_follows_every_training_text_to_the_last_and_how_they_split(train_texts, tmp_path, monkeypatch):
    """The tokenizer is cached, keyed by the texts and the settings: a corpus that differs from another only in its last
    text, or in a text added at its end (own data that grew, a larger data.max_train_samples), gets a tokenizer learned
    on its own texts, not the other's from the cache; so do the same characters split into other texts, and a text
    repeated (the counts the vocabulary is learned from)."""
    texts = train_texts[:300]
    grown = [*texts, train_texts[300]]
    last_changed = [*texts[:-1], texts[-1] + " and one word more"]
    keys = {cache.cache_key(t, 500, None) for t in (texts, grown, last_changed, [*texts, texts[-1]])}
    assert len(keys) == 4
    assert cache.cache_key(["ab", "c"], 500, None) != cache.cache_key(["a", "bc"], 500, None)
    learned = []
    real = wordpiece.train_tokenizer
    monkeypatch.setattr(cache, "train_tokenizer", lambda t, *args: learned.append(len(t)) or real(t, *args))
    settings = TokenizerSettings(vocab_size=500, cache_dir=str(tmp_path))
    cache.get_tokenizer(texts, settings, max_length=64)
    assert cache.get_tokenizer(grown, settings, max_length=64).get_vocab() == real(grown, 500).get_vocab()
    assert learned == [300, 301] and len(list(tmp_path.iterdir())) == 2


@pytest.mark.parametrize("library", ["tokenizers", "transformers"])
def test_the_cache_key_follows_the_versions_of_the_libraries_that_train_the_tokenizer(library, monkeypatch):
    """The cache is keyed by the tokenizers and transformers versions too, so an upgrade never reuses a tokenizer the
    other version trained."""
    texts = ["one text", "another text"]
    before = cache.cache_key(texts, 500, None)
    monkeypatch.setattr(getattr(cache, library), "__version__", "0.0.0-other")
    assert cache.cache_key(texts, 500, None) != before


def test_the_cache_lives_where_the_setting_or_the_environment_says(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_TEXTCLF_CACHE", str(tmp_path / "from-env"))
    assert cache.cache_root(None) == tmp_path / "from-env"
    assert cache.cache_root(str(tmp_path / "from-setting")) == tmp_path / "from-setting"  # the setting wins
    monkeypatch.delenv("MHA_TEXTCLF_CACHE")
    assert cache.cache_root(None) == Path("~/.cache/mha-textclf").expanduser()


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


def test_unk_from_characters_the_training_texts_never_have_is_no_matter_of_vocab_size():
    tokenizer = wordpiece.train_tokenizer(["abc abd"], vocab_size=100)  # every character fits
    assert tokenizer.tokenize("abc xbd") == ["abc", "[UNK]"]
    assert encoding.unknown_rate_warning(tokenizer, {"train": 0.0, "val": 0.01}, ["abc abd"]) is None  # 1%: no warning
    warning = encoding.unknown_rate_warning(tokenizer, {"train": 0.0, "val": 0.011}, ["abc abd"])
    assert "1.10% of the val tokens" in warning
    warning = encoding.unknown_rate_warning(tokenizer, {"train": 0.0, "val": 0.5}, ["abc abd"])
    assert "50.00% of the val tokens, though every character of the training texts is in the vocabulary" in warning
    assert "tokenizer.vocab_size=" not in warning


# a, b (10 times), c and d (4), e to h (once); inside a word: a, b, d, f, h. The alphabet: 8 characters and 5 ## forms.
INSIDE_AND_OUT = ["ab ab ab ab ab ba ba ba ba ba", "c c c c dd dd ef gh"]


def test_the_sizes_the_messages_name_are_those_where_every_character_fits():
    """tokenizer.vocab_size=3 names N, the 5 special tokens and the 13 alphabet tokens; a vocabulary that leaves
    characters out names its size plus the 8 tokens it lacks (d e f g h and ##d ##f ##h: 5 characters, whose ## forms
    count too), and at that size every one fits, with the merge it had."""
    with pytest.raises(UserError, match=r"tokenizer\.vocab_size=3 leaves no room for a character beside the 5 special "
                                        r"tokens .*; use tokenizer\.vocab_size=18 or more, where every character"):
        wordpiece.train_tokenizer(INSIDE_AND_OUT, vocab_size=3)
    fits = wordpiece.train_tokenizer(INSIDE_AND_OUT, vocab_size=18)
    assert not encoding.missing_alphabet(fits, INSIDE_AND_OUT)
    tokenizer = wordpiece.train_tokenizer(INSIDE_AND_OUT, vocab_size=11)  # a, b, c, ##a, ##b and the merge ab
    warning = encoding.unknown_rate_warning(tokenizer, {"train": 0.5}, INSIDE_AND_OUT)
    assert warning == ("[UNK] is 50.00% of the train tokens: 5 characters of the training texts are not in the "
                       "11-token vocabulary. Use tokenizer.vocab_size=19 (or more), where every character fits.")
    every = wordpiece.train_tokenizer(INSIDE_AND_OUT, vocab_size=19)
    assert not encoding.missing_alphabet(every, INSIDE_AND_OUT) and "ab" in every.get_vocab()


def test_a_vocab_size_without_room_for_a_character_is_a_clear_error(train_texts):
    with pytest.raises(UserError, match=r"tokenizer.vocab_size=3 leaves no room .* use tokenizer.vocab_size=\d+"):
        wordpiece.train_tokenizer(train_texts[:10], vocab_size=3)


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="No tokenizer"):
        cache.load_tokenizer(tmp_path, max_length=512)


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
    # encodes as [UNK] whatever the vocabulary holds


def learn_in_a_fresh_process(root, texts, minilm, barrier):
    """In a fresh interpreter, with its own hash seed: learn a tokenizer from scratch, one on MiniLM's pipeline and
    one too small for every character, each into a private cache, and return their files; then, at the same moment
    as the other process, build one entry of a cache both share."""
    from mha_textclf.settings import TokenizerSettings
    from mha_textclf.tokenizer.cache import get_tokenizer
    from mha_textclf.tokenizer.encoding import missing_alphabet

    files = []
    for base, vocab_size in ((None, 1000), (minilm, 1000), (None, 60)):
        private = Path(root) / f"private-{os.getpid()}-{'minilm' if base else 'scratch'}-{vocab_size}"
        settings = TokenizerSettings(vocab_size=vocab_size, base=base, cache_dir=str(private))
        tokenizer = get_tokenizer(texts, settings, max_length=512)
        assert bool(missing_alphabet(tokenizer, texts)) == (vocab_size == 60)  # (60: the alphabet does not fit)
        (entry,) = private.iterdir()
        files.append((entry / "tokenizer.json").read_bytes())
    barrier.wait()  # both processes start building the shared entry at once
    shared = TokenizerSettings(vocab_size=300, cache_dir=str(Path(root) / "shared"))
    return files, len(get_tokenizer(texts[:300], shared, max_length=64))


@pytest.mark.slow
def test_fresh_processes_learn_the_same_files_and_build_one_cache_entry_safely(train_texts, minilm_dir, tmp_path):
    """The same texts give the same tokenizer.json in any process (from scratch, on MiniLM's pipeline, and with
    characters that do not fit), and two processes building the same cache entry at once leave one valid entry and no
    half-written leftovers."""
    context = mp.get_context("spawn")  # fresh interpreters, each with its own hash seed
    with context.Manager() as manager, context.Pool(2) as pool:
        barrier = manager.Barrier(2)
        (files, size), (other_files, other_size) = pool.starmap(
            learn_in_a_fresh_process, [(tmp_path, train_texts[:400], str(minilm_dir), barrier)] * 2)
    assert files == other_files
    assert size == other_size == 300
    entries = os.listdir(tmp_path / "shared")
    assert len(entries) == 1 and not entries[0].startswith(".")
    assert len(cache.load_tokenizer(tmp_path / "shared" / entries[0], 64)) == 300


def test_a_cache_entry_is_written_under_a_private_name_and_appears_only_whole(tmp_path, monkeypatch):
    """The tokenizer cache is safe when parallel jobs build it at the same moment: each builds under a private name and
    renames it into place. While the tokenizer's files are written, the entry's own name does not exist, so a job that
    looks for it finds none or a whole one; then it is there, and nothing else."""
    texts = ["the cat sat on the mat", "a dog sat on a log"] * 5
    settings = TokenizerSettings(vocab_size=60, cache_dir=str(tmp_path))
    entry = tmp_path / cache.cache_key(texts, 60, None)
    saved, real_train = [], wordpiece.train_tokenizer

    def train(*args, **kwargs):
        tokenizer = real_train(*args, **kwargs)
        real_save = tokenizer.save_pretrained

        def save(folder, *args, **kwargs):
            result = real_save(folder, *args, **kwargs)
            saved.append((Path(folder), entry.exists()))  # its files all written: is the entry visible yet?
            return result

        tokenizer.save_pretrained = save
        return tokenizer

    monkeypatch.setattr(cache, "train_tokenizer", train)
    tokenizer = cache.get_tokenizer(texts, settings, max_length=64)
    ((folder, visible),) = saved
    assert folder.parent == tmp_path and folder != entry and not visible
    assert os.listdir(tmp_path) == [entry.name] and not folder.exists()  # renamed into place, no leftovers
    assert cache.load_tokenizer(entry, 64).get_vocab() == tokenizer.get_vocab()  # the entry is the whole tokenizer


def test_two_jobs_building_the_same_cache_entry_at_once_each_build_under_a_name_of_their_own(tmp_path, monkeypatch):
    """The tokenizer cache is safe when parallel jobs build it at the same moment: each builds under a private name and
    renames it into place. A second job asks for the same entry while the first is training it: the two write into two
    different folders (one shared name would let a job rename the other's half-written files into place), and one
    whole entry is left, with nothing beside it."""
    texts = ["the cat sat on the mat", "a dog sat on a log"] * 5
    settings = TokenizerSettings(vocab_size=60, cache_dir=str(tmp_path))
    entry = tmp_path / cache.cache_key(texts, 60, None)
    saved, jobs, real_train = [], [], wordpiece.train_tokenizer

    def train(*args, **kwargs):
        tokenizer = real_train(*args, **kwargs)
        real_save = tokenizer.save_pretrained

        def save(folder, *args, **kwargs):
            saved.append(Path(folder))
            return real_save(folder, *args, **kwargs)

        tokenizer.save_pretrained = save
        jobs.append(tokenizer)
        if len(jobs) == 1:  # the other job asks for the same entry meanwhile, and builds it to the end
            jobs.append(cache.get_tokenizer(texts, settings, max_length=64))
        return tokenizer

    monkeypatch.setattr(cache, "train_tokenizer", train)
    first = cache.get_tokenizer(texts, settings, max_length=64)
    assert len(saved) == 2 and saved[0] != saved[1] and entry not in saved
    assert os.listdir(tmp_path) == [entry.name]
    assert cache.load_tokenizer(entry, 64).get_vocab() == first.get_vocab() == jobs[-1].get_vocab()


def test_cache_key_follows_the_base_tokenizers_content_not_its_path(train_texts, minilm_dir, tmp_path):
    copy = tmp_path / "minilm"
    shutil.copytree(minilm_dir, copy)
    texts = train_texts[:10]
    assert cache.cache_key(texts, 500, str(copy)) == cache.cache_key(texts, 500, str(minilm_dir))
    # Every file that may build it: tokenizer_config.json, and vocab.txt (without tokenizer.json, transformers builds
    # a BERT tokenizer from vocab.txt, its special tokens' ids included).
    for name in ("tokenizer_config.json", "vocab.txt"):
        changed = tmp_path / f"changed-{name}"
        shutil.copytree(minilm_dir, changed)
        with (changed / name).open("a") as f:
            f.write(" ")
        assert cache.cache_key(texts, 500, str(changed)) != cache.cache_key(texts, 500, str(minilm_dir)), name
    assert cache.cache_key(texts, 500, None) != cache.cache_key(texts, 500, str(minilm_dir))


def test_long_texts_encode_exactly_as_the_whole_text_would(trained, train_texts):
    """encode tokenizes a prefix of a very long text; the ids must be the whole text's, truncated."""
    # The fifth: at max_length 32 its 512-character prefix holds 25 tokens (3 [UNK] words of 120 characters and 20
    # "the"), fewer than 32 but more than half, so only tokenizing the whole text again gives its 32 ids
    # (a long text is tokenized from a prefix that gives exactly the same ids; round 26b: redoing only prefixes of
    # fewer than half the tokens passed).
    long_texts = [" ".join(train_texts[:40]), "x" * 20_000 + " end", " ".join(train_texts[:3]) + " " + "y" * 9000,
                  "short text", ("z" * 120 + " ") * 3 + "the " * 20 + "z" * 120 + " the" * 50]
    for max_length in (32, 128):
        got = [x.tolist() for x in encoding.encode(trained, long_texts, max_length)]
        whole = trained(long_texts, truncation=True, max_length=max_length)["input_ids"]
        assert got == whole
    assert len(long_texts[0]) > 100 * 16  # the prefix path was taken


def test_texts_are_encoded_a_thousand_at_a_time_into_int32_arrays(trained, train_texts):
    """Texts are encoded a thousand at a time into int32 arrays (a list of Python ints, or int64, takes far more memory
    on a large corpus): 2100 texts in three calls of 1000, 1000 and 100, each text's ids an int32 array holding what the
    tokenizer gives it alone."""
    texts = [" ".join(text.split()[i % 7 : i % 7 + 12]) for i, text in enumerate(train_texts * 3)][:2100]
    calls = []

    def recording(batch, **kwargs):  # encode calls the tokenizer on a batch of texts (their prefixes), nothing else
        calls.append(len(batch))
        return trained(batch, **kwargs)

    ids = encoding.encode(recording, texts, 16)
    assert calls == [1000, 1000, 100]
    assert all(isinstance(row, np.ndarray) and row.dtype == np.int32 for row in ids)
    assert [row.tolist() for row in ids] == trained(texts, truncation=True, max_length=16)["input_ids"]


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


def test_a_null_vocabulary_size_holds_every_word_and_character_that_occurs_min_frequency_times():
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
    """The vocabulary holds a token for every word that occurs tokenizer.min_frequency times, and every character (and
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
