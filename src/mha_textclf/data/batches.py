"""Token ids in batches: dynamic padding with a padding mask, and batches of texts of similar length."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class TokenizedDataset(Dataset):
    def __init__(self, input_ids: list[Sequence[int]], labels: list[int]):
        assert len(input_ids) == len(labels)
        self.input_ids, self.labels = input_ids, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[Sequence[int], int]:
        return self.input_ids[i], self.labels[i]


def collate(batch: list[tuple[Sequence[int], int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Pad to the longest sequence in the batch (dynamic padding); `padding_mask` is True at padding."""
    lengths = torch.tensor([len(ids) for ids, _ in batch])
    T = int(lengths.max())
    input_ids = torch.full((len(batch), T), pad_id, dtype=torch.long)  # (B, T)
    for row, (ids, _) in enumerate(batch):
        input_ids[row, : len(ids)] = torch.as_tensor(ids)
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
    input_ids: list[Sequence[int]], labels: list[int], batch_size: int, pad_id: int, shuffle: bool = False,
    seed: int = 0, pin_memory: bool = False, group_by_length: bool = False,
) -> DataLoader:
    """Batches of {input_ids, padding_mask, labels}: shuffled for training (and with `group_by_length`, batches of
    similar lengths in a random order); for evaluation in the data's order, or with `group_by_length` sorted by
    length (only the order of the predictions changes, no metric does)."""
    # A seeded generator of our own makes the batch order a function of `seed` alone (and is saved for resume).
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    dataset = TokenizedDataset(input_ids, labels)
    common = {"collate_fn": lambda batch: collate(batch, pad_id), "pin_memory": pin_memory, "generator": generator}
    if group_by_length:
        lengths = [len(ids) for ids in input_ids]
        if shuffle:
            sampler = LengthGroupedSampler(lengths, batch_size, generator)
        else:
            order = sorted(range(len(lengths)), key=lengths.__getitem__)
            sampler = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
        return DataLoader(dataset, batch_sampler=sampler, **common)
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, **common)
