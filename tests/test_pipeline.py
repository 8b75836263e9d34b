"""Tests src/mha_textclf/pipeline.py: train(settings, run_dir) in-process. The shared tiny run checks the
run-folder contract and what its files say (against scikit-learn and the run's own model and data); its stages,
threads, loaders and unknown tokens; and the stopping rules (early stopping, a diverging loss, a signal during
the final evaluation) leave honest files."""

import json
import logging
import os
import re
import signal
import time
from collections import Counter
from fnmatch import fnmatch
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
import yaml
from sklearn.metrics import accuracy_score, classification_report, confusion_matrix, f1_score
from sklearn.utils.class_weight import compute_class_weight

from conftest import logits_one_by_one, png_size, require, run_split, settings_for, train_in_process, write_jsonl
from mha_textclf import pipeline as train_module
from mha_textclf import training
from mha_textclf.calibration import TEMPERATURE_RANGE, expected_calibration_error
from mha_textclf.data.corpus import load_corpus
from mha_textclf.inference import load_run
from mha_textclf.model import TextClassifier
from mha_textclf.predictions import predict
from mha_textclf.runs import files, lifecycle
from mha_textclf.runs.checkpoint import load_checkpoint, load_training_state
from mha_textclf.runs.metrics import CONFUSED_PAIRS, RunMetrics
from mha_textclf.settings import DataSettings
from mha_textclf.tokenizer.cache import load_tokenizer
from mha_textclf.tokenizer.wordpiece import SPECIAL_TOKENS, train_tokenizer
from mha_textclf.tracking import Trackers
from mha_textclf.training import DivergenceError
from run_fakes import SMOKE, history

CONTRACT = ["config.yaml", "history.csv", "loss_curve.png", "classification_report_val.txt",
            "classification_report_val.json", "classification_report_test.txt", "classification_report_test.json",
            "confusion_matrix_val.png", "confusion_matrix_test.png", "metrics.json", "model.pt", "best.pt", "last.pt",
            "tokenizer/tokenizer.json", "attention_can_you_can_that.png", "order_probe.json", "errors.csv",
            "reliability.png", "report.html"]


class StopAfterBuildingError(Exception):
    """Ends a run once its loaders and model are built: what the settings decided is seen before any training."""


def peak_rss_resets() -> bool:
    """Whether this kernel lets a process reset its peak RSS (Linux, where /proc/self/clear_refs is writable)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


PATIENCE = 1


@pytest.mark.slow
def test_single_run_writes_the_whole_contract(smoke_run, data_dir):
    run_dir = smoke_run.dir
    missing = [name for name in CONTRACT if not (run_dir / name).is_file()]
    assert not missing, f"missing from the run folder: {missing}"
    # And nothing it holds is missing from the listing docs/runs.md renders (files.RUN_FOLDER).
    listed = [name for entry in files.RUN_FOLDER for name in (re.sub(r"<\w+>", "*", entry.name.rstrip("/")),
                                                               entry.pattern or "") if name]
    assert [p.name for p in run_dir.iterdir() if not any(fnmatch(p.name, name) for name in listed)] == []
    # Each figure rendered whole (the shared run renders them; other tests draw theirs without rendering).
    assert all(min(png_size(path)) > 100 for path in run_dir.glob("*.png")) and len(list(run_dir.glob("*.png"))) == 5

    metrics = RunMetrics.read(run_dir / "metrics.json")
    assert metrics == smoke_run.metrics
    assert metrics.model == "efficient" and metrics.pe is True and metrics.seed == 0
    assert metrics.device == "cpu" and metrics.epochs == 2
    assert metrics.class_names == ["tech", "business", "sport", "entertainment", "politics"]
    assert (metrics.train_samples, metrics.val.n_samples, metrics.test.n_samples) == (48, 17, 53)
    assert {"torch", "transformers", "tokenizers", "python"} <= set(metrics.versions)
    config = yaml.safe_load((run_dir / "config.yaml").read_text())  # the resolved settings the run used
    assert config["model"]["attention"] == "efficient" and config["data"]["path"] == str(data_dir)

    rows = history(run_dir)
    assert [r["epoch"] for r in rows] == [1, 2]
    # Training and validation are timed apart; the training seconds add up to what metrics.json reports.
    assert all(r["train_seconds"] > 0 and r["eval_seconds"] > 0 for r in rows)
    assert rows[-1]["elapsed_train_seconds"] == pytest.approx(sum(r["train_seconds"] for r in rows))
    assert metrics.train_seconds == pytest.approx(rows[-1]["elapsed_train_seconds"])
    assert metrics.eval_seconds == pytest.approx(sum(r["eval_seconds"] for r in rows))
    # Real (non-padding) training tokens: every text of the training split, cut at max_length, once per epoch.
    tokenizer = load_tokenizer(run_dir / "tokenizer", max_length=128)
    lengths = [len(ids) for ids in tokenizer(run_split(run_dir, "train").texts, truncation=False)["input_ids"]]
    assert [r["train_tokens"] for r in rows] == [sum(min(n, 128) for n in lengths)] * 2
    assert metrics.tokens_per_second == pytest.approx(sum(r["train_tokens"] for r in rows) / metrics.train_seconds)
    assert set(metrics.stages) == {"data", "tokenizer", "encode", "fit", "reports"}
    assert set(metrics.unk_rate) == {"train", "val", "test"}  # (counted in the test of characters that do not fit)
    assert all(s["seconds"] >= 0 and s["peak_memory_mb"] > 0 for s in metrics.stages.values())
    assert metrics.time_to_accuracy == {  # the first epoch at each level, in training seconds
        f"{level:g}": next((r["elapsed_train_seconds"] for r in rows if r["val_accuracy"] >= level), None)
        for level in (0.85, 0.9, 0.95)}
    best = min(rows, key=lambda r: r["val_loss"])  # best.pt's epoch; the reports are the last epoch's by default
    assert metrics.best_epoch == best["epoch"] and metrics.reported_epoch == rows[-1]["epoch"]
    assert rows[-1]["val_accuracy"] == pytest.approx(metrics.val.accuracy)

    model, class_names = load_checkpoint(run_dir / "model.pt")
    assert model.config.attention == "efficient" and model.config.pe and class_names == metrics.class_names
    best_model, best_names = load_checkpoint(run_dir / "best.pt")  # a drop-in model too (weights: see below)
    assert best_names == metrics.class_names and best_model.config == model.config
    assert len(tokenizer) == model.config.vocab_size == metrics.vocab_size
    assert model.num_parameters() == metrics.params


@pytest.mark.slow
def test_params_counts_every_learned_weight_of_the_reported_model_the_classifier_s_too(smoke_run):
    """RunMetrics' `params` is the number of learned parameters, written to metrics.json and repeated per run in
    summary.csv. Counted afresh from model.pt's own tensors (its state dict holds the learned weights, the positional
    encoding's learned scale among them, and of the buffers the bigram hash's random numbers alone, saved so that a
    loaded model hashes alike: the sinusoids are left out), module by module, so that a count skipping one shows."""
    state = torch.load(smoke_run.dir / "model.pt", weights_only=True)["state_dict"]
    assert state.pop("bigram_hash").shape == (2, smoke_run.metrics.vocab_size)  # the smoke run has a bigram table
    by_module = {}
    for name, tensor in state.items():
        by_module[name.split(".")[0]] = by_module.get(name.split(".")[0], 0) + tensor.numel()
    assert {"embedding", "attention", "classifier"} <= set(by_module) and all(by_module.values()), by_module
    assert smoke_run.metrics.params == RunMetrics.read(smoke_run.dir / "metrics.json").params == sum(by_module.values())


@pytest.mark.slow
@pytest.mark.parametrize("split", ["val", "test"])
def test_reports_and_confusion_matrices_are_scikit_learns_on_the_split_they_name(smoke_run, split):
    """Recomputed from model.pt, one text at a time, on the split settled afresh from config.yaml."""
    run = load_run(smoke_run.dir)
    data = run_split(smoke_run.dir, split)
    logits = logits_one_by_one(run.model, run.tokenizer, data.texts)
    labels, predictions = data.labels, logits.argmax(-1).tolist()
    ids = list(range(len(run.class_names)))
    kwargs = {"labels": ids, "target_names": run.class_names, "zero_division": 0, "digits": 4}
    assert json.loads((smoke_run.dir / f"classification_report_{split}.json").read_text()) == classification_report(
        labels, predictions, output_dict=True, **kwargs)
    assert (smoke_run.dir / f"classification_report_{split}.txt").read_text() == classification_report(
        labels, predictions, **kwargs)
    metrics = getattr(RunMetrics.read(smoke_run.dir / "metrics.json"), split)
    assert metrics.n_samples == len(labels) == {"val": 17, "test": 53}[split]
    assert metrics.accuracy == pytest.approx(accuracy_score(labels, predictions))
    assert metrics.macro_f1 == pytest.approx(f1_score(labels, predictions, labels=ids, average="macro",
                                                      zero_division=0))
    assert metrics.loss == pytest.approx(F.cross_entropy(logits, torch.tensor(labels)).item(), rel=1e-5)

    # The plot: true classes down, predictions across, each row normalised, the numbers in the cells.
    matrix = confusion_matrix(labels, predictions, labels=ids, normalize="true")
    assert not np.allclose(matrix, confusion_matrix(predictions, labels, labels=ids, normalize="true"))  # (so
    # that a swap of the two would show)
    ax = smoke_run.figures[f"confusion_matrix_{split}.png"].axes[0]
    np.testing.assert_allclose(ax.images[0].get_array(), matrix)
    assert (ax.get_ylabel(), ax.get_xlabel()) == ("True label", "Predicted label")
    assert [t.get_text() for t in ax.get_yticklabels()] == [t.get_text() for t in ax.get_xticklabels()] == \
        run.class_names
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in ax.texts}
    assert cells == {(i, j): f"{matrix[i, j]:.2f}" for i in ids for j in ids}  # (row, column): its number
    assert ax.get_title().startswith(f"efficient, pe=True on bbc-news: {split} ({len(labels)} texts)\n")


@pytest.mark.slow
def test_errors_csv_and_calibration_are_the_models_own_on_each_split(smoke_run):
    """Recomputed from model.pt, one text at a time: the temperature minimises validation's negative log-likelihood
    (checked on a fine grid), ECE before and after it, errors.csv holds exactly the misclassified texts of each split
    with their calibrated probabilities, and metrics.json names the most confused pairs."""
    run = load_run(smoke_run.dir)
    metrics = RunMetrics.read(smoke_run.dir / "metrics.json")
    data = {split: run_split(smoke_run.dir, split) for split in ("val", "test")}
    logits = {split: logits_one_by_one(run.model, run.tokenizer, data[split].texts).double() for split in data}
    labels = {split: torch.tensor(data[split].labels) for split in data}

    temperature = metrics.calibration["temperature"]
    grid = torch.exp(torch.linspace(*np.log(TEMPERATURE_RANGE), 2001, dtype=torch.float64))
    losses = torch.stack([F.cross_entropy(logits["val"] / t, labels["val"]) for t in grid])
    assert F.cross_entropy(logits["val"] / temperature, labels["val"]) <= losses.min() + 1e-4
    assert abs(temperature - 1) > 0.01  # (so that a temperature left out would show)

    errors = pd.read_csv(smoke_run.dir / "errors.csv", keep_default_na=False)
    assert list(errors.columns) == ["split", "position", "text", "true", "predicted", "confidence", "runner_up"]
    assert list(errors["split"]) == sorted(errors["split"], key=["val", "test"].index)  # val first, then test
    for split in data:
        probabilities = (logits[split] / temperature).softmax(-1)
        for name, scaled in (("ece", logits[split].softmax(-1)), ("ece_calibrated", probabilities)):
            assert metrics.calibration[split][name] == pytest.approx(
                expected_calibration_error(scaled.numpy(), labels[split].numpy()), abs=1e-4)
        predicted = probabilities.argmax(-1)
        wrong = [i for i in range(len(data[split])) if predicted[i] != labels[split][i]]
        rows = errors[errors["split"] == split]
        assert sorted(rows["position"]) == wrong and len(wrong) == round((1 - getattr(metrics, split).accuracy)
                                                                         * len(data[split]))
        assert list(rows["confidence"]) == sorted(rows["confidence"], reverse=True)  # most confident first
        for row in rows.itertuples():
            p = probabilities[row.position]
            assert row.text == data[split].texts[row.position]
            assert row.true == run.class_names[data[split].labels[row.position]]
            assert row.predicted == run.class_names[int(p.argmax())]
            assert row.confidence == pytest.approx(p.max().item(), abs=1e-4)  # 4 decimals, batched float32
            assert row.runner_up == run.class_names[int(p.argsort(descending=True)[1])]
        pairs = Counter((data[split].labels[i], int(predicted[i])) for i in wrong)
        top = sorted(pairs.items(), key=lambda item: (-item[1], item[0]))[:CONFUSED_PAIRS]
        assert getattr(metrics, split).confused == [
            {"true": run.class_names[t], "predicted": run.class_names[q], "count": n} for (t, q), n in top]


@pytest.mark.slow
def test_the_loss_curve_draws_each_epochs_train_and_val_loss_and_marks_the_reported_epoch(smoke_run):
    ax = smoke_run.figures["loss_curve.png"].axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    rows = history(smoke_run.dir)
    for label, column in (("train", "train_loss"), ("val", "val_loss")):
        assert list(lines[label].get_xdata()) == [r["epoch"] for r in rows]
        np.testing.assert_allclose(lines[label].get_ydata(), [r[column] for r in rows], rtol=1e-12)
    (mark,) = [line for label, line in lines.items() if label.startswith("reported model")]
    assert set(mark.get_xdata()) == {smoke_run.metrics.reported_epoch}


@pytest.mark.slow
def test_the_tokenizer_is_learned_on_the_training_texts_only(smoke_run):
    splits = {split: run_split(smoke_run.dir, split) for split in ("train", "val", "test")}
    saved = load_tokenizer(smoke_run.dir / "tokenizer", max_length=128).get_vocab()
    assert saved == train_tokenizer(splits["train"].texts, vocab_size=1000).get_vocab()
    every_text = [text for split in splits.values() for text in split.texts]
    assert saved != train_tokenizer(every_text, vocab_size=1000).get_vocab()  # (so that the check can fail)


def test_on_a_gpu_every_split_s_batches_come_pinned_and_on_the_cpu_they_do_not(tmp_path):
    """On a GPU, batches are pinned and copied without blocking: the loaders train builds for a CUDA device pin their
    batches' memory, for every split; for the CPU, where pinning buys nothing, none does. (Building a loader touches
    no GPU, so this runs anywhere.)"""
    from mha_textclf.tokenizer.wordpiece import train_tokenizer

    rows = {split: [{"text": f"{('red', 'blue')[i % 2]} text {i}", "label": i % 2} for i in range(n)]
            for split, n in (("train", 16), ("validation", 8), ("test", 8))}
    settings = settings_for(*SMOKE, f"data.path={write_jsonl(tmp_path / 'data', rows)}")
    corpus = load_corpus(settings.data, settings.seed)
    tokenizer = train_tokenizer(corpus.train.texts, vocab_size=60)
    for device, pinned in (("cuda", True), ("cuda:0", True), ("cpu", False)):
        loaders = train_module.make_loaders(settings, corpus, tokenizer, torch.device(device))
        assert sorted(loaders) == ["test", "train", "val"]
        assert {name: loader.pin_memory for name, loader in loaders.items()} == dict.fromkeys(loaders, pinned), device


def test_the_seed_decides_the_initial_weights_and_the_batch_order_and_the_settings_shape_the_batches(
        tmp_path, monkeypatch):
    """Seeds vary the model, not the data: on a corpus with a validation split of its own (so that the seed changes no
    split), each seed starts from its own weights and draws its own order of training batches. A training batch holds
    trainer.batch_size texts, and so does an evaluation batch (evaluation keeps the training batch size); evaluation
    batches come in length order with data.group_by_length, else in the data's order, and training batches group
    texts of similar length."""
    rows = {split: [{"text": f"{('red', 'blue')[i % 2]} text {i}" + " word" * (i % 7), "label": i % 2}
                    for i in range(n)] for split, n in (("train", 40), ("validation", 20), ("test", 20))}
    folder = write_jsonl(tmp_path / "data", rows)
    real_loaders, real_build = train_module.make_loaders, train_module.build_model
    seen = {}

    def make_loaders(settings, *args, **kwargs):
        loaders = real_loaders(settings, *args, **kwargs)
        seen["train"] = [b["input_ids"].tolist() for b in loaders["train"]]  # (its generator: this run ends here)
        seen["val"] = [(ids[~padding].tolist(), label) for b in loaders["val"] for ids, padding, label in zip(
            b["input_ids"], b["padding_mask"], b["labels"].tolist(), strict=True)]  # each text's tokens, unpadded
        seen["eval sizes"] = [[len(b["labels"]) for b in loaders[split]] for split in ("val", "test")]
        return loaders

    def build_model(*args):
        seen["weights"] = {name: t.clone() for name, t in real_build(*args).state_dict().items()}
        raise StopAfterBuildingError

    monkeypatch.setattr(train_module, "make_loaders", make_loaders)
    monkeypatch.setattr(train_module, "build_model", build_model)
    runs = {}
    for name, overrides in {"seed 0": ["seed=0"], "seed 1": ["seed=1"],
                            "in data order": ["seed=0", "data.group_by_length=false"]}.items():
        with pytest.raises(StopAfterBuildingError):
            train_in_process(tmp_path / name.replace(" ", "-"), *SMOKE, "trainer.batch_size=8", *overrides,
                             data_dir=folder)
        runs[name], seen = seen, {}

    assert [len(batch) for batch in runs["seed 0"]["train"]] == [8] * 5
    assert runs["seed 0"]["train"] != runs["seed 1"]["train"]  # another order of batches...
    assert any(not torch.equal(t, runs["seed 1"]["weights"][name])  # ...and other initial weights
               for name, t in runs["seed 0"]["weights"].items())
    grouped, in_order = runs["seed 0"]["val"], runs["in data order"]["val"]
    lengths = [len(ids) for ids, _ in grouped]
    assert lengths == sorted(lengths) and [label for _, label in in_order] == [i % 2 for i in range(20)]
    assert sorted(grouped) == sorted(in_order) and grouped != in_order  # the same texts, in another order
    assert runs["seed 0"]["eval sizes"] == runs["in data order"]["eval sizes"] == [[8, 8, 4]] * 2
    # Training batches are length-grouped too (grouping changes which texts share a batch): the same texts padded to
    # fewer cells than the random batches of data.group_by_length=false.
    cells = {name: sum(len(batch) * len(batch[0]) for batch in run["train"]) for name, run in runs.items()}
    assert cells["seed 0"] < cells["in data order"] and cells["seed 1"] < cells["in data order"]


@pytest.mark.slow
def test_validation_time_is_not_counted_as_training_time(monkeypatch, tmp_path, data_dir):
    """A slow validation shows in eval_seconds and leaves train_seconds alone."""
    from mha_textclf import training

    real_evaluate = training.evaluate

    def slow_evaluate(*args, **kwargs):
        time.sleep(0.5)
        return real_evaluate(*args, **kwargs)

    monkeypatch.setattr(training, "evaluate", slow_evaluate)
    train_in_process(tmp_path, *SMOKE, "trainer.epochs=1", "probes.attention=[]", data_dir=data_dir)
    (row,) = history(tmp_path)
    assert row["eval_seconds"] >= 0.5 and row["train_seconds"] < row["eval_seconds"]  # a smoke epoch trains in ~0.1 s
    assert row["train_seconds"] == pytest.approx(row["elapsed_train_seconds"])


def test_each_stage_records_its_own_seconds_and_the_peak_memory_within_it():
    """metrics.json's `stages` holds how long each stage took and the process's peak memory in it, not the peak so
    far: a stage that allocates 200 MB, then one that allocates nothing."""
    require(peak_rss_resets(), "a stage's own peak RSS needs Linux's /proc/self/clear_refs")
    stage = train_module.Stages(torch.device("cpu"))
    with stage("large"):
        block = np.ones(200 * 2**20 // 8)  # every page written: resident
        time.sleep(0.2)
        del block
    with stage("small"):
        pass
    large, small = stage.record["large"], stage.record["small"]
    assert large["seconds"] >= 0.2 and small["seconds"] < 1.0  # (a loaded machine may pause the empty stage)
    assert large["peak_memory_mb"] - small["peak_memory_mb"] > 150


def test_on_a_gpu_each_stage_also_records_the_most_torch_allocated_there_within_it(monkeypatch):
    """Peak memory while training is the process's peak RSS from `stages.fit` and, on a GPU, also the most torch
    allocated there (`peak_cuda_mb`). Faked: torch.cuda's counters for a stage that allocates 300 MiB on the GPU and
    frees them, then one that allocates nothing; each stage has its own CUDA peak beside its peak RSS, and a CPU run's
    stages have none."""
    mib = 2**20
    cuda = {"now": 50 * mib, "peak": 50 * mib, "resets": 0}

    def reset_peak_memory_stats(device=None):
        cuda["peak"], cuda["resets"] = cuda["now"], cuda["resets"] + 1

    def allocate(n_bytes):
        cuda["now"] += n_bytes
        cuda["peak"] = max(cuda["peak"], cuda["now"])

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", reset_peak_memory_stats)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: cuda["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: cuda["peak"])
    stage = train_module.Stages(torch.device("cuda"))
    with stage("large"):
        allocate(300 * mib)
        allocate(-300 * mib)
    with stage("small"):
        pass
    assert cuda["resets"] == 2  # a fresh CUDA peak for each stage
    assert stage.record["large"]["peak_cuda_mb"] == 350.0 and stage.record["small"]["peak_cuda_mb"] == 50.0
    assert all(record["peak_memory_mb"] > 0 for record in stage.record.values())  # the process's RSS as well
    cpu_stage = train_module.Stages(torch.device("cpu"))
    with cpu_stage("fit"):
        pass
    assert set(cpu_stage.record["fit"]) == {"seconds", "peak_memory_mb"}


@pytest.mark.slow
def test_the_time_to_accuracy_setting_chooses_the_levels(tmp_path, data_dir):
    """The top-level setting `time_to_accuracy` chooses the levels metrics.json reports."""
    metrics = train_in_process(tmp_path, *SMOKE, "probes.attention=[]", "probes.order=[]",
                               "time_to_accuracy=[0.01,0.3,0.999]", data_dir=data_dir)
    rows = history(tmp_path)
    expected = {f"{level:g}": next((r["elapsed_train_seconds"] for r in rows if r["val_accuracy"] >= level), None)
                for level in (0.01, 0.3, 0.999)}
    assert expected["0.01"] is not None and expected["0.999"] is None  # (one level reached, one not)
    assert metrics.time_to_accuracy == RunMetrics.read(tmp_path / "metrics.json").time_to_accuracy == expected


@pytest.mark.slow
def test_unk_rate_counts_each_splits_unknown_tokens_as_the_model_sees_them_and_a_high_one_says_what_to_set(
        tmp_path, caplog):
    """Chinese characters, 20 frequent and 80 rare, in a 60-token vocabulary: the rare ones become [UNK]. unk_rate in
    metrics.json is their share of each split's tokens after truncation, counted here from the saved tokenizer's own
    tokens; the warning names the vocab_size at which every training character fits (and at that size it does)."""
    rng = np.random.default_rng(0)
    common, rare = [chr(0x4E00 + i) for i in range(20)], [chr(0x4E00 + 100 + i) for i in range(80)]

    def text(label: str, n: int) -> dict:
        chars = [rng.choice(common) if rng.random() < 0.9 else rng.choice(rare) for _ in range(n)]
        return {"text": f"{label} " + "".join(chars), "label": label}

    rows = {split: [text(label, 20) for label in ("red", "blue") for _ in range(n)]
            for split, n in (("train", 40), ("test", 10))}
    # Past max_length (128 tokens, [CLS] and [SEP] included), only rare characters: none of them is seen.
    rows["test"].append({"text": "red " + "".join(common) * 7 + "".join(rare), "label": "red"})
    folder = write_jsonl(tmp_path / "chars", rows)
    with caplog.at_level("INFO"):
        metrics = train_in_process(tmp_path / "run", *SMOKE, "data.max_train_samples=null", "tokenizer.vocab_size=60",
                                   "trainer.epochs=1", "probes.attention=[]", "probes.order=[]",
                                   f"tokenizer.cache_dir={tmp_path / 'cache'}", data_dir=folder)
    tokenizer = load_tokenizer(tmp_path / "run" / "tokenizer", max_length=128)
    for split in ("train", "val", "test"):
        tokens = [tokenizer.tokenize(t)[:126] for t in run_split(tmp_path / "run", split).texts]
        unknown = sum(token == "[UNK]" for row in tokens for token in row)
        assert metrics.unk_rate[split] == pytest.approx(unknown / sum(map(len, tokens)), rel=1e-12)
        assert 0.05 < metrics.unk_rate[split] < 0.2  # about 10% of the characters are rare
    assert RunMetrics.read(tmp_path / "run" / "metrics.json").unk_rate == metrics.unk_rate
    (warning,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and "[UNK]" in r.getMessage()]
    size = int(re.search(r"tokenizer\.vocab_size=(\d+)", warning).group(1))
    train_texts = run_split(tmp_path / "run", "train").texts
    every_character = train_tokenizer(train_texts, vocab_size=size)
    assert {c for t in train_texts for c in t if not c.isspace()} <= every_character.get_vocab().keys()
    def merges(tokenizer) -> list[str]:
        return [t for t in tokenizer.get_vocab() if len(t.removeprefix("##")) > 1 and t not in SPECIAL_TOKENS]

    assert len(merges(every_character)) == len(merges(tokenizer)) > 0  # and as many merges as the run's vocabulary


def test_the_unk_rate_of_every_split_is_logged_as_metrics_json_records_it(caplog):
    """Every run records the share of `[UNK]` among each split's tokens (`unk_rate` in metrics.json, counted on the
    tokens the model sees: truncated, without `[CLS]`, `[SEP]` and padding) and logs it: one line naming each split
    with its share, as a percentage, below the 1% at which it also warns. The reference counts the saved tokens
    itself."""
    from types import SimpleNamespace

    from mha_textclf.data.corpus import Corpus, Split
    from mha_textclf.tokenizer.encoding import encode

    tokenizer = train_tokenizer(["abc abd abe", "abd abc"], vocab_size=40)  # every character of these texts fits
    texts = {"train": ["abc abd abe"] * 300 + ["abc xbd"], "val": ["abd abc"] * 199 + ["abc xbd"],
             "test": ["abc abd abe"] * 400}  # one word with an unseen x among 601, 400 and 1200 words
    loaders = {split: SimpleNamespace(dataset=SimpleNamespace(input_ids=encode(tokenizer, split_texts, 128)))
               for split, split_texts in texts.items()}
    corpus = Corpus(*(Split(split_texts, [0] * len(split_texts)) for split_texts in texts.values()), ["a"])
    with caplog.at_level(logging.INFO, logger="train"):
        rates = train_module.unknown_tokens(tokenizer, loaders, corpus)
    expected = {}
    for split, split_texts in texts.items():
        tokens = [token for text in split_texts for token in tokenizer.tokenize(text)]
        expected[split] = tokens.count("[UNK]") / len(tokens)
    assert rates == pytest.approx(expected, rel=1e-12) and 0 < expected["val"] < 0.01 and expected["test"] == 0
    (line,) = [r.getMessage() for r in caplog.records if "[UNK]" in r.getMessage()]  # and no warning
    logged = dict(re.findall(r"(train|val|test) ([\d.]+)%", line))
    assert set(logged) == set(texts)
    assert {split: float(share) / 100 for split, share in logged.items()} == pytest.approx(expected, abs=5e-6)


def test_the_unk_warning_reads_the_training_texts_characters_not_the_evaluation_splits(caplog):
    """Above 1% of unknown tokens a run warns, with the `tokenizer.vocab_size` at which every character fits, or, when
    they all fit already, that the unknown tokens are characters the training texts never have: a test split
    full of a character the training texts never have gets the second warning, not a vocab_size; and a size named for
    training characters that do not fit counts those of the training texts, not those the test split happens to
    have."""
    from types import SimpleNamespace

    from mha_textclf.data.corpus import Corpus, Split
    from mha_textclf.tokenizer.encoding import encode

    def warning(tokenizer, texts) -> str:
        loaders = {split: SimpleNamespace(dataset=SimpleNamespace(input_ids=encode(tokenizer, split_texts, 128)))
                   for split, split_texts in texts.items()}
        corpus = Corpus(*(Split(split_texts, [0] * len(split_texts)) for split_texts in texts.values()), ["a"])
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="train"):
            train_module.unknown_tokens(tokenizer, loaders, corpus)
        (said,) = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        return said

    every = train_tokenizer(["abc abd"], vocab_size=40)  # every training character fits
    said = warning(every, {"train": ["abc abd"] * 10, "val": ["abc abd"] * 10, "test": ["xyz abc"] * 10})
    assert "of the test tokens, though every character of the training texts is in the vocabulary" in said
    # Too small for the training characters: a and b (10 times), c, d (4), e..h once; five of them and ##d ##f ##h
    # are left out (test_wordpiece.py: the 11-token vocabulary lacks 8 tokens, 19 holds them all).
    texts = ["ab ab ab ab ab ba ba ba ba ba", "c c c c dd dd ef gh"]
    small = train_tokenizer(texts, vocab_size=11)
    said = warning(small, {"train": texts, "val": texts, "test": ["dd dd dd", "ab"]})
    assert "5 characters of the training texts are not in the 11-token vocabulary. Use tokenizer.vocab_size=19" in said


@pytest.mark.slow
def test_trainer_num_threads_wins_over_the_launchers_share(data_dir, tmp_path, monkeypatch):
    class ThreadsSetError(Exception):  # stops the run once its threads are set
        pass

    def load_data(settings):  # the threads are set by then: no need to train
        raise ThreadsSetError(torch.get_num_threads())

    monkeypatch.setattr(train_module, "load_data", load_data)
    with pytest.raises(ThreadsSetError) as threads:
        train_in_process(tmp_path, *SMOKE, "trainer.num_threads=1", data_dir=data_dir, threads=2)  # joblib's share
    assert threads.value.args == (1,)


@pytest.mark.slow
def test_without_trainer_num_threads_torch_keeps_its_threads_or_takes_the_launchers_share(data_dir, tmp_path,
                                                                                        monkeypatch):
    """train --help: trainer.num_threads "null: torch's default, or the launcher's share of the cores", the default:
    a run on its own leaves torch's threads as they were (3 here, set before the run), and a sweep job takes the
    launcher's share (2), whatever torch had."""
    class ThreadsSetError(Exception):  # stops the run once its threads are set
        pass

    def load_data(settings):  # the threads are set by then: no need to train
        raise ThreadsSetError(torch.get_num_threads())

    monkeypatch.setattr(train_module, "load_data", load_data)
    try:
        for before, share, expected in ((3, None, 3), (3, 2, 2)):
            torch.set_num_threads(before)
            with pytest.raises(ThreadsSetError) as threads:
                train_in_process(tmp_path / str(share), *SMOKE, data_dir=data_dir, threads=share)
            assert threads.value.args == (expected,)
    finally:
        torch.set_num_threads(1)  # in-process tests run on one thread (conftest)


@pytest.mark.slow
@pytest.mark.parametrize("final_weights", ["last", "best"])
def test_a_run_that_gets_worse_keeps_its_best_epoch_and_reports_the_final_weights_with_long_inputs(
        data_dir, tmp_path, monkeypatch, final_weights):
    # A learning rate this high overshoots: the validation loss rises again within a few epochs, so patience ends
    # the run before trainer.epochs (checked below, so that a run that ignored patience could not pass), and the
    # best epoch is not the last one.
    curves, real_plot = [], train_module.plot_loss_curve
    monkeypatch.setattr(train_module, "plot_loss_curve", lambda *args, **kwargs: curves.append(
        real_plot(*args, **kwargs)) or curves[-1])  # loss_curve.png, as a figure
    metrics = train_in_process(
        tmp_path, "pe=true", "data.max_length=1024", "data.max_train_samples=48", "trainer.epochs=8",
        f"trainer.patience={PATIENCE}", "trainer.lr=3e-2", "trainer.schedule=constant", "trainer.grad_clip=1.0",
        "trainer.label_smoothing=0.1", "model.embedding_dropout=0.1", "model.mlp_dropout=0.1", "probes.attention=[]",
        *([] if final_weights == "last" else [f"trainer.final_weights={final_weights}"]), data_dir=data_dir)
    model, _ = load_checkpoint(tmp_path / "model.pt")
    assert model.positional.pe.shape[0] == 1024  # the PE buffer follows data.max_length...
    # ...and so does truncation: the tokens the pipeline trained on are the texts cut at 1024, not at 512.
    tokenizer = load_tokenizer(tmp_path / "tokenizer", max_length=1024)
    texts = load_corpus(DataSettings(path=str(data_dir), max_train_samples=48), seed=0).train.texts
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
    last = load_training_state(tmp_path / "last.pt")
    assert last["history"][0]["train_tokens"] == sum(min(n, 1024) for n in lengths) > sum(min(n, 512) for n in lengths)
    rows = history(tmp_path)
    best = min(rows, key=lambda r: r["val_loss"])
    # Patience: the run ends exactly PATIENCE epochs after its best, and before its last epoch.
    assert metrics.stopped_early and len(rows) == metrics.best_epoch + PATIENCE < 8
    # A run stopped before its last epoch (by patience here, by the search's pruner in a search) still loaded the
    # data and writes the whole contract, the probes included, but the attention map it was given no sentence for
    # (round 24: skipping the probes of a run stopped early passed).
    assert [name for name in CONTRACT if not (tmp_path / name).exists()] == ["attention_can_you_can_that.png"]
    assert metrics.best_epoch == best["epoch"] and rows[-1]["val_loss"] > 1.01 * best["val_loss"]
    # metrics.json's epochs counts the finished epochs (reports.py: "epochs: finished epochs"), the ones past the
    # best included, whichever epoch the run reports.
    assert metrics.epochs == RunMetrics.read(tmp_path / "metrics.json").epochs == len(rows) > metrics.best_epoch

    # best.pt holds the best epoch's weights, last.pt the last epoch's, and model.pt those trainer.final_weights
    # names (by default the last): evaluated afresh on the validation split, each gives the validation loss
    # history.csv recorded for its epoch.
    reported = best if final_weights == "best" else rows[-1]
    assert metrics.reported_epoch == reported["epoch"]
    final = train_module.final_values(metrics)  # what the trackers record as the run's outcome
    assert (final["final/best_epoch"], final["final/reported_epoch"]) == (best["epoch"], reported["epoch"])
    val = run_split(tmp_path, "val")

    def val_loss(weights: dict) -> float:
        evaluated = TextClassifier(model.config)
        evaluated.load_state_dict(weights)
        return F.cross_entropy(logits_one_by_one(evaluated, tokenizer, val.texts), torch.tensor(val.labels)).item()

    best_pt, _ = load_checkpoint(tmp_path / "best.pt")
    assert val_loss(best_pt.state_dict()) == pytest.approx(best["val_loss"], rel=1e-5)
    assert val_loss(model.state_dict()) == pytest.approx(reported["val_loss"], rel=1e-5)
    assert val_loss(last["model"]) == pytest.approx(rows[-1]["val_loss"], rel=1e-5)
    # The reports and metrics.json describe the reported epoch.
    assert metrics.val.loss == pytest.approx(reported["val_loss"], rel=1e-6)
    report = json.loads((tmp_path / "classification_report_val.json").read_text())
    assert report["accuracy"] == pytest.approx(reported["val_accuracy"]) == metrics.val.accuracy
    (curve,) = curves  # ...and so does the loss curve's mark
    (mark,) = [line for line in curve.axes[0].get_lines() if line.get_label().startswith("reported model")]
    assert set(mark.get_xdata()) == {reported["epoch"]}


@pytest.mark.slow
def test_a_diverging_loss_stops_and_keeps_the_finished_epochs_on_disk(data_dir, tmp_path, monkeypatch):
    real_epoch = training._train_epoch

    def diverging_in_epoch_2(model, loader, optimizer, scheduler, config, device, epoch, *args):
        if epoch == 2:
            with torch.no_grad():
                model.classifier[0].weight.fill_(float("nan"))
        return real_epoch(model, loader, optimizer, scheduler, config, device, epoch, *args)

    monkeypatch.setattr(training, "_train_epoch", diverging_in_epoch_2)
    with pytest.raises(DivergenceError, match=r"became nan at epoch 2, step 1; .* history\.csv and last\.pt keep "
                                              r"the epochs finished before it"):
        train_in_process(tmp_path, *SMOKE, "trainer.epochs=3", "probes.attention=[]", data_dir=data_dir)
    (row,) = history(tmp_path)
    assert row["epoch"] == 1
    status = files.read_status(tmp_path)  # a failure, not an interruption, and why
    assert status["state"] == lifecycle.FAILED and "became nan at epoch 2" in status["message"]
    state = load_training_state(tmp_path / "last.pt")
    assert state["epoch"] == 1 and [r["epoch"] for r in state["history"]] == [1]
    assert state["history"][0]["val_loss"] == pytest.approx(row["val_loss"], rel=1e-12)
    assert all(t.isfinite().all() for t in state["model"].values() if t.is_floating_point())
    best, _ = load_checkpoint(tmp_path / "best.pt")  # epoch 1, the best so far
    assert all(t.isfinite().all() for t in best.state_dict().values() if t.is_floating_point())

    # The cause gone (here, the poisoning), the same command continues a failed run after its last finished epoch,
    # and the folder no longer says it failed: error.txt, as the command line wrote it (cli.run_job), is gone.
    (tmp_path / "error.txt").write_text(f"DivergenceError: {status['message']}\n")
    monkeypatch.undo()
    metrics = train_in_process(tmp_path, *SMOKE, "trainer.epochs=3", "probes.attention=[]", data_dir=data_dir)
    assert metrics.epochs == 3 and [r["epoch"] for r in history(tmp_path)] == [1, 2, 3]
    assert history(tmp_path)[0] == row  # epoch 1 as it was, not trained again
    assert not (tmp_path / "error.txt").exists()
    status = files.read_status(tmp_path)
    assert (status["state"], status["attempt"], status["message"]) == (lifecycle.FINISHED, 2, None)


@pytest.mark.slow
def test_a_signal_during_the_final_evaluation_still_writes_the_reports(monkeypatch, tmp_path, data_dir):
    real_evaluate = train_module.evaluate
    calls = []

    def interrupted_evaluate(model, loader, *args, **kwargs):
        calls.append(1)
        if len(calls) == 2:  # the test split, evaluated once after training
            os.kill(os.getpid(), signal.SIGINT)
        return real_evaluate(model, loader, *args, **kwargs)

    monkeypatch.setattr(train_module, "evaluate", interrupted_evaluate)
    closed = []  # how the run's loggers were closed

    class Tracker:
        def start(self, params, tags):
            pass

        def log(self, values, step):
            pass

        def finish(self, final, run_dir, status):
            closed.append(status)

    monkeypatch.setattr(train_module, "open_trackers", lambda *args: Trackers([Tracker()]))
    handler = signal.getsignal(signal.SIGINT)  # Python's default, or what the test runner set
    metrics = train_in_process(tmp_path, *SMOKE, "probes.attention=[]", data_dir=data_dir)
    assert metrics.interrupted_by == "SIGINT" and metrics.epochs == 2  # training itself had finished
    assert RunMetrics.read(tmp_path / "metrics.json") == metrics
    assert (tmp_path / "classification_report_test.txt").exists()
    assert 'id="state">interrupted<' in (tmp_path / "report.html").read_text()  # its page says so
    assert closed == ["KILLED"]  # a run stopped by a signal, for the loggers
    assert signal.getsignal(signal.SIGINT) is handler  # the run's handler is gone again


@pytest.mark.slow
def test_own_data_with_its_own_columns_string_labels_and_class_weights(tmp_path):
    """A third-party corpus in the shape it comes in trains end to end, and predict speaks its class names; metrics.json
    records the size of the vocabulary it learned (`vocab_size`)."""
    topics = {"earn": 30, "acq": 20, "crude": 6, "grain": 4}
    folder = tmp_path / "newswire"
    folder.mkdir()
    for split, scale in (("train", 1), ("test", 0.5)):
        frame = pd.DataFrame([{"Category": t, "Text": f"{t} {t} report number {i} from the wire"}
                              for t, n in topics.items() for i in range(int(n * scale))])
        frame.to_csv(folder / f"{split}.csv", index=False)
    run_dir = tmp_path / "run"
    metrics = train_in_process(run_dir, *SMOKE, "data.max_train_samples=null", "data.text_column=Text",
                               "data.label_column=Category", "trainer.class_weights=balanced", "trainer.epochs=3",
                               "probes.attention=[]", data_dir=folder)
    assert metrics.dataset == "newswire" and metrics.class_names == sorted(topics)
    assert metrics.splits == {"train": "train split minus what was carved from it",
                              "val": "carved from the train split: 25%, stratified by class, seed 0",
                              "test": "test split"}
    assert metrics.train_samples + metrics.val.n_samples == 60 and metrics.test.n_samples == 30
    # The class weights reach the loss: the same run without them starts from another training loss.
    plain = train_in_process(tmp_path / "plain", *SMOKE, "data.max_train_samples=null", "data.text_column=Text",
                             "data.label_column=Category", "trainer.epochs=1", "probes.attention=[]", data_dir=folder)
    weighted = pd.read_csv(run_dir / "history.csv")["train_loss"][0]
    assert weighted != pytest.approx(pd.read_csv(tmp_path / "plain" / "history.csv")["train_loss"][0], rel=1e-3)
    assert plain.class_names == metrics.class_names
    # ...and the validation loss, in history.csv and in metrics.json: scikit-learn's balanced weights, from the
    # training split, in a weighted mean cross-entropy of the reported model.
    run = load_run(run_dir)
    # metrics.json holds what the run measured, `vocab_size` among it: the vocabulary the model was built with,
    # which a corpus of a few dozen distinct words leaves far below the 1000 tokens tokenizer.vocab_size asks
    # (round 22: recording the setting passed, every other run's vocabulary reached the size asked).
    assert metrics.vocab_size == len(run.tokenizer) == run.model.config.vocab_size < 1000
    val, train_labels = run_split(run_dir, "val"), run_split(run_dir, "train").labels
    weights = compute_class_weight("balanced", classes=np.arange(4), y=train_labels)
    expected = F.cross_entropy(logits_one_by_one(run.model, run.tokenizer, val.texts), torch.tensor(val.labels),
                               weight=torch.tensor(weights, dtype=torch.float32)).item()
    assert metrics.val.loss == pytest.approx(expected, rel=1e-5)
    assert min(history(run_dir), key=lambda r: r["val_loss"])["val_loss"] == pytest.approx(expected, rel=1e-5)
    table = predict(settings_for(f"run_dir={run_dir}", "text=[crude crude report,earn earn report]", app="predict"))
    assert list(table.columns) == ["text", *sorted(topics), "predicted"]


@pytest.mark.slow
def test_a_tokenizer_smaller_than_asked_is_said_with_both_sizes(smoke_run, caplog):
    """Texts that hold fewer words and pieces than the vocabulary asked: config.yaml keeps the size asked, and the log
    says the size the model has."""
    from types import SimpleNamespace

    settings = settings_for("experiment=smoke", "tokenizer.vocab_size=5000")
    texts = [text[:300] for text in run_split(smoke_run.dir, "train").texts[:10]]
    with caplog.at_level(logging.INFO, logger="train"):
        tokenizer = train_module.prepare_tokenizer(settings, settings.tokenizer, SimpleNamespace(
            train=SimpleNamespace(texts=texts)), None, None)
    assert len(tokenizer) < 5000
    assert f"the tokenizer learnt {len(tokenizer)} tokens of the 5000 asked" in caplog.text
