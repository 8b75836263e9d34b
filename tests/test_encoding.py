"""tokenizer/encoding.py: texts to token ids (truncated, long texts from a prefix, a thousand at a time),
the [UNK] warning and the characters the vocabulary lacks."""

import numpy as np
import pytest

from mha_textclf.errors import UserError
from mha_textclf.tokenizer import encoding, wordpiece


@pytest.mark.slow
def test_truncation_at_max_length(trained, train_texts):
    ids = encoding.encode(trained, train_texts[:50], max_length=128)
    assert max(map(len, ids)) == 128  # bbc articles are far longer than 128 wordpieces
    assert all(seq[0] == trained.cls_token_id and seq[-1] == trained.sep_token_id for seq in ids)


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


@pytest.mark.slow
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


@pytest.mark.slow
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
