"""What is wrong with settings, in words that say what to change, and what each one means (for --help).

`problems(settings)` checks ranges, choices and the rules that tie settings together, and returns every problem at
once; `lookup` and `check_value` let the command line be checked key by key before Hydra composes it; `help_rows`
describes every setting (its default, meaning and valid values) for `--help` and the docs.
"""

from __future__ import annotations

import difflib
import math
import operator
import textwrap
import typing
from dataclasses import MISSING as NO_DEFAULT
from dataclasses import fields, is_dataclass
from typing import Any

from omegaconf import MISSING

from mha_textclf.settings import (
    BY_TEXT_LENGTH,
    DERIVED,
    DataSettings,
    MLflowSettings,
    PredictSettings,
    TensorBoardSettings,
    TrainSettings,
    _leaves,
    field_type,
    show,
)


def lookup(cls: type, key: str) -> tuple[type, Any] | str:
    """The (owner dataclass, field) of `key`, or a sentence saying why it is not a setting."""
    leaves = _leaves(cls)
    if key in leaves and not leaves[key][1].metadata.get("group_choice"):
        return leaves[key]
    if key in leaves:  # model.attention: one way to choose the variant, and the run folder is named after it
        return f"{key} is chosen with {leaves[key][1].metadata['group_choice']}."
    if key in DERIVED and cls is TrainSettings:
        return f"{key} is set by the pipeline from {DERIVED[key]}."
    if any(k.startswith(f"{key}.") for k in leaves):
        example = next(k for k in leaves if k.startswith(f"{key}."))
        return f"{key} is a group of settings, not a value or a config group: set its keys, e.g. {example}=..."
    mapping = next((k for k, (owner, f) in leaves.items() if key.startswith(f"{k}.")
                    and typing.get_origin(field_type(owner, f.name)) is dict), None)
    if mapping is not None:  # search's params: its keys hold dots, so a key inside it cannot be reached by a path
        return (f"{key} is not a setting: {mapping} maps keys to values, and takes them whole, merged into its own: "
                f"'{mapping}={{{key.removeprefix(mapping + '.')}: \"<value>\"}}' (quoted for the shell).")
    group, _, name = key.rpartition(".")
    siblings = [k.rpartition(".")[2] for k in leaves if k.rpartition(".")[0] == group]
    if group and siblings:  # a known group, an unknown name in it: compare names within the group
        close = [f"{group}.{n}" for n in difflib.get_close_matches(name, siblings, n=2, cutoff=0.6)]
        hint = " or ".join(close) + "?" if close else f"the {group} settings are {', '.join(siblings)}."
        return f"{key} is not a setting; " + ("did you mean " + hint if close else hint)
    close = difflib.get_close_matches(key, leaves, n=2, cutoff=0.6) or [
        k for k in leaves if k.rpartition(".")[2] == name]  # lr=3e-3: the group left out
    return f"{key} is not a setting" + (f"; did you mean {' or '.join(close)}?" if close else
                                        f" (see --help for all {len(leaves)}).")


def describe_type(kind: Any) -> str:
    """Words for a field type, for error messages and --help."""
    args = typing.get_args(kind)
    if type(None) in args:
        return f"{describe_type(next(a for a in args if a is not type(None)))} or null"
    names = {int: "a whole number", float: "a number", bool: "true or false", str: "text"}
    if kind in names:
        return names[kind]
    if typing.get_origin(kind) is list:
        return "a list"
    return "a value"


BOUNDS = {"gt": (operator.gt, ">"), "ge": (operator.ge, "≥"), "lt": (operator.lt, "<"), "le": (operator.le, "≤")}


def check_value(f, value: Any) -> str | None:
    """Why `value` is out of range or not among the choices of field `f`; None when it is fine.

    Types are OmegaConf's to check (it converts `3` to 3.0 and refuses `abc` for a number); this checks values.
    """
    if value is None:
        return None
    m = f.metadata
    if m.get("choices") and value not in m["choices"]:
        return f"must be one of {', '.join(map(show, m['choices']))}"
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    broken = [f"{sign} {show(m[name])}" for name, (holds, sign) in BOUNDS.items()
              if m.get(name) is not None and isinstance(value, int | float) and not holds(value, m[name])]
    return "must be " + " and ".join(broken) if broken else None


def problems(settings: Any, prefix: str = "") -> list[str]:
    """Every out-of-range value, unknown choice and broken rule in `settings`, as `key=value: what is wrong`."""
    found = []
    for f in fields(settings):
        value = getattr(settings, f.name)
        if is_dataclass(value):
            found += problems(value, f"{prefix}{f.name}.")
        elif (why := check_value(f, value)) is not None:
            found.append(f"{prefix}{f.name}={show(value)}: {why}.")
    rules = {TrainSettings: _train_rules, PredictSettings: _predict_rules, DataSettings: _data_rules,
             TensorBoardSettings: _logger_rules, MLflowSettings: _logger_rules}
    if type(settings) in rules:
        found += [f"{prefix}{problem}" for problem in rules[type(settings)](settings)]
    return found


def _data_rules(s: DataSettings) -> list[str]:
    columns = s.text_column
    if isinstance(columns, str) or (isinstance(columns, list) and columns and all(isinstance(c, str) for c in columns)):
        return []
    return [f"text_column={show(columns)}: must be a column name or a list of them (data.text_column=[title,body])."]


def _logger_rules(s: TensorBoardSettings | MLflowSettings) -> list[str]:
    """A logger's settings, changed while it is off, would be silently ignored."""
    if s.enabled:
        return []
    name = "tensorboard" if isinstance(s, TensorBoardSettings) else "mlflow"
    default = type(s)()
    return [f"{f.name}={show(getattr(s, f.name))}: {name} logging is off; add logger={name} (or logger=many)."
            for f in fields(s) if getattr(s, f.name) != getattr(default, f.name)]


def _train_rules(s: TrainSettings) -> list[str]:
    found = []
    # A null width becomes one of two values later, from the corpus: both must suit the other settings.
    widths = [s.model.d_model] if s.model.d_model is not None else list(BY_TEXT_LENGTH["model.d_model"])
    for d_model in widths:
        shown = f"model.d_model={d_model}" + ("" if s.model.d_model is not None else " (what null may become)")
        if s.model.n_heads > 0 and d_model % s.model.n_heads:
            divisors = [n for n in range(1, d_model + 1) if d_model % n == 0]
            found.append(f"model.n_heads={s.model.n_heads}: {shown} is not divisible by it; each head gets "
                         f"d_model // n_heads dimensions (choose among {divisors[:12]}).")
            break
        if s.pe and d_model % 2:
            found.append(f"pe=true needs an even model.d_model (sin/cos pairs), got {d_model}.")
    if not all(0 < level <= 1 for level in s.time_to_accuracy):
        found.append(f"time_to_accuracy={show(s.time_to_accuracy)}: accuracies lie in (0,1], e.g. [0.9,0.95].")
    return found


def _predict_rules(s: PredictSettings) -> list[str]:
    found = []
    if s.backend != "torch" and s.device not in ("cpu", "auto"):
        found.append(f"device={s.device}: backend={s.backend} runs on the CPU (onnxruntime); leave device at cpu, "
                     "or use backend=torch for a GPU.")
    text = s.text
    if text is None or isinstance(text, str) or (isinstance(text, list) and all(isinstance(t, str) for t in text)):
        return found
    shown = show(text)
    found.append(f"text={shown}: was read as {type(text).__name__}, not as text; quote it for Hydra, e.g. "
                 f"text=\"'{shown}'\" or text='[\"first text\",\"second text\"]'.")
    return found


def _interval(m: dict) -> str:
    """The valid range as one unbreakable word: (0,1), [0,1), >0, ≥0."""
    low = ("(", m["gt"]) if m.get("gt") is not None else ("[", m["ge"]) if m.get("ge") is not None else None
    high = (")", m["lt"]) if m.get("lt") is not None else ("]", m["le"]) if m.get("le") is not None else None
    if low and high:
        return f"{low[0]}{show(low[1])},{show(high[1])}{high[0]}"
    if low:
        return f"{'>' if low[0] == '(' else '≥'}{show(low[1])}"
    if high:
        return f"{'<' if high[0] == ')' else '≤'}{show(high[1])}"
    return ""


def help_rows(cls: type) -> list[tuple[str, str, str, str]]:
    """One row per setting of `cls`: its key, its default as typed, its meaning and its valid values ("" where any
    value of its type is); for --help and the docs' tables of settings."""
    rows = []
    for key, (_, f) in _leaves(cls).items():
        default = f.default_factory() if f.default_factory is not NO_DEFAULT else f.default
        # A required value comes from a config group: model=efficient sets model.attention, data=... data.path.
        shown = show(default) if default != MISSING else f"({key.split('.')[0]}=...)" if "." in key else "(required)"
        choices = " | ".join(map(show, f.metadata.get("choices") or ()))
        interval = _interval(f.metadata)
        valid = f"range {interval}" if interval else f"one of {choices}" if choices else ""
        rows.append((key, shown, f.metadata["help"], valid))
    return rows


def help_table(cls: type, width: int = 118) -> str:
    """One entry per setting: key, default, meaning and valid values; for Hydra's --help template."""
    rows = [(key, default, meaning + (f"; {valid}" if valid else ""))
            for key, default, meaning, valid in help_rows(cls)]
    key_width = max(len(k) for k, _, _ in rows) + 2
    default_width = max(len(d) for _, d, _ in rows) + 2
    indent = 2 + key_width + default_width
    lines = []
    for key, default, meaning in rows:
        wrapped = textwrap.wrap(meaning, width=max(width - indent, 40))
        lines.append(f"  {key:<{key_width}}{default:<{default_width}}{wrapped[0]}")
        lines += [" " * indent + more for more in wrapped[1:]]
    return "\n".join(lines)
