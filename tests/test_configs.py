"""The real configs compose for every variant × pe, hold only deltas over the schema, and every experiment runs."""

import math
import re
from dataclasses import asdict

import pytest
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.errors import ConfigCompositionException, MissingConfigException
from omegaconf import MISSING, OmegaConf

from conftest import CONFIG_DIR, REPO, compose_config, require, settings_for, train_in_process
from mha_textclf import cli
from mha_textclf.checks import lookup
from mha_textclf.errors import UserError
from mha_textclf.settings import (
    ADAPTIVE,
    BY_TEXT_LENGTH,
    ModelSettings,
    SearchSettings,
    TrainSettings,
    flat,
    known_keys,
    with_values,
)

# The schema each config file's values merge into: a root config's own, a group's that of the app reading it.
ROOTS = cli.SCHEMAS  # configs/<app>.yaml merges into the app's schema
GROUPS = {"hparams_search": SearchSettings}  # every other group: TrainSettings


@pytest.mark.parametrize("model", ["naive", "efficient", "torch"])
@pytest.mark.parametrize("pe", [True, False])
def test_every_variant_and_pe_composes_to_the_schema_defaults(model, pe):
    settings = settings_for(f"model={model}", f"pe={str(pe).lower()}")
    assert isinstance(settings, TrainSettings)
    assert settings.model.attention == model and settings.pe is pe
    # A variant file changes the variant and nothing else: the rest is the schema's defaults, the one source, but for
    # the training settings the default data config fixes (configs/tuned/bbc_news.yaml).
    tuned = flat(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "tuned" / "bbc_news.yaml")))
    expected = with_values(TrainSettings(model=ModelSettings(attention=model)), tuned)
    assert asdict(settings.model) == asdict(expected.model)
    assert settings.trainer == expected.trainer


def test_a_tuned_file_fixes_only_settings_that_adapt_for_its_own_data_config():
    """configs/tuned/<data>.yaml applies with data=<data> alone: its keys are settings that adapt (ADAPTIVE), so that
    it takes nothing from another corpus; data=own leaves them all null, to adapt."""
    tuned = sorted((CONFIG_DIR / "tuned").glob("*.yaml"))
    assert tuned
    for path in tuned:
        assert (CONFIG_DIR / "data" / path.name).is_file(), f"{path.name}: no data config of that name"
        keys = flat(OmegaConf.to_container(OmegaConf.load(path)))
        assert keys and set(keys) <= set(ADAPTIVE), sorted(set(keys) - set(ADAPTIVE))
        fixed = flat(asdict(settings_for(f"data={path.stem}")))
        assert all(fixed[k] == v for k, v in keys.items())
    others = flat(asdict(settings_for("data=own", "data.path=/somewhere")))
    assert all(others[k] is None for k in ADAPTIVE)
    # bbc-news keeps what it was tuned with: the values of short texts, though its articles are long; but not the
    # dropout added since, which long texts do without, nor R-Drop; and since the bigram table, the token dropout and
    # passes of long texts.
    bbc = flat(OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "tuned" / "bbc_news.yaml")))
    added_since = {k: values[1] for k, values in BY_TEXT_LENGTH.items()
                   if k in ("model.embedding_dropout", "model.mlp_dropout", "model.token_dropout", "trainer.epochs")}
    assert bbc == {k: values[0] for k, values in BY_TEXT_LENGTH.items()} | added_since | {"trainer.rdrop": 0.0}


def test_a_corpus_data_config_sets_where_and_how_to_read_its_corpus_and_nothing_else():
    """A corpus runs on the defaults with nothing set but its data config (python -m train -m data=<corpus>
    seed=0,1,2): each corpus's configs/data/<corpus>.yaml (bbc-news aside, which keeps its tuned values) names its
    files and columns only; every other setting, data.max_length and the split fractions included, composes to what
    data=own gives."""
    reading = {"data.path", "data.name", "data.text_column", "data.label_column"}
    own = {k: v for k, v in flat(asdict(settings_for("data=own", "data.path=/somewhere"))).items() if k not in reading}
    corpora = sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml") if p.stem not in ("bbc_news", "own"))
    assert len(corpora) == 7
    for corpus in corpora:
        assert set(OmegaConf.load(CONFIG_DIR / "data" / f"{corpus}.yaml")) <= {k.removeprefix("data.") for k in reading}
        composed = flat(asdict(settings_for(f"data={corpus}")))
        assert {k: v for k, v in composed.items() if k not in reading} == own, corpus


@pytest.mark.unit
def test_default_variant_is_efficient_without_pe():
    settings = settings_for()
    assert settings.model.attention == "efficient" and settings.pe is False


@pytest.mark.unit
def test_each_extra_installs_the_modules_its_commands_import():
    """The hpo extra holds Optuna (python -m search), tracking TensorBoard and MLflow (logger=...), launchers Hydra's
    submitit and joblib launchers (hydra/launcher=slurm, joblib): each extra in pyproject.toml requires distributions
    that hold those modules (read from the installed distributions' own file lists; an extra that lost one installs,
    and the command then fails), and every error message that names an extra names one of pyproject.toml's."""
    import importlib.metadata

    from packaging.requirements import Requirement

    needs = {"hpo": ["optuna"], "tracking": ["tensorboard", "mlflow"],
             "launchers": ["hydra_plugins/hydra_submitit_launcher", "hydra_plugins/hydra_joblib_launcher"],
             "export": ["onnx", "onnxscript", "onnxruntime"], "serve": ["onnxruntime", "tokenizers", "numpy"]}
    section = (REPO / "pyproject.toml").read_text().split("[project.optional-dependencies]\n")[1].split("\n[")[0]
    extras = {name: [Requirement(r).name for r in re.findall(r'"([^"]+)"', body)]
              for name, body in re.findall(r"^(\w+) = \[(.*)\]$", section, re.MULTILINE)}
    assert set(extras) == {"dev", *needs}
    named = {name for path in (REPO / "src").rglob("*.py") for name in re.findall(r'install -e "\.\[(\w+)\]"',
                                                                                path.read_text())}
    assert named and named <= set(extras), named
    for extra, modules in needs.items():
        held = set()
        for name in extras[extra]:
            try:
                held |= {str(f).removesuffix(".py") for f in importlib.metadata.files(name) or []}
            except importlib.metadata.PackageNotFoundError:
                require(False, f'{name} is not installed: pip install -e ".[{extra}]"')
        for module in modules:
            assert any(f == module or f.startswith(f"{module}/") for f in held), (extra, module, extras[extra])


@pytest.mark.unit
def test_the_default_run_is_bbc_news_with_its_vocabulary_of_wordpieces_fixed():
    """The default composition reads bbc-news and pins the vocabulary size its architecture was tuned with (its own
    data config; other corpora leave it to adapt), a WordPiece vocabulary learned here, not a pretrained one."""
    settings = settings_for()
    assert settings.tokenizer.vocab_size is not None and settings.tokenizer.base is None
    assert settings_for("data=own", "data.path=/somewhere").tokenizer.vocab_size is None
    assert settings.data.path.rstrip("/").endswith("bbc-news")


@pytest.mark.unit
def test_config_files_hold_no_value_the_schema_already_holds():
    """Every key a config file sets is a setting of the schema it merges into, and differs from that setting's
    default or fills a required one: a file that repeats a default is a second source for it.

    (Experiments may pin a value on purpose, so that they stay the same experiment if a default moves.)
    """
    checked = 0
    for path in sorted([*CONFIG_DIR.glob("*.yaml"), *CONFIG_DIR.glob("*/*.yaml")]):
        group = path.parent.name if path.parent != CONFIG_DIR else None
        if group in ("hydra", "experiment"):
            continue
        schema = ROOTS[path.stem] if group is None else GROUPS.get(group, TrainSettings)
        # Where the file's keys land: a group's under its name, unless the file says `# @package _global_`.
        package = "" if group is None or "@package _global_" in path.read_text() else f"{group}."
        body = OmegaConf.to_container(OmegaConf.load(path))  # unresolved: ${oc.env:...} stays as written
        body.pop("defaults", None)  # Hydra's, not settings
        body.pop("hydra", None)
        for key, value in _settings(schema, body, package):
            assert key in known_keys(schema), f"{path.relative_to(CONFIG_DIR)}: {lookup(schema, key)}"
            default = schema()
            for part in key.split("."):
                default = getattr(default, part)
            assert default == MISSING or default != value, (
                f"{path.relative_to(CONFIG_DIR)}: {key}={value} repeats the schema default")
            checked += 1
    assert checked >= 9  # the variants' attention, the datasets' paths and columns, the loggers, the search space


def _settings(schema, body: dict, prefix: str):
    """(key, value) for every setting in a config body: nested down to the schema's own keys, whose values may be
    lists or dicts themselves (probes.attention, params)."""
    keys = known_keys(schema)
    for name, value in body.items():
        key = f"{prefix}{name}"
        if isinstance(value, dict) and key not in keys and any(k.startswith(f"{key}.") for k in keys):
            yield from _settings(schema, value, f"{key}.")
        else:
            yield key, value


@pytest.mark.unit
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


def test_data_own_takes_no_corpus_of_its_own_and_asks_for_data_path(monkeypatch):
    """data=own reads the corpus data.path points at, in the shape it comes in, and has no corpus of its own to fall
    back on (not bbc-news, whatever BBC_NEWS_PATH says): without data.path it is refused, naming the setting."""
    monkeypatch.setenv("BBC_NEWS_PATH", "/somewhere/bbc")
    with pytest.raises(UserError, match=r"data\.path is required"):
        settings_for("data=own")
    assert settings_for("data=own", "data.path=/mine").data.path == "/mine"


def test_reuters_r8_reads_r8_path_before_corpora_dir_as_its_config_says(monkeypatch):
    """configs/data/reuters_r8.yaml: "python -m train data=reuters_r8      # or R8_PATH=/elsewhere/r8 (or
    CORPORA_DIR=/elsewhere) python -m train ...": R8_PATH names the folder itself and wins; without it,
    <CORPORA_DIR>/r8."""
    monkeypatch.setenv("R8_PATH", "/elsewhere/r8")
    monkeypatch.setenv("CORPORA_DIR", "/corpora")
    assert settings_for("data=reuters_r8").data.path == "/elsewhere/r8"
    monkeypatch.delenv("R8_PATH")
    assert settings_for("data=reuters_r8").data.path == "/corpora/r8"


def test_no_logger_is_on_by_default_and_each_logger_choice_turns_on_its_own():
    """The logger group holds tensorboard, mlflow, and many, which lists the other two; none by default: a plain run
    writes no event files and records into no MLflow store; logger=<name> turns that one on, logger=many both."""
    expected = {(): (False, False), ("logger=tensorboard",): (True, False), ("logger=mlflow",): (False, True),
                ("logger=many",): (True, True)}
    for choice, on in expected.items():
        logger = settings_for(*choice).logger
        assert (logger.tensorboard.enabled, logger.mlflow.enabled) == on, choice


@pytest.fixture
def as_hydra_job():
    """Make a composed config Hydra's current one (its folder names read hydra.job), and put the old one back."""
    previous = HydraConfig.instance().cfg
    yield HydraConfig.instance().set_config
    HydraConfig.instance().cfg = previous


def test_run_folder_is_named_by_time_model_and_pe(as_hydra_job):
    cfg = compose_config(["model=torch", "pe=true"], hydra_config=True)
    as_hydra_job(cfg)
    run_dir = cfg.hydra.run.dir
    assert run_dir.startswith("outputs/runs/") and run_dir.endswith("_torch_pe-True")
    # date_time with microseconds, so two runs started in the same second never share a folder
    stamp = run_dir.removeprefix("outputs/runs/").removesuffix("_torch_pe-True")
    date, time = stamp.split("_")
    assert len(date) == 10 and len(time.split("-")) == 4 and len(time.split("-")[3]) == 6
    assert cfg.hydra.sweep.dir.startswith("outputs/multirun/")
    assert cfg.hydra.job.chdir is False


def test_a_sweep_job_folder_is_named_by_its_number_and_overrides_without_equals_signs_commas_or_paths(tmp_path):
    """Sweep jobs land in <sweep>/<job number>_<overrides>, the overrides as typed (3_model-torch_pe-true_seed-0): no
    `=` or `,`, so the folder passes back unquoted as run_dir= or resume=; paths, lists, resume and overwrite are left
    out (a path would nest folders; the same sweep with overwrite=true must land in the same folders)."""
    cfg = compose_config(["model=torch", "pe=True", "seed=0", f"data.path={tmp_path}", "tokenizer.base=../tok",
                          f"resume={tmp_path}", "overwrite=true", "probes.order=[a,b]", "trainer.lr=0.001"],
                         hydra_config=True)
    assert OmegaConf.to_container(cfg.hydra.sweep)["subdir"] == "${hydra.job.num}_${hydra.job.override_dirname}"
    assert cfg.hydra.job.override_dirname == "model-torch_pe-True_seed-0_trainer.lr-0.001"


def test_a_sweep_job_folder_leaves_out_every_setting_whose_value_is_a_path_a_uri_or_a_list(tmp_path):
    """A sweep job's folder is <job number>_<overrides>, the overrides as typed but with no `=` or `,`, so that a
    folder can be passed back unquoted as run_dir= or resume=. Every setting whose value is a path or a URI (a `/`
    nests the folder, a `:` and `//` too), or a list (`,`), is left out of the name, whatever the value: the cache
    folder, MLflow's store, the probes' sentences, the accuracy levels."""
    typed = {"data.path": str(tmp_path), "tokenizer.base": "../tok", "tokenizer.cache_dir": str(tmp_path / "cache"),
             "resume": str(tmp_path), "logger.mlflow.tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}",
             "probes.attention": "[a b,c d]", "probes.order": "[a b,b a]", "time_to_accuracy": "[0.9,0.95]"}
    cfg = compose_config(["logger=mlflow", "seed=1", *(f"{key}={value}" for key, value in typed.items())],
                         hydra_config=True)
    assert cfg.hydra.job.override_dirname == "logger-mlflow_seed-1"


def test_a_baseline_lands_in_its_own_folder_under_outputs_baselines(as_hydra_job):
    """The TF-IDF reference writes into its own folder under outputs/baselines/, named by its features and seed, so
    that scripts/summarize.py outputs tables it beside the training runs."""
    cfg = compose_config(["features=chars", "seed=2"], app="baseline", hydra_config=True)
    as_hydra_job(cfg)
    run_dir = cfg.hydra.run.dir
    assert run_dir.startswith("outputs/baselines/") and run_dir.endswith("_tfidf-chars_seed-2")
    assert cfg.hydra.sweep.dir.startswith("outputs/baselines/")


@pytest.mark.parametrize(("overrides", "study"), [([], "accuracy"), (["study=accuracy_unpruned"], "accuracy_unpruned")])
def test_a_study_lands_in_outputs_search_under_its_name_its_journal_there(as_hydra_job, overrides, study):
    """Each trial trains into outputs/search/<study>/trial_<n>/, the study lives in a journal file in its folder and
    the plots land there too: python -m search's folder (Hydra's run folder, where tuning.search writes) is
    outputs/search/<study>, named by the study, the default one accuracy."""

    cfg = compose_config(overrides, app="search", hydra_config=True)
    as_hydra_job(cfg)
    assert cfg.hydra.run.dir == f"outputs/search/{study}" and cfg.study == study
    assert cfg.hydra.job.chdir is False  # (relative to the folder the command runs in)


def test_experiment_best_is_a_delta_over_the_defaults():
    default, best = settings_for(), settings_for("experiment=best")
    assert best.model.cls_only and not default.model.cls_only
    assert best.data.max_length > default.data.max_length
    assert best.trainer.lr == default.trainer.lr  # everything not named in best.yaml stays the default
    # experiment=best is pe=false, 1024 tokens, 24 epochs, cls_only, token dropout 0.75, as it was measured.
    assert (best.pe, best.data.max_length, best.trainer.epochs, best.model.token_dropout) == (False, 1024, 24, 0.75)
    # experiment comes after _self_ in the defaults list, yet the command line still wins over it.
    naive = settings_for("experiment=best", "model=naive", "pe=true")
    assert naive.model.attention == "naive" and naive.model.cls_only and naive.pe


@pytest.mark.parametrize("data", [["data=own", "data.path=/somewhere"], ["data=newsgroups"], []])
def test_experiment_best_holds_its_own_settings_on_any_data_config(data):
    """What configs/experiment/best.yaml sets is what the experiment composes to on bbc-news, and on a data config
    that leaves pe to adapt (data=own, or a corpus of long texts, where a pe left null would become true), which only
    the experiment's own pe=false keeps off."""
    best_yaml = flat(yaml.safe_load((CONFIG_DIR / "experiment" / "best.yaml").read_text()))
    assert best_yaml["pe"] is False
    composed = flat(asdict(settings_for("experiment=best", *data)))
    assert {key: composed[key] for key in best_yaml} == best_yaml


def test_experiment_search_sweeps_over_the_defaults():
    cfg = compose_config(["experiment=search"], hydra_config=True)
    params = {key: values.split(",") for key, values in cfg.hydra.sweeper.params.items()}
    assert set(params) == {"pe", "seed", "model.token_dropout", "trainer.lr"}
    assert math.prod(len(values) for values in params.values()) == 72  # as its header says
    # The search's best point is averaged over pe=false and pe=true, so its grid holds both (round 24a: pe=false
    # alone over 6 seeds, still 72 runs, passed).
    assert sorted(params["pe"]) == ["false", "true"]
    # The learning rate must be one of the points the search measured, or the search does not back it. (bbc-news'
    # token dropout and passes have moved since, measured with the bigram table: configs/tuned/bbc_news.yaml.)
    default = settings_for()
    assert default.trainer.lr in [float(v) for v in params["trainer.lr"]]
    search = settings_for("experiment=search")
    for key in ("schedule", "warmup_epochs", "batch_size", "weight_decay"):
        assert getattr(search.trainer, key) == getattr(default.trainer, key), key
    assert search.data.max_length == default.data.max_length and search.model.cls_only


EXPERIMENTS = sorted(p.stem for p in (CONFIG_DIR / "experiment").glob("*.yaml"))


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs(experiment, data_dir, tmp_path, request):
    """Each experiment file, shrunk to one epoch on a sliver of the data, runs the whole pipeline (smoke: the
    session's shared run is that experiment)."""
    shrink = [] if experiment == "smoke" else ["data.max_train_samples=32", "trainer.epochs=1", "probes.attention=[]"]
    if experiment == "smoke":
        shared = request.getfixturevalue("smoke_run")
        run_dir, metrics = shared.dir, shared.metrics
    else:
        run_dir, metrics = tmp_path, train_in_process(tmp_path, f"experiment={experiment}", *shrink, data_dir=data_dir)
    settings = settings_for(f"experiment={experiment}", *shrink)
    assert metrics.epochs == settings.trainer.epochs and (run_dir / "metrics.json").is_file()
    assert (run_dir / "config.yaml").read_text().count(f"max_length: {settings.data.max_length}") == 1


def imported_modules(path) -> set[str]:
    """Every module a source file imports, and `module.name` for each name it takes from one."""
    import ast

    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def test_hydra_stops_at_the_entry_points_and_no_entry_point_imports_another():
    """Of the library only what the entry points share (cli.py), the sweep's Hydra callback and the search space read in
    Hydra's sweep syntax see Hydra (settings.py and checks.py take omegaconf's MISSING, the marker of a required value,
    nothing else); the entry points call into the library, never into each other."""
    src = CONFIG_DIR.parent / "src"
    hydra_users = set()
    for path in sorted((src / "mha_textclf").rglob("*.py")):
        found = {m for m in imported_modules(path) if m.split(".")[0] in ("hydra", "omegaconf")}
        if found - {"omegaconf", "omegaconf.MISSING"} or (found and path.name not in ("settings.py", "checks.py")):
            hydra_users.add(str(path.relative_to(src / "mha_textclf")))
    assert hydra_users == {"cli.py", "sweeps/callback.py", "search/space.py"}
    entry_points = {"train", "predict", "search"}
    for name in entry_points:
        imported = {m.split(".")[0] for m in imported_modules(src / f"{name}.py")}
        assert not imported & (entry_points - {name}), f"src/{name}.py imports {imported & entry_points}"
