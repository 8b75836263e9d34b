"""Shared fixtures: where the real data and the MiniLM tokenizer copy live, private caches, the real configs
composed and run in-process, one tiny trained run shared by the tests that only read a run folder, and reference
computations that check a run's files against its own model and data."""

import atexit
import copy
import functools
import hashlib
import importlib
import io
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import hypothesis
import pytest
import yaml

import commands

# Property tests: no deadline (a shared 2-core machine times nothing reliably), and under CI the same examples in
# every run, so that a red CI run is red again on a rerun.
hypothesis.settings.register_profile("mha-textclf", deadline=None, derandomize=bool(os.environ.get("CI")))
hypothesis.settings.load_profile("mha-textclf")

REPO = Path(__file__).resolve().parents[1]
CONFIG_DIR = REPO / "configs"
DATA_DIR = Path(os.environ.get("BBC_NEWS_PATH", REPO.parent / "shared" / "data" / "bbc-news"))
MINILM_DIR = Path(os.environ.get("MINILM_TOKENIZER_PATH", REPO.parent / "shared" / "tokenizers" / "all-MiniLM-L6-v2"))


def require(condition: bool, reason: str) -> None:
    """Skip where the resource is simply absent; in CI, where it must be present, fail instead of passing green."""
    if not condition:
        (pytest.fail if os.environ.get("CI") else pytest.skip)(reason)


def optional(module: str, extra: str):
    """An optional extra's module: skipped where it is simply not installed, a failure in CI, which installs it."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module, reason=f'the {extra} extra: pip install -e ".[{extra}]"')


# Modules by their time in a full run on 2 cores, longest first (seconds: 80, 75, 45, 20, 34, 21, 15, 14, 16, 18, 13,
# 10, 8, 9, 9); the rest take a few seconds each. xdist hands whole modules to its workers in collection order
# (`--no-loadscope-reorder` in pyproject.toml; by default it sorts them by their number of tests), so starting with the
# longest keeps one worker from running a long module alone at the end while the other waits. The Slurm module goes
# first: much of its time is Slurm's scheduling and requeue delays, when the other worker has the cores.
LONGEST_MODULES = ("test_slurm.py", "test_callback.py", "test_export.py", "test_pages.py", "test_lifecycle.py",
                   "test_end_to_end.py",
                   "test_baseline.py", "test_benchmark.py", "test_tokenizer_cache.py", "test_workers.py",
                   "test_checks.py", "test_study.py", "test_tracking.py", "test_pipeline.py", "test_cli.py")


def pytest_configure(config: pytest.Config) -> None:
    """An xdist worker ends with os._exit once its results are sent and the exit handlers registered after this one
    have run (multiprocessing's, the temporary folders' of tests/commands.py; before it, only logging's and
    execnet's): tearing down an interpreter that imported torch, scikit-learn and transformers took each worker 2 to
    3 s, which the suite waited for at its end."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        def leave() -> None:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

        atexit.register(leave)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """The unit lane (`-m unit`) does not import the test modules that hold no unit test: importing them (torch,
    scikit-learn, transformers, datasets...) would take most of the lane's time."""
    if config.getoption("markexpr") == "unit" and collection_path.suffix == ".py" and \
            collection_path.name.startswith("test_") and "mark.unit" not in collection_path.read_text():
        return True
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, each module's tests kept together and in their order."""
    rank = {name: i for i, name in enumerate(LONGEST_MODULES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


# What a test in the unit lane may not use: the real corpus and tokenizer, or a run trained on them.
REAL_DATA = {"data_dir", "minilm_dir", "train_texts", "smoke_run"}


@pytest.fixture(scope="session", autouse=True)
def processor_known():
    """platform.processor() runs `uname -p` the first time anything asks (metrics.json's versions do): asked once
    here, so that the process Python starts for itself counts against no test."""
    import platform

    platform.processor()


@pytest.fixture(autouse=True)
def lanes(request):
    """A test marked `unit` trains nothing, starts no process and reads no real corpus: it fails if it does, so that
    the unit lane (pytest -m unit) stays what it says. Every test draws its figures without rendering them, in its
    process and in the commands it forks: each figure's file holds a blank PNG (rendering is most of a small run's
    time). The shared run (smoke_run) renders its figures, and a test that reads a rendering asks for it with
    capture_figures."""
    with pytest.MonkeyPatch.context() as patch:
        if request.node.get_closest_marker("unit"):
            import multiprocessing.process
            import subprocess

            from mha_textclf import training

            if REAL_DATA & set(request.fixturenames):
                pytest.fail(f"a unit test reads the real data: {sorted(REAL_DATA & set(request.fixturenames))}")

            def refuse(what):
                return lambda *args, **kwargs: pytest.fail(f"a unit test {what}")

            patch.setattr(training, "_train_epoch", refuse("trained"))
            patch.setattr(subprocess.Popen, "__init__", refuse("started a process"))
            patch.setattr(multiprocessing.process.BaseProcess, "start", refuse("started a process"))
        capture_figures(patch, write=False)
        patch.setattr(commands, "render_figures", False)
        yield


@pytest.fixture(scope="session")
def data_dir() -> Path:
    require((DATA_DIR / "train.jsonl").is_file(), f"bbc-news not found at {DATA_DIR}; set BBC_NEWS_PATH")
    return DATA_DIR.resolve()


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    require((MINILM_DIR / "tokenizer.json").is_file(),
            f"all-MiniLM-L6-v2 tokenizer not found at {MINILM_DIR}; set MINILM_TOKENIZER_PATH")
    return MINILM_DIR.resolve()


@pytest.fixture(scope="session")
def train_texts(data_dir) -> list[str]:
    from mha_textclf.data.corpus import load_corpus
    from mha_textclf.settings import DataSettings

    return load_corpus(DataSettings(path=str(data_dir)), seed=0).train.texts


@pytest.fixture(scope="session", params=["scratch", "minilm"])
def trained(request, train_texts, minilm_dir):
    """A tokenizer learned from scratch and one on MiniLM's pipeline, on some of bbc-news' training texts (a
    1000-token vocabulary still), for the tokenizer modules' tests, which only read them."""
    from mha_textclf.tokenizer import wordpiece

    base = None if request.param == "scratch" else str(minilm_dir)
    return wordpiece.train_tokenizer(train_texts[:250], vocab_size=1000, base=base)


@pytest.fixture(scope="session", autouse=True)
def one_torch_thread():
    """In-process tests run torch on one thread. Their tensors are tiny, so a second thread has nothing to share,
    and on a busy 2-core machine OpenMP's waiting threads spin against every other process (test_model.py and
    test_training.py took 45 s instead of 7 s). Subprocesses keep torch's default: what launchers set is tested."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session", autouse=True)
def private_caches(tmp_path_factory) -> Path:
    """Every test (and every subprocess it starts) caches tokenizers and datasets' Arrow files here, never in the
    user's home: tests neither depend on nor pollute what the machine has cached."""
    root = tmp_path_factory.mktemp("caches")
    os.environ["MHA_TEXTCLF_CACHE"] = str(root / "mha-textclf")
    os.environ["HF_HOME"] = str(root / "huggingface")
    os.environ["HF_DATASETS_CACHE"] = str(root / "huggingface" / "datasets")
    return root


class Terminal(io.StringIO):
    """What a progress bar writes to, as a terminal would take it."""

    def isatty(self) -> bool:
        return True


def write_jsonl(folder: Path, rows_by_split: dict[str, list[dict]]) -> Path:
    """A tiny local dataset folder in the bbc-news layout (train.jsonl, test.jsonl)."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    for split, rows in rows_by_split.items():
        (folder / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def compose_config(overrides: list[str] = (), app: str = "train", hydra_config: bool = False):
    """configs/<app>.yaml composed with `overrides`, as Hydra composes it for `python -m <app>`."""
    from hydra import compose, initialize_config_dir

    from mha_textclf import cli

    cli.register(app)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return compose(app, overrides=list(overrides), return_hydra_config=hydra_config)


def settings_for(*overrides: str, app: str = "train"):
    """The typed settings `python -m <app> <overrides>` would run with (problems raise UserError): a copy of their
    first composition in this session, for composing takes most of a second and the same overrides recur in many
    tests. The configs do not change during a session; the variables they read are part of the key."""
    return copy.deepcopy(_composed(app, overrides, *(os.environ.get(name) for name in CONFIG_VARIABLES)))


# What configs/ reads with ${oc.env:NAME,...}.
CONFIG_VARIABLES = sorted({name for path in CONFIG_DIR.rglob("*.yaml")
                           for name in re.findall(r"oc\.env:(\w+)", path.read_text())})


@functools.cache
def _composed(app: str, overrides: tuple[str, ...], *variables: str | None):
    from mha_textclf import cli

    return cli.compose_settings(app, overrides)


def train_in_process(run_dir: Path, *overrides: str, data_dir: Path, **kwargs):
    """`python -m train <overrides>` without a subprocess: the real configs, composed, then train() into run_dir."""
    from mha_textclf.pipeline import train

    return train(settings_for(f"data.path={data_dir}", *overrides), run_dir, overrides=list(overrides), **kwargs)


def load_script(name: str, monkeypatch=None):
    """scripts/<name>.py as a module, to call its functions in-process. With `monkeypatch` it is registered in
    sys.modules for the test (a script whose dataclasses look their module up needs that)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    if monkeypatch is not None:
        monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def run_cli(module: str, *overrides: str, data_dir: Path | None = None, cwd: Path = REPO,
            env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    """`python -m <module> <overrides>` from the repo root (or `cwd`), as users run it; `env` adds variables. The
    process is forked from a preloaded interpreter (tests/commands.py) where `env` allows it."""
    env = os.environ | ({"BBC_NEWS_PATH": str(data_dir)} if data_dir else {}) | (env or {})
    return commands.run(["-m", module, *overrides], cwd=cwd, env=env, timeout=timeout)


def run_train(*overrides: str, data_dir: Path, **kwargs) -> subprocess.CompletedProcess:
    return run_cli("train", *overrides, data_dir=data_dir, **kwargs)


def fingerprint(folder) -> dict:
    """Every file's hash, but the records of each start: the lines Hydra appends to train.log, and a sweep job's
    job.json (its wall time this time)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name not in ("train.log", "job.json")}


@dataclass(frozen=True)
class SlurmCluster:
    partition: str
    env: dict[str, str]  # what a process needs to reach the cluster (SLURM_CONF), for run_cli(env=...)


@pytest.fixture(scope="session")
def slurm_cluster():
    """The single-node Slurm cluster of scripts/slurm_up.sh (root on Debian/Ubuntu), up once for the session.

    A cluster this session started is stopped at its end, whatever the tests did; one already up (CI's .ci/run starts
    it before the tests, a developer may have) is left as it was, for whoever started it to stop. Where it cannot
    run the tests that need it skip with the reason; in CI, which runs as root on Debian, they fail instead."""
    scripts = REPO / "scripts"
    require(sys.platform == "linux" and os.geteuid() == 0, "a Slurm cluster needs root: sudo scripts/slurm_up.sh")
    require(bool(shutil.which("slurmctld") or shutil.which("apt-get")),
            "a Slurm cluster needs Debian/Ubuntu (apt-get) to install slurmctld, slurmd, munge")
    up = subprocess.run(["bash", str(scripts / "slurm_up.sh")], capture_output=True, text=True, timeout=900)
    output = (up.stdout + up.stderr)[-3000:]
    require(up.returncode == 0, f"scripts/slurm_up.sh failed (exit {up.returncode}):\n{output}")
    started_here = "already up" not in up.stderr
    try:
        # The script names the partition and the config; nothing here repeats them.
        partition = re.search(r"partition '(\S+)'", up.stdout).group(1)
        conf = re.search(r"^export SLURM_CONF=(\S+)$", up.stdout, re.MULTILINE).group(1)
        yield SlurmCluster(partition=partition, env={"SLURM_CONF": conf})
    finally:
        if started_here:
            subprocess.run(["bash", str(scripts / "slurm_down.sh")], capture_output=True, timeout=300)


@dataclass
class TrainedRun:
    dir: Path
    metrics: object  # RunMetrics, as train() returned it
    figures: dict = field(default_factory=dict)  # every figure the run saved, by file name (loss_curve.png, ...)


@pytest.fixture(scope="session")
def smoke_run(data_dir, tmp_path_factory) -> TrainedRun:
    """One tiny trained run (`model=efficient pe=true experiment=smoke`), trained once per session and shared by
    every test that only reads a run folder: such a test must not write into it.

    The figures it saved are kept as objects, so that a test reads what a plot draws (its lines, its cells), not
    its pixels.
    """
    run_dir = tmp_path_factory.mktemp("smoke-run")
    with pytest.MonkeyPatch.context() as patch:
        figures = capture_figures(patch)
        metrics = train_in_process(run_dir, "model=efficient", "pe=true", "experiment=smoke", data_dir=data_dir)
    return TrainedRun(run_dir, metrics, figures)


def capture_figures(patch: pytest.MonkeyPatch, write: bool = True) -> dict:
    """Every figure written from now on (through runs/files.write_figure, as all of them are), by its file name; with
    `write=False` drawn but not rendered (its pixels take most of a second): its file, and a page's inline image
    (runs/files.figure_png renders both), hold a blank PNG."""
    from mha_textclf.runs import files

    figures = {}
    real_write, real_png = _real_figure_functions()

    def write_figure(path, figure, **savefig):
        figures[Path(path).name] = figure
        real_write(path, figure, **savefig)

    patch.setattr(files, "write_figure", write_figure)
    patch.setattr(files, "figure_png", real_png if write else lambda figure, **savefig: commands.blank_png())
    return figures


def png_size(path: Path) -> tuple[int, int]:
    """Width and height of the PNG image at `path` (a rendered figure's, or 1×1 for one drawn without rendering)."""
    from PIL import Image

    with Image.open(path) as image:
        image.load()  # decodes it whole: a truncated file fails here
        return image.size


@functools.cache
def _real_figure_functions():
    """files.write_figure and files.figure_png as the package has them, whatever a test's patch made of them since."""
    from mha_textclf.runs import files

    return files.write_figure, files.figure_png


def run_split(run_dir: Path, split: str):
    """The texts and labels of a run's split, settled afresh from the data settings and seed in its config.yaml."""
    from mha_textclf.data.corpus import load_corpus
    from mha_textclf.settings import DataSettings

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return getattr(load_corpus(DataSettings(**config["data"]), config["seed"]), split)


def logits_one_by_one(model, tokenizer, texts: list[str]):
    """The model's logits (N, n_classes) for each text alone: no batch, no padding, no mask; the reference for what
    the pipeline computed in sorted, padded batches."""
    import torch

    from mha_textclf.tokenizer.encoding import encode

    model.eval()
    with torch.no_grad():
        return torch.cat([model(torch.as_tensor(ids, dtype=torch.long)[None])
                          for ids in encode(tokenizer, texts, model.config.max_length)])
