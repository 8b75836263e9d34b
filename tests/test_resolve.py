"""Tests src/mha_textclf/resolve.py: the settings left null that a run decides from its training texts (by text
length, the long-text rule, the vocabulary size), decided once, recorded, and found again by the same command."""

import dataclasses
import logging

import numpy as np
import pytest
import torch
import yaml

from conftest import run_split, settings_for, train_in_process, write_jsonl
from mha_textclf import pipeline as train_module
from mha_textclf import resolve, training
from mha_textclf.errors import RunFolderError
from mha_textclf.model import ModelConfig
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.settings import BY_TEXT_LENGTH, LONG_TEXT, RDROP, TrainerSettings, flat, show
from mha_textclf.tokenizer.cache import load_tokenizer
from mha_textclf.tokenizer.vocabulary import resolve_vocab_size


class _DecidedError(Exception):
    """Raised in place of building the model: the settings a run decided, before it trains."""


def decided_settings(tmp_path, monkeypatch, rows: dict[str, list[dict]]):
    """The settings `python -m train data=own` decides on a corpus of these rows, stopped before the model is built
    (nothing trained)."""
    decided = []

    def build_model(settings, *args):
        decided.append(settings)
        raise _DecidedError

    monkeypatch.setattr(train_module, "build_model", build_model)
    with pytest.raises(_DecidedError):
        train_in_process(tmp_path / "run", "data=own", "probes.attention=[]",
                         data_dir=write_jsonl(tmp_path / "data", rows))
    return decided[0]


@pytest.mark.parametrize(("lengths", "long"), [
    ([LONG_TEXT] * 3 + [10] * 2, True),  # the median at the threshold: long
    ([LONG_TEXT - 1] * 3 + [1000] * 2, False),  # many very long texts, but not half
    ([10, LONG_TEXT - 2, LONG_TEXT + 2, 1000], True),  # an even count: the mean of the middle two
    ([10, LONG_TEXT - 2, LONG_TEXT + 1, 1000], False),
])
def test_settings_that_adapt_to_text_length_take_their_long_text_values_from_half_the_texts_at_128_tokens(lengths,
                                                                                                        long):
    decided = resolve.by_text_length(lengths, n_classes=2)  # 2 or 3 texts a class: no cap on the epochs
    assert {k: d.value for k, d in decided.items()} == {k: v[long] for k, v in BY_TEXT_LENGTH.items()}
    assert {d.why for d in decided.values()} == {
        f"the median training text has {np.median(lengths):g} tokens, "
        f"{'at least' if long else 'fewer than'} {LONG_TEXT}: {'a corpus of long texts' if long else 'short texts'}"}


@pytest.mark.parametrize(("n_texts", "n_classes", "long", "epochs"), [
    (8343, 3, False, 4),  # Rotten Tomatoes: 2,781 a class, 11,000 / 2,781 = 3.96 passes
    (10418, 2, False, 4),  # the Chinese reviews: 2.1 passes, raised to the floor of 4
    (3866, 2, False, 6),  # the election tweets: 5.69
    (4113, 8, False, 12),  # Reuters R8: 21.4, above the 12 of short texts
    (1044, 4, False, 12),  # the Slovenian comments
    (8469, 20, True, 24),  # 20 Newsgroups: 26, above the 24 of long texts
    (60000, 3, True, 4),  # long texts, large classes: 0.55
    (12000, 2, True, 4),  # 1.83, rounded to 2, raised to 4
    (4000, 2, True, 6),  # 5.5 rounds up to 6
    (22000, 9, False, 5),  # 4.5 rounds up to 5 (half to even would give 4)
])
def test_the_epochs_are_capped_by_how_many_texts_each_class_has(n_texts, n_classes, long, epochs):
    """No more passes than show each class about 11,000 training texts on average, at least 4, and never more than
    the text length's own value; the other settings are the text length's, and the reason says when the cap
    decided."""
    lengths = [LONG_TEXT if long else 20] * n_texts
    decided = resolve.by_text_length(lengths, n_classes)
    assert decided["trainer.epochs"].value == epochs
    assert {k: d.value for k, d in decided.items() if k != "trainer.epochs"} == \
        {k: v[long] for k, v in BY_TEXT_LENGTH.items() if k != "trainer.epochs"}
    capped = epochs < BY_TEXT_LENGTH["trainer.epochs"][long]
    why = decided["trainer.epochs"].why
    assert ("capped" in why) is capped
    if capped:
        assert f"{n_texts:,} training texts in {n_classes} classes, {n_texts / n_classes:,.0f} a class" in why
        assert ("raised to the minimum of 4" in why) is (11000 * n_classes / n_texts < 3.5)


def test_a_continued_run_keeps_the_epochs_and_dropouts_it_started_with_where_the_rules_would_now_say_otherwise():
    """A run saved with 12 passes and no dropout, continued by a command that leaves them null, keeps them although
    its 60,000 short texts in 2 classes would now be capped at 4 passes and take dropout."""
    settings = settings_for("data=own", "data.path=/somewhere")
    saved = {k: values[0] for k, values in BY_TEXT_LENGTH.items()} | {
        "trainer.epochs": 12, "model.embedding_dropout": 0.0, "model.mlp_dropout": 0.0, "trainer.rdrop": 0.0}
    fresh = resolve.resolve(settings, None, [20] * 60000, 2)
    assert fresh.settings.trainer.epochs == 4 and fresh.settings.model.mlp_dropout > 0
    assert fresh.settings.trainer.rdrop > 0
    continued = resolve.resolve(settings, None, [20] * 60000, 2, saved)
    assert {k: d.value for k, d in continued.decisions.items()} == saved
    assert {d.why for d in continued.decisions.values()} == {resolve.CONTINUED}


@pytest.mark.parametrize(("n_texts", "n_classes", "rdrop"), [
    (3866, 2, RDROP),  # the election tweets: 1,933 a class
    (8343, 3, RDROP),  # Rotten Tomatoes: 2,781
    (10418, 2, RDROP),  # the Chinese reviews: 5,209
    (2000, 2, RDROP),  # 1,000 a class: on
    (1999, 2, 0.0),  # 999.5: off
    (4113, 8, 0.0),  # Reuters R8: 514
    (4899, 52, 0.0),  # Reuters R52: 94
    (1044, 4, 0.0),  # the Slovenian comments: 261
    (8469, 20, 0.0),  # 20 Newsgroups: 423
])
def test_r_drop_left_null_is_on_where_the_classes_average_a_thousand_training_texts(n_texts, n_classes, rdrop):
    """trainer.rdrop left null is decided from how many training texts each class has, whatever their length, and
    the reason says so; a value given stays."""
    settings = settings_for("data=own", "data.path=/somewhere")
    for lengths in ([20] * n_texts, [LONG_TEXT] * n_texts):
        resolved = resolve.resolve(settings, None, lengths, n_classes)
        assert resolved.settings.trainer.rdrop == rdrop
        assert resolved.decisions["trainer.rdrop"].why == (
            f"{n_texts:,} training texts in {n_classes} classes, {n_texts / n_classes:,.0f} a class, "
            f"{'at least' if rdrop else 'fewer than'} 1,000")
    given = resolve.resolve(settings_for("data=own", "data.path=/somewhere", "trainer.rdrop=0.5"), None,
                            [20] * n_texts, n_classes)
    assert given.settings.trainer.rdrop == 0.5 and "trainer.rdrop" not in given.decisions


def test_a_run_saved_before_r_drop_continues_without_it():
    """A run whose config.yaml has no trainer.rdrop trained with one pass per batch: continued by a command that
    leaves it null, it keeps one pass, although its classes would now take R-Drop."""
    settings = settings_for("data=own", "data.path=/somewhere")
    saved = {k: values[0] for k, values in BY_TEXT_LENGTH.items()}  # no trainer.rdrop
    continued = resolve.resolve(settings, None, [20] * 60000, 2, saved)
    assert continued.settings.trainer.rdrop == 0.0
    assert continued.decisions["trainer.rdrop"].why == resolve.CONTINUED


@pytest.mark.parametrize("long_split", ["train", "validation"])
def test_the_long_text_rule_counts_the_training_texts_not_the_evaluation_splits(tmp_path, monkeypatch, long_split):
    """A corpus counts as one of long texts where half the *training* texts have 128 tokens or more. A corpus whose
    training texts are long and whose validation and test texts are short is a corpus of long texts, and the other
    way round it is not: decided from the training split alone (stopped before the model is built, nothing
    trained)."""
    words = [f"w{i}" for i in range(40)]
    long_text, short_text = " ".join(words * 5), " ".join(words[:4])  # 200 words; 4
    rows = {split: [{"text": long_text if split == long_split else short_text, "label": label}
                    for label in ("a", "b") for _ in range(4)] for split in ("train", "validation", "test")}
    decided = decided_settings(tmp_path, monkeypatch, rows)
    long = long_split == "train"
    values = flat(dataclasses.asdict(decided))
    assert {k: values[k] for k in BY_TEXT_LENGTH} == {k: v[long] for k, v in BY_TEXT_LENGTH.items()}


def test_a_run_caps_its_epochs_by_the_size_of_its_corpus_s_classes(tmp_path, monkeypatch, caplog):
    """The epochs a run decides count its training texts and its classes: 3,000 short training texts in 2 classes
    (validation and test given, so nothing is carved from them) train round(11,000 / 1,500) = 7 passes, and the log
    says why (stopped before the model is built, nothing trained)."""
    rows = {split: [{"text": f"w{i % 50} w{i % 7} w{i % 3}", "label": "ab"[i % 2]} for i in range(n)]
            for split, n in (("train", 3000), ("validation", 20), ("test", 20))}
    caplog.set_level(logging.INFO)
    assert decided_settings(tmp_path, monkeypatch, rows).trainer.epochs == 7
    assert "trainer.epochs=7 (null: the median training text has 5 tokens, fewer than 128: short texts, capped: " \
           "3,000 training texts in 2 classes, 1,500 a class, and 7 passes show each class about 11,000" in caplog.text


@pytest.mark.slow
@pytest.mark.parametrize("max_length", [128, 48])  # bbc-news articles cut at 128 tokens are long texts; at 48, short
def test_settings_left_null_take_the_values_of_long_or_short_texts_once_and_the_same_command_continues(
        data_dir, tmp_path, caplog, max_length):
    """settings.BY_TEXT_LENGTH: with the median training text at LONG_TEXT tokens or more, the second values, else the
    first; decided once, logged, written where the run is described; a value given (here trainer.epochs) wins."""
    run_dir = tmp_path / "run"
    command = ["experiment=smoke", "probes.attention=[]", f"data.max_length={max_length}", "model.d_model=null",
               "model.token_dropout=null", "model.embedding_dropout=null",
               "model.mlp_dropout=null", "trainer.label_smoothing=null",
               "pe=null"]  # bbc-news' config fixes them
    caplog.set_level(logging.INFO)
    metrics = train_in_process(run_dir, *command, data_dir=data_dir)
    # The reference: the run's own tokenizer over its own training texts, lengths counted here.
    tokenizer = load_tokenizer(run_dir / "tokenizer", max_length)
    lengths = sorted(len(ids) for ids in tokenizer(run_split(run_dir, "train").texts, truncation=True,
                                                   max_length=max_length)["input_ids"])
    median = (lengths[(len(lengths) - 1) // 2] + lengths[len(lengths) // 2]) / 2
    long = median >= LONG_TEXT
    assert long is (max_length == 128)
    config = flat(yaml.safe_load((run_dir / "config.yaml").read_text()))
    decided = {k: values[long] for k, values in BY_TEXT_LENGTH.items() if k != "trainer.epochs"}
    assert {k: config[k] for k in decided} == decided and config["trainer.epochs"] == 2  # the smoke run's own
    assert set(metrics.adapted) == set(decided)  # trainer.epochs was given: nothing to decide
    assert all(metrics.adapted[k].startswith(f"{show(v)}: the median training text has {median:g} tokens")
               for k, v in decided.items()), metrics.adapted
    assert f"model.d_model={decided['model.d_model']} (null: the median training text" in caplog.text
    saved = torch.load(run_dir / "last.pt", weights_only=True)["metadata"]["config"]
    assert flat(saved)["model.token_dropout"] == decided["model.token_dropout"]
    assert torch.load(run_dir / "model.pt", weights_only=True)["model_config"]["d_model"] == decided["model.d_model"]
    # The same command (null again) finds its run; another value is other settings.
    assert train_in_process(run_dir, *command, data_dir=data_dir) == metrics
    with pytest.raises(RunFolderError, match=r"trainer\.label_smoothing"):
        train_in_process(run_dir, *command, "trainer.label_smoothing=0.05", data_dir=data_dir)


def test_a_model_or_a_training_asked_for_with_a_setting_left_null_says_which_and_what_to_do():
    with pytest.raises(ValueError, match=r"model\.d_model, model\.embedding_dropout, model\.token_dropout, "
                                         r"model\.mlp_dropout left null: "
                                         r"a setting that adapts"):
        ModelConfig(attention="efficient", vocab_size=50, n_classes=2, n_heads=2, pe=False, max_length=8, pad_id=0)
    with pytest.raises(ValueError, match=r"trainer\.epochs, trainer\.rdrop left null: .*give it a value, or let "
                                         r"resolve\.resolve decide it"):
        training.fit(torch.nn.Linear(1, 1), [], [], TrainerSettings(label_smoothing=0.0), torch.device("cpu"))


@pytest.mark.slow
def test_a_vocabulary_size_left_null_is_decided_once_recorded_and_the_same_command_continues(data_dir, tmp_path,
                                                                                             caplog):
    run_dir, command = tmp_path / "run", ["tokenizer.vocab_size=null", "experiment=smoke", "probes.attention=[]"]
    caplog.set_level(logging.INFO)
    metrics = train_in_process(run_dir, *command, data_dir=data_dir)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    decided = config["tokenizer"]["vocab_size"]
    # The rule's own answer on this run's training texts, recorded with its reason wherever the run is described.
    fresh = dataclasses.replace(settings_for(*command).tokenizer, cache_dir=str(tmp_path / "fresh"))  # counted anew
    expected, why = resolve_vocab_size(run_split(run_dir, "train").texts, fresh)
    assert decided == expected.vocab_size and metrics.adapted == {"tokenizer.vocab_size": f"{decided}: {why}"}
    assert f"tokenizer.vocab_size={decided} (null: {why})" in caplog.text  # logged with its reason
    assert RunMetrics.read(run_dir / "metrics.json").adapted == metrics.adapted
    assert torch.load(run_dir / "last.pt", weights_only=True)["metadata"]["config"]["tokenizer"]["vocab_size"] \
        == decided
    # The same command (null again) finds its run; another size is other settings.
    assert train_in_process(run_dir, *command, data_dir=data_dir) == metrics
    with pytest.raises(RunFolderError, match=r"tokenizer\.vocab_size"):
        train_in_process(run_dir, *command, f"tokenizer.vocab_size={decided + 100}", data_dir=data_dir)
