"""Learn a WordPiece vocabulary (BERT-uncased style, or inside a base tokenizer's own pipeline), deterministically:
the same texts give the same tokens, in the same order, in every process."""

from __future__ import annotations

import heapq
import itertools
import json
import logging
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from mha_textclf.errors import UserError

log = logging.getLogger("mha_textclf.tokenizer")


# [PAD] first so that its id is 0, the padding_idx the embedding expects.
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


# When the characters of the training texts do not all fit in the vocabulary, they (with their ## forms) take at most
# this share of it, and merges the rest. Merges are what make a vocabulary more than an alphabet: they keep sequences
# short and give frequent words a token of their own. Half keeps both. On the Chinese reviews (4132 characters), a
# 1000-token vocabulary keeps the 471 most frequent, 84% of the characters' occurrences; that script would be better
# served by more characters and fewer merges (each of its characters is a word of its own), but better still by a
# vocabulary that holds them all, which the [UNK] warning names.
ALPHABET_SHARE = 0.5


def train_tokenizer(texts: list[str], vocab_size: int, base: str | None = None) -> PreTrainedTokenizerFast:
    """A WordPiece vocabulary learned on `texts`, inside a BERT-uncased pipeline (base=None) or inside `base`'s own
    (a hub id or folder of a WordPiece tokenizer: its normalizer, pre-tokenizer, special tokens and templates)."""
    spec, special_tokens = _pipeline(base)
    backend = Tokenizer.from_str(json.dumps(spec))
    specials = [t["content"] for t in sorted(spec["added_tokens"], key=lambda t: t["id"]) if t["special"]]
    model = spec["model"]
    vocab = learn_wordpiece(count_words(texts, backend), vocab_size, specials, model["continuing_subword_prefix"],
                            model["max_input_chars_per_word"])
    return PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_str(json.dumps(_with_vocabulary(spec, vocab))),
                                   **special_tokens)


def _pipeline(base: str | None) -> tuple[dict, dict[str, str]]:
    """The serialised tokenizer to learn a vocabulary for (its model's vocabulary still the base's, or specials
    only), and its special tokens by role (unk_token, pad_token, ...)."""
    if base is None:
        tokenizer = Tokenizer(models.WordPiece(vocab={t: i for i, t in enumerate(SPECIAL_TOKENS)}, unk_token="[UNK]"))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        tokenizer.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
            special_tokens=[(t, SPECIAL_TOKENS.index(t)) for t in ("[CLS]", "[SEP]")])
        tokenizer.add_special_tokens(SPECIAL_TOKENS)
        roles = dict(zip(["pad_token", "unk_token", "cls_token", "sep_token", "mask_token"], SPECIAL_TOKENS,
                         strict=True))
        return json.loads(tokenizer.to_str()), roles
    local = Path(base).expanduser()
    try:
        base_tokenizer = AutoTokenizer.from_pretrained(str(local) if local.exists() else base)
        spec = json.loads(base_tokenizer.backend_tokenizer.to_str())
    except Exception as e:
        raise UserError(f"Could not load tokenizer.base={base!r}: {type(e).__name__}: {e}\nGive a local folder "
                        "with tokenizer.json (e.g. ../shared/tokenizers/all-MiniLM-L6-v2), or null to train from "
                        "scratch.") from e
    if spec["model"]["type"] != "WordPiece":
        raise UserError(f"tokenizer.base={base!r} is a {spec['model']['type']} tokenizer; this pipeline learns "
                        "WordPiece vocabularies, so give a WordPiece (BERT-style) tokenizer, or null.")
    return spec, base_tokenizer.special_tokens_map


def count_words(texts: Iterable[str], backend: Tokenizer) -> Counter[str]:
    """How often each word occurs, words as the tokenizer's normalizer and pre-tokenizer make them."""
    words = Counter()
    for text in tqdm(texts, desc="counting words", delay=2, disable=None, leave=False):
        normalized = backend.normalizer.normalize_str(text) if backend.normalizer else text
        pieces = backend.pre_tokenizer.pre_tokenize_str(normalized) if backend.pre_tokenizer else [(normalized, 0)]
        words.update(word for word, _ in pieces)
    return words


def learn_wordpiece(words: Counter[str], vocab_size: int, specials: list[str], prefix: str = "##",
                    max_word_length: int = 100) -> list[str]:
    """The WordPiece vocabulary, learned by the algorithm of the tokenizers library's WordPiece trainer (merge the
    most frequent pair of adjacent symbols, as BPE does, until the vocabulary is full), but with ties broken by the
    tokens' text.

    The library breaks ties by token id, and numbers the `##` tokens in hash-map order, which Rust seeds anew in
    every process: the same texts then give different vocabularies on small corpora and different ids on large ones
    (on bbc-news, 995 of 1000 tokens are the library's; the other 5 won ties the other way). Here the same words
    always give the same list: the special tokens; every character, in code-point order; the `##` form of every
    character that occurs inside a word, in code-point order; then each merged token in the order it was learned.
    When the characters do not all fit, only the most frequent are kept (`choose_alphabet`), and the words that hold
    any other learn no merges: they encode as [UNK] whatever the vocabulary holds.
    """
    words = {w: n for w, n in words.items() if len(w) <= max_word_length}  # longer words encode as [UNK] anyway
    alphabet = choose_alphabet(words, vocab_size, specials, prefix)
    vocab = specials + [t for t in alphabet if t not in specials]
    ids = {token: i for i, token in enumerate(vocab)}
    words = {w: n for w, n in words.items() if all(c in ids for c in w)}
    # Each distinct word as a list of symbol ids: its first character as is, the rest as continuations.
    symbols = [[ids[w[0]], *(ids[prefix + c] for c in w[1:])] for w in words]
    counts = list(words.values())
    pair_counts: Counter[tuple[int, int]] = Counter()
    where: dict[tuple[int, int], set[int]] = defaultdict(set)  # the words a pair occurs in (or once did)
    for i, word in enumerate(symbols):
        for pair in itertools.pairwise(word):
            pair_counts[pair] += counts[i]
            where[pair].add(i)
    # Max-heap of (count, pair) with lazy updates: every pair with a positive count has an entry at least as high
    # as its count (a rise pushes a new entry, a fall is noticed when the stale entry surfaces).
    heap = [(-n, vocab[a], vocab[b], a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)
    progress = tqdm(total=vocab_size, initial=len(vocab), desc="learning WordPiece", delay=2, disable=None, leave=False)
    while len(vocab) < vocab_size and heap:
        stale_count, _, _, a, b = heapq.heappop(heap)
        count = pair_counts[a, b]
        if count <= 0:
            continue
        if -stale_count != count:
            heapq.heappush(heap, (-count, vocab[a], vocab[b], a, b))
            continue
        token = vocab[a] + vocab[b].removeprefix(prefix)  # t + ##h -> th, ##e + ##r -> ##er
        if token not in ids:  # a token can be reached by two merge paths; it joins the vocabulary once
            ids[token] = len(vocab)
            vocab.append(token)
            progress.update()
        risen = set()
        for i in where.pop((a, b)):
            word, merged = symbols[i], _merge(symbols[i], a, b, ids[token])
            if merged is word:
                continue  # the pair has left this word through an earlier merge
            before = Counter(itertools.pairwise(word))
            after = Counter(itertools.pairwise(merged))
            for pair in before.keys() | after.keys():
                change = after[pair] - before[pair]
                pair_counts[pair] += change * counts[i]
                if change > 0:
                    risen.add(pair)
                    where[pair].add(i)
            symbols[i] = merged
        for x, y in sorted(risen):
            heapq.heappush(heap, (-pair_counts[x, y], vocab[x], vocab[y], x, y))
    progress.close()
    return vocab


def choose_alphabet(words: dict[str, int], vocab_size: int, specials: list[str], prefix: str = "##") -> list[str]:
    """The tokens a vocabulary starts from: characters in code-point order, then the `##` forms of those that occur
    inside a word, in code-point order.

    Every character of `words` when they all fit in `vocab_size` beside `specials`. Otherwise the most frequent
    characters (by occurrences in the words, times each word's count; ties to the lower code point, so that the
    choice is the same in every process) whose tokens, with their `##` forms, take at most ALPHABET_SHARE of
    `vocab_size`; the others become [UNK].
    """
    chars = sorted({c for w in words for c in w})
    inside = {c for w in words for c in w[1:]}
    every = chars + sorted(prefix + c for c in inside)
    if len(specials) + len([t for t in every if t not in specials]) <= vocab_size:
        return every
    frequency = Counter()
    for word, n in words.items():
        for c, times in Counter(word).items():
            frequency[c] += times * n
    budget = min(int(ALPHABET_SHARE * vocab_size), vocab_size - len(specials))
    kept, used = [], 0
    for c in sorted(chars, key=lambda c: (-frequency[c], c)):
        used += 1 + (c in inside)  # the character, and its ## form if it has one
        if used > budget:
            break
        kept.append(c)
    fits = len(specials) + len(every)
    if not kept:
        raise UserError(f"tokenizer.vocab_size={vocab_size} leaves no room for a character beside the "
                        f"{len(specials)} special tokens (when not every character fits, characters take at most "
                        f"{ALPHABET_SHARE:.0%} of it); use tokenizer.vocab_size={fits} or more, where every character "
                        "of the training texts fits.")
    alphabet = sorted(kept) + sorted(prefix + c for c in kept if c in inside)
    share = sum(frequency[c] for c in kept) / sum(frequency.values())
    log.info(f"tokenizer.vocab_size={vocab_size} holds {len(kept)} of the {len(chars)} characters of the training "
             f"texts (the most frequent, {share:.2%} of their occurrences); the others become [UNK].")
    return alphabet


def _merge(word: list[int], a: int, b: int, new: int) -> list[int]:
    """`word` with every (a, b), left to right, replaced by `new`; the same list object when it has none."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(new)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return out if len(out) < len(word) else word


def _with_vocabulary(spec: dict, vocab: list[str]) -> dict:
    """The serialised tokenizer with `vocab` as its model's vocabulary, every id that refers to it renumbered."""
    ids = {token: i for i, token in enumerate(vocab)}
    spec = json.loads(json.dumps(spec))
    spec["model"]["vocab"] = ids
    for token in spec["added_tokens"]:
        token["id"] = ids[token["content"]]
    processor = spec.get("post_processor") or {}
    for special in (processor.get("special_tokens") or {}).values():  # TemplateProcessing: "[CLS] $A [SEP]"
        special["ids"] = [ids[t] for t in special["tokens"]]
    for role in ("cls", "sep"):  # BertProcessing and RobertaProcessing: [token, id]
        if role in processor:
            processor[role][1] = ids[processor[role][0]]
    return spec
