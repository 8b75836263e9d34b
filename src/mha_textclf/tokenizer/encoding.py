"""Texts to token ids as the model sees them (truncated, unpadded), and how many of them are [UNK]."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from tqdm.auto import tqdm
from transformers import PreTrainedTokenizerBase

from mha_textclf.tokenizer.prefix import text_prefix
from mha_textclf.tokenizer.wordpiece import count_words

# A split whose tokens are [UNK] more often than this gets a warning. With every character in the vocabulary the rate
# is at most 0.03% on the corpora of scripts/fetch_corpora.py and bbc-news, 0.14% on the Chinese reviews (characters
# the training texts never have); with characters cut, 5.7% (Chinese, 2000 tokens) and more. 1% lies well between.
UNKNOWN_RATE_WARNING = 0.01


def unknown_rate(tokenizer: PreTrainedTokenizerBase, encodings: Iterable[np.ndarray]) -> float:
    """The share of the tokens that are [UNK] in `encodings` (a split, as `encode` gives it: truncated, what the model
    sees), [CLS], [SEP] and [PAD] not counted; 0 for a split without tokens."""
    framing = [i for i in (tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.pad_token_id) if i is not None]
    tokens = unknown = 0
    for ids in encodings:
        tokens += len(ids) - int(np.isin(ids, framing).sum())
        unknown += int(np.count_nonzero(ids == tokenizer.unk_token_id))
    return unknown / tokens if tokens else 0.0


def unknown_rate_warning(tokenizer: PreTrainedTokenizerBase, rates: dict[str, float],
                         train_texts: list[str]) -> str | None:
    """What to say when a split's [UNK] rate is above UNKNOWN_RATE_WARNING (None when none is): the setting that puts
    every character of the training texts in the vocabulary, or, when they are all there already, that no vocabulary
    size helps."""
    high = {split: rate for split, rate in rates.items() if rate > UNKNOWN_RATE_WARNING}
    if not high:
        return None
    shown = ", ".join(f"{rate:.2%} of the {split} tokens" for split, rate in high.items())
    missing = missing_alphabet(tokenizer, train_texts)
    model = tokenizer.backend_tokenizer.model
    if missing:
        # Every character and as many merges as now: the vocabulary learned at that size holds both.
        characters = {t.removeprefix(model.continuing_subword_prefix) for t in missing}
        return (f"[UNK] is {shown}: {len(characters)} characters of the training texts are not in the "
                f"{len(tokenizer)}-token vocabulary. Use tokenizer.vocab_size={len(tokenizer) + len(missing)} (or "
                "more), where every character fits.")
    return (f"[UNK] is {shown}, though every character of the training texts is in the vocabulary: the others are "
            f"characters the training texts never have, or words of more than {model.max_input_chars_per_word} "
            "characters. A larger tokenizer.vocab_size does not change that; training texts that have them do.")


def missing_alphabet(tokenizer: PreTrainedTokenizerBase, texts: list[str]) -> list[str]:
    """The characters of `texts` (as the tokenizer normalises and splits them) and `##` forms that its vocabulary
    lacks: those that did not fit when it was learned."""
    backend = tokenizer.backend_tokenizer
    model = backend.model
    words = [w for w in count_words(texts, backend) if len(w) <= model.max_input_chars_per_word]
    prefix, vocab = model.continuing_subword_prefix, tokenizer.get_vocab()
    wanted = {c for w in words for c in w} | {prefix + c for w in words for c in w[1:]}
    return sorted(t for t in wanted if t not in vocab)


ENCODE_BATCH = 1000  # texts per call: the tokenizer's own threads get work, memory stays a batch's worth


def encode(tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int) -> list[np.ndarray]:
    """Token ids per text: [CLS] first, [SEP] last, truncated to max_length, unpadded (batches pad dynamically),
    as int32 arrays (a list of Python ints would take ten times the memory on a large corpus).

    A text much longer than max_length tokens is tokenized from a prefix cut at a space. Tokenization works word by
    word, so the prefix's tokens are the text's first tokens: when the prefix alone fills max_length, the result is
    exactly the whole text's, at a fraction of the cost for a 100,000-character text. Otherwise the whole text is
    tokenized.
    """
    out = []
    for start in tqdm(range(0, len(texts), ENCODE_BATCH), desc="encoding", unit_scale=ENCODE_BATCH, delay=2,
                      disable=None, leave=False):
        batch = texts[start : start + ENCODE_BATCH]
        prefixes = [text_prefix(text, max_length) for text in batch]
        ids = tokenizer(prefixes, truncation=True, max_length=max_length)["input_ids"]
        short = [i for i, (text, prefix) in enumerate(zip(batch, prefixes, strict=True))
                 if prefix is not text and len(ids[i]) < max_length]
        if short:
            redone = tokenizer([batch[i] for i in short], truncation=True, max_length=max_length)["input_ids"]
            for i, row in zip(short, redone, strict=True):
                ids[i] = row
        out += [np.asarray(row, dtype=np.int32) for row in ids]
    return out

