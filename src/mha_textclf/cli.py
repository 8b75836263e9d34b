"""What the Hydra entry points (`train`, `predict`, `search`, scripts/baseline_tfidf.py) share: the schema registered
with Hydra, the command line checked before Hydra composes it, the composed config turned into typed settings, and a
job's failures recorded in its run folder.

Hydra refuses a misspelt key or a word where a number belongs with its own message, one mistake at a time, and
accepts `+trainer.anything=...` silently. Checking the command line against the schema first lists every mistake in
one message, names the closest valid keys, and exits with 2, like every other bad input. The settings it returns are
plain dataclasses: the library behind the entry points never sees Hydra's objects (but for the sweep's callback and
the search space, which reads Hydra's sweep syntax).
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.override_parser.types import (
    ChoiceSweep,
    IntervalSweep,
    Override,
    OverrideType,
    RangeSweep,
    Sweep,
    ValueType,
)
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from mha_textclf import checks
from mha_textclf import settings as schema
from mha_textclf.errors import RunFolderError, UserError
from mha_textclf.runs import files

CONFIG_DIR = Path(__file__).resolve().parents[2] / "configs"
SCHEMAS = {"train": schema.TrainSettings, "predict": schema.PredictSettings, "baseline": schema.BaselineSettings,
           "search": schema.SearchSettings, "export": schema.ExportSettings}
COMMANDS = {"train": "python -m train", "predict": "python -m predict", "baseline": "python scripts/baseline_tfidf.py",
            "search": "python -m search", "export": "python -m export"}
# The config groups each one reads.
GROUPS = {"train": ("model", "data", "experiment", "logger"), "predict": (), "baseline": ("data",),
          "search": ("hparams_search",), "export": ()}
EXAMPLES = {
    "train": """\
  python -m train model=naive pe=true                 one run: a variant, with positional encoding
  python -m train experiment=best                     the best settings found (configs/experiment/best.yaml)
  python -m train experiment=smoke                    a seconds-long run that exercises everything
  python -m train -m model=naive,efficient,torch pe=true,false seed=0,1,2     a sweep, summarised at its end
  python -m train --cfg job --resolve                 print the composed settings and exit""",
    "predict": """\
  python -m predict run_dir=outputs/runs/<run> text='["how are you","you how are"]'
  python -m predict run_dir=outputs/runs/<run> file=texts.txt out=predictions.csv
  python -m predict run_dir=outputs/runs/<run> backend=onnx text='["how are you"]'    the export, without torch""",
    "export": """\
  python -m export run_dir=outputs/runs/<run>        ONNX fp32 and int8, tokenizer and model card in <run>/export/""",
    "baseline": """\
  python scripts/baseline_tfidf.py                                   wordpiece features on bbc-news, seed 0
  python scripts/baseline_tfidf.py -m features=wordpiece,words seed=0,1,2      six runs, summarised at the end
  python scripts/baseline_tfidf.py data=reuters_r8 features=words    the same data settings as training
  python scripts/baseline_tfidf.py data=chinese_reviews features=chars    character n-grams, for any script""",
    "search": """\
  python -m search                                   40 trials over configs/hparams_search/accuracy.yaml
  python -m search n_trials=60                       the same study, extended (or resumed after Ctrl-C)
  python -m search num_threads=1                     in two terminals: two workers share the study, a core each
  python -m search study=no_pruning pruning=false    another study over the same space""",
}

log = logging.getLogger(__name__)
T = TypeVar("T")


@functools.cache
def register(app: str) -> None:
    """Put the app's schema and its --help page into Hydra's ConfigStore (before Hydra composes anything).

    configs/<app>.yaml lists `<app>_schema` first in its defaults, so every YAML value merges into a typed field.
    Once per process: storing converts the schema into an OmegaConf node, which costs more than composing.
    """
    store = ConfigStore.instance()
    store.store(name=f"{app}_schema", node=SCHEMAS[app])
    # The help page is a string.Template ($APP_CONFIG_GROUPS) inside an OmegaConf node (${...}): escape both.
    table = checks.help_table(SCHEMAS[app]).replace("$", "$$").replace("${", "\\${")
    defaults = _default_options(app)
    options = {group: sorted(p.stem for p in (CONFIG_DIR / group).glob("*.yaml")) for group in GROUPS[app]}
    groups = "".join(f"{group}: {', '.join(f'{n} (default)' if n == defaults.get(group) else n for n in names)}\n"
                     for group, names in options.items())
    groups = f"== Config groups (group=option) ==\n{groups}{_tuned_note(defaults)}\n" if groups else ""
    template = (f"{SCHEMAS[app].__doc__}\n\n{groups}== Settings (key=value; default; meaning) ==\n{table}\n\n"
                f"== Examples ==\n{EXAMPLES[app]}\n\n"
                "Mistakes are listed together with what to change, and exit with code 2. "
                "Hydra's own flags: --hydra-help.\n")
    store.store(group="hydra/help", name=f"mha_{app}", node={"app_name": app, "header": "", "footer": "",
                                                             "template": template})


def _default_options(app: str) -> dict[str, str]:
    """Each config group's option in configs/<app>.yaml's defaults list; `optional tuned` (a group the data config
    picks) under `tuned` when the list has it."""
    entries = yaml.safe_load((CONFIG_DIR / f"{app}.yaml").read_text()).get("defaults", [])
    pairs = (item for entry in entries if isinstance(entry, dict) for item in entry.items())
    return {key.removeprefix("optional "): value for key, value in pairs if isinstance(value, str)}


def _tuned_note(defaults: dict[str, str]) -> str:
    """What the default data config fixes beyond its data (a global package), with its tuned file: the settings
    below that adapt (null) take these values unless data= names another corpus."""
    data = defaults.get("data")
    tuned = CONFIG_DIR / "tuned" / f"{data}.yaml"
    if defaults.get("tuned") != "${data}" or not tuned.is_file():
        return ""
    own = (CONFIG_DIR / "data" / f"{data}.yaml").read_text()
    fixed = schema.flat(yaml.safe_load(own) or {}) if "@package _global_" in own else {}
    fixed = {k: v for k, v in fixed.items() if not k.startswith("data.")}
    fixed |= schema.flat(yaml.safe_load(tuned.read_text()))
    values = ", ".join(f"{key}={schema.show(value)}" for key, value in fixed.items())
    return textwrap.fill(f"data={data}, the default, fixes settings that adapt (null below) to the values it was "
                         f"tuned with: {values} (configs/data/{data}.yaml, configs/tuned/{data}.yaml); data=own "
                         "leaves them to adapt to your corpus.", 120) + "\n"


def check_command_line(app: str, argv: list[str]) -> None:
    """Exit with every mistake in the command line's settings, or return and let Hydra take over.

    Each `key=value` is checked against the schema (key, type, range, choices; every value of a sweep). Then every
    job is composed as Hydra will compose it (a sweep's every combination, with its experiment's sweeper params) and
    checked as a whole: rules between settings, values from experiment files. All problems come out in one message.
    This check never raises: whatever it cannot judge, Hydra reports in its own words.
    """
    from hydra._internal.utils import get_args_parser  # Hydra's own parser: flags are read exactly as Hydra reads them

    register(app)
    args, _ = get_args_parser().parse_known_args(argv)
    if args.help or args.hydra_help or args.info or args.shell_completion:
        return
    parser = OverridesParser.create()
    try:
        overrides = parser.parse_overrides(args.overrides)
    except Exception:
        # A syntax error: Hydra's own message says where, but not why a ~ is one.
        home = [why for line in args.overrides if "~" in line and not _parses(parser, line)
                if (why := _unexpanded_home(parser, line))]
        if home:
            report(app, home)
        return
    found, clean, dropped = [], [], []
    for override in overrides:
        mistakes = check_override(SCHEMAS[app], override)
        found += mistakes
        (dropped if mistakes else clean).append(override)
    for problem in _composed_problems(args.config_name or app, clean, args.multirun):
        # A problem that names a dropped setting is one already reported (a rule checked against its default).
        if problem not in found and not any(o.key_or_group in problem for o in dropped):
            found.append(problem)
    if found:
        report(app, found)


def _parses(parser: OverridesParser, line: str) -> bool:
    try:
        parser.parse_overrides([line])
    except Exception:
        return False
    return True


# A ~ that starts a path: the value's, or an item's of a sweep, a list or choice(...).
HOME_PATH = re.compile(r"(^|[,(\[]\s*)~(?=/|,|\)|\]|$)")


def _unexpanded_home(parser: OverridesParser, line: str) -> str | None:
    """The shell expands ~ only at the start of a word, so `data.path=~/corpus` reaches Hydra with its ~, which
    Hydra's override syntax refuses outside quotes. None where no fix is sure to parse (Hydra's message stands)."""
    key, _, value = line.partition("=")
    if HOME_PATH.search(value):
        fix = key + "=" + HOME_PATH.sub(r"\1$HOME", value)
        typed = fix.replace("$HOME", os.path.expanduser("~"))  # what the shell hands Hydra
    elif value.startswith("~") and not re.search(r"[,(\[]", value):  # ~user/...: one path, quoted whole
        typed = f'{key}="{value}"'
        fix = f"'{typed}'"
    else:
        return None
    if not _parses(parser, typed):
        return None
    return f"{line}: the shell expands ~ only at the start of a word, and Hydra's syntax refuses it here; write {fix}."


def _is_group(key: str) -> bool:
    return key == "hydra" or key.startswith(("hydra.", "hydra/")) or "/" in key or (CONFIG_DIR / key).is_dir()


def check_override(cls: type, override: Override) -> list[str]:
    """What is wrong with one `key=value` (or `+key=value`, or a sweep `key=a,b`) against schema `cls`."""
    key = override.key_or_group
    if override.is_sweep_override() and not override.is_discrete_sweep():
        return [f"{override.input_line}: a sweep over this command line takes lists ({key}=a,b,c), range(...) or "
                "choice(...); interval(...) needs a sweeper that samples values."]
    if override.value_type == ValueType.GLOB_CHOICE_SWEEP and not _is_group(key):
        return [f"{override.input_line}: glob(...) picks options of a config group (model=glob(*)); {key} is a "
                f"setting: list its values instead ({key}=a,b)."]
    if _is_group(key) and not key.startswith("hydra") and override.value() is None:
        options = ", ".join(sorted(p.stem for p in (CONFIG_DIR / key).glob("*.yaml")))
        return [f"{key}=null: choose one of {options} ({key}=...), or leave {key} out to run without one."
                if key == "experiment" else f"{key}=null: choose one of {options} ({key}=...)."]
    if _is_group(key) or override.type == OverrideType.DEL:
        return []  # groups and Hydra's own settings: Hydra lists their choices itself
    found = checks.lookup(cls, key)
    if isinstance(found, str):
        return [_group_hint(cls, override) or found]
    owner, f = found
    value = override.value()
    if isinstance(value, dict) and any(isinstance(v, Sweep) for v in value.values()):  # search's params, unquoted
        name, expression = next((k, v) for k, v in value.items() if isinstance(v, Sweep))
        quoted = f"'{key}={{{name}: \"{_sweep_text(expression)}\"}}'"
        return [f"{key}: quote each expression inside the braces, e.g. {quoted}; unquoted, Hydra reads it as a sweep "
                "of the command line, not as text."]
    try:
        typed_values = list(override.sweep_string_iterator()) if override.is_sweep_override() else [
            override.get_value_element_as_str()]
        values = list(override.sweep_iterator()) if override.is_sweep_override() else [value]
    except Exception as e:  # glob(...) over a key that is not a config group, say
        return [f"{override.input_line}: {str(e).splitlines()[0]}"]
    mistakes = []
    for value, as_typed in zip(values, typed_values, strict=True):
        if isinstance(value, str) and "${" in value:
            continue  # an interpolation: judged once the whole config is composed
        try:
            typed = getattr(OmegaConf.merge(OmegaConf.structured(owner), {f.name: value}), f.name)
        except OmegaConfBaseException:
            kind = checks.describe_type(schema.field_type(owner, f.name))
            mistakes.append(f"{key}={as_typed}: must be {kind}.")
            continue
        why = checks.check_value(f, typed)
        if why:
            mistakes.append(f"{key}={as_typed}: {why}.")
    return mistakes


def _sweep_text(sweep: Sweep) -> str:
    """An unquoted sweep as it was typed, near enough to be quoted back: choice(64, 128), interval(0.1, 0.5)."""
    if isinstance(sweep, ChoiceSweep):
        return f"choice({', '.join(map(str, sweep.list))})"
    if isinstance(sweep, IntervalSweep):
        return f"interval({sweep.start}, {sweep.end})"
    if isinstance(sweep, RangeSweep):
        return f"range({sweep.start}, {sweep.stop}, {sweep.step})"
    return "..."


def _group_hint(cls: type, override: Override) -> str | None:
    """For a misspelt config group (`modle=naive`), the "did you mean" that a misspelt key gets; None when the key
    is closer to a setting than to one of the app's groups."""
    key = override.key_or_group
    if "." in key:
        return None  # modle.d_model: a setting's path, which lookup() matches against the settings
    app = next(name for name, schema_cls in SCHEMAS.items() if schema_cls is cls)
    top_level = [k for k in schema.known_keys(cls) if "." not in k]
    close = difflib.get_close_matches(key, [*GROUPS[app], *top_level], n=1, cutoff=0.6)
    if not close or close[0] not in GROUPS[app]:
        return None
    options = ", ".join(sorted(p.stem for p in (CONFIG_DIR / close[0]).glob("*.yaml")))
    return (f"{key} is not a setting or a config group; did you mean "
            f"{close[0]}={override.input_line.partition('=')[2]}? ({close[0]}: {options})")


MAX_JOBS_CHECKED = 1000  # a sweep's jobs are composed ~50 per second; past this, the jobs check themselves


def _composed_problems(config_name: str, overrides: list[Override], multirun: bool) -> list[str]:
    """The problems of every job these overrides make, each composed as Hydra composes it."""
    from hydra import compose, initialize_config_dir
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    found = []
    try:
        with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
            jobs = [[o.input_line for o in overrides]]
            if multirun:  # as Hydra's basic sweeper: the config's sweeper params, then the command line
                plain = [o.input_line for o in overrides if not o.is_sweep_override()]
                params = compose(config_name, overrides=plain, return_hydra_config=True).hydra.sweeper.get("params")
                lines = [f"{k}={v}" for k, v in (params or {}).items()] + [o.input_line for o in overrides]
                (jobs,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(lines), None)
            for job in jobs[:MAX_JOBS_CHECKED]:
                found += [p for p in settings_problems(compose(config_name, overrides=job))[1] if p not in found]
    except Exception:
        pass  # e.g. model=transformer: Hydra's own message lists the available options
    return found


def compose_settings(app: str, overrides: Sequence[str] = ()) -> Any:
    """The typed settings `python -m <app> <overrides>` runs with, composed in-process from the real configs (for
    tests, scripts and the hyperparameter search); a UserError lists every problem."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    register(app)
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:
        raise UserError(f"Cannot read the settings {list(overrides)}: {str(e).splitlines()[0]}") from e
    found = [problem for override in parsed for problem in check_override(SCHEMAS[app], override)]
    if found:  # in our words, before Hydra refuses the first of them in its own
        raise UserError(_message(found))
    if GlobalHydra.instance().is_initialized():  # inside a running Hydra app (python -m search), on configs/ too
        return to_settings(compose(app, overrides=list(overrides)))
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return to_settings(compose(app, overrides=list(overrides)))


def settings_problems(cfg: DictConfig) -> tuple[Any, list[str]]:
    """The typed settings of a composed config (None if they cannot be built) and every problem in them."""
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
        if missing:
            return None, [f"{key} is required ({_help_of(cfg, key)})." for key in missing]
        settings = OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:  # an interpolation that does not resolve, or resolves to the wrong type
        return None, [f"{e.full_key or 'config'}: {str(e).splitlines()[0]}"]
    return settings, checks.problems(settings)


def _help_of(cfg: DictConfig, key: str) -> str:
    cls = OmegaConf.get_type(cfg)
    found = checks.lookup(cls, key) if cls is not None else None
    return found[1].metadata["help"] if isinstance(found, tuple) else "no default"


def to_settings(cfg: DictConfig) -> Any:
    """The typed settings of a composed config; a UserError listing every problem if it has any."""
    settings, found = settings_problems(cfg)
    if found:
        raise UserError(_message(found))
    return settings


def _message(found: list[str]) -> str:
    head = "Invalid setting:" if len(found) == 1 else f"Invalid settings ({len(found)} problems):"
    return "\n  ".join([head, *found])


def run_job(job: Callable[[Path, Callable[[], None]], T], cfg: DictConfig | None = None) -> T | None:
    """Run one Hydra job, `job(run_dir, record)`, so that a failure is reported once and recorded where the run is.

    With `cfg`, Hydra's record of the job (.hydra/: config.yaml, hydra.yaml, overrides.yaml) is written by `record()`
    rather than by Hydra at start-up (configs/train.yaml sets hydra.output_subdir=null): the job calls it once the
    folder is its own, so a refused start leaves a folder holding another run as it was.

    Bad input (UserError): its message, error.txt in the run folder, exit 2; a RunFolderError (the folder is
    another run's or another process's) is not written into that folder. Anything else: the traceback, and
    error.txt too. In a sweep a failed job must not take the others down: Hydra would re-raise only after the last
    job and skip the end-of-sweep summary, so a failed job returns None and the summary lists it.
    """
    hydra_cfg = HydraConfig.get()
    run_dir, in_sweep = Path(hydra_cfg.runtime.output_dir), hydra_cfg.mode == RunMode.MULTIRUN

    claimed = False

    def record() -> None:
        nonlocal claimed
        claimed = True
        if cfg is not None:
            (run_dir / files.HYDRA).mkdir(parents=True, exist_ok=True)
            OmegaConf.save(cfg, run_dir / files.HYDRA / "config.yaml")
            OmegaConf.save(OmegaConf.create({"hydra": hydra_cfg}), run_dir / files.HYDRA / "hydra.yaml")
            OmegaConf.save(hydra_cfg.overrides.task, run_dir / files.HYDRA / "overrides.yaml")

    def record_failure(message: str) -> None:
        if claimed or not (run_dir / files.CONFIG).exists():  # never into a folder that holds another run
            record()
            files.write_text(run_dir / files.ERROR, message + "\n")
            from mha_textclf.pages.run import write_run_page  # here: a command's mistakes are answered without it

            write_run_page(run_dir)  # again, now with error.txt

    try:
        return job(run_dir, record)
    except RunFolderError as e:
        log.error(str(e))
        if not in_sweep:
            sys.exit(2)
    except UserError as e:
        log.error(str(e))
        record_failure(str(e))
        if not in_sweep:
            sys.exit(2)
    except KeyboardInterrupt:
        if in_sweep:
            raise  # Ctrl-C stops the whole sweep
        log.error("interrupted before there was anything to report (or a second time): stopped")
        sys.exit(130)
    except Exception as e:
        record_failure(f"{type(e).__name__}: {e}")
        if not in_sweep:
            raise
        log.exception("job failed")  # the traceback goes to this job's log file
    return None


def report(app: str, found: list[str]) -> None:
    print(f"{_message(found)}\nEvery setting, its default and meaning: {COMMANDS[app]} --help", file=sys.stderr)
    sys.exit(2)
