"""The WordPiece tokenizer: size, special tokens, truncation, save/load, both training modes, the cache."""

import pytest

from mha_textclf import tokenizer as tok
from mha_textclf.errors import UserError
from mha_textclf.settings import TokenizerSettings


@pytest.fixture(scope="module", params=["scratch", "minilm"])
def trained(request, train_texts, minilm_dir):
    base = None if request.param == "scratch" else str(minilm_dir)
    return tok.train_tokenizer(train_texts, vocab_size=1000, base=base)


def test_vocabulary_and_special_tokens(trained):
    assert len(trained) <= 1000
    assert trained.convert_tokens_to_ids("[PAD]") == trained.pad_token_id == 0
    for token in tok.SPECIAL_TOKENS:
        assert trained.convert_tokens_to_ids(token) != trained.unk_token_id or token == "[UNK]"


def test_uncased_wordpiece_with_cls_and_sep(trained):
    ids = tok.encode(trained, ["The Prime Minister said", "the prime minister said"], max_length=512)
    assert ids[0] == ids[1]  # lowercased
    assert ids[0][0] == trained.cls_token_id and ids[0][-1] == trained.sep_token_id
    assert trained.pad_token_id not in ids[0]
    assert any(t.startswith("##") for t in trained.convert_ids_to_tokens(tok.encode(trained, ["unbelievably"], 64)[0]))


def test_truncation_at_max_length(trained, train_texts):
    ids = tok.encode(trained, train_texts[:50], max_length=128)
    assert max(map(len, ids)) == 128  # bbc articles are far longer than 128 wordpieces
    assert all(seq[0] == trained.cls_token_id and seq[-1] == trained.sep_token_id for seq in ids)


def test_save_load_round_trip(trained, train_texts, tmp_path):
    trained.save_pretrained(tmp_path / "tokenizer")
    loaded = tok.load_tokenizer(tmp_path / "tokenizer", max_length=256)
    assert tok.encode(loaded, train_texts[:20], 256) == tok.encode(trained, train_texts[:20], 256)
    assert loaded.pad_token_id == 0 and len(loaded) == len(trained)


def test_cache_reuses_and_keys_by_corpus_and_settings(train_texts, tmp_path, monkeypatch):
    texts = train_texts[:200]
    settings = TokenizerSettings(vocab_size=500, cache_dir=str(tmp_path))
    first = tok.get_tokenizer(texts, settings, max_length=64)
    entries = sorted(p.name for p in tmp_path.iterdir())
    assert len(entries) == 1 and not entries[0].startswith(".tmp")

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been reused")

    monkeypatch.setattr(tok, "train_tokenizer", no_training)
    again = tok.get_tokenizer(texts, settings, max_length=64)
    assert again.get_vocab() == first.get_vocab()
    assert tok.cache_key(texts, 500, None) != tok.cache_key(texts, 400, None)
    assert tok.cache_key(texts, 500, None) != tok.cache_key(texts[1:], 500, None)


def test_vocab_too_small_is_a_clear_error(train_texts):
    with pytest.raises(UserError, match="vocab_size=3"):
        tok.train_tokenizer(train_texts[:10], vocab_size=3)


def test_missing_tokenizer_folder_is_a_clear_error(tmp_path):
    with pytest.raises(UserError, match="No tokenizer"):
        tok.load_tokenizer(tmp_path, max_length=512)
