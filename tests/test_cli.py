"""cli.py: the command line checked before Hydra composes it, and through the real commands: bad input gives one
clear message, exit code 2 (Hydra's errors: 1), and no traceback.

What a setting's value may be is checks.py's (test_checks.py), what data may hold corpus.py's (test_corpus.py); these
keep the wiring honest: our own check before Hydra, Hydra's own errors and flags, errors found while loading data,
and predict; the --help pages; run_job recording a failure in the run folder; a mistake answered before torch is
imported.
"""

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import OmegaConf

import commands
from conftest import REPO, compose_config, fingerprint, run_cli, write_jsonl
from mha_textclf import cli
from mha_textclf.errors import RunFolderError, UserError
from mha_textclf.settings import ADAPTIVE, TrainSettings, flat, show
from settings_fakes import command_line_problems

TINY = ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]", "data.max_length=128"]


def output(result) -> str:
    return result.stdout + result.stderr


@pytest.fixture(scope="module")
def ran(data_dir, tmp_path_factory):
    """Every command line of this module, run two at a time, by name, with the folder each may write in: a command
    spends seconds importing before it says a word, and this machine has two cores."""
    folder = {name: tmp_path_factory.mktemp(name) for name in
              ("mistakes", "hydra", "bad_data", "offline", "cuda")}
    one_class = write_jsonl(folder["bad_data"] / "one-class", {s: [{"text": f"words {i}", "label": 0}
                                                                   for i in range(8)] for s in ("train", "test")})
    commands = {
        "mistakes": ("train", ["trainer.epoch=3", "trainer.warmup_epochs=abc", "+model.pe=true", "model.n_heads=5",
                               f"hydra.run.dir={folder['mistakes'] / 'run'}"], {}),
        "hydra": ("train", ["model=transformer", f"hydra.run.dir={folder['hydra']}"], {}),
        "bad_data": ("train", [*TINY, f"data.path={one_class}", f"hydra.run.dir={folder['bad_data'] / 'run'}"], {}),
        "offline": ("train", [*TINY, "data.path=SetFit/bbc-news", f"hydra.run.dir={folder['offline']}"],
                    {"HF_HUB_OFFLINE": "1"}),
        "predict": ("predict", ["run_dir=nowhere", "text=123"], {}),
        "predict_run_dir": ("predict", ["run_dir=nowhere", "text=hello"], {}),  # found once predict runs
        "help": ("train", ["--help"], {}),
    }
    if not torch.cuda.is_available():  # (with a GPU, this would train)
        commands["cuda"] = ("train", ["device=cuda", f"hydra.run.dir={folder['cuda']}"], {})
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(run_cli, module, *args, data_dir=data_dir, env=env)
                   for name, (module, args, env) in commands.items()}
        return {name: future.result() for name, future in futures.items()} | {"folders": folder}


@pytest.mark.slow
def test_every_command_line_mistake_in_one_message_exit_2(ran):
    result = ran["mistakes"]
    text = output(result)
    assert result.returncode == 2 and "Traceback" not in text
    assert "Invalid settings (4 problems)" in text and "did you mean trainer.epochs?" in text
    assert "python -m train --help" in text
    assert not (ran["folders"]["mistakes"] / "run").exists()  # refused before anything ran: no run folder


@pytest.mark.slow
def test_hydras_own_errors_stay_hydras(ran):
    result = ran["hydra"]
    assert result.returncode == 1
    assert "Available options in 'model'" in output(result) and "Traceback" not in output(result)
    assert "base" not in output(result).split("Available options in 'model'")[1]


@pytest.mark.slow
def test_bad_data_stops_with_exit_2_and_leaves_its_error_in_the_run_folder(ran):
    result = ran["bad_data"]
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "has a single class" in output(result)
    assert "has a single class" in (ran["folders"]["bad_data"] / "run" / "error.txt").read_text()


@pytest.mark.slow
def test_offline_without_a_local_copy_says_what_to_do(ran):
    result = ran["offline"]
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert output(result).count("Download the dataset once and set data.path=<folder>") == 1  # said once


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message shown when no GPU is present")
def test_cuda_without_a_gpu(ran):
    result = ran["cuda"]
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "device=cuda but PyTorch sees no CUDA GPU" in output(result)


@pytest.mark.slow
def test_predict_mistakes(ran):
    result = ran["predict"]
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "text=123: was read as int, not as text" in output(result)
    # A mistake only predict itself can find (the folder is not there) exits with 2 as well.
    result = ran["predict_run_dir"]
    assert result.returncode == 2 and "Traceback" not in output(result)
    assert "run_dir=nowhere is not a folder" in output(result)


@pytest.mark.slow
def test_help_describes_every_setting(ran):
    result = ran["help"]
    assert result.returncode == 0
    assert "== Settings (key=value; default; meaning) ==" in result.stdout
    assert "model: efficient (default), naive, torch" in result.stdout  # the variants, and no `base`
    assert "trainer.epochs" in result.stdout and "data.val_fraction" in result.stdout
    assert "logger: many, mlflow, tensorboard" in result.stdout


@pytest.mark.unit
def test_help_says_what_the_default_corpus_fixes_of_the_settings_that_adapt():
    """A plain run is not the schema's defaults: bbc-news' configs fix every setting that adapts. --help lists those
    values as composing gives them, and data=own leaves each null."""
    page = compose_config([], hydra_config=True).hydra.help.template
    said = re.search(r"data=bbc_news, the default, fixes settings that adapt \(null below\) to the values it was "
                     r"tuned with: (.*?) \(configs/data/bbc_news.yaml", " ".join(page.split())).group(1)
    fixed = dict(item.split("=") for item in said.split(", "))
    composed = flat(OmegaConf.to_container(compose_config([])))
    own = flat(OmegaConf.to_container(compose_config(["data=own", "data.path=x"])))
    assert set(fixed) == set(ADAPTIVE)
    assert {key: show(composed[key]) for key in fixed} == fixed and all(own[key] is None for key in fixed)


@pytest.mark.parametrize("app", ["predict", "search", "baseline"])
def test_the_other_commands_help_pages_describe_their_settings(app):
    """The page `python -m <app> --help` prints (Hydra prints the composed template; `train`'s is run above)."""
    page = compose_config([], app=app, hydra_config=True).hydra.help.template
    assert "== Settings (key=value; default; meaning) ==" in page
    if app == "search":
        assert "hparams_search: accuracy" in page and "n_trials" in page
    elif app == "baseline":  # scripts/baseline_tfidf.py --help: the data settings training takes, and its features
        assert "data: bbc_news (default), chinese_reviews" in page and "data.text_column" in page
        assert "fixes settings that adapt" not in page  # the baseline trains nothing: no tuned settings
        assert "features" in page and "wordpiece" in page and "model:" not in page
    else:
        assert "run_dir" in page and "model:" not in page


@pytest.mark.slow
@pytest.mark.parametrize("module", ["train", "predict", "search"])
def test_a_mistake_is_answered_before_torch_is_imported(module):
    """A typo costs a second, not the seconds torch, transformers and scikit-learn take to import: the entry point
    checks the command line before it imports the pipeline."""
    result = run_cli(module, "modle=naive", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 2 and "modle is not a setting" in result.stderr
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and not imported & {"torch", "transformers", "sklearn", "pandas", "matplotlib"}


@pytest.mark.slow
def test_the_baseline_script_answers_a_mistake_before_scikit_learn_and_torch_are_imported():
    """The entry points (`train`, `predict`, `search`, `scripts/baseline_tfidf.py`), the only modules that see Hydra,
    import the pipeline only after the command line is checked, so that a mistake is answered in under a second: the
    fourth entry point too, typed as a script."""
    result = commands.run(["scripts/baseline_tfidf.py", "modle=naive"], cwd=REPO,
                          env=os.environ | {"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 2 and "modle is not a setting" in result.stderr
    assert "python scripts/baseline_tfidf.py --help" in result.stderr  # its own help, not train's
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "hydra" in imported and not imported & {"torch", "transformers", "sklearn", "pandas", "matplotlib"}


def test_a_refused_start_leaves_the_folder_as_it_was_and_a_later_failure_is_recorded_there(tmp_path):
    """cli.run_job, as `python -m train` runs a job in Hydra's run folder: a folder refused (it holds another run,
    or another process holds it), or one left unclaimed by an error, gets neither error.txt nor this command's
    .hydra/; an error once the folder is the run's own is written there. Exit code 2 either way."""
    run_dir = tmp_path / "run"
    cfg = compose_config(["seed=3", f"hydra.run.dir={run_dir}"], hydra_config=True)
    cfg.hydra.runtime.output_dir = str(run_dir)  # (what Hydra sets when the job starts)
    previous = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    job_cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])  # what Hydra hands the job
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("pe: true\n")  # another run's
    before = fingerprint(run_dir)

    def refused(run_dir, record):
        raise RunFolderError(f"{run_dir} holds a run with other training settings")

    def unclaimed(run_dir, record):  # e.g. its last.pt cannot be read
        raise UserError("Cannot continue the run")

    def fails_later(run_dir, record):
        record()
        raise UserError("the data has a single class")

    try:
        for job in (refused, unclaimed):
            with pytest.raises(SystemExit) as exit:
                cli.run_job(job, job_cfg)
            assert exit.value.code == 2 and fingerprint(run_dir) == before, job.__name__
        with pytest.raises(SystemExit) as exit:
            cli.run_job(fails_later, job_cfg)
        assert exit.value.code == 2
        assert (run_dir / "error.txt").read_text() == "the data has a single class\n"
        # Hydra's record in .hydra/: config.yaml unresolved, hydra.yaml, overrides.yaml (the command line's).
        record = run_dir / ".hydra"
        written = OmegaConf.load(record / "config.yaml")  # the job's config, composed afresh here for reference
        assert written == compose_config(["seed=3", f"hydra.run.dir={run_dir}"]) and "hydra" not in written
        assert "${oc.env:BBC_NEWS_PATH" in (record / "config.yaml").read_text()  # (so that resolving it would show)
        assert OmegaConf.load(record / "hydra.yaml").hydra.run.dir == str(run_dir)
        assert OmegaConf.to_container(OmegaConf.load(record / "overrides.yaml")) == ["seed=3"]
    finally:
        HydraConfig.instance().cfg = previous


@pytest.mark.parametrize("mode", [RunMode.RUN, RunMode.MULTIRUN])
def test_a_crash_that_is_no_mistake_is_written_to_error_txt_and_a_sweep_goes_on_and_lists_it(tmp_path, mode):
    """A failed sweep job writes error.txt into its folder, the other jobs go on, and the summary lists it; a single
    run that stops on an error once its folder exists writes the error to error.txt there too. Not only bad input
    (UserError): an error of any kind, here a RuntimeError (out of memory), in a single run (which then ends with its
    traceback) and in a sweep's job (which returns, for the next job)."""
    from mha_textclf.sweeps.collect import runs_table

    sweep = tmp_path / "sweep"
    run_dir = sweep / "0_seed-3"
    cfg = compose_config(["seed=3", f"hydra.run.dir={run_dir}"], hydra_config=True)
    cfg.hydra.runtime.output_dir = str(run_dir)  # (what Hydra sets when the job starts)
    cfg.hydra.mode = mode
    previous = HydraConfig.instance().cfg
    HydraConfig.instance().set_config(cfg)
    job_cfg = OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"])  # what Hydra hands the job

    def crashes(run_dir, record):
        record()
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    try:
        if mode == RunMode.RUN:
            with pytest.raises(RuntimeError, match="out of memory"):  # a single run: the traceback, as it was
                cli.run_job(crashes, job_cfg)
        else:
            assert cli.run_job(crashes, job_cfg) is None  # a sweep's job: the launcher goes on to the next
    finally:
        HydraConfig.instance().cfg = previous
    assert (run_dir / "error.txt").read_text() == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
    (row,) = runs_table(sweep).to_dict("records")
    assert (row["status"], row["seed"]) == ("failed", 3)
    assert row["error"] == "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"


@pytest.mark.unit
@pytest.mark.parametrize(("app", "help_command"), [
    ("train", "python -m train --help"), ("predict", "python -m predict --help"),
    ("search", "python -m search --help"), ("baseline", "python scripts/baseline_tfidf.py --help")])
def test_a_mistake_ends_with_the_help_command_of_the_command_that_was_typed(app, help_command, capsys):
    """A mistake in the settings stops with one message that lists every problem and what to change (exit code 2),
    and ends with the command that lists what is valid: each command's own help page, the one that lists its
    settings (predict's, search's and the baseline's are not train's)."""
    with pytest.raises(SystemExit) as exit_code:
        cli.check_command_line(app, ["no_such_setting=1"])
    assert exit_code.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"Every setting, its default and meaning: {help_command}"


def test_groups_help_and_hydras_own_keys_are_left_to_hydra():
    assert command_line_problems("model=transformer") == []  # Hydra lists the variants itself
    assert command_line_problems("hydra.run.dir=/tmp/x", "hydra/launcher=basic") == []
    assert command_line_problems("--help", "trainer.epoch=3") == []


@pytest.mark.unit
def test_overrides_parse_like_hydra():
    (override,) = OverridesParser.create().parse_overrides(["+trainer.lr=1e-3"])
    assert cli.check_override(TrainSettings, override) == []
