"""tokenizer/cache.py: the tokenizer cache (its key, where it lives, entries written under a private
name, parallel jobs building one entry) and load_tokenizer."""

import multiprocessing as mp
import os
import shutil
from pathlib import Path

import pytest

from mha_textclf.errors import UserError
from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer import cache, encoding, wordpiece


@pytest.mark.slow
def test_save_load_round_trip(trained, train_texts, tmp_path):
    trained.save_pretrained(tmp_path / "tokenizer")
    loaded = cache.load_tokenizer(tmp_path / "tokenizer", max_length=256)
    assert [x.tolist() for x in encoding.encode(loaded, train_texts[:20], 256)] == [
        x.tolist() for x in encoding.encode(trained, train_texts[:20], 256)]
    assert loaded.pad_token_id == 0 and len(loaded) == len(trained)


@pytest.mark.slow
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


@pytest.mark.slow
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


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="No tokenizer"):
        cache.load_tokenizer(tmp_path, max_length=512)


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


@pytest.mark.slow
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
