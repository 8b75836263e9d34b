"""Trained tokenizers, cached by everything that decides them (the texts, the settings, the libraries, the base
tokenizer's files), and loaded from a run folder or the cache."""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path

import tokenizers
import transformers
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from mha_textclf.errors import UserError
from mha_textclf.runs.files import write_atomically
from mha_textclf.settings import TokenizerSettings
from mha_textclf.tokenizer.wordpiece import train_tokenizer

# Bump when the way tokenizers are built changes, so stale cache entries are not reused (2: learn_wordpiece). Not
# bumped for alphabets that do not fit (see `choose_alphabet`): every tokenizer that was built before is built the same
# way now, and those that are new were refused before, so no entry of theirs exists.
CACHE_FORMAT = 2


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
        # A concurrent run sees either no entry or a complete one; where another process finished the same entry
        # first (the rename fails), theirs is as good as ours.
        with contextlib.suppress(OSError):
            write_atomically(entry, tokenizer.save_pretrained)
    return load_tokenizer(entry, max_length)


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


def load_tokenizer(path: str | Path, max_length: int) -> PreTrainedTokenizerBase:
    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "vocab.txt").is_file():
        raise UserError(f"No tokenizer in {path} (expected tokenizer.json); retrain it by running train again.")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    tokenizer.model_max_length = max_length
    return tokenizer
