"""Learn, cache and load the WordPiece tokenizer (BERT-uncased style; its size grows with the corpus unless set, 1000
tokens on bbc-news), deterministically."""

from __future__ import annotations

import hashlib
import heapq
import itertools
import json
import logging
import os
import shutil
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

import numpy as np
import tokenizers
import transformers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
from tqdm.auto import tqdm
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from mha_textclf.errors import UserError
from mha_textclf.settings import TokenizerSettings

log = logging.getLogger(__name__)

# [PAD] first so that its id is 0, the padding_idx the embedding expects.
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
# Bump when the way tokenizers are built changes, so stale cache entries are not reused (2: learn_wordpiece). Not
# bumped for alphabets that do not fit (see `choose_alphabet`): every tokenizer that was built before is built the same
# way now, and those that are new were refused before, so no entry of theirs exists.
CACHE_FORMAT = 2
# When the characters of the training texts do not all fit in the vocabulary, they (with their ## forms) take at most
# this share of it, and merges the rest. Merges are what make a vocabulary more than an alphabet: they keep sequences
# short and give frequent words a token of their own. Half keeps both. On the Chinese reviews (4132 characters), a
# 1000-token vocabulary keeps the 471 most frequent, 84% of the characters' occurrences; that script would be better
# served by more characters and fewer merges (each of its characters is a word of its own), but better still by a
# vocabulary that holds them all, which the [UNK] warning names.
ALPHABET_SHARE = 0.5
# A split whose tokens are [UNK] more often than this gets a warning. With every character in the vocabulary the rate
# is at most 0.03% on the corpora of scripts/fetch_corpora.py and bbc-news, 0.14% on the Chinese reviews (characters
# the training texts never have); with characters cut, 5.7% (Chinese, 2000 tokens) and more. 1% lies well between.
UNKNOWN_RATE_WARNING = 0.01


def cache_root(cache_dir: str | None) -> Path:
    """tokenizer.cache_dir, or by default $MHA_TEXTCLF_CACHE, or ~/.cache/mha-textclf."""
    return Path(cache_dir or os.environ.get("MHA_TEXTCLF_CACHE") or "~/.cache/mha-textclf").expanduser()


def get_tokenizer(texts: list[str], settings: TokenizerSettings, max_length: int) -> PreTrainedTokenizerBase:
    """The tokenizer trained on `texts`, from the cache when it was built before with the same corpus and settings."""
    cache_dir = cache_root(settings.cache_dir)
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"The tokenizer cache {cache_dir} cannot be created ({e.strerror}); point "
                        "tokenizer.cache_dir (or MHA_TEXTCLF_CACHE) at a writable folder.") from e
    entry = cache_dir / cache_key(texts, settings.vocab_size, settings.base)
    if not entry.is_dir():
        tokenizer = train_tokenizer(texts, settings.vocab_size, settings.base)
        # Build under a private name, then rename: a concurrent run sees either no entry or a complete one.
        tmp = _private_name(entry)
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(entry)
        except OSError:  # another process finished the same entry first; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    return load_tokenizer(entry, max_length)


def _private_name(path: Path) -> Path:
    """A name beside `path` that no other process uses: build there, then rename onto `path`."""
    return path.with_name(f".tmp-{path.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}")


# The least an automatic vocabulary holds: what bbc-news was tuned with, and room for common subwords on a small
# corpus.
AUTO_VOCAB_FLOOR = 1000
AUTO_CHARACTER_COVERAGE = 0.995


def resolve_vocab_size(texts: list[str], settings: TokenizerSettings) -> tuple[TokenizerSettings, str | None]:
    """The settings with tokenizer.vocab_size decided (unchanged when set), and why, for the log and metrics.json.

    null means: a token for every word that occurs min_frequency times or more in the training texts (an embedding
    seen that often is learned; rarer words are better left to subwords), plus every character and `##` character
    that occurs as often (and at least the most frequent characters that make up 99.5% of all of theirs), with room
    for the characters to take no more than half the vocabulary (where each character is a word, as in Chinese, they
    are the vocabulary), rounded up to hundreds, and at least AUTO_VOCAB_FLOOR. 20 Newsgroups (8,469 training
    posts) gets 8,500 tokens, the Chinese reviews 5,100, tweets 1,000 (docs/own-data.md has the measurements).

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
        tmp = _private_name(memo)
        tmp.write_text(json.dumps([size, why]))
        tmp.replace(memo)  # whole or absent, for a concurrent run
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


def cache_key(texts: list[str], vocab_size: int | str, base: str | None) -> str:
    """A name for everything that decides the trained tokenizer: the texts, the settings, the libraries that train
    it, and the base tokenizer's own files (their content, not their path: a moved copy is the same tokenizer)."""
    h = hashlib.sha256()
    for part in (f"format={CACHE_FORMAT}", f"tokenizers={tokenizers.__version__}",
                 f"transformers={transformers.__version__}", f"vocab={vocab_size}", f"base={_base_id(base)}", *texts):
        h.update(part.encode())
        h.update(b"\0")
    return f"wordpiece-{vocab_size}-{h.hexdigest()[:16]}"


def _base_id(base: str | None) -> str:
    folder = Path(base).expanduser() if base else None
    if folder is None or not folder.is_dir():
        return str(base)  # null, or a hub id
    h = hashlib.sha256()
    for file in sorted(p for p in folder.iterdir() if p.is_file() and p.suffix in (".json", ".txt")):
        h.update(file.name.encode() + b"\0" + file.read_bytes() + b"\0")
    return f"folder:{h.hexdigest()}"


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


def load_tokenizer(path: str | Path, max_length: int) -> PreTrainedTokenizerBase:
    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "vocab.txt").is_file():
        raise UserError(f"No tokenizer in {path} (expected tokenizer.json); retrain it by running train again.")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    tokenizer.model_max_length = max_length
    return tokenizer


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
CHARS_PER_TOKEN = 16  # a prefix this many characters per token nearly always holds max_length tokens


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
        prefixes = [_prefix(text, max_length * CHARS_PER_TOKEN) for text in batch]
        ids = tokenizer(prefixes, truncation=True, max_length=max_length)["input_ids"]
        short = [i for i, (text, prefix) in enumerate(zip(batch, prefixes, strict=True))
                 if prefix is not text and len(ids[i]) < max_length]
        if short:
            redone = tokenizer([batch[i] for i in short], truncation=True, max_length=max_length)["input_ids"]
            for i, row in zip(short, redone, strict=True):
                ids[i] = row
        out += [np.asarray(row, dtype=np.int32) for row in ids]
    return out


def _prefix(text: str, limit: int) -> str:
    """`text` cut at its last whitespace before `limit` characters (the text itself when it is shorter)."""
    if len(text) <= limit:
        return text
    cut = max(text.rfind(space, 0, limit) for space in " \n\t\r")
    return text[:cut] if cut > 0 else text
