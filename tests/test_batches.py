"""data/batches.py: batching with padding masks (collate), and the order of the batches (make_loader,
LengthGroupedSampler): a function of the seed, grouped by length."""

import pytest
import torch

from mha_textclf.data.batches import collate, make_loader


@pytest.mark.unit
def test_collate_pads_dynamically_and_marks_padding():
    batch = collate([([2, 7, 8, 3], 1), ([2, 9, 3], 0)], pad_id=0)
    assert batch["input_ids"].tolist() == [[2, 7, 8, 3], [2, 9, 3, 0]]
    assert batch["padding_mask"].tolist() == [[False] * 4, [False, False, False, True]]
    assert batch["labels"].tolist() == [1, 0]


@pytest.mark.unit
def test_loader_order_is_a_function_of_the_seed():
    ids, labels = [[2, i, 3] for i in range(40)], list(range(40))

    def order(seed):
        return torch.cat([b["labels"] for b in make_loader(ids, labels, 8, 0, shuffle=True, seed=seed)]).tolist()

    assert order(0) == order(0) != order(1)
    assert sorted(order(0)) == labels


def test_length_grouped_batches_cover_everything_once_with_less_padding():
    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(5, 500, (300,), generator=g).tolist()
    ids, labels = [[1] * n for n in lengths], list(range(300))

    def epochs(seed, grouped, n=2):
        loader = make_loader(ids, labels, 8, 0, shuffle=True, seed=seed, group_by_length=grouped)
        return [[(b["labels"].tolist(), int(b["padding_mask"].sum())) for b in loader] for _ in range(n)], loader

    (first, second), loader = epochs(0, grouped=True)
    assert len(first) == len(loader)
    assert sorted(i for batch, _ in first for i in batch) == labels  # every text once per epoch
    assert [b for b, _ in first] != [b for b, _ in second]  # a new order every epoch...
    assert {tuple(sorted(b)) for b, _ in first} != {tuple(sorted(b)) for b, _ in second}  # ...and new batches
    assert epochs(0, grouped=True)[0] == [first, second]  # ...that is a function of the seed
    # The batches themselves are shuffled: each chunk of 4 batches (32 texts, sorted by length) does not come out
    # longest first, as it would unshuffled.
    longest = [max(lengths[i] for i in batch) for batch, _ in first]
    chunks = [longest[k : k + 4] for k in range(0, 36, 4)]
    assert any(chunk != sorted(chunk, reverse=True) for chunk in chunks), chunks
    grouped_padding = sum(p for _, p in first)
    plain_padding = sum(p for _, p in epochs(0, grouped=False)[0][0])
    assert grouped_padding < plain_padding / 2


@pytest.mark.unit
def test_evaluation_batches_sorted_by_length_cover_everything_once_with_little_padding():
    lengths = torch.randint(5, 500, (100,), generator=torch.Generator().manual_seed(1)).tolist()
    ids, labels = [[1] * n for n in lengths], list(range(100))
    sorted_batches = [(b["labels"].tolist(), int(b["padding_mask"].sum()))
                      for b in make_loader(ids, labels, 8, 0, group_by_length=True)]
    assert sorted(i for batch, _ in sorted_batches for i in batch) == labels
    assert [lengths[i] for batch, _ in sorted_batches for i in batch] == sorted(lengths)
    plain = sum(int(b["padding_mask"].sum()) for b in make_loader(ids, labels, 8, 0))
    assert sum(p for _, p in sorted_batches) < plain / 5
