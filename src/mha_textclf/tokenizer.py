"""Train, cache and load the 1000-token WordPiece tokenizer (BERT-uncased style)."""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from pathlib import Path

import tokenizers
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from mha_textclf.errors import UserError
from mha_textclf.settings import TokenizerSettings

# [PAD] first so that its id is 0, the padding_idx the embedding expects.
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CACHE_FORMAT = 1  # bump when the way tokenizers are built changes, so stale cache entries are not reused


def cache_root(cache_dir: str | None) -> Path:
    """tokenizer.cache_dir, or by default $MHA_TEXTCLF_CACHE, or ~/.cache/mha-textclf."""
    return Path(cache_dir or os.environ.get("MHA_TEXTCLF_CACHE") or "~/.cache/mha-textclf").expanduser()


def get_tokenizer(texts: list[str], settings: TokenizerSettings, max_length: int) -> PreTrainedTokenizerBase:
    """The tokenizer trained on `texts`, from the cache when it was built before with the same corpus and settings."""
    cache_dir = cache_root(settings.cache_dir)
    cache_dir.mkdir(parents=True, exist_ok=True)
    entry = cache_dir / cache_key(texts, settings.vocab_size, settings.base)
    if not entry.is_dir():
        tokenizer = train_tokenizer(texts, settings.vocab_size, settings.base)
        # Build under a private name, then rename: a concurrent run sees either no entry or a complete one.
        tmp = cache_dir / f".tmp-{entry.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(entry)
        except OSError:  # another process finished the same entry first; theirs is as good as ours
            shutil.rmtree(tmp, ignore_errors=True)
    return load_tokenizer(entry, max_length)


def cache_key(texts: list[str], vocab_size: int, base: str | None) -> str:
    h = hashlib.sha256()
    base_id = str(Path(base).expanduser().resolve()) if base and Path(base).expanduser().exists() else str(base)
    for part in (f"format={CACHE_FORMAT}", f"tokenizers={tokenizers.__version__}", f"vocab={vocab_size}",
                 f"base={base_id}", *texts):
        h.update(part.encode())
        h.update(b"\0")
    return f"wordpiece-{vocab_size}-{h.hexdigest()[:16]}"


def train_tokenizer(texts: list[str], vocab_size: int, base: str | None = None) -> PreTrainedTokenizerBase:
    """From scratch (base=None) or by retraining `base` (hub id or folder) with `train_new_from_iterator`."""
    if base is None:
        return _train_wordpiece(texts, vocab_size)
    local = Path(base).expanduser()
    try:
        base_tokenizer = AutoTokenizer.from_pretrained(str(local) if local.exists() else base)
    except Exception as e:
        raise UserError(f"Could not load tokenizer.base={base!r}: {type(e).__name__}: {e}\nGive a local folder "
                        "with tokenizer.json (e.g. ../shared/tokenizers/all-MiniLM-L6-v2), or null to train from "
                        "scratch.") from e
    return _check_size(base_tokenizer.train_new_from_iterator(texts, vocab_size=vocab_size), vocab_size)


def _check_size(tokenizer: PreTrainedTokenizerBase, vocab_size: int) -> PreTrainedTokenizerBase:
    # WordPiece keeps every character of the corpus (and its ## form) whatever vocab_size says: below that floor
    # the trainer silently returns a larger vocabulary than asked for.
    if len(tokenizer) > vocab_size:
        raise UserError(f"tokenizer.vocab_size={vocab_size} is smaller than the special tokens plus the characters "
                        f"of the training texts need ({len(tokenizer)} tokens); use tokenizer.vocab_size="
                        f"{len(tokenizer)} or more.")
    return tokenizer


def _train_wordpiece(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False)
    tokenizer.train_from_iterator(texts, trainer)
    cls_id, sep_id = (tokenizer.token_to_id(t) for t in ("[CLS]", "[SEP]"))
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return _check_size(PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]",
        mask_token="[MASK]",
    ), vocab_size)


def load_tokenizer(path: str | Path, max_length: int) -> PreTrainedTokenizerBase:
    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "vocab.txt").is_file():
        raise UserError(f"No tokenizer in {path} (expected tokenizer.json); retrain it by running train again.")
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    tokenizer.model_max_length = max_length
    return tokenizer


def encode(tokenizer: PreTrainedTokenizerBase, texts: list[str], max_length: int) -> list[list[int]]:
    """Token ids per text: [CLS] first, [SEP] last, truncated to max_length, unpadded (batches pad dynamically)."""
    return tokenizer(texts, truncation=True, max_length=max_length)["input_ids"]
