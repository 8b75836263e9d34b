"""mha_textclf.export and mha_textclf.serving: a trained run as ONNX (fp32, int8), served without torch."""

import json
import logging
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import REPO, optional, run_split, settings_for, train_in_process
from mha_textclf.data.batches import collate
from mha_textclf.errors import UserError
from mha_textclf.export import export_run, exportable, model_card, to_onnx
from mha_textclf.inference import load_run
from mha_textclf.model import TextClassifier
from mha_textclf.runs.metrics import RunMetrics
from mha_textclf.serving import EXPORT_FORMAT, ExportedModel
from mha_textclf.settings import ExportSettings
from mha_textclf.tokenizer.encoding import encode

optional("onnxruntime", "export")


@pytest.fixture(scope="module")
def default_run(data_dir, tmp_path_factory):
    """A bbc-news run at the defaults (the model the int8 promise is about), exported. Read only."""
    run_dir = tmp_path_factory.mktemp("default-run")
    train_in_process(run_dir, "model=efficient", "probes.attention=[]", data_dir=data_dir)
    export_run(ExportSettings(run_dir=str(run_dir)))
    return run_dir


@pytest.fixture(scope="module")
def held_out(default_run):
    return run_split(default_run, "test")


def padded_batches(ids: list[np.ndarray], pad_id: int, size: int = 64):
    """(B, T) int64 batches of `ids`, padded with [PAD] to each batch's longest, as a service would send them."""
    for start in range(0, len(ids), size):
        rows = ids[start : start + size]
        batch = np.full((len(rows), max(map(len, rows))), pad_id, dtype=np.int64)
        for i, row in enumerate(rows):
            batch[i, : len(row)] = row
        yield batch


def torch_logits(model: TextClassifier, ids: list[np.ndarray], size: int = 64) -> np.ndarray:
    """The logits training's own batches give (collate: padding masked by each text's length)."""
    with torch.no_grad():
        return np.concatenate([model(batch["input_ids"], batch["padding_mask"]).numpy() for batch in (
            collate([(row, 0) for row in ids[start : start + size]], model.config.pad_id)
            for start in range(0, len(ids), size))])


@pytest.mark.slow
def test_the_export_holds_both_models_the_tokenizer_the_classes_and_a_model_card(default_run):
    export = default_run / "export"
    meta = json.loads((export / "export.json").read_text())
    metrics = json.loads((default_run / "metrics.json").read_text())
    assert meta["format"] == EXPORT_FORMAT and meta["class_names"] == metrics["class_names"]
    # The temperature the run fitted on validation, which serving applies as predict's torch backend does.
    assert meta["max_length"] == 512 and meta["temperature"] == metrics["calibration"]["temperature"]
    exported, saved = (json.loads(path.read_text()) for path in (export / "tokenizer.json",
                                                                  default_run / "tokenizer" / "tokenizer.json"))
    assert exported["model"] == saved["model"] and exported["normalizer"] == saved["normalizer"]
    int8, fp32 = (export / "model.int8.onnx").stat().st_size, (export / "model.onnx").stat().st_size
    assert int8 * 3 < fp32  # the embedding tables (tokens, bigrams), most of the weights, in a byte each
    card = (export / "MODEL_CARD.md").read_text()
    assert f"{metrics['test']['accuracy']:.4f}" in card and f"{metrics['val']['macro_f1']:.4f}" in card
    assert all(name in card for name in metrics["class_names"])
    assert f"{metrics['calibration']['test']['ece_calibrated']:.4f} with it" in card


@pytest.mark.slow
def test_the_model_card_gives_the_scale_training_learnt_for_positions(default_run):
    """A reader of the card learns how much word order counts in the model (model.pe_gate), not just that pe is on."""
    meta = json.loads((default_run / "export" / "export.json").read_text())
    metrics = RunMetrics.read(default_run / "metrics.json")
    assert meta["pe"] is False and meta["pe_scale"] is None
    # Three significant digits: the scales training learns are small (0.03-0.07 on bbc-news, less in short runs).
    assert "0.000831" in model_card(default_run, metrics, {**meta, "pe": True, "pe_scale": 0.000831})
    assert "0.000831" not in model_card(default_run, metrics, meta)


@pytest.mark.slow
def test_onnx_reads_the_same_token_ids_and_gives_the_same_logits_as_torch_on_the_test_split(default_run, held_out):
    """And for texts that hold the literal "[PAD]" (the tokenizer gives its id; training attends to it)."""
    run, served = load_run(default_run), ExportedModel.load(default_run)
    texts = [*held_out.texts, "shares [PAD] fell sharply", "[PAD] the striker [PAD] scored [PAD]"]
    ids = served.encode(texts)
    expected_ids = encode(run.tokenizer, texts, run.model.config.max_length)
    assert all(np.array_equal(a, b) for a, b in zip(ids, expected_ids, strict=True))
    assert (ids[-1] == served.pad_id).sum() == 3
    onnx = np.concatenate([served.logits(ids[s : s + 64]) for s in range(0, len(ids), 64)])
    expected = torch_logits(run.model, ids)
    assert onnx.shape == (1002, 5) and np.abs(onnx - expected).max() <= 1e-4


@pytest.mark.slow
def test_int8_test_accuracy_is_within_0_3_points_of_fp32(default_run, held_out):
    accuracy = {}
    for int8 in (False, True):
        probabilities = ExportedModel.load(default_run, int8=int8).predict_proba(held_out.texts)
        accuracy[int8] = float((probabilities.argmax(1) == np.asarray(held_out.labels)).mean())
    metrics = json.loads((default_run / "metrics.json").read_text())
    assert accuracy[False] == pytest.approx(metrics["test"]["accuracy"], abs=1e-9)  # fp32 is the trained model
    assert abs(accuracy[True] - accuracy[False]) <= 0.003


@pytest.mark.slow
@pytest.mark.parametrize(("variant", "pe", "bigram_buckets"), [
    *[(variant, pe, None) for variant in ("naive", "efficient", "torch") for pe in (False, True)],
    ("efficient", True, 0), ("efficient", True, 997)])
def test_every_variant_with_and_without_pe_exports_the_function_torch_computes(variant, pe, bigram_buckets,
                                                                                default_run, held_out, tmp_path,
                                                                                caplog, capfd):
    """The trained weights in each variant (they share one parameterisation), with and without the positional
    encoding (a buffer, not a weight), with the run's hashed bigrams (None), without (0) and with a table of another
    size (random vectors: the hashing is what is exported);
    batches padded as a service sends them. Quietly, at the level Hydra's runs log at: the exporter's notes on
    each node it folds, and its warnings about torchvision, are not the user's business."""
    import onnxruntime as ort

    trained = load_run(default_run)
    buckets = trained.model.config.bigram_buckets if bigram_buckets is None else bigram_buckets
    torch.manual_seed(0)
    model = TextClassifier(replace(trained.model.config, attention=variant, pe=pe, bigram_buckets=buckets)).eval()
    outside = {k: v for k, v in trained.model.state_dict().items() if not k.startswith("attention.")
               and (bigram_buckets is None or not k.startswith("bigram"))}
    assert not model.load_state_dict(outside, strict=False).unexpected_keys
    model.attention.load_projections(trained.model.attention.projections())
    if pe:  # the gate as training leaves it, off 0, so that the encoding reaches the keys
        with torch.no_grad():
            model.positional.scale.fill_(0.5)
    capfd.readouterr()
    with caplog.at_level(logging.INFO):
        to_onnx(model, tmp_path / "model.onnx")
    assert caplog.records == [] and capfd.readouterr().err == ""
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = encode(trained.tokenizer, held_out.texts, model.config.max_length)
    batches = list(padded_batches(ids, model.config.pad_id))
    onnx = np.concatenate([session.run(["logits"], {"input_ids": b})[0] for b in batches])
    expected = torch_logits(model, ids)
    assert np.abs(onnx - expected).max() <= 1e-4
    assert len(np.unique(expected.argmax(1))) > 1  # the weights tell texts apart: the comparison means something


@pytest.mark.slow
def test_exporting_leaves_the_model_it_is_given_as_training_runs_compute(default_run):
    """The exported copy uses the masked computation (a traced graph cannot size tensors by the data) in eval mode;
    the model given keeps compacting and stays in the mode it was in."""
    run = load_run(default_run)
    run.model.train()
    wrapper = exportable(run.model)
    assert not wrapper.model.compact and not wrapper.model.training
    assert run.model.compact and run.model.training


@pytest.mark.slow
def test_predict_with_the_onnx_backends_imports_no_torch_and_prints_the_torch_backend_s_table(default_run, held_out,
                                                                                                 tmp_path):
    texts = [" ".join(text.split()) for text in held_out.texts[:3]]  # one line each
    texts_file = tmp_path / "texts.txt"
    texts_file.write_text("\n".join(texts))
    out = {}
    for backend in ("torch", "onnx", "onnx-int8"):
        # A fresh interpreter: the tests' forked commands preload torch.
        code = ("import runpy, sys; sys.argv[0] = 'predict'; runpy.run_module('predict', run_name='__main__'); "
                "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)")
        args = [f"run_dir={default_run}", f"file={texts_file}", f"out={tmp_path / backend}.csv",
                f"backend={backend}"]
        result = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, result.stderr[-3000:]
        assert f"torch imported: {backend == 'torch'}" in result.stderr
        out[backend] = pd.read_csv(tmp_path / f"{backend}.csv")
        assert all(name in result.stdout for name in out[backend]["predicted"])  # the table, printed
    classes = json.loads((default_run / "export" / "export.json").read_text())["class_names"]
    assert list(out["onnx"].columns) == list(out["torch"].columns) == ["text", *classes, "predicted"]
    assert out["onnx"]["text"].tolist() == texts
    np.testing.assert_allclose(out["onnx"][classes], out["torch"][classes], atol=1e-5)
    assert out["onnx"]["predicted"].tolist() == out["torch"]["predicted"].tolist()
    assert out["onnx-int8"]["predicted"].tolist() == out["torch"]["predicted"].tolist()
    assert not out["torch"]["predicted"].eq(out["torch"]["predicted"][0]).all()  # texts of more than one class


BLOCKER = """
import sys
from importlib.abc import MetaPathFinder
BLOCKED = {"torch", "transformers", "datasets", "sklearn", "scipy", "pandas", "hydra", "omegaconf", "matplotlib",
           "yaml", "tqdm"}
ALLOWED = {"mha_textclf", "mha_textclf.serving", "mha_textclf.errors", "mha_textclf.predictions",
           "mha_textclf.tokenizer", "mha_textclf.tokenizer.prefix"}
class Blocker(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED or (name.startswith("mha_textclf") and name not in ALLOWED):
            raise ImportError(f"{name} is not installed")
sys.meta_path.insert(0, Blocker())
from mha_textclf.serving import ExportedModel
model = ExportedModel.load(__import__("pathlib").Path(sys.argv[1]), int8=True, threads=1)
print(model.class_names[model.predict_proba(sys.argv[2:]).argmax(1)[0]])
"""


@pytest.mark.slow
def test_serving_needs_only_onnxruntime_tokenizers_and_numpy(default_run, held_out):
    result = subprocess.run([sys.executable, "-c", BLOCKER, str(default_run), held_out.texts[0]], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    run = load_run(default_run)
    with torch.no_grad():
        logits = run.model(torch.as_tensor(encode(run.tokenizer, held_out.texts[:1], 512)[0], dtype=torch.long)[None])
    assert result.stdout.strip() == run.class_names[int(logits.argmax())]


@pytest.mark.unit
def test_a_folder_without_a_finished_model_is_refused_with_what_to_run(tmp_path):
    with pytest.raises(UserError, match="is not a folder"):
        export_run(ExportSettings(run_dir=str(tmp_path / "nowhere")))
    (tmp_path / "status.json").write_text(json.dumps({"state": "interrupted"}))
    with pytest.raises(UserError, match=r"lacks model.pt, tokenizer, metrics.json: export a run that finished"):
        export_run(ExportSettings(run_dir=str(tmp_path)))
    for name in ("model.pt", "tokenizer", "metrics.json"):
        (tmp_path / name).mkdir()
    with pytest.raises(UserError, match=r"is interrupted, not finished: export a run that finished training\. "
                                        r"Finish it with the command that started it, in its folder "
                                        rf"\(hydra.run.dir={tmp_path}\)"):
        export_run(ExportSettings(run_dir=str(tmp_path)))
    # Where Hydra recorded the overrides, the exact command that finishes it in place.
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- model=naive\n- pe=true\n")
    with pytest.raises(UserError) as info:
        export_run(ExportSettings(run_dir=str(tmp_path)))
    assert f"Finish it in place: python -m train model=naive pe=true hydra.run.dir={tmp_path}; or train" in \
        str(info.value)


@pytest.mark.unit
def test_a_failed_run_is_refused_naming_its_error_file_not_the_command_that_failed(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- data.text_column=body\n")
    (tmp_path / "status.json").write_text(json.dumps({"state": "failed"}))
    with pytest.raises(UserError) as info:
        export_run(ExportSettings(run_dir=str(tmp_path)))
    assert f"holds a run that failed; what went wrong is in {tmp_path / 'error.txt'}" in str(info.value)
    assert "python -m train" not in str(info.value)
    assert not (tmp_path / "export").exists()


@pytest.mark.unit
def test_without_the_export_extra_the_export_says_what_to_install_and_writes_nothing(tmp_path, monkeypatch):
    for name in ("model.pt", "tokenizer", "metrics.json"):
        (tmp_path / name).mkdir()
    monkeypatch.setitem(sys.modules, "onnxscript", None)  # as if not installed: imports and find_spec both fail
    with pytest.raises(UserError, match=r"needs the optional packages of the `export` extra \(onnxscript missing "
                                        r"here\): pip install -e \"\.\[export\]\"$"):
        export_run(ExportSettings(run_dir=str(tmp_path)))
    assert not (tmp_path / "export").exists()


@pytest.mark.unit
def test_a_run_without_an_export_or_with_another_version_s_says_what_to_run(tmp_path):
    with pytest.raises(UserError, match=rf"holds no export; make one with: python -m export run_dir={tmp_path}$"):
        ExportedModel.load(tmp_path)
    (tmp_path / "export").mkdir()
    (tmp_path / "export" / "export.json").write_text(json.dumps({"format": "mha-textclf-export/0"}))
    with pytest.raises(UserError, match=r"format 'mha-textclf-export/0'.*export it again with python -m export"):
        ExportedModel.load(tmp_path)
    (tmp_path / "export" / "export.json").write_text(json.dumps({"format": EXPORT_FORMAT}))
    with pytest.raises(UserError, match=r"lacks model.int8.onnx, tokenizer.json; export it again"):
        ExportedModel.load(tmp_path, int8=True)


@pytest.mark.unit
def test_an_unknown_backend_and_a_gpu_for_onnx_are_named_before_anything_loads(capsys):
    from mha_textclf import cli

    with pytest.raises(UserError, match=r"device=cuda: backend=onnx runs on the CPU \(onnxruntime\); leave device "
                                        r"at cpu, or use backend=torch for a GPU\.$"):
        settings_for("run_dir=x", "backend=onnx", "device=cuda", app="predict")
    with pytest.raises(SystemExit) as exited:
        cli.check_command_line("predict", ["run_dir=x", "backend=tflite"])
    message = capsys.readouterr().err
    assert exited.value.code == 2 and "backend=tflite" in message and "onnx-int8" in message


@pytest.mark.slow
def test_the_benchmark_measures_each_backend_in_a_process_of_its_own_side_by_side(default_run):
    result = subprocess.run([sys.executable, "scripts/benchmark_export.py", str(default_run), "--repeats", "1"],
                            cwd=REPO, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [line.strip("|").split("|") for line in result.stdout.splitlines() if line.startswith("| ")][1:]
    table = {cells[0].strip(): [cell.strip() for cell in cells[1:]] for cells in rows}
    assert list(table) == ["torch", "onnx", "onnx-int8"]
    assert table["torch"][4] == "1.00×" and all(float(row[3]) > 0 for row in table.values())  # peak RSS measured
    metrics = json.loads((default_run / "metrics.json").read_text())
    assert table["torch"][-1] == table["onnx"][-1] == f"{metrics['test']['accuracy']:.4f}"
    assert float(table["onnx-int8"][5]) < float(table["onnx"][5])  # the int8 file is the smaller


@pytest.mark.unit
def test_an_onnxruntime_call_takes_at_most_max_tokens_positions_and_the_rows_keep_their_order(monkeypatch):
    from mha_textclf import serving

    calls = []

    class Session:
        def run(self, names, feeds):
            batch = feeds["input_ids"]
            calls.append(batch.shape)
            return [np.stack([batch[:, 0], (batch != 0).sum(1)], axis=1)]  # each row's first id and its length

    monkeypatch.setattr(serving, "MAX_TOKENS", 12)
    model = ExportedModel(Session(), None, ["a", "b"], pad_id=0, max_length=8, temperature=None)
    lengths = [3, 5, 2, 8, 4, 4, 1, 6]
    ids = [np.arange(i + 1, i + 1 + n) for i, n in enumerate(lengths)]
    logits = model.logits(ids)
    assert logits[:, 0].tolist() == list(range(1, 9)) and logits[:, 1].tolist() == lengths
    assert all(b * t <= 12 for b, t in calls) and sum(b for b, _ in calls) == 8 and len(calls) < 8


@pytest.mark.unit
def test_a_stored_temperature_divides_the_logits_before_the_softmax_and_keeps_the_predicted_class():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 1.5, 0.0]], dtype=np.float32)

    class Session:
        def run(self, names, feeds):
            return [logits[: len(feeds["input_ids"])]]

    class Tokenizer:
        def encode_batch(self, texts):
            return [type("Encoding", (), {"ids": [2, 5, 3]})() for _ in texts]

    def probabilities(temperature):
        model = ExportedModel(Session(), Tokenizer(), ["a", "b", "c"], pad_id=0, max_length=8,
                              temperature=temperature)
        return model.predict_proba(["one text", "another"])

    plain, calibrated = probabilities(None), probabilities(2.0)
    expected = np.exp(logits / 2) / np.exp(logits / 2).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(calibrated, expected, rtol=1e-6)
    assert not np.allclose(plain, calibrated) and (plain.argmax(1) == calibrated.argmax(1)).all()
