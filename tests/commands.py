"""The commands users type (`python -m train ...`, `python scripts/x.py ...`), each in a process of its own, started
in about a second instead of about ten.

Most of a command's time in these tests is its imports (torch, torch._dynamo, scikit-learn, transformers, datasets,
matplotlib: about 10 s of CPU on these 2 cores) and not its work (a tiny run trains in under a second). So a command
is forked from a server process that imported them once (multiprocessing's forkserver, with those modules preloaded)
and then runs as `python` would run it: `-m module` through runpy with sys.argv and sys.path[0] as Python sets
them, `script.py` likewise, `-c code` in a fresh `__main__`; in the folder and with the variables asked for; its
stdout and stderr in files, its exit code Python's (a SystemExit's code, 1 and a traceback for an exception,
-signal when a signal ends it), atexit handlers run. The process is real, so signals, exit codes, files and
concurrency are what they are for a user; what it skips is re-importing libraries already imported. Forked commands
share the server's hash seed and imports: a test about what differs between processes starts a fresh one.

Some variables are read once, when a library is imported (HF_HUB_OFFLINE, HF_HOME, PYTHONPROFILEIMPORTTIME...). A
command whose variables differ from the server's in any but RUNTIME_VARIABLES, read only while a command runs,
starts a fresh interpreter instead (`subprocess.Popen`), as do tests that need one (`fresh=True`): what a fresh
process imports, caches shared across processes."""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import weakref
from pathlib import Path

# Imported once, in the server: what the package's commands import, heaviest first.
PRELOAD = ["torch", "torch._dynamo", "sklearn.metrics", "transformers", "datasets", "pandas", "matplotlib.figure",
           "matplotlib.backends.backend_agg", "hydra", "optuna", "mha_textclf.pipeline", "mha_textclf.sweeps.summary",
           "mha_textclf.sweeps.callback", "mha_textclf.search.study", "mha_textclf.search.workers"]
# Read when a command runs (by this package, Hydra's config interpolation, Slurm's tools, MLflow), so they may differ
# from the server's; PYTEST_CURRENT_TEST changes with every test. torch writes TORCHINDUCTOR_CACHE_DIR into the test
# process's own variables the first time inductor asks for its cache (torch/_inductor/runtime/cache_dir_utils.py), and
# reads it only then: without it here, every command a worker started after that came from a fresh interpreter.
RUNTIME_VARIABLES = {"BBC_NEWS_PATH", "MHA_TEXTCLF_CACHE", "SLURM_CONF", "MLFLOW_TRACKING_URI", "PYTEST_CURRENT_TEST",
                     "TORCHINDUCTOR_CACHE_DIR"}

_server_env: dict[str, str] | None = None
# Whether a forked command renders the figures it draws into PNG files: tests/conftest.py turns it off for every test
# (rendering is most of a small run's time), and each figure's file then holds a blank 1×1 PNG. A fresh interpreter
# always renders.
render_figures = True


def blank_png() -> bytes:
    """The smallest valid PNG: one grey pixel."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\x00\x80")) + chunk(b"IEND", b""))


def draw_figures_only() -> None:
    """From now on in this process, a figure is drawn by the code that made it, and its file (or a page's inline
    image) holds a blank PNG instead of its rendering (runs/files.figure_png renders every figure)."""
    from mha_textclf.runs import files

    files.figure_png = lambda figure, **savefig: blank_png()


def _forkserver() -> multiprocessing.context.BaseContext:
    global _server_env
    context = multiprocessing.get_context("forkserver")
    if _server_env is None:
        context.set_forkserver_preload(PRELOAD)
        _server_env = dict(os.environ)
    return context


def _forkable(env: dict[str, str]) -> bool:
    server_env = _server_env if _server_env is not None else dict(os.environ)
    changed = {k for k in env.keys() | server_env.keys() if env.get(k) != server_env.get(k)}
    return changed <= RUNTIME_VARIABLES


class Command:
    """A forked command, with the part of subprocess.Popen's interface the tests use."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], merge_stderr: bool):
        self.args = [sys.executable, *argv]
        self._folder = Path(tempfile.mkdtemp(prefix="command-"))
        weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        self._stdout = self._folder / "stdout"
        self._stderr = self._stdout if merge_stderr else self._folder / "stderr"
        self._process = _forkserver().Process(target=_run_as_python, args=(argv, str(cwd), env, str(self._stdout),
                                                                           str(self._stderr), render_figures))
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self._process.join()
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self.poll() is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        self.wait(timeout)
        out = self._stdout.read_text(errors="replace") if self._stdout.exists() else ""
        err = None if self._stderr == self._stdout else (
            self._stderr.read_text(errors="replace") if self._stderr.exists() else "")
        return out, err


def start(argv: list[str], cwd: Path, env: dict[str, str] | None = None, merge_stderr: bool = False,
          fresh: bool = False) -> Command | subprocess.Popen:
    """`python *argv` in `cwd`, with `env` (default: this process's variables); stdout and stderr captured as text
    (stderr into stdout with merge_stderr)."""
    env = dict(os.environ if env is None else env)
    if fresh or not _forkable(env):
        return subprocess.Popen([sys.executable, *argv], cwd=cwd, env=env, stdout=subprocess.PIPE, text=True,
                                stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE)
    return Command(argv, cwd, env, merge_stderr)


def run(argv: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 900,
        fresh: bool = False) -> subprocess.CompletedProcess:
    """`python *argv` to its end, as subprocess.run(..., capture_output=True, text=True) gives it."""
    command = start(argv, cwd, env, fresh=fresh)
    try:
        stdout, stderr = command.communicate(timeout=timeout)
    finally:
        command.kill()
    return subprocess.CompletedProcess(command.args, command.returncode, stdout, stderr)


def _run_as_python(argv: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str,
                   figures: bool = True) -> None:
    """In the forked process: what `python *argv` does, then exit with its code."""
    if not figures:
        draw_figures_only()
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    out = os.open(stdout, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    err = out if stderr == stdout else os.open(stderr, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(out, 1)
    os.dup2(err, 2)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv, sys.path[0] = argv[1:], cwd
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        elif argv[0] == "-c":
            sys.argv, sys.path[0] = argv[1:], ""
            sys.argv[0] = "-c"
            exec(compile(argv[1], "<string>", "exec"), {"__name__": "__main__"})
        else:
            sys.argv, sys.path[0] = list(argv), str(Path(cwd, argv[0]).resolve().parent)
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as stop:
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
            code = 1
    except BaseException as error:
        traceback.print_exc()
        code = -signal.SIGINT if isinstance(error, KeyboardInterrupt) else 1
    # What a Python exit runs, in its order: wait for the other threads and run threading's exit hooks (loky's
    # shuts down its workers), then atexit's (logging's flush, multiprocessing's clean-up).
    threading._shutdown()
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    if code == -signal.SIGINT:  # Python ends on an uncaught Ctrl-C by the signal itself
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code)
