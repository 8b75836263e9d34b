"""Through the real command line: bad input gives one clear message, the documented exit code, and no traceback.

Most mistakes are checked in-process (test_settings.py, test_data.py); these few keep the wiring honest: our own
check before Hydra, Hydra's own errors, errors found while loading data, and predict.
"""

import pytest
import torch

from conftest import run_cli, write_jsonl

TINY = ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]"]


def output(result) -> str:
    return result.stdout + result.stderr


@pytest.mark.slow
def test_every_command_line_mistake_in_one_message_exit_2(tmp_path):
    result = run_cli("train", "trainer.epoch=3", "trainer.warmup_epochs=abc", "+model.pe=true", "model.n_heads=5",
                     f"hydra.run.dir={tmp_path / 'run'}")
    text = output(result)
    assert result.returncode == 2 and "Traceback" not in text
    assert "Invalid settings (4 problems)" in text and "did you mean trainer.epochs?" in text
    assert "python -m train --help" in text
    assert not (tmp_path / "run").exists()  # refused before anything ran: no run folder


@pytest.mark.slow
def test_hydras_own_errors_stay_hydras(tmp_path):
    result = run_cli("train", "model=transformer", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 1
    assert "Available options in 'model'" in output(result) and "Traceback" not in output(result)
    assert "base" not in output(result).split("Available options in 'model'")[1]


@pytest.mark.slow
def test_bad_data_stops_with_exit_2_and_leaves_its_error_in_the_run_folder(data_dir, tmp_path):
    folder = write_jsonl(tmp_path / "one-class", {s: [{"text": f"words {i}", "label": 0} for i in range(8)]
                                                  for s in ("train", "test")})
    run_dir = tmp_path / "run"
    result = run_cli("train", *TINY, f"data.path={folder}", f"hydra.run.dir={run_dir}", data_dir=data_dir)
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "has a single class" in output(result)
    assert "has a single class" in (run_dir / "error.txt").read_text()


@pytest.mark.slow
def test_offline_without_a_local_copy_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    result = run_cli("train", *TINY, "data.path=SetFit/bbc-news", f"hydra.run.dir={tmp_path}")
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert output(result).count("Download the dataset once and set data.path=<folder>") == 1  # said once


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when no GPU is present")
def test_cuda_without_a_gpu(data_dir, tmp_path):
    result = run_cli("train", "device=cuda", f"hydra.run.dir={tmp_path}", data_dir=data_dir)
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "device=cuda but PyTorch sees no CUDA GPU" in output(result)


@pytest.mark.slow
def test_predict_mistakes():
    result = run_cli("predict", "run_dir=nowhere", "text=123")
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "text=123: was read as int, not as text" in output(result)


@pytest.mark.slow
@pytest.mark.parametrize("app", ["train", "predict", "search"])
def test_help_describes_every_setting(app):
    result = run_cli(app, "--help")
    assert result.returncode == 0
    assert "== Settings (key=value; default; meaning) ==" in result.stdout
    if app == "train":
        assert "model: efficient, naive, torch" in result.stdout  # the variants, and no `base`
        assert "trainer.epochs" in result.stdout and "data.val_fraction" in result.stdout
        assert "logger: many, mlflow, tensorboard" in result.stdout
    elif app == "search":
        assert "hparams_search: accuracy" in result.stdout and "n_trials" in result.stdout
    else:
        assert "run_dir" in result.stdout and "model:" not in result.stdout
