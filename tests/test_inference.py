"""Questions to a trained run: predict CLI, order sensitivity, attention heatmaps, safe loading."""

import json
import os
import shutil

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import capture_figures, logits_one_by_one, run_cli, run_train, settings_for, train_in_process
from mha_textclf.errors import UserError
from mha_textclf.inference import attention_map, load_run, predict_proba
from mha_textclf.predictions import predict
from mha_textclf.reports import slug
from mha_textclf.runs.checkpoint import CHECKPOINT_FORMAT, load_checkpoint, save_checkpoint
from mha_textclf.tokenizer.encoding import encode
from mha_textclf.tokenizer.wordpiece import train_tokenizer

PROBES = ["how are you", "you how are"]


@pytest.fixture(scope="module")
def runs(smoke_run, data_dir, tmp_path_factory):
    """Two tiny trained runs: a bag of tokens (without positional encoding or bigrams), and the session's shared run
    (with both). Read only."""
    without = tmp_path_factory.mktemp("run-pe-False")
    train_in_process(without, "pe=false", "model.bigram_buckets=0", "experiment=smoke", "trainer.epochs=1",
                     "probes.attention=[]", data_dir=data_dir)
    return {False: without, True: smoke_run.dir}


@pytest.mark.slow
def test_predict_cli_prints_and_writes_probabilities_of_the_model(runs, tmp_path):
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    # run_dir relative to the folder the command runs in, as a user would type it.
    result = run_cli("predict", f"run_dir={os.path.relpath(runs[True], workdir)}", f"text={json.dumps(PROBES)}",
                     "out=predictions.csv", cwd=workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert os.listdir(workdir) == ["predictions.csv"]  # nothing else lands in the current directory
    assert "wrote" in result.stderr and "wrote" not in result.stdout  # the table on stdout, messages on stderr
    table = pd.read_csv(workdir / "predictions.csv")
    run = load_run(runs[True])
    assert list(table.columns) == ["text", *run.class_names, "predicted"]
    assert table["text"].tolist() == PROBES
    probabilities = table[run.class_names].to_numpy()
    np.testing.assert_allclose(probabilities.sum(axis=1), 1, atol=1e-5)
    # The model's own forward pass, one text at a time (no padding involved), its logits divided by the temperature
    # the run fitted on validation (metrics.json's).
    temperature = json.loads((runs[True] / "metrics.json").read_text())["calibration"]["temperature"]
    assert run.temperature == temperature and abs(temperature - 1) > 0.01  # (so that leaving it out would show)
    for text, row in zip(PROBES, probabilities, strict=True):
        ids = torch.as_tensor(encode(run.tokenizer, [text], 512)[0], dtype=torch.long)[None]
        with torch.no_grad():
            expected = (run.model(ids) / temperature).softmax(-1)[0].numpy()
        np.testing.assert_allclose(row, expected, atol=1e-6)
    assert table["predicted"].tolist() == [run.class_names[i] for i in probabilities.argmax(axis=1)]
    # The printed table: one row per text, the probability of each class (4 decimals), then the predicted class.
    header, *rows = result.stdout.strip().splitlines()
    assert header.split() == ["text", *run.class_names, "predicted"]
    assert len(rows) == len(PROBES)
    for text, row, predicted, line in zip(PROBES, probabilities, table["predicted"], rows, strict=True):
        assert line.strip().startswith(text)
        assert line.strip()[len(text):].split() == [f"{p:.4f}" for p in row] + [predicted]


@pytest.mark.slow
def test_predict_reads_a_file(runs, tmp_path):
    """predict writes nothing except `out`: the run folder is as it was, file for file, and the texts' folder holds only
    the texts and out."""
    texts = tmp_path / "texts.txt"
    long = " ".join(["the minister said the striker scored twice"] * 40)  # past the run's max_length (128 tokens)
    texts.write_text(f"the minister said\n\nthe striker scored twice\n{long}\n")
    out = tmp_path / "predictions.csv"

    def files(folder):
        return {p.relative_to(folder): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")}

    before = files(runs[False])
    table = predict(settings_for(f"run_dir={runs[False]}", f"file={texts}", f"out={out}", app="predict"))
    assert files(runs[False]) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["predictions.csv", "texts.txt"]
    assert table["text"].tolist() == ["the minister said", "the striker scored twice", long]  # blank lines skipped
    pd.testing.assert_frame_equal(pd.read_csv(out), table, check_dtype=False)
    # Texts of different lengths share a padded batch: each row is still what the model says of its text alone, a
    # long one cut where training cut it (logits_one_by_one: at the model's max_length).
    run = load_run(runs[False])
    logits = logits_one_by_one(run.model, run.tokenizer, table["text"].tolist())
    expected = (logits / run.temperature).softmax(-1).numpy()
    np.testing.assert_allclose(table[run.class_names].to_numpy(), expected, atol=1e-6)
    assert table["predicted"].tolist() == [run.class_names[i] for i in expected.argmax(axis=1)]
    # calibrated=false: the plain softmax, the same predicted classes.
    plain = predict(settings_for(f"run_dir={runs[False]}", f"file={texts}", "calibrated=false", app="predict"))
    np.testing.assert_allclose(plain[run.class_names].to_numpy(), logits.softmax(-1).numpy(), atol=1e-6)
    assert plain["predicted"].tolist() == table["predicted"].tolist()
    with pytest.raises(UserError, match="Nothing to predict"):
        predict(settings_for(f"run_dir={runs[False]}", app="predict"))
    with pytest.raises(UserError, match="does not exist"):
        predict(settings_for(f"run_dir={runs[False]}", f"file={tmp_path / 'none.txt'}", app="predict"))
    with pytest.raises(UserError, match="which does not exist; give a file name in an existing folder"):
        predict(settings_for(f"run_dir={runs[False]}", "text=hello", f"out={tmp_path}/no/such/file.csv", app="predict"))
    with pytest.raises(UserError, match="is a folder"):
        predict(settings_for(f"run_dir={runs[False]}", "text=hello", f"out={tmp_path}", app="predict"))
    with pytest.raises(UserError, match="is not a folder"):
        predict(settings_for(f"run_dir={tmp_path / 'nowhere'}", "text=hello", app="predict"))
    failed = tmp_path / "failed"
    failed.mkdir()
    (failed / "status.json").write_text('{"state": "failed"}')
    with pytest.raises(UserError, match=f"holds a run that failed before it saved a model; what went wrong is in "
                                        f"{failed / 'error.txt'}"):
        predict(settings_for(f"run_dir={failed}", "text=hello", app="predict"))


@pytest.mark.slow
def test_predict_answers_with_the_reported_model_not_best_pt(smoke_run, tmp_path):
    """model.pt holds the reported model (trainer.final_weights: the last finished epoch by default), and best.pt the
    weights of the epoch with the lowest validation loss; predict reads model.pt (a run whose best epoch is not its last
    holds two different models)."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(smoke_run.dir / "model.pt", run_dir / "model.pt")
    (run_dir / "tokenizer").symlink_to(smoke_run.dir / "tokenizer")
    reported, class_names = load_checkpoint(run_dir / "model.pt")
    earlier, _ = load_checkpoint(run_dir / "model.pt")
    with torch.no_grad():
        for parameter in earlier.parameters():
            parameter.mul_(-1.5)  # another epoch's weights
    save_checkpoint(run_dir / "best.pt", earlier, class_names)
    texts = ["the striker scored twice", "the minister said no"]
    table = predict(settings_for(f"run_dir={run_dir}", f"text={json.dumps(texts)}", app="predict"))
    tokenizer = load_run(run_dir).tokenizer
    expected = logits_one_by_one(reported, tokenizer, texts).softmax(-1).numpy()
    other = logits_one_by_one(earlier, tokenizer, texts).softmax(-1).numpy()
    assert not np.allclose(expected, other, atol=1e-3)  # (so that reading best.pt would show)
    np.testing.assert_allclose(table[class_names].to_numpy(), expected, atol=1e-6)


@pytest.mark.slow
def test_word_order_changes_probabilities_only_with_pe_or_bigrams(runs):
    without, with_pe = (json.loads((runs[pe] / "order_probe.json").read_text()) for pe in (False, True))
    assert without["texts"] == with_pe["texts"] == PROBES
    assert without["max_abs_difference"] < 1e-6  # a bag of tokens: same up to float rounding
    assert without["bigram_buckets"] == 0 and with_pe["bigram_buckets"] == 1024  # the smoke run's table
    assert with_pe["max_abs_difference"] > 1e-5
    # Its positions reach the keys: training moved the gate off the 0 it starts at (model.pe_gate), as the probe says.
    assert with_pe["pe_scale"] == load_run(runs[True]).model.positional.scale.item() != 0
    assert without["pe_scale"] is None
    for pe, probe in ((False, without), (True, with_pe)):
        run = load_run(runs[pe])
        # The reference: the model's own forward pass on each text alone, and the largest gap over the classes.
        expected = logits_one_by_one(run.model, run.tokenizer, PROBES).softmax(-1).numpy()
        for text, row in zip(PROBES, expected, strict=True):
            assert probe["probabilities"][text] == pytest.approx(dict(zip(run.class_names, row, strict=True)),
                                                                 abs=1e-6)
        assert probe["max_abs_difference"] == pytest.approx(np.abs(expected[0] - expected[1]).max(), abs=1e-6)


@pytest.mark.slow
def test_heatmaps_have_one_panel_per_head_plus_the_mean(smoke_run):
    """What attention_can_you_can_that.png draws: the reported model's weights for the probe, queries down, keys
    across, every head and their mean on one colour scale."""
    run = load_run(smoke_run.dir)
    tokens, weights = attention_map(run.model, run.tokenizer, "can you can that")
    assert tokens == ["[CLS]", "can", "you", "can", "that", "[SEP]"]
    assert weights.shape == (run.model.config.n_heads, 6, 6)
    np.testing.assert_allclose(weights.sum(axis=-1), 1, atol=1e-5)  # each query's row
    # The reference: the model's own forward pass with every query, from the efficient variant's projections.
    ids = torch.as_tensor(encode(run.tokenizer, ["can you can that"], 512)[0], dtype=torch.long)[None]
    with torch.no_grad():
        x = run.model.embedding(ids) + run.model.bigrams(run.model.bigram_ids(ids))  # the smoke run has bigrams
        x = run.model.positional(x * run.model.embedding_scale)
        P, nh = run.model.attention.projections(), run.model.config.n_heads
        q, k = ((x @ P[f"W_{n}"].T + P[f"b_{n}"]).view(1, 6, nh, -1).transpose(1, 2) for n in "qk")
        expected = (q @ k.transpose(-2, -1) / q.size(-1) ** 0.5).softmax(-1)[0].numpy()  # (nh, T, T)
    np.testing.assert_allclose(weights, expected, atol=1e-5)
    figure = smoke_run.figures["attention_can_you_can_that.png"]
    panels = [ax for ax in figure.axes if ax.images]
    assert [ax.get_title() for ax in panels] == [f"head {h}" for h in range(nh)] + ["mean over heads"]
    for ax, drawn in zip(panels, [*weights, weights.mean(axis=0)], strict=True):
        np.testing.assert_allclose(ax.images[0].get_array(), drawn, atol=1e-6)
        assert [t.get_text() for t in ax.get_xticklabels()] == [t.get_text() for t in ax.get_yticklabels()] == tokens
        assert ax.images[0].get_clim() == (0, pytest.approx(weights.max()))
    # The axes say so too: "query" down the left of the rows, "key" under the bottom row.
    assert {ax.get_ylabel() for ax in panels} - {""} == {"query"}
    assert {ax.get_xlabel() for ax in panels} - {""} == {"key"}


@pytest.mark.slow
def test_predict_runs_on_the_cpu_unless_told_otherwise(runs, monkeypatch):
    from mha_textclf import inference

    asked = []
    real = inference.resolve_device
    monkeypatch.setattr(inference, "resolve_device", lambda name: asked.append(name) or real("cpu"))
    predict(settings_for(f"run_dir={runs[False]}", "text=hello", app="predict"))
    predict(settings_for(f"run_dir={runs[False]}", "text=hello", "device=auto", app="predict"))
    assert asked == ["cpu", "auto"]


@pytest.mark.slow
def test_predict_loads_the_model_onto_the_device_asked_for_where_a_gpu_is(runs, monkeypatch):
    """predict --help: device "cpu | cuda | cuda:N | auto"; predict runs on the CPU by default (`device=cpu`). Faked: a
    machine where torch.cuda says a GPU is present; the model is asked for on the device the setting names (auto: CUDA),
    the CPU by default, and is then loaded on the CPU here to answer the same table."""
    from mha_textclf import inference

    asked, real = [], inference.load_checkpoint
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(inference, "load_checkpoint", lambda path, device: asked.append(torch.device(device))
                        or real(path, "cpu"))
    tables = [predict(settings_for(f"run_dir={runs[False]}", "text=hello", *device, app="predict"))
              for device in ([], ["device=cuda"], ["device=cuda:1"], ["device=auto"], ["device=cpu"])]
    assert asked == [torch.device(d) for d in ("cpu", "cuda", "cuda:1", "cuda", "cpu")]
    assert all(table.equals(tables[0]) for table in tables)


class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.slow
def test_a_checkpoint_holding_code_is_refused_without_running_it(runs, tmp_path):
    evil = tmp_path / "evil"
    evil.mkdir()
    (evil / "tokenizer").symlink_to(runs[False] / "tokenizer")
    marker = tmp_path / "pwned"
    torch.save({"format": CHECKPOINT_FORMAT, "state_dict": RunsCode(marker)}, evil / "model.pt")
    with pytest.raises(UserError, match="not a checkpoint this project can load safely") as info:
        predict(settings_for(f"run_dir={evil}", "text=hello", app="predict"))
    assert str(evil / "model.pt") in str(info.value)
    assert not marker.exists()


@pytest.mark.slow
def test_mismatched_or_missing_files_are_clear_errors(runs, tmp_path):
    run = load_run(runs[False])
    bad = tmp_path / "bad"
    (bad / "tokenizer").mkdir(parents=True)
    run.model.config.vocab_size += 1  # the config now disagrees with the weights it is saved with
    save_checkpoint(bad / "model.pt", run.model, run.class_names)
    with pytest.raises(UserError, match="do not match its own model config"):
        load_run(bad)
    run.model.config.vocab_size -= 1
    save_checkpoint(bad / "model.pt", run.model, run.class_names)
    with pytest.raises(UserError, match="No tokenizer"):
        load_run(bad)
    # A tokenizer of another size: from another run, its ids would mean other tokens to this model.
    train_tokenizer(["the striker scored twice", "the minister said"], vocab_size=60).save_pretrained(bad / "tokenizer")
    with pytest.raises(UserError, match=r"has \d+ tokens but .*model\.pt was trained with \d+; the two files come "
                                        r"from different runs"):
        load_run(bad)
    with pytest.raises(UserError, match=r"Text number\(s\) \[2, 4\] are empty"):  # counted from 1, as a user does
        predict_proba(run.model, run.tokenizer, ["fine", "  ", "good", ""])


@pytest.mark.slow
def test_predicting_with_an_interrupted_run_says_it_is_not_the_finished_model(runs, tmp_path, caplog):
    """A run stopped by a signal keeps the model it reported then (model.pt): predict answers with it, and warns that
    it is not the trained one (so for any state but finished: continued in place, then failed or killed, it keeps
    the earlier attempt's); a finished run's folder gets no such warning."""
    import logging

    interrupted = tmp_path / "interrupted"
    shutil.copytree(runs[False], interrupted)
    status = json.loads((interrupted / "status.json").read_text())
    (interrupted / "status.json").write_text(json.dumps(status | {"state": "interrupted", "epochs_done": 3}))
    with caplog.at_level(logging.WARNING, logger="mha_textclf.inference"):
        load_run(runs[False])
        assert not caplog.records
        load_run(interrupted)
    assert [r.getMessage() for r in caplog.records] == [
        f"{interrupted} is interrupted, not finished: its model.pt is the model an attempt reported when it stopped, "
        "not the trained one (its train.log says what happened, and how to finish it)."]


@pytest.mark.slow
def test_predict_names_the_file_of_each_problem_with_a_run_folder(runs, tmp_path):
    """predict refuses a missing or foreign model.pt and a tokenizer missing or from another run, naming the file and
    the problem: each refusal holds the path of the file at fault (the tests above match the problem alone)."""
    def refusal(run_dir) -> str:
        with pytest.raises(UserError) as refused:
            predict(settings_for(f"run_dir={run_dir}", "text=hello", app="predict"))
        return str(refused.value)

    missing = tmp_path / "missing"
    (missing / "tokenizer").mkdir(parents=True)
    message = refusal(missing)
    assert str(missing / "model.pt") in message and "No checkpoint" in message
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    torch.save({"format": "someone-else/1", "weights": torch.zeros(2)}, foreign / "model.pt")
    message = refusal(foreign)
    assert str(foreign / "model.pt") in message and "is not an mha-textclf checkpoint" in message
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    shutil.copy(runs[False] / "model.pt", no_tokenizer / "model.pt")
    message = refusal(no_tokenizer)
    assert str(no_tokenizer / "tokenizer") in message and "No tokenizer" in message
    other = tmp_path / "other-tokenizer"
    other.mkdir()
    shutil.copy(runs[False] / "model.pt", other / "model.pt")
    train_tokenizer(["the striker scored twice", "the minister said"], vocab_size=60).save_pretrained(
        other / "tokenizer")
    message = refusal(other)
    assert str(other / "tokenizer") in message and str(other / "model.pt") in message
    assert "the two files come from different runs" in message


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("table", [[], ["model.bigram_buckets=4096"]], ids=["plain", "lazy-bigram-table"])
def test_a_model_trained_on_gpu_predicts_on_cpu(table, data_dir, tmp_path):
    """A run on the GPU (with a bigram table too, whose sparse gradient lazy Adam steps there) predicts on the CPU."""
    folder = tmp_path / "gpu"
    result = run_train("device=cuda", "data.max_train_samples=48", "trainer.epochs=1", *table,
                       f"hydra.run.dir={folder}", data_dir=data_dir)
    assert result.returncode == 0, result.stderr[-3000:]
    result = run_cli("predict", f"run_dir={folder}", "device=cpu", f"text={json.dumps(PROBES)}")
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_every_attention_probe_gets_its_heatmap_and_the_order_probe_its_texts(smoke_run, tmp_path, monkeypatch):
    """The probes write attention_<slug>.png for each sentence in probes.attention, and order_probe.json for the texts
    of probes.order, from the run's model (here the shared run's, written into a folder of this test's own)."""
    from mha_textclf.pipeline import write_probes

    drawn = capture_figures(monkeypatch, write=False)
    sentences = ["The striker scored!", "the minister said no"]
    order = ["the striker scored", "scored the striker", "striker the scored"]
    settings = settings_for(f"probes.attention={json.dumps(sentences)}", f"probes.order={json.dumps(order)}")
    run = load_run(smoke_run.dir)
    write_probes(settings, tmp_path, run.model, run.tokenizer, run.class_names)
    assert sorted(drawn) == ["attention_the_minister_said_no.png", "attention_the_striker_scored.png"]
    for sentence in sentences:
        _, weights = attention_map(run.model, run.tokenizer, sentence)
        panels = [ax for ax in drawn[f"attention_{slug(sentence)}.png"].axes if ax.images]
        for ax, expected in zip(panels, [*weights, weights.mean(axis=0)], strict=True):
            np.testing.assert_allclose(ax.images[0].get_array(), expected, atol=1e-6)
    probe = json.loads((tmp_path / "order_probe.json").read_text())
    expected = logits_one_by_one(run.model, run.tokenizer, order).softmax(-1).numpy()
    assert probe["texts"] == order and list(probe["probabilities"]) == order
    assert probe["max_abs_difference"] == pytest.approx((expected.max(0) - expected.min(0)).max(), abs=1e-6)


def test_the_order_probe_gives_the_largest_difference_between_any_two_texts(monkeypatch):
    """order_probe.json holds the class probabilities of probes.order and their largest absolute difference: with three
    texts, between the two furthest apart (here the second and third), not from the first."""
    from mha_textclf import inference

    probabilities = np.array([[0.5, 0.5], [0.2, 0.8], [0.8, 0.2]], dtype=np.float32)
    monkeypatch.setattr(inference, "predict_proba", lambda model, tokenizer, texts: probabilities)
    model = torch.nn.Module()
    model.config = type("Config", (), {"pe": True, "bigram_buckets": 0})()
    model.position_scale = lambda: None
    probe = inference.order_probe(model, None, ["neg", "pos"], ["a b c", "c b a", "b c a"])
    assert probe["max_abs_difference"] == pytest.approx(0.6)
    assert probe["probabilities"]["c b a"] == pytest.approx({"neg": 0.2, "pos": 0.8})


@pytest.mark.slow
def test_a_file_of_more_texts_than_one_batch_gets_each_row_for_its_own_text_in_the_file_s_order(runs, tmp_path):
    """`python -m predict run_dir=... file=texts.txt out=predictions.csv` (one text per line) gives one row per text,
    the probability of each class and the predicted class: a file of 150 texts (more than a batch of predict_proba
    holds) gets its rows in the file's order, each what the model says of that text alone, whatever batch it was in."""
    import random

    words = ["the", "minister", "said", "striker", "scored", "twice", "market", "shares", "fell", "film", "music",
             "election", "court", "goal"]
    lines = [" ".join(random.Random(i).choices(words, k=2 + i % 17)) for i in range(150)]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(lines) + "\n")
    table = predict(settings_for(f"run_dir={runs[True]}", f"file={texts}", f"out={tmp_path / 'out.csv'}",
                                 app="predict"))
    assert table["text"].tolist() == lines
    run = load_run(runs[True])
    expected = (logits_one_by_one(run.model, run.tokenizer, lines) / run.temperature).softmax(-1).numpy()
    assert np.abs(expected - expected.mean(axis=0)).max() > 1e-4  # (texts the model tells apart)
    np.testing.assert_allclose(table[run.class_names].to_numpy(), expected, atol=1e-6)
    assert table["predicted"].tolist() == [run.class_names[i] for i in expected.argmax(axis=1)]


def test_a_file_s_blank_lines_are_skipped_spaces_and_tabs_only_included(tmp_path, caplog):
    """python -m predict --help, file: "a text file, one text per line (blank lines skipped)": a line of spaces or a
    tab is blank too, and skipped, not a text refused as empty; every other line is a text as it is, after the texts
    of text=. The rows then no longer line up with the file's lines, so a warning says which lines were skipped."""
    import logging

    from mha_textclf.predictions import read_texts

    texts = tmp_path / "texts.txt"
    texts.write_text("the minister said\n   \n\t\n\nthe striker scored twice \n  indented\n")
    with caplog.at_level(logging.WARNING, logger="predict"):
        assert read_texts(None, str(texts)) == ["the minister said", "the striker scored twice ", "  indented"]
    assert [r.getMessage() for r in caplog.records] == [
        f"file={texts}: 3 blank line(s) skipped (line 2, 3, 4); the table has a row per other line, in order."]
    assert read_texts("first", str(texts))[:2] == ["first", "the minister said"]
    # A line is what ends at a newline: a form feed or a Unicode line separator stays inside its text.
    texts.write_text("first\u2028half\n\nthird\fpage\n")
    assert read_texts(None, str(texts)) == ["first\u2028half", "third\fpage"]
    assert "(line 2)" in caplog.records[-1].getMessage()
