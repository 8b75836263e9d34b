"""settings.py: the typed schema's own declarations: every training setting says what it decides, the
settings that name no folder are Hydra's folder-name exclusions, and the derived keys are what the
model config adds."""

import pytest

from mha_textclf.settings import DERIVED


@pytest.mark.unit
def test_derived_keys_are_exactly_what_the_model_config_adds():
    from dataclasses import fields

    from mha_textclf.model import ModelConfig
    from mha_textclf.settings import ModelSettings

    added = {f.name for f in fields(ModelConfig)} - {f.name for f in fields(ModelSettings)}
    assert set(DERIVED) == {f"model.{name}" for name in added}


@pytest.mark.unit
def test_every_training_setting_says_what_it_decides():
    """A new setting must be judged once, on its field: the stage it decides, or None for nothing trained."""
    from mha_textclf.settings import _TRAINING, STAGES

    undeclared = {key: meta["decides"] for key, meta in _TRAINING.items() if meta["decides"] not in (*STAGES, None)}
    assert not undeclared


def test_hydras_folder_name_exclusions_are_the_settings_that_name_no_folder():
    """configs/hydra/default.yaml's exclude_keys, as Hydra composes it, against the schema's `names_folder=False`."""
    from conftest import compose_config
    from mha_textclf.settings import NOT_IN_FOLDER_NAMES

    cfg = compose_config([], hydra_config=True)
    excluded = list(cfg.hydra.job.config.override_dirname.exclude_keys)
    assert sorted(excluded) == sorted(NOT_IN_FOLDER_NAMES)
    assert len(excluded) == len(set(excluded))
