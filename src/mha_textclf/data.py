"""Load bbc-news (hub id or local folder), carve a validation split, and batch token ids with padding masks."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from sklearn.model_selection import train_test_split
from torch.utils.data import DataLoader, Dataset, Sampler

from mha_textclf.errors import UserError

# datasets' builder name for each file type a local folder may hold.
FILE_FORMATS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
SPLITS = ("train", "test")


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
    class_names: list[str]  # class_names[i] names class index i; taken from the data's label_text

    def splits(self) -> dict[str, Split]:
        return {"train": self.train, "val": self.val, "test": self.test}


def dataset_name(path: str) -> str:
    """A short name for the dataset at `path`: a local folder or file by its name, a hub id as it is."""
    local = Path(path).expanduser()
    return local.stem if local.is_file() else local.resolve().name if local.is_dir() else path


def load_corpus(
    path: str,
    val_fraction: float,
    seed: int,
    max_train_samples: int | None = None,
    max_eval_samples: int | None = None,
) -> Corpus:
    """Load train/test from `path`, carve a stratified validation split from train, optionally subsample."""
    frames = _load_frames(path)
    class_names, index = _classes(frames, path)
    train, test = (
        Split(frames[s]["text"].astype(str).tolist(), [index[v] for v in frames[s]["label"]]) for s in SPLITS
    )
    # Stratified so that a 307-article validation split has every class in its natural proportion for any seed.
    try:
        train_idx, val_idx = train_test_split(
            np.arange(len(train)), test_size=val_fraction, random_state=seed, stratify=train.labels
        )
    except ValueError as e:  # too few texts of a class, or fewer validation texts than classes
        counts = dict(zip(class_names, np.bincount(train.labels, minlength=len(class_names)).tolist(), strict=True))
        raise UserError(f"Cannot carve a stratified validation split ({val_fraction:g} of {len(train)} training "
                        f"texts) from {path!r} with class counts {counts}: every class needs at least two texts and "
                        "the split at least one per class. Change data.val_fraction or add data.") from e
    train, val = _take(train, train_idx), _take(train, val_idx)
    if max_train_samples is not None and max_train_samples < len(train):
        fraction = max_train_samples / len(train)
        train = _subsample(train, max_train_samples, seed)
        if max_eval_samples is None:
            val = _subsample(val, math.ceil(fraction * len(val)), seed)
            test = _subsample(test, math.ceil(fraction * len(test)), seed)
    if max_eval_samples is not None:
        val, test = _subsample(val, max_eval_samples, seed), _subsample(test, max_eval_samples, seed)
    return Corpus(train, val, test, class_names)


def _load_frames(path: str):
    import datasets  # slow to import; only loading needs it

    datasets.disable_progress_bars()
    folder = Path(path).expanduser()
    try:
        if folder.is_dir():
            builder, data_files = _local_files(folder)
            dataset = datasets.load_dataset(builder, data_files=data_files)
        elif _looks_like_a_path(path):
            raise UserError(f"data.path={path!r} does not exist. Point data.path (or BBC_NEWS_PATH) at a folder "
                            "holding train and test files, or give a Hugging Face hub id such as SetFit/bbc-news.")
        else:
            dataset = _from_hub(path)
    except UserError:
        raise
    except Exception as e:  # hub and parsing errors land here; say what to do about them
        raise UserError(f"Could not load the dataset {path!r}: {type(e).__name__}: {e}\n{_offline_hint()}") from e
    missing = [s for s in SPLITS if s not in dataset]
    if missing:
        raise UserError(f"The dataset {path!r} has no {missing} split (it has {list(dataset)}); "
                        "it needs a train and a test split.")
    return {s: dataset[s].to_pandas() for s in SPLITS}


def _offline_hint() -> str:
    import huggingface_hub

    cached = ("" if huggingface_hub.constants.HF_HUB_OFFLINE else
              "; a copy already in the Hugging Face cache loads with HF_HUB_OFFLINE=1")
    return ("Offline or no hub access? Download the dataset once and set data.path=<folder> (for bbc-news, "
            f"BBC_NEWS_PATH=<folder> does the same){cached}.")


def _from_hub(path: str):
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
    return datasets.load_dataset(path)


def _looks_like_a_path(path: str) -> bool:
    # A hub id is `name` or `owner/name`; anything else with a separator or a leading dot/tilde is meant as a folder.
    return path.startswith((".", "/", "~")) or path.count("/") > 1 or "\\" in path


def _local_files(folder: Path) -> tuple[str, dict[str, list[str]]]:
    for suffix, builder in FILE_FORMATS.items():
        # Accept both `train.jsonl` and hub-snapshot names such as `data/train-00000-of-00001.parquet`.
        files = {s: sorted(str(p) for p in folder.rglob(f"{s}*{suffix}")) for s in SPLITS}
        if all(files.values()):
            empty = [f for split_files in files.values() for f in split_files if Path(f).stat().st_size == 0]
            if empty:
                raise UserError(f"{empty[0]} is empty; each split needs at least one row with `text` and `label`.")
            return builder, files
    raise UserError(f"{folder} holds no train and test files. Expected e.g. train.jsonl and test.jsonl "
                    f"(also .json, .csv or .parquet) with columns `text` and `label`.")


def _classes(frames, path: str) -> tuple[list[str], dict]:
    """Class names and the label → index map, both from the data."""
    for split, frame in frames.items():
        missing = {"text", "label"} - set(frame.columns)
        if missing:
            raise UserError(f"The {split} split of {path!r} lacks column(s) {sorted(missing)} "
                            f"(it has {list(frame.columns)}); each row needs `text` and an integer `label`.")
        if len(frame) == 0:
            raise UserError(f"The {split} split of {path!r} is empty.")
        if not pd.api.types.is_integer_dtype(frame["label"]):
            raise UserError(f"The {split} split of {path!r} has non-integer labels (dtype {frame['label'].dtype}, "
                            f"e.g. {frame['label'].iloc[0]!r}); labels must be integer class ids, names go in "
                            "`label_text`.")
    labels = sorted({int(v) for frame in frames.values() for v in frame["label"]})
    if len(set(frames["train"]["label"])) < 2:
        raise UserError(f"The train split of {path!r} has a single class; a classifier needs at least two.")
    names = {}
    for frame in frames.values():
        if "label_text" in frame.columns:
            names.update(zip(frame["label"].astype(int), frame["label_text"].astype(str), strict=True))
    return [names.get(label, str(label)) for label in labels], {label: i for i, label in enumerate(labels)}


def _take(split: Split, idx) -> Split:
    return Split([split.texts[i] for i in idx], [split.labels[i] for i in idx])


def _subsample(split: Split, n: int, seed: int) -> Split:
    if n >= len(split):
        return split
    return _take(split, np.random.default_rng(seed).permutation(len(split))[:n])


class TokenizedDataset(Dataset):
    def __init__(self, input_ids: list[list[int]], labels: list[int]):
        assert len(input_ids) == len(labels)
        self.input_ids, self.labels = input_ids, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[list[int], int]:
        return self.input_ids[i], self.labels[i]


def collate(batch: list[tuple[list[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence in the batch (dynamic padding); `padding_mask` is True at padding."""
    lengths = torch.tensor([len(ids) for ids, _ in batch])
    T = int(lengths.max())
    input_ids = torch.full((len(batch), T), pad_id, dtype=torch.long)  # (B, T)
    for row, (ids, _) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.tensor(ids)
    padding_mask = torch.arange(T)[None, :] >= lengths[:, None]  # (B, T)
    labels = torch.tensor([label for _, label in batch])
    return {"input_ids": input_ids, "padding_mask": padding_mask, "labels": labels}


class LengthGroupedSampler(Sampler[list[int]]):
    """Batches of texts of similar length, so dynamic padding pads little, in a random order every epoch.

    Each epoch: shuffle all indices, cut them into chunks of `batch_size * group_size`, sort each chunk by length,
    cut it into batches, shuffle the batches. Randomness comes only from `generator`: deterministic under the seed,
    and resumable by saving the generator's state.
    """

    def __init__(self, lengths: list[int], batch_size: int, generator: torch.Generator, group_size: int = 4):
        # Small chunks (4 batches) keep batch composition random from epoch to epoch; large ones would sort the
        # whole training set once and freeze which texts share a batch.
        self.lengths, self.batch_size, self.generator, self.group_size = lengths, batch_size, generator, group_size

    def __iter__(self):
        order = torch.randperm(len(self.lengths), generator=self.generator).tolist()
        chunk = self.batch_size * self.group_size
        batches = []
        for start in range(0, len(order), chunk):
            group = sorted(order[start : start + chunk], key=lambda i: -self.lengths[i])
            batches += [group[i : i + self.batch_size] for i in range(0, len(group), self.batch_size)]
        for b in torch.randperm(len(batches), generator=self.generator).tolist():
            yield batches[b]

    def __len__(self) -> int:
        chunk = self.batch_size * self.group_size
        full, rest = divmod(len(self.lengths), chunk)
        return full * self.group_size + math.ceil(rest / self.batch_size)


def make_loader(
    input_ids: list[list[int]], labels: list[int], batch_size: int, pad_id: int, shuffle: bool = False,
    seed: int = 0, pin_memory: bool = False, group_by_length: bool = False,
) -> DataLoader:
    """Batches of {input_ids, padding_mask, labels}; shuffled (optionally grouped by length) for training."""
    # A seeded generator of our own makes the batch order a function of `seed` alone (and is saved for resume).
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    dataset = TokenizedDataset(input_ids, labels)
    common = {"collate_fn": lambda batch: collate(batch, pad_id), "pin_memory": pin_memory, "generator": generator}
    if shuffle and group_by_length:
        sampler = LengthGroupedSampler([len(ids) for ids in input_ids], batch_size, generator)
        return DataLoader(dataset, batch_sampler=sampler, **common)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **common)
