"""The real configs compose for every variant × pe, and mistakes in them fail loudly."""

import math

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import OmegaConf

from conftest import CONFIG_DIR


def compose_train(overrides: list[str], hydra_config: bool = False):
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return compose("train", overrides=overrides, return_hydra_config=hydra_config)


@pytest.mark.parametrize("model", ["naive", "efficient", "torch"])
@pytest.mark.parametrize("pe", [True, False])
def test_every_variant_and_pe_composes(model, pe):
    cfg = compose_train([f"model={model}", f"pe={str(pe).lower()}"])
    assert cfg.model.attention == model
    assert cfg.pe is pe
    # The variants share one base: only `attention` differs.
    assert (cfg.model.d_model, cfg.model.n_heads, cfg.model.mlp_hidden, cfg.model.bias, cfg.model.dropout) == (
        64, 8, 128, True, 0.0)
    assert cfg.model.max_length == cfg.data.max_length == 512  # one source, by interpolation
    assert (cfg.seed, cfg.device, cfg.data.val_fraction, cfg.tokenizer.vocab_size) == (0, "auto", 0.25, 1000)
    assert (cfg.trainer.epochs, cfg.trainer.batch_size, cfg.trainer.lr) == (12, 32, 3e-3)
    assert OmegaConf.missing_keys(cfg) == set()


def test_default_variant_is_efficient_without_pe():
    cfg = compose_train([])
    assert cfg.model.attention == "efficient" and cfg.pe is False


def test_max_length_flows_to_the_model():
    assert compose_train(["data.max_length=1024"]).model.max_length == 1024


def test_unknown_key_fails():
    with pytest.raises(ConfigCompositionException, match="d_modle"):
        compose_train(["model.d_modle=32"])


def test_unknown_model_lists_the_choices():
    with pytest.raises(MissingConfigException, match="efficient"):
        compose_train(["model=transformer"])


def test_data_path_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("BBC_NEWS_PATH", "/somewhere/bbc")
    assert compose_train([]).data.path == "/somewhere/bbc"
    monkeypatch.delenv("BBC_NEWS_PATH")
    assert compose_train([]).data.path == "SetFit/bbc-news"


def test_run_folder_is_named_by_time_model_and_pe():
    cfg = compose_train(["model=torch", "pe=true"], hydra_config=True)
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
    default, best = compose_train([]), compose_train(["experiment=best"])
    assert best.model.cls_only and not default.model.cls_only
    assert best.data.max_length == best.model.max_length == 1024  # the PE buffer and truncation follow
    assert best.trainer.epochs > default.trainer.epochs
    assert best.trainer.lr == default.trainer.lr  # everything not named in best.yaml stays the default
    # experiment comes after _self_ in the defaults list, yet the command line still wins over it.
    naive = compose_train(["experiment=best", "model=naive", "pe=true"])
    assert naive.model.attention == "naive" and naive.model.cls_only and naive.pe
    assert naive.model.max_length == 1024


def test_experiment_search_sweeps_over_the_defaults():
    cfg = compose_train(["experiment=search"], hydra_config=True)
    params = {key: values.split(",") for key, values in cfg.hydra.sweeper.params.items()}
    assert set(params) == {"pe", "seed", "model.token_dropout", "trainer.lr"}
    assert math.prod(len(values) for values in params.values()) == 72  # as its header says
    # The defaults must be one of the points the search measured, or the search does not back them.
    default = compose_train([])
    assert str(default.model.token_dropout) in params["model.token_dropout"]
    assert default.trainer.lr in [float(v) for v in params["trainer.lr"]]
    for key in ("trainer.epochs", "trainer.schedule", "trainer.warmup_epochs", "trainer.batch_size",
                "trainer.weight_decay", "data.max_length"):
        assert OmegaConf.select(cfg, key) == OmegaConf.select(default, key), key
    assert cfg.model.cls_only
