"""The real configs compose for every variant × pe, hold only deltas over the schema, and every experiment runs."""

import math
from dataclasses import asdict

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from conftest import CONFIG_DIR, compose_config, settings_for, train_in_process
from mha_textclf.settings import ModelSettings, TrainerSettings, TrainSettings


@pytest.mark.parametrize("model", ["naive", "efficient", "torch"])
@pytest.mark.parametrize("pe", [True, False])
def test_every_variant_and_pe_composes_to_the_schema_defaults(model, pe):
    settings = settings_for(f"model={model}", f"pe={str(pe).lower()}")
    assert isinstance(settings, TrainSettings)
    assert settings.model.attention == model and settings.pe is pe
    # A variant file changes the variant and nothing else: the rest is the schema's defaults, the one source.
    assert asdict(settings.model) == asdict(ModelSettings(attention=model))
    assert settings.trainer == TrainerSettings()


def test_default_variant_is_efficient_without_pe():
    settings = settings_for()
    assert settings.model.attention == "efficient" and settings.pe is False


def test_config_files_hold_no_value_the_schema_already_holds():
    """Every key an option file of a config group sets differs from the schema's default or is required there.

    (Experiments may pin a value on purpose, so that they stay the same experiment if a default moves.)
    """
    defaults = OmegaConf.structured(TrainSettings)
    for path in sorted(CONFIG_DIR.glob("*/*.yaml")):
        if path.parent.name in ("hydra", "experiment"):
            continue
        body = OmegaConf.load(path)
        for key, value in _flat(OmegaConf.to_container(body)).items():
            full = f"{path.parent.name}.{key}"
            default = OmegaConf.select(defaults, full, throw_on_missing=False)
            assert default is None or default != value, f"{path.name}: {full}={value} repeats the schema default"


def _flat(d, prefix=""):
    out = {}
    for k, v in d.items():
        out |= _flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def test_unknown_model_lists_the_choices_without_base():
    with pytest.raises(MissingConfigException, match="efficient") as info:
        compose_config(["model=transformer"])
    assert "base" not in str(info.value)


def test_typed_schema_refuses_what_the_command_line_check_would():
    with pytest.raises(ConfigCompositionException):
        compose_config(["trainer.epoch=3"])
    with pytest.raises(ConfigCompositionException):
        compose_config(["trainer.lr=abc"])


def test_data_path_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("BBC_NEWS_PATH", "/somewhere/bbc")
    assert settings_for().data.path == "/somewhere/bbc"
    monkeypatch.delenv("BBC_NEWS_PATH")
    assert settings_for().data.path == "SetFit/bbc-news"


def test_run_folder_is_named_by_time_model_and_pe():
    cfg = compose_config(["model=torch", "pe=true"], hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    run_dir = cfg.hydra.run.dir
    assert run_dir.startswith("outputs/runs/") and run_dir.endswith("_torch_pe-True")
    # date_time with microseconds, so two runs started in the same second never share a folder
    stamp = run_dir.removeprefix("outputs/runs/").removesuffix("_torch_pe-True")
    date, time = stamp.split("_")
    assert len(date) == 10 and len(time.split("-")) == 4 and len(time.split("-")[3]) == 6
    assert cfg.hydra.sweep.dir.startswith("outputs/multirun/")
    assert cfg.hydra.job.chdir is False


def test_experiment_best_is_a_delta_over_the_defaults():
    default, best = settings_for(), settings_for("experiment=best")
    assert best.model.cls_only and not default.model.cls_only
    assert best.data.max_length > default.data.max_length
    assert best.trainer.epochs > default.trainer.epochs
    assert best.trainer.lr == default.trainer.lr  # everything not named in best.yaml stays the default
    # experiment comes after _self_ in the defaults list, yet the command line still wins over it.
    naive = settings_for("experiment=best", "model=naive", "pe=true")
    assert naive.model.attention == "naive" and naive.model.cls_only and naive.pe


def test_experiment_search_sweeps_over_the_defaults():
    cfg = compose_config(["experiment=search"], hydra_config=True)
    params = {key: values.split(",") for key, values in cfg.hydra.sweeper.params.items()}
    assert set(params) == {"pe", "seed", "model.token_dropout", "trainer.lr"}
    assert math.prod(len(values) for values in params.values()) == 72  # as its header says
    # The defaults must be one of the points the search measured, or the search does not back them.
    default = settings_for()
    assert str(default.model.token_dropout) in params["model.token_dropout"]
    assert default.trainer.lr in [float(v) for v in params["trainer.lr"]]
    search = settings_for("experiment=search")
    for key in ("epochs", "schedule", "warmup_epochs", "batch_size", "weight_decay"):
        assert getattr(search.trainer, key) == getattr(default.trainer, key), key
    assert search.data.max_length == default.data.max_length and search.model.cls_only


EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs(experiment, data_dir, tmp_path):
    """Each experiment file, shrunk to one epoch on a sliver of the data, runs the whole pipeline."""
    shrink = [] if experiment == "smoke" else ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]"]
    metrics = train_in_process(tmp_path, f"experiment={experiment}", *shrink, data_dir=data_dir)
    settings = settings_for(f"experiment={experiment}", *shrink)
    assert metrics.epochs == settings.trainer.epochs and (tmp_path / "metrics.json").is_file()
    assert (tmp_path / "config.yaml").read_text().count(f"max_length: {settings.data.max_length}") == 1
