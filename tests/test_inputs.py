"""The corpus, tokenizer and encodings that runs in one process reuse: served only under the settings that decide
them, and a run on reused ones is the run it would have been on fresh ones."""

import csv

import pytest

from conftest import settings_for, train_in_process
from mha_textclf import pipeline
from mha_textclf.inputs import KEYS, InputCache


@pytest.mark.parametrize(("change", "expected"), [
    # What a trial of the search changes: the model, the optimiser, the batches; where things are cached.
    ("trainer.lr=0.01", set()),
    ("model.token_dropout=0.5", set()),
    ("pe=true", set()),
    ("data.group_by_length=false", set()),
    ("tokenizer.cache_dir=/elsewhere", set()),
    # What the products are made of.
    ("data.max_length=256", {"tokenizer", "encodings"}),  # the texts are the same, their tokens are not
    ("tokenizer.vocab_size=500", {"tokenizer", "encodings"}),
    ("seed=1", {"corpus", "tokenizer", "encodings"}),  # another validation split, so other training texts
    ("data.max_train_samples=100", {"corpus", "tokenizer", "encodings"}),
    ("data.path=/other/data", {"corpus", "tokenizer", "encodings"}),
    ("resume=/earlier/run", {"tokenizer", "encodings"}),  # a resumed run takes the tokenizer of the run it continues
])
def test_each_product_is_reused_only_under_the_settings_that_decide_it(change, expected):
    assert rebuilt(settings_for("data.path=/data"), settings_for("data.path=/data", change)) == expected


def rebuilt(base, changed) -> set[str]:
    """The products a run with `changed` settings builds after one with `base` kept them all."""
    cache, built = InputCache(), set()
    for product in KEYS:
        cache.get(product, base, object)
    for product in KEYS:
        cache.get(product, changed, lambda product=product: built.add(product))
    return built


@pytest.mark.unit
def test_every_data_and_tokenizer_setting_decides_what_the_docstring_says():
    """src/mha_textclf/inputs.py: the corpus is keyed by all the data settings but max_length and group_by_length
    (which act later), the tokenizer and encodings by those, max_length and every tokenizer setting but cache_dir.
    Each setting, changed alone."""
    from dataclasses import fields

    base = settings_for("data.path=/data")
    for field in fields(base.data):
        changed = settings_for("data.path=/data")
        setattr(changed.data, field.name, f"{getattr(base.data, field.name)}, changed")  # a key only reads it
        expected = {"group_by_length": set(), "max_length": {"tokenizer", "encodings"}}.get(
            field.name, {"corpus", "tokenizer", "encodings"})
        assert rebuilt(base, changed) == expected, field.name
    for field in fields(base.tokenizer):  # and every tokenizer setting but cache_dir decides the tokenizer
        changed = settings_for("data.path=/data")
        setattr(changed.tokenizer, field.name, f"{getattr(base.tokenizer, field.name)}, changed")
        expected = set() if field.name == "cache_dir" else {"tokenizer", "encodings"}
        assert rebuilt(base, changed) == expected, field.name


def test_the_least_recently_used_product_goes_first_when_the_cache_is_full():
    cache, built = InputCache(size=2), []
    settings = {n: settings_for("data.path=/data", f"data.max_length={n}") for n in (64, 128, 256)}
    for n in (64, 128, 64, 256, 64, 128):  # 128 is the oldest when 256 comes, so it is built again
        cache.get("encodings", settings[n], lambda n=n: built.append(n))
    assert built == [64, 128, 256, 128]


def test_a_search_over_the_accuracy_space_s_two_lengths_builds_each_length_s_tokenizer_and_encodings_once():
    """A trial of the accuracy space, which varies data.max_length between 512 and 1024, rebuilds the tokenizer and
    the encodings only for a length it has not seen: the cache a search's worker makes (the default size) keeps both
    lengths, whatever the order the trials ask for them in."""
    cache, built = InputCache(), []
    settings = {n: settings_for("data.path=/data", f"data.max_length={n}") for n in (512, 1024)}
    for n in (512, 1024, 1024, 512, 1024, 512, 512, 1024):
        for product in ("tokenizer", "encodings"):
            cache.get(product, settings[n], lambda n=n, product=product: built.append((product, n)))
    assert sorted(built) == [("encodings", 512), ("encodings", 1024), ("tokenizer", 512), ("tokenizer", 1024)]


def history_without_times(run_dir):
    with open(run_dir / "history.csv") as f:
        return [{k: v for k, v in row.items() if "seconds" not in k} for row in csv.DictReader(f)]


@pytest.mark.slow
def test_a_run_on_reused_inputs_is_the_run_on_fresh_ones(data_dir, tmp_path, monkeypatch):
    builds = []
    for name in ("load_corpus", "get_tokenizer", "encode"):
        real = getattr(pipeline, name)
        monkeypatch.setattr(pipeline, name, lambda *a, real=real, name=name, **k: builds.append(name) or real(*a, **k))
    common = ("experiment=smoke", "trainer.epochs=2", "probes.attention=[]")
    cache = InputCache()
    train_in_process(tmp_path / "first", *common, "trainer.lr=0.003", data_dir=data_dir, inputs=cache)
    assert builds == ["load_corpus", "get_tokenizer", "encode", "encode", "encode"]  # train, val, test

    def same_run(name, *overrides, rebuilt):
        builds.clear()
        reused = train_in_process(tmp_path / name, *common, *overrides, data_dir=data_dir, inputs=cache)
        assert builds == rebuilt
        fresh = train_in_process(tmp_path / f"{name}_fresh", *common, *overrides, data_dir=data_dir)
        assert history_without_times(tmp_path / name) == history_without_times(tmp_path / f"{name}_fresh")
        for split in ("val", "test"):
            assert vars(getattr(reused, split)) == vars(getattr(fresh, split))
        assert (tmp_path / name / "tokenizer" / "tokenizer.json").read_text() == (
            tmp_path / f"{name}_fresh" / "tokenizer" / "tokenizer.json").read_text()

    # Another learning rate and PE: everything reused.
    same_run("reused", "trainer.lr=0.01", "pe=true", rebuilt=[])
    # Shorter texts: the same corpus, the tokenizer (from the disk cache) and the encodings made again.
    same_run("shorter", "trainer.lr=0.01", "data.max_length=64", rebuilt=["get_tokenizer", "encode", "encode",
                                                                          "encode"])
