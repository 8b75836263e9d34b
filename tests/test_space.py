"""search/space.py: the search space in Hydra's sweep syntax (interval, int, tag(log, ...), range, choice)
as Optuna's distributions, a sampled value as an override, and the accuracy study's documented space."""

import numpy as np
import pytest

from conftest import optional, settings_for
from mha_textclf.errors import UserError

optuna = optional("optuna", "hpo")

from mha_textclf.search.space import as_override, search_space  # noqa: E402  (after the check that Optuna is there)


def test_hydra_sweep_expressions_become_optuna_distributions():
    space = search_space({"trainer.lr": "tag(log, interval(1e-4, 1e-2))", "model.dropout": "interval(0, 0.5)",
                          "model.n_heads": "int(interval(1, 8))", "trainer.epochs": "range(8, 33, 4)",
                          "pe": "choice(true, false)", "data.max_length": "choice(512, 1024)"})
    assert space["trainer.lr"] == optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True)
    assert space["model.dropout"] == optuna.distributions.FloatDistribution(0, 0.5)
    assert space["model.n_heads"] == optuna.distributions.IntDistribution(1, 8)
    assert space["trainer.epochs"] == optuna.distributions.IntDistribution(8, 32, step=4)  # range's end: exclusive
    assert space["pe"] == optuna.distributions.CategoricalDistribution([True, False])
    assert space["data.max_length"].choices == (512, 1024)
    with pytest.raises(UserError, match="is a single value, not a range"):
        search_space({"trainer.lr": "0.1"})
    assert as_override("trainer.lr", 0.1234567890123) == "trainer.lr=0.1234567890123"
    assert as_override("pe", True) == "pe=true"


def test_interval_is_a_float_even_between_whole_numbers_and_only_int_interval_an_int():
    """The space is declared in Hydra's sweep syntax: interval(a,b) is a float, int(interval(a,b)) an int, and
    tag(log, interval(a,b)) on a log scale. A float however its ends are written: interval(0, 1) samples the whole
    range between them, not the two ints 0 and 1."""
    space = search_space({"model.dropout": "interval(0, 1)", "trainer.lr": "tag(log, interval(1, 100))",
                          "model.n_heads": "int(interval(1, 8))", "trainer.epochs": "int(tag(log, interval(2, 64)))"})
    assert space["model.dropout"] == optuna.distributions.FloatDistribution(0.0, 1.0)
    assert space["trainer.lr"] == optuna.distributions.FloatDistribution(1.0, 100.0, log=True)
    assert space["model.n_heads"] == optuna.distributions.IntDistribution(1, 8)
    assert space["trainer.epochs"] == optuna.distributions.IntDistribution(2, 64, log=True)


def test_range_ends_before_its_end_as_python_s_range_does_on_every_grid():
    """range(a,b,step) in the space's sweep syntax is Python's range, whose end is left out, also where the steps land
    on it exactly: range(8, 32, 4) is 8, ..., 28 as list(range(8, 32, 4)), and a float range(0, 1, 0.25) is numpy's
    arange (round 24: an end taken in when the steps reached it passed, the one tested range ended between two
    steps)."""
    for start, stop, step in ((8, 32, 4), (8, 33, 4), (1, 2, 1), (0, 10, 3)):
        grid = search_space({"trainer.epochs": f"range({start}, {stop}, {step})"})["trainer.epochs"]
        assert list(range(grid.low, grid.high + 1, grid.step)) == list(range(start, stop, step)), (start, stop, step)
    grid = search_space({"model.dropout": "range(0.0, 1.0, 0.25)"})["model.dropout"]
    assert isinstance(grid, optuna.distributions.FloatDistribution)
    assert np.arange(grid.low, grid.high + grid.step / 2, grid.step) == pytest.approx(np.arange(0.0, 1.0, 0.25))


def test_the_accuracy_space_is_the_documented_one():
    """A plain `python -m search` runs the accuracy study: 40 trials, pruned, over configs/hparams_search/accuracy.yaml,
    each with model.cls_only=true, 24 epochs and seed 0. Its space varies model.token_dropout, trainer.lr and
    trainer.weight_decay (both on a log scale), data.max_length (512 or 1024) and pe; study=accuracy_unpruned
    searches the same space with the same shared settings."""
    settings = settings_for(app="search")
    assert (settings.study, settings.n_trials, settings.pruning) == ("accuracy", 40, True)
    trial = settings_for(*settings.train)  # what every trial shares
    assert trial.model.cls_only is True and trial.trainer.epochs == 24 and trial.seed == 0
    space = search_space(settings.params)
    assert set(space) == {"model.token_dropout", "trainer.lr", "trainer.weight_decay", "data.max_length", "pe"}
    assert space["data.max_length"].choices == (512, 1024) and set(space["pe"].choices) == {True, False}
    assert space["trainer.lr"].log and space["trainer.weight_decay"].log
    unpruned = settings_for("study=accuracy_unpruned", "pruning=false", app="search")
    assert (unpruned.train, unpruned.params) == (settings.train, settings.params)
