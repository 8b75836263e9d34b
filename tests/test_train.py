"""End to end through the real CLI: one run checks the run-folder contract, one multirun compares the variants."""

import csv
import json
from pathlib import Path

import pandas as pd
import pytest

from conftest import run_train
from mha_textclf.checkpoint import load_checkpoint, load_training_state
from mha_textclf.data import load_corpus
from mha_textclf.tokenizer import load_tokenizer

SMOKE = ["data.max_train_samples=48", "trainer.epochs=2", "trainer.batch_size=16"]
CONTRACT = [".hydra/config.yaml", ".hydra/overrides.yaml", "train.log", "history.csv", "loss_curve.png",
            "classification_report_val.txt", "classification_report_val.json", "classification_report_test.txt",
            "classification_report_test.json", "confusion_matrix_val.png", "confusion_matrix_test.png",
            "metrics.json", "model.pt", "best.pt", "last.pt", "tokenizer/tokenizer.json",
            "attention_can_you_can_that.png", "order_probe.json"]


def history(run_dir: Path) -> list[dict]:
    with (run_dir / "history.csv").open() as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


@pytest.mark.slow
def test_single_run_writes_the_whole_contract(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    result = run_train("model=efficient", "pe=true", *SMOKE, f"hydra.run.dir={run_dir}", data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    missing = [name for name in CONTRACT if not (run_dir / name).is_file()]
    assert not missing, f"missing from the run folder: {missing}"

    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["model"] == "efficient" and metrics["pe"] is True and metrics["seed"] == 0
    assert metrics["device"] == "cpu" and metrics["epochs"] == 2 and len(metrics["epoch_seconds"]) == 2
    assert metrics["class_names"] == ["tech", "business", "sport", "entertainment", "politics"]
    for split, n in (("val", 17), ("test", 53)):
        assert set(metrics[split]) == {"accuracy", "macro_f1", "loss", "n_samples"}
        assert metrics[split]["n_samples"] == n and 0 <= metrics[split]["accuracy"] <= 1
    assert metrics["train_seconds"] > 0 and metrics["tokens_per_second"] > 0
    assert {"torch", "transformers", "tokenizers", "python"} <= set(metrics["versions"])

    rows = history(run_dir)
    assert [r["epoch"] for r in rows] == [1, 2]
    best = min(rows, key=lambda r: r["val_loss"])  # reports come from the epoch with the lowest validation loss
    assert metrics["best_epoch"] == best["epoch"] and best["val_accuracy"] == pytest.approx(metrics["val"]["accuracy"])
    report = json.loads((run_dir / "classification_report_test.json").read_text())
    assert set(metrics["class_names"]) <= set(report)  # class names, not ids
    assert "epoch 2/2" in (run_dir / "train.log").read_text()

    model, class_names = load_checkpoint(run_dir / "model.pt")
    assert model.config.attention == "efficient" and model.config.pe and class_names == metrics["class_names"]
    tokenizer = load_tokenizer(run_dir / "tokenizer", max_length=512)
    assert len(tokenizer) == model.config.vocab_size == metrics["vocab_size"]
    assert model.num_parameters() == metrics["params"]


@pytest.mark.slow
def test_multirun_variants_agree(data_dir, tmp_path):
    """Same seed, three variants, with and without PE: the same training trajectory (issue: one function)."""
    sweep = tmp_path / "sweep"
    result = run_train("-m", "model=naive,efficient,torch", "pe=false,true", *SMOKE, f"hydra.sweep.dir={sweep}",
                       data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    jobs = {p.name: p for p in sweep.iterdir() if p.is_dir()}
    assert sorted(int(name.split("_")[0]) for name in jobs) == list(range(6))  # one folder per job, numbered
    assert "0_data.max_train_samples-48_model-naive_pe-False_trainer.batch_size-16_trainer.epochs-2" in jobs

    def job(model: str, pe: str) -> Path:
        (name,) = [n for n in jobs if f"_model-{model}_" in n and f"_pe-{pe}_" in n]
        return jobs[name]

    for pe in ("False", "True"):
        runs = {m: job(m, pe) for m in ("naive", "efficient", "torch")}
        histories = {m: history(d) for m, d in runs.items()}
        metrics = {m: json.loads((d / "metrics.json").read_text()) for m, d in runs.items()}
        assert len(histories["efficient"]) == 2
        for m in ("naive", "torch"):
            for mine, theirs in zip(histories[m], histories["efficient"], strict=True):
                for column in ("train_loss", "val_loss"):
                    assert mine[column] == pytest.approx(theirs[column], rel=1e-4), (m, pe, column)
            assert metrics[m]["val"]["accuracy"] == pytest.approx(metrics["efficient"]["val"]["accuracy"], abs=1e-9)
            assert metrics[m]["params"] == metrics["efficient"]["params"]
    # The end-of-sweep hook summarised it: one row per job, the grouped table, both plots.
    summary = pd.read_csv(sweep / "summary.csv")
    assert len(summary) == 6 and set(summary["status"]) == {"ok"}
    assert sorted(zip(summary["model"], summary["pe"], strict=True)) == sorted(
        (m, pe) for m in ("naive", "efficient", "torch") for pe in (False, True))
    assert "## By model, pe" in (sweep / "summary.md").read_text()
    assert (sweep / "loss_curves.png").stat().st_size > 0 and (sweep / "accuracy_vs_time.png").stat().st_size > 0


@pytest.mark.slow
def test_long_inputs_and_early_stopping_end_to_end(data_dir, tmp_path):
    run_dir = tmp_path / "run"
    result = run_train("pe=true", "data.max_length=1024", "data.max_train_samples=48", "trainer.epochs=4",
                       "trainer.patience=1", "trainer.lr=3e-2", "trainer.schedule=cosine", "trainer.warmup_epochs=1",
                       "trainer.grad_clip=1.0", "trainer.label_smoothing=0.1", "model.embedding_dropout=0.1",
                       "model.mlp_dropout=0.1", f"hydra.run.dir={run_dir}", data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    model, _ = load_checkpoint(run_dir / "model.pt")
    assert model.positional.pe.shape[0] == 1024  # the PE buffer follows data.max_length...
    # ...and so does truncation: the tokens the pipeline trained on are the texts cut at 1024, not at 512.
    tokenizer = load_tokenizer(run_dir / "tokenizer", max_length=1024)
    texts = load_corpus(str(data_dir), 0.25, seed=0, max_train_samples=48).train.texts
    lengths = [len(ids) for ids in tokenizer(texts, truncation=False)["input_ids"]]
    trained_on = load_training_state(run_dir / "last.pt")["history"][0]["train_tokens"]
    assert trained_on == sum(min(n, 1024) for n in lengths) > sum(min(n, 512) for n in lengths)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    rows = history(run_dir)
    best = min(rows, key=lambda r: r["val_loss"])
    assert metrics["best_epoch"] == best["epoch"] and (run_dir / "best.pt").exists()
    assert metrics["val"]["loss"] == pytest.approx(best["val_loss"], rel=1e-6)  # reported from the best epoch
    assert metrics["training"]["schedule"] == "cosine" and metrics["regularisation"]["embedding_dropout"] == 0.1
    assert metrics["stopped_early"] == (len(rows) < 4)
