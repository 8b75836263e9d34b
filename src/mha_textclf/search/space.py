"""The search space in Hydra's own sweep syntax (interval, tag(log, ...), range, choice), as Optuna distributions, and
a trial's values as `train` overrides."""

from __future__ import annotations

import math
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import ChoiceSweep, IntervalSweep, RangeSweep

from mha_textclf.checks import check_value, lookup
from mha_textclf.errors import UserError
from mha_textclf.settings import TrainSettings


def _optuna():
    try:
        import optuna
    except ImportError as e:
        raise UserError('python -m search needs Optuna, the `hpo` extra: pip install -e ".[hpo]"') from e
    return optuna


def search_space(params: dict[str, str]) -> dict[str, Any]:
    """Optuna distributions from Hydra sweep expressions: interval(a,b) -> a float, int(interval(a,b)) -> an int,
    either on a log scale with tag(log, ...); range(a,b,step) -> an int or float on that grid; choice(...) ->
    categorical."""
    optuna = _optuna()
    parser = OverridesParser.create()
    space = {}
    for key, expression in params.items():
        try:
            sweep = parser.parse_override(f"{key}={expression}").value()
        except Exception as e:
            raise UserError(f"params.{key}={expression!r} is not a sweep expression: use interval(a,b), "
                            "tag(log,interval(a,b)), range(a,b,step) or choice(a,b,...).") from e
        if isinstance(sweep, IntervalSweep):
            log_scale = "log" in sweep.tags
            if isinstance(sweep.start, int) and isinstance(sweep.end, int):
                space[key] = optuna.distributions.IntDistribution(sweep.start, sweep.end, log=log_scale)
            else:
                space[key] = optuna.distributions.FloatDistribution(sweep.start, sweep.end, log=log_scale)
        elif isinstance(sweep, RangeSweep):
            # range's end is exclusive, as in Python: range(8, 33, 4) is 8, 12, ..., 32.
            last = sweep.start + sweep.step * (math.ceil((sweep.stop - sweep.start) / sweep.step) - 1)
            if all(isinstance(v, int) for v in (sweep.start, sweep.stop, sweep.step)):
                space[key] = optuna.distributions.IntDistribution(sweep.start, last, step=sweep.step)
            else:
                space[key] = optuna.distributions.FloatDistribution(sweep.start, last, step=sweep.step)
        elif isinstance(sweep, ChoiceSweep):
            space[key] = optuna.distributions.CategoricalDistribution(sweep.list)
        else:
            raise UserError(f"params.{key}={expression!r} is a single value, not a range; put fixed settings in "
                            "`train`.")
    return space


def as_override(key: str, value: Any) -> str:
    """`key=value` as the train command line takes it; repr keeps every digit of a float."""
    text = str(value).lower() if isinstance(value, bool) else repr(value) if isinstance(value, float) else str(value)
    return f"{key}={text}"


def suggest(trial, key: str, distribution) -> Any:
    """The trial's value for `key` from its distribution (Optuna's public suggest_* calls)."""
    optuna = _optuna()
    if isinstance(distribution, optuna.distributions.FloatDistribution):
        return trial.suggest_float(key, distribution.low, distribution.high, log=distribution.log,
                                   step=distribution.step)
    if isinstance(distribution, optuna.distributions.IntDistribution):
        return trial.suggest_int(key, distribution.low, distribution.high, log=distribution.log,
                                 step=distribution.step)
    return trial.suggest_categorical(key, distribution.choices)


def space_problems(params: dict[str, str]) -> list[str]:
    """Each end of an interval or range, and each choice, that its setting refuses (a bound, a set of choices)."""
    optuna = _optuna()
    found = []
    for key, distribution in search_space(params).items():
        owner = lookup(TrainSettings, key)
        if isinstance(owner, str):  # a config group (model=...): Hydra names the options it has
            continue
        if isinstance(distribution, optuna.distributions.CategoricalDistribution):
            values = distribution.choices
        else:
            values = (distribution.low, distribution.high)
        distinct = [v for i, v in enumerate(values) if v not in values[:i]]  # a choice may hold lists: no hashing
        found += [f"params.{key}={params[key]}: {value} {why}." for value in distinct
                  if (why := check_value(owner[1], value)) is not None]
    return found
