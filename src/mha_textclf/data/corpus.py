"""Load a labelled text corpus in the shape it comes in (local files, a `save_to_disk` folder or a hub id), and settle
its splits and classes: texts and class indices for train, validation and test, class names from the data."""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import re
from collections import Counter, defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mha_textclf.errors import UserError
from mha_textclf.settings import SEPARATORS, DataSettings

log = logging.getLogger("mha_textclf.data")


# The names a dataset may give its splits; the first is ours.
SPLIT_NAMES = {"train": ("train",), "val": ("validation", "valid", "val", "dev"), "test": ("test",)}


# datasets' builder (and its options) for each file type a local dataset may come in; compressed ones too.
FILE_FORMATS = {".jsonl": ("json", {}), ".json": ("json", {}), ".csv": ("csv", {}), ".tsv": ("csv", {"sep": "\t"}),
                ".parquet": ("parquet", {})}


COMPRESSIONS = (".gz", ".bz2", ".xz")


KINDS = "a .jsonl, .json, .csv, .tsv or .parquet file (compressed with gzip, bzip2 or xz too)"


# How many classes an error lists, so that a column of thousands of values does not fill the screen.
SHOWN_CLASSES = 10


# A carved test split is the same texts for every run seed: seeds vary the model, not what it is tested on.
TEST_SPLIT_SEED = 0


@dataclass
class Split:
    texts: list[str]
    labels: list[int]  # class indices 0..n_classes-1

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class Corpus:
    train: Split
    val: Split
    test: Split
    class_names: list[str]  # class_names[i] names class index i
    name: str = ""  # the dataset's short name (dataset_name)
    sources: dict[str, str] = field(default_factory=dict)  # split -> where it came from

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "val": self.val, "test": self.test}


def dataset_name(path: str) -> str:
    """A short name for the dataset at `path`: a local folder or file by its name, a hub id as it is."""
    local = Path(path).expanduser()
    if local.is_file():
        return re.sub(r"(\.[a-z0-9]+)+$", "", local.name)  # reviews.csv.bz2 -> reviews
    return local.resolve().name if local.is_dir() else path


def load_corpus(settings: DataSettings, seed: int) -> Corpus:
    """The dataset at `settings.path` as train, validation and test texts with class indices.

    Splits the dataset has are used as they are; without a test split, `test_fraction` of train is carved off
    first (stratified, the same texts for every seed), then without a validation split `val_fraction` of the rest
    (stratified, with `seed`). Class names come from the data (see `_classes`), in an order that is the same for
    every run on it.
    """
    path = settings.path
    raw = _load(path, settings.name, settings.separator)
    columns = [settings.text_column] if isinstance(settings.text_column, str) else list(settings.text_column)
    twice = [[n for n in names if n in raw] for names in SPLIT_NAMES.values()]
    twice = [names for names in twice if len(names) > 1]
    if twice:
        raise UserError(f"The dataset {path!r} has splits {twice[0]}, which are the same split by name; keep one "
                        "(remove or rename the other's files).")
    found = {ours: next((raw[n] for n in names if n in raw), None) for ours, names in SPLIT_NAMES.items()}
    sources = {ours: next((f"{n} split" for n in names if n in raw), "") for ours, names in SPLIT_NAMES.items()}
    if found["train"] is None:
        raise UserError(f"The dataset {path!r} has no train split (it has {sorted(raw)}); name its training data "
                        "train (train.csv, ...), or point data.path at that one file.")
    for split, dataset in found.items():
        if dataset is not None:
            _check_columns(dataset, columns, settings.label_column, split, path)
    class_names, labels = _classes({s: d for s, d in found.items() if d is not None}, settings.label_column, path)
    splits = {s: Split(_texts(d, columns), labels[s]) for s, d in found.items() if d is not None}
    for split, part in splits.items():  # rows as read, before any carving, so that the numbers find them
        empty = [i for i, text in enumerate(part.texts) if not text.strip()]
        if len(empty) == len(part):  # not one text to learn from or to test on: the wrong column, surely
            raise UserError(f"The {split} split of {path!r} has no text in {columns} in any of its {len(part)} rows. "
                            "Name the column of texts with data.text_column=<column>.")
        if empty:
            log.warning(f"The {split} split of {path!r} has {len(empty)} of {len(part)} rows with no text in "
                        f"{columns} (row{'s' if len(empty) > 1 else ''} {', '.join(str(i + 1) for i in empty[:5])}"
                        f"{', ...' if len(empty) > 5 else ''}, counting from 1): the model sees [CLS] alone for them. "
                        "Drop them, or name the text with data.text_column.")

    if "test" not in splits:
        splits["train"], splits["test"] = _carve(splits["train"], settings.test_fraction, TEST_SPLIT_SEED,
                                                 "test", "data.test_fraction", class_names, path)
        sources["test"] = (f"carved from the train split: {settings.test_fraction:.0%}, stratified by class, "
                           f"seed {TEST_SPLIT_SEED} for every run")
    if "val" not in splits:
        # Stratified so that the validation split has every class in its natural proportion for any seed.
        splits["train"], splits["val"] = _carve(splits["train"], settings.val_fraction, seed, "validation",
                                                "data.val_fraction", class_names, path)
        sources["val"] = f"carved from the train split: {settings.val_fraction:.0%}, stratified by class, seed {seed}"
    train, val, test = splits["train"], splits["val"], splits["test"]
    if settings.max_train_samples is not None and settings.max_train_samples < len(train):
        fraction = settings.max_train_samples / len(train)
        train = _subsample(train, settings.max_train_samples, seed)
        if settings.max_eval_samples is None:
            val = _subsample(val, math.ceil(fraction * len(val)), seed)
            test = _subsample(test, math.ceil(fraction * len(test)), TEST_SPLIT_SEED)
    if settings.max_eval_samples is not None:
        val = _subsample(val, settings.max_eval_samples, seed)
        test = _subsample(test, settings.max_eval_samples, TEST_SPLIT_SEED)
    if "carved" in sources["val"] + sources["test"]:
        sources["train"] += " minus what was carved from it"
    return Corpus(train, val, test, class_names, dataset_name(path), sources)


def source_fingerprint(path: str) -> str | None:
    """The SHA-256 of what loading a local corpus reads: each split's name and its files' bytes (of a save_to_disk
    folder, the files load_from_disk reads), so that a run can tell the same data moved or renamed from other data at
    the same path. None for a hub id or a path that cannot be read: loading it says what is wrong."""
    local = Path(path).expanduser()
    try:
        if local.is_dir() and _saved_by_datasets(local):
            splits = _saved_files(local)
        elif local.exists():
            splits = _local_files(local, quiet=True)[1]
        else:
            return None
        digest = hashlib.sha256()
        for split, paths in sorted(splits.items()):
            for file in sorted(Path(p) for p in paths):
                stat = file.stat()
                content = _file_digest(str(file.resolve()), stat.st_size, stat.st_mtime_ns)
                digest.update(f"{split}\0{content}\0".encode())
        return digest.hexdigest()
    except (UserError, OSError, ValueError, KeyError, TypeError):
        return None


def _saved_files(folder: Path) -> dict[str, list[Path]]:
    """What load_from_disk reads of a save_to_disk folder, by split: each split's state.json and the data files it
    lists (not the cache files that a .map() on a loaded copy leaves beside them)."""
    found = {}
    for state in sorted(folder.rglob("state.json")):
        if any(part.startswith(".") for part in state.relative_to(folder).parts):
            continue
        listed = [state.parent / entry["filename"] for entry in json.loads(state.read_text())["_data_files"]]
        found[str(state.parent.relative_to(folder))] = [state, *listed]
    return found


@functools.lru_cache(maxsize=256)
def _file_digest(path: str, size: int, mtime_ns: int) -> str:
    # Once per file and version in a process: a search's every trial, and a sweep's every job, start with this check.
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _carve(split: Split, fraction: float, seed: int, what: str, setting: str, class_names: list[str],
           path: str) -> tuple[Split, Split]:
    from sklearn.model_selection import train_test_split  # here: summaries read dataset_name without scikit-learn

    labels, texts = np.asarray(split.labels), np.arange(len(split))
    # A class with a single text cannot be on both sides: it stays in train (R52 has such topics), and the rest is
    # carved stratified as always (the same texts as before where no class is alone).
    alone = np.bincount(labels, minlength=len(class_names))[labels] == 1
    try:
        keep, carved = train_test_split(texts[~alone], test_size=fraction, random_state=seed,
                                        stratify=labels[~alone])
    except ValueError as e:  # fewer texts carved (or left) than classes to carve from
        sizes = np.bincount(labels[~alone], minlength=len(class_names))
        counts = sorted((int(sizes[i]), class_names[i]) for i in np.flatnonzero(sizes))
        shown = {name: n for n, name in counts[:SHOWN_CLASSES]}  # the fewest first
        more = f" and {len(counts) - SHOWN_CLASSES} more" if len(counts) > SHOWN_CLASSES else ""
        n = int((~alone).sum())
        raise UserError(f"Cannot carve a stratified {what} split from {path!r}: {fraction:g} of the {n} training "
                        f"texts in classes of two or more is {math.ceil(fraction * n)} texts for {len(counts)} "
                        f"classes (class counts, fewest first: {shown}{more}), and each side needs a text of each "
                        f"class. Change {setting} or add data.") from e
    if alone.any():
        n, have = int(alone.sum()), "classes have" if alone.sum() > 1 else "class has"
        log.info(f"{what} split: {n} {have} a single training text, which stays in train: "
                 f"{', '.join(class_names[label] for label in labels[alone])}")
        keep = np.concatenate([keep, texts[alone]])
    return _take(split, keep), _take(split, carved)


def _load(path: str, name: str | None, separator: str | None = None) -> dict:
    """The dataset's splits by the names it gives them, as `datasets.Dataset`s; `separator` for .csv and .tsv files
    (None: their own)."""
    import datasets  # slow to import; only loading needs it

    datasets.disable_progress_bars()
    local = Path(path).expanduser()
    saved = local.is_dir() and _saved_by_datasets(local)
    if separator is not None and (saved or not local.exists()):
        kind = "a folder written by save_to_disk" if saved else "not a local file"
        raise UserError(f"data.separator={separator} is for .csv and .tsv files, and {path!r} is {kind}; leave it out.")
    try:
        if saved:
            loaded = datasets.load_from_disk(str(local))
            return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
        if local.exists():
            (builder, options), files = _local_files(local)
            if separator is not None:
                if builder != "csv":
                    kinds = sorted({_data_suffix(Path(p)) for paths in files.values() for p in paths})
                    raise UserError(f"data.separator={separator} is for .csv and .tsv files, and {path!r} holds "
                                    f"{', '.join(kinds)} files; leave it out.")
                options = options | {"sep": SEPARATORS[separator]}
            # One split at a time: read together, every split takes the first one's columns, so a column missing
            # from validation.jsonl would come back as nulls (empty texts) instead of being refused.
            with _offline_reader(datasets):
                return {split: datasets.load_dataset(builder, data_files={split: paths}, split=split, **options)
                        for split, paths in files.items()}
        if _looks_like_a_path(path):
            raise UserError(f"data.path={path!r} does not exist. Point data.path at a folder of labelled texts or "
                            f"at {KINDS} (for bbc-news, BBC_NEWS_PATH does the same), or give a Hugging Face hub id "
                            "such as SetFit/bbc-news.")
        return dict(_from_hub(path, name))
    except UserError:
        raise
    except Exception as e:  # hub and parsing errors land here; say what to do about them
        raise UserError(_unreadable(e, path, local)) from e


def _unreadable(e: Exception, path: str, local: Path) -> str:
    """Why the data could not be loaded, and what to do: files not in UTF-8, a split without rows, else the
    library's words."""
    causes = [e]
    while (cause := causes[-1].__cause__ or causes[-1].__context__) is not None and cause not in causes:
        causes.append(cause)
    decode = next((c for c in causes if isinstance(c, UnicodeDecodeError)), None)
    if decode is not None:
        utf16 = decode.start == 0 and bytes(decode.object[:2]) in (b"\xff\xfe", b"\xfe\xff")
        found = ("they start with a UTF-16 byte order mark" if utf16 else
                 f"byte 0x{decode.object[decode.start]:02x} is not UTF-8, as in Latin-1 or Windows-1252 text")
        return (f"Could not read {path!r}: its files must be UTF-8, and {found}. Save them as UTF-8 (e.g. iconv -f "
                "<their encoding> -t UTF-8 <file> > <new file>) and point data.path at those.")
    empty = re.search(r'Instruction "(\w+)" corresponds to no data', str(e))
    if empty and local.exists():
        return (f"The {empty[1]} split of {path!r} has no rows (a header alone?); each split needs at least one "
                "labelled text.")
    return (f"Could not load the dataset {path!r}: {type(e).__name__}: {e}\n"
            + (_offline_hint() if not local.exists() else "Check that its files parse as their extension says."))


@contextmanager
def _offline_reader(datasets):
    """Local files stay local: `load_dataset("json", ...)` counts each use of its packaged readers with a request to
    Hugging Face's servers, even for local files, and on a node without internet that request waits for DNS (5 s, now
    and then) before it fails, once per split."""
    before = datasets.config.HF_UPDATE_DOWNLOAD_COUNTS
    datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = False
    try:
        yield
    finally:
        datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = before


def _saved_by_datasets(folder: Path) -> bool:
    return (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()


def _data_suffix(path: Path) -> str | None:
    """The data format of a file name, compression aside: train.csv.gz -> .csv; None if not a data file."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in COMPRESSIONS:
        suffixes = suffixes[:-1]
    return suffixes[-1] if suffixes and suffixes[-1] in FILE_FORMATS else None


def _split_of(path: Path) -> str | None:
    """The split a file's name says it holds: train.jsonl, data/test-00000-of-00001.parquet, dev.tsv, ..."""
    stem = path.name.lower()
    for names in SPLIT_NAMES.values():
        for name in names:
            if re.match(rf"{name}(?![a-z])", stem):
                return name
    return None


def _local_files(local: Path, quiet: bool = False) -> tuple[tuple[str, dict], dict[str, list[str]]]:
    """The builder and the data files by split of a local file or folder (`quiet`: without the warning about files
    named after no split)."""
    if local.is_file():
        if _data_suffix(local) is None:
            raise UserError(f"{local} is not a data file this pipeline reads; give {KINDS}, or a folder of them.")
        files = {"train": [local]}
    else:
        # Hidden files and folders (.ipynb_checkpoints, .cache) hold copies, not data.
        found = sorted(p for p in local.rglob("*") if p.is_file() and _data_suffix(p)
                       and not any(part.startswith(".") for part in p.relative_to(local).parts))
        if not found:
            raise UserError(f"{local} holds no data files. Expected e.g. train.jsonl and test.jsonl, each {KINDS}, "
                            "a folder written by datasets' save_to_disk, or a single file.")
        files = {}
        for p in found:
            if _split_of(p):
                files.setdefault(_split_of(p), []).append(p)
        if not files:
            if len(found) > 1:
                raise UserError(f"{local} holds {len(found)} data files, none named after a split: "
                                f"{[p.name for p in found[:6]]}. Name them train.*, test.* (and validation.*), or "
                                "point data.path at one file.")
            files = {"train": found}
        ignored = [p.name for p in found if not _split_of(p) and len(found) > 1 and files]
        if ignored and not quiet:
            log.warning(f"{local}: ignoring {ignored}, whose names are no split")
    suffixes = sorted({_data_suffix(p) for paths in files.values() for p in paths})
    if len({repr(FILE_FORMATS[s]) for s in suffixes}) > 1:  # .json and .jsonl share a reader; .csv and .tsv do not
        raise UserError(f"{local} mixes file formats ({', '.join(suffixes)}); give every split in one format.")
    empty = [p for paths in files.values() for p in paths if p.stat().st_size == 0]
    if empty:
        raise UserError(f"{empty[0]} is empty; each split needs at least one labelled text.")
    return FILE_FORMATS[suffixes[0]], {split: [str(p) for p in paths] for split, paths in files.items()}


def _check_columns(dataset, columns: list[str], label_column: str, split: str, path: str) -> None:
    have = list(dataset.column_names)
    missing = [c for c in [*columns, label_column] if c not in have]
    if missing:
        # A file separated by ; or tabs read as a .csv comes as one column whose name holds every header.
        joined = next((name for name, sep in SEPARATORS.items() if len(have) == 1 and sep in have[0]), None)
        hint = (f" Its header looks separated by {SEPARATORS[joined]!r}: .csv files are read with commas and .tsv "
                f"files with tabs unless data.separator names another (data.separator={joined})." if joined else "")
        raise UserError(f"The {split} split of {path!r} has no column {' or '.join(map(repr, missing))}; its "
                        f"columns are {have}. Choose them with data.text_column=<column> (a list joins several with "
                        f"a space: data.text_column=[title,body]) and data.label_column=<column>.{hint}")
    if len(dataset) == 0:
        raise UserError(f"The {split} split of {path!r} is empty.")
    for column in columns:  # a list or a number would reach the tokenizer as its Python text: "['coach', ...]", "406"
        dtype = getattr(dataset.features[column], "dtype", None)
        if dtype in ("string", "large_string"):
            continue
        example = next((v for v in _column(dataset, column) if v is not None), None)
        if example is None:  # no value at all (null, or NaN in a .csv): refused below, as a column without text
            continue
        kind = f"numbers ({dtype})" if dtype else f"{type(example).__name__}s"
        raise UserError(f"Column {column!r} of the {split} split of {path!r} holds {kind}, not text (e.g. "
                        f"{str(example)[:60]!r}). Name the column of texts with data.text_column=<column>, or make "
                        "each of its values one string.")


def _texts(dataset, columns: list[str]) -> list[str]:
    """The text of every row: one column, or several joined with a space (a title and a body)."""
    parts = [["" if v is None else str(v) for v in _column(dataset, c)] for c in columns]
    return [" ".join(row) for row in zip(*parts, strict=True)] if len(parts) > 1 else parts[0]


def _column(dataset, name: str) -> list:
    """A column's values as a list, read at once: iterating datasets' Column formats row by row (a tenth of a second
    for a 10,000-text corpus, on every run); a slice of it reads the rows in one go (a list already, before
    datasets 4)."""
    return dataset[name][:]


def _classes(splits: dict, column: str, path: str) -> tuple[list[str], dict[str, list[int]]]:
    """Class names and every split's labels as class indices, both from the data.

    Labels may be a `ClassLabel` feature (names from it), integer ids (names from a `label_text` column when there
    is one, else the ids themselves) or strings (sorted). The classes are those of the train split, in that order;
    a label that only validation or test has is an error, since nothing could learn it.
    """
    import datasets

    feature = splits["train"].features[column]
    values = {split: [_label(v) for v in _column(d, column)] for split, d in splits.items()}
    if any(v is None for split_values in values.values() for v in split_values):
        split, row = next((s, i) for s, vs in values.items() for i, v in enumerate(vs) if v is None)
        raise UserError(f"Row {row + 1} (counting from 1) of the {split} split of {path!r} (and maybe others) has "
                        f"no label in column {column!r}; drop those rows or label them.")
    if isinstance(feature, datasets.ClassLabel):
        names = dict(enumerate(feature.names))
    elif all(isinstance(v, int | np.integer) and not isinstance(v, bool) for v in values["train"]):
        names = {}
        for d in splits.values():
            if "label_text" in d.column_names:
                names |= dict(zip(_column(d, column), _column(d, "label_text"), strict=True))
    elif all(isinstance(v, str) for v in values["train"]):
        names = {v: v for v in set(values["train"])}
        alike = defaultdict(set)
        for name in names:
            alike[" ".join(name.split()).casefold()].add(name)
        twins = [sorted(group) for group in alike.values() if len(group) > 1]
        if twins:  # "sport" and "sport ", "Sport": kept apart, as given, but likely one class each
            shown = ", ".join(map(str, sorted(twins)[:3])) + (", ..." if len(twins) > 3 else "")
            log.warning(f"Column {column!r} of {path!r} has class names that differ only in spaces or letter case "
                        f"({shown}): each is a class of its own. If they are one class, clean the labels.")
    else:
        example = next((v for v in values["train"] if not isinstance(v, int | str) or isinstance(v, bool)), None)
        if example is None:  # every label an id or a name, but both kinds in one column
            number = next(v for v in values["train"] if not isinstance(v, str))
            text = next(v for v in values["train"] if isinstance(v, str))
            raise UserError(f"The labels in column {column!r} of {path!r} mix integer ids and class names (e.g. "
                            f"{number!r} and {text!r}); give every label in one form.")
        raise UserError(f"The labels in column {column!r} of {path!r} are neither integer ids nor strings (e.g. "
                        f"{example!r}, {type(example).__name__}); give class ids, class names, or a ClassLabel.")
    classes = sorted(set(values["train"]))  # by id, or by name for string labels
    if len(classes) < 2:
        raise UserError(f"The train split of {path!r} has a single class ({names.get(classes[0], classes[0])!r}); "
                        f"a classifier needs at least two. Check that data.label_column ({column!r}) names the "
                        "column of classes.")
    # A column of texts named as the labels: most values occur once, and read like sentences (a few-shot corpus,
    # one text per class, has names: it is not refused).
    counts = Counter(values["train"])
    once = [v for v, n in counts.items() if n == 1]
    sentences = [v for v in once if isinstance(v, str) and len(v.split()) >= 3]
    if len(values["train"]) >= 20 and len(once) > len(values["train"]) / 2 and len(sentences) > len(once) / 2:
        example = sentences[0]
        raise UserError(f"Column {column!r} of {path!r} does not hold classes: {len(once)} of its "
                        f"{len(values['train'])} training values occur once (e.g. "
                        f"{example[:60] + '...' if len(example) > 60 else example!r}). Name the column of classes "
                        "with data.label_column=<column>.")
    index = {label: i for i, label in enumerate(classes)}
    for split, split_values in values.items():
        unknown = sorted({str(v) for v in split_values if v not in index})
        if unknown:
            raise UserError(f"The {split} split of {path!r} has label(s) {unknown[:5]} that the train split never "
                            "has; nothing can learn them. Drop those rows or add training texts for them.")
    return [str(names.get(c, c)) for c in classes], {s: [index[v] for v in vs] for s, vs in values.items()}


def _label(value):
    """A label as read: a missing one (null, or an empty CSV cell read as NaN) is None, a whole float (a CSV column
    with gaps reads as floats) the integer it stands for, a boolean its name."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool | np.bool_):
        return str(bool(value))
    if isinstance(value, float | np.floating) and float(value).is_integer():
        return int(value)
    return value


def _offline_hint() -> str:
    import huggingface_hub

    cached = ("" if huggingface_hub.constants.HF_HUB_OFFLINE else
              "; a copy already in the Hugging Face cache loads with HF_HUB_OFFLINE=1")
    return ("Offline or no hub access? Download the dataset once and set data.path=<folder> (for bbc-news, "
            f"BBC_NEWS_PATH=<folder> does the same){cached}.")


def _from_hub(path: str, name: str | None = None):
    """A dataset from the Hugging Face hub. One request first asks whether the hub answers at all: unreachable, the
    datasets library would retry for half a minute, printing every retry, before failing the same way."""
    import datasets
    import huggingface_hub
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    if not huggingface_hub.constants.HF_HUB_OFFLINE:  # offline mode: straight to the local cache
        try:
            huggingface_hub.HfApi().dataset_info(path, timeout=10)
        except RepositoryNotFoundError as e:
            raise UserError(f"data.path={path!r} is not a dataset on the Hugging Face hub (or it is private); give "
                            "an existing hub id or a local folder.") from e
        except HfHubHTTPError:
            pass  # the hub answered; let the datasets library say what it makes of the dataset
        except Exception as e:  # no answer: no network, no DNS, a proxy in the way
            raise UserError(f"Cannot reach the Hugging Face hub to load data.path={path!r} ({type(e).__name__}: "
                            f"{e}).\n{_offline_hint()}") from e
    return datasets.load_dataset(path, name)


def _looks_like_a_path(path: str) -> bool:
    # A hub id is `name` or `owner/name`; a data file's name, a separator or a leading dot/tilde mean a local path.
    return (path.startswith((".", "/", "~")) or path.count("/") > 1 or "\\" in path
            or _data_suffix(Path(path)) is not None)


def _take(split: Split, idx) -> Split:
    return Split([split.texts[i] for i in idx], [split.labels[i] for i in idx])


def _subsample(split: Split, n: int, seed: int) -> Split:
    if n >= len(split):
        return split
    return _take(split, np.random.default_rng(seed).permutation(len(split))[:n])
