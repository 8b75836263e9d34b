"""Loading (real data and local folders), the validation split, subsampling, batching with padding masks."""

from collections import Counter

import pandas as pd
import pytest
import torch

from conftest import write_jsonl
from mha_textclf.data import collate, load_corpus, make_loader
from mha_textclf.errors import UserError


@pytest.fixture(scope="module")
def corpus(data_dir):
    return load_corpus(str(data_dir), val_fraction=0.25, seed=0)


def test_real_splits_and_class_names_from_the_data(corpus):
    assert (len(corpus.train), len(corpus.val), len(corpus.test)) == (918, 307, 1000)
    # Names come from label_text, ordered by label id (the dataset's README: 0=tech ... 4=politics).
    assert corpus.class_names == ["tech", "business", "sport", "entertainment", "politics"]
    assert Counter(corpus.test.labels) == {0: 189, 1: 224, 2: 236, 3: 176, 4: 175}


def test_validation_split_is_stratified_disjoint_and_seeded(data_dir, corpus):
    train_share = {c: n / len(corpus.train) for c, n in Counter(corpus.train.labels).items()}
    for c, n in Counter(corpus.val.labels).items():
        assert abs(n / len(corpus.val) - train_share[c]) < 0.01
    assert not set(corpus.train.texts) & set(corpus.val.texts) - set(
        t for t, n in Counter(corpus.train.texts + corpus.val.texts).items() if n > 1)  # only true duplicates shared
    assert load_corpus(str(data_dir), 0.25, seed=0).val.texts == corpus.val.texts
    assert load_corpus(str(data_dir), 0.25, seed=1).val.texts != corpus.val.texts


def test_max_train_samples_shrinks_eval_in_proportion(data_dir):
    small = load_corpus(str(data_dir), 0.25, seed=0, max_train_samples=92)
    assert (len(small.train), len(small.val), len(small.test)) == (92, 31, 101)
    capped = load_corpus(str(data_dir), 0.25, seed=0, max_train_samples=92, max_eval_samples=10)
    assert (len(capped.train), len(capped.val), len(capped.test)) == (92, 10, 10)


def rows(n, labels=("a", "b")):
    return [{"text": f"text number {i}", "label": i % len(labels), "label_text": labels[i % len(labels)]}
            for i in range(n)]


def test_local_csv_folder_and_class_names(tmp_path):
    for split, n in (("train", 20), ("test", 6)):
        pd.DataFrame(rows(n, ("neg", "pos"))).to_csv(tmp_path / f"{split}.csv", index=False)
    corpus = load_corpus(str(tmp_path), 0.25, seed=0)
    assert corpus.class_names == ["neg", "pos"]
    assert (len(corpus.train), len(corpus.val), len(corpus.test)) == (15, 5, 6)


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda r: [{"text": x["text"]} for x in r], "lacks column"),
    (lambda r: [x | {"label": "pos"} for x in r], "non-integer labels"),
    (lambda r: [x | {"label": 0} for x in r], "single class"),
    (lambda r: [x | {"label": int(i == 0)} for i, x in enumerate(r)], "Cannot carve a stratified validation split"),
])
def test_bad_local_data_is_a_clear_error(tmp_path, mutate, message):
    write_jsonl(tmp_path, {"train": mutate(rows(20)), "test": mutate(rows(4))})
    with pytest.raises(UserError, match=message):
        load_corpus(str(tmp_path), 0.25, seed=0)


def test_an_empty_split_is_a_clear_error(tmp_path):
    write_jsonl(tmp_path, {"train": [], "test": rows(4)})
    with pytest.raises(UserError, match="is empty"):
        load_corpus(str(tmp_path), 0.25, seed=0)


def test_missing_folder_and_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        load_corpus(str(tmp_path / "nowhere"), 0.25, seed=0)
    with pytest.raises(UserError, match="no train and test files"):
        load_corpus(str(tmp_path), 0.25, seed=0)


def test_collate_pads_dynamically_and_marks_padding():
    batch = collate([([2, 7, 8, 3], 1), ([2, 9, 3], 0)], pad_id=0)
    assert batch["input_ids"].tolist() == [[2, 7, 8, 3], [2, 9, 3, 0]]
    assert batch["padding_mask"].tolist() == [[False] * 4, [False, False, False, True]]
    assert batch["labels"].tolist() == [1, 0]


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
    grouped_padding = sum(p for _, p in first)
    plain_padding = sum(p for _, p in epochs(0, grouped=False)[0][0])
    assert grouped_padding < plain_padding / 2


def test_an_unreachable_hub_is_said_at_once_with_what_to_do(monkeypatch):
    import datasets
    import huggingface_hub

    def unreachable(*args, **kwargs):
        raise OSError("[Errno -2] Name or service not known")

    def must_not_run(*args, **kwargs):
        raise AssertionError("the datasets library would retry for half a minute")

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", unreachable)
    monkeypatch.setattr(datasets, "load_dataset", must_not_run)
    with pytest.raises(UserError, match="Cannot reach the Hugging Face hub") as info:
        load_corpus("SetFit/bbc-news", 0.25, seed=0)
    assert "set data.path=<folder>" in str(info.value)


def test_a_hub_id_that_does_not_exist_is_named(monkeypatch):
    import httpx2  # huggingface_hub's HTTP client
    import huggingface_hub
    from huggingface_hub.errors import RepositoryNotFoundError

    def not_found(*args, **kwargs):
        url = "https://huggingface.co/api/datasets/nobody/nothing"
        raise RepositoryNotFoundError("404", response=httpx2.Response(404, request=httpx2.Request("GET", url)))

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", not_found)
    with pytest.raises(UserError, match="is not a dataset on the Hugging Face hub"):
        load_corpus("nobody/nothing", 0.25, seed=0)
