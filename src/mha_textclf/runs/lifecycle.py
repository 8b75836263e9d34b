"""A run folder's lifecycle: a folder knows its state, and a run started in a folder that holds one does what the
user means.

Runs get started again in the same folder all the time: a Slurm job is requeued after preemption, a sweep is run
again after the laptop slept, the same command is typed twice. `status.json` records the state (running,
interrupted, failed, finished) and `config.yaml` the settings, so a new start can decide:

- the folder is new (or holds nothing of a run): train from scratch;
- the same training settings, unfinished: continue after the last finished epoch (last.pt), in place;
- the same settings, finished: train nothing, say so, and hand back the recorded metrics (a sweep counts the run);
- other training settings: refuse before touching anything, naming the differences and the ways out.

`last.pt` is the truth about finished epochs (written atomically after each one); history.csv is rewritten from it
whenever a run continues, so it never holds an epoch twice whatever killed the previous attempt. An exclusive lock
(flock on `.lock`, released by the kernel when a process dies, SIGKILL included) keeps two live processes out of one
folder.
"""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from shlex import join

import yaml

from mha_textclf.data.corpus import source_fingerprint
from mha_textclf.errors import RunFolderError, UserError
from mha_textclf.runs import files
from mha_textclf.runs.checkpoint import load_training_state
from mha_textclf.runs.files import read_status
from mha_textclf.runs.metrics import RunMetrics, read_metrics
from mha_textclf.settings import ADAPTIVE, ADDED_SINCE, CONTINUABLE, TrainSettings, flat, show

log = logging.getLogger("train")


RUNNING, INTERRUPTED, FAILED, FINISHED = "running", "interrupted", "failed", "finished"

# How long a requeued Slurm job waits for its killed previous attempt to let go of the folder: Slurm sends SIGKILL
# KillWait seconds (30 by default) after SIGTERM.
REQUEUE_PATIENCE_S = 120.0


@dataclass
class Start:
    """What a run does in its folder: `state` is the training state to continue from (None: from scratch);
    `finished` the recorded metrics of a run that has nothing left to train; `attempt` counts starts in the folder."""

    state: dict | None = None
    finished: RunMetrics | None = None
    in_place: bool = False  # continuing this folder's own run (its tokenizer is already here)
    attempt: int = 1


def changed_settings(saved: dict, now: dict) -> list[str]:
    """The training settings (flattened keys) on which two runs disagree, in the sense of continuing one with the
    other: where things are, what is reported and a longer run with a constant learning rate do not count."""
    # A key only one side has is a setting added or removed since then: nothing the two runs can disagree on.
    # How positions enter (model.pe_gate) means nothing to a run without them: a pe=false run saved before the gate
    # existed is the same model now.
    moot = {"model.pe_gate"} if saved.get("pe") is False and now.get("pe") is not True else set()
    changed = sorted(k for k in saved.keys() & now.keys()
                     if saved[k] != now[k] and k not in CONTINUABLE and k not in moot
                     and not (k in ADAPTIVE and now[k] is None))  # null: whatever the run decided
    if (now.get("trainer.epochs") not in (None, saved.get("trainer.epochs"))  # null: whatever the run decided
            and now.get("trainer.schedule") != "constant"):
        changed.append("trainer.epochs")  # a decaying schedule is laid out over the original epochs
    return changed


def mark(run_dir: Path, state: str, **fields) -> None:
    """Record the folder's state (atomically: a kill mid-write leaves the previous status)."""
    status = read_status(run_dir) | {"state": state, "updated_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")} | fields
    files.write_json(run_dir / files.STATUS, status)


def folder_state(run_dir: Path) -> str | None:
    """running / interrupted / failed / finished, for readers such as the sweep summary. A folder marked running
    whose lock nobody holds was killed (SIGKILL, node failure, a cancelled allocation): interrupted."""
    state = read_status(run_dir).get("state")
    if state == RUNNING and not _locked(run_dir):
        return INTERRUPTED
    return state


@contextmanager
def claim(run_dir: Path, settings: TrainSettings, overrides: list[str]) -> Iterator[Start]:
    """Hold `run_dir` for this process and decide how the run starts there (see the module's docstring).

    Raises RunFolderError, before anything in the folder changes, when another live process holds it or it holds a
    run with other training settings.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    with _lock(run_dir):
        data = source_fingerprint(settings.data.path)
        start = _plan(run_dir, settings, overrides, data)
        if start.finished is None:
            files.remove_temporaries(run_dir)  # a write a kill cut short; nothing else writes here now
            if start.state is None or not start.in_place:
                _clear(run_dir, settings)  # a fresh start, or a continuation of another folder: nothing stale stays
            files.write_config(run_dir, settings)
            if start.state is not None:  # history.csv tells the whole story up to the state continued from
                files.write_history(run_dir / files.HISTORY, start.state["history"])
            (run_dir / files.ERROR).unlink(missing_ok=True)
            done = len(start.state["history"]) if start.state else 0
            # A continuation whose data cannot be read now keeps the fingerprint of what it trained on.
            if data is None and start.state is not None and start.in_place:
                data = read_status(run_dir).get("data")
            mark(run_dir, RUNNING, attempt=start.attempt, pid=os.getpid(), host=socket.gethostname(),
                 launch=launch_id(), data=data, message=None, interrupted_by=None,
                 started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"), epochs_done=done, started_from_epoch=done)
        yield start


# What a run folder that holds another run leaves the command that was refused.
WAYS_OUT = ("Choose another folder (hydra.run.dir=<folder>, or hydra.sweep.dir=<folder> for a sweep), or start afresh "
            "in this one with overwrite=true (its results are deleted).")


def _plan(run_dir: Path, settings: TrainSettings, overrides: list[str], data: str | None) -> Start:
    status = read_status(run_dir)
    attempt = status.get("attempt", 0) + 1
    has_run = (run_dir / files.CONFIG).is_file()
    resumes_itself = settings.resume is not None and Path(settings.resume).expanduser().resolve() == run_dir.resolve()
    if settings.overwrite and resumes_itself:
        raise RunFolderError(f"overwrite=true would delete what resume={settings.resume} continues; drop one of them.")
    # A requeued Slurm job runs its command again, overwrite=true included: it continues what its first start began.
    overwrite = settings.overwrite and not (launch_id() and status.get("launch") == launch_id())
    if has_run and not overwrite:
        # A setting added since the run was saved: the run had the value that adds nothing.
        saved, now = ADDED_SINCE | flat(files.read_config(run_dir) or {}), flat(asdict(settings))
        changed = changed_settings(saved, now)
        if changed:
            raise RunFolderError(
                f"{run_dir} holds a run with other training settings ({differences(saved, now, changed, 'there')}); "
                f"nothing was changed. To continue it, give the run's value of each (a default may have moved since "
                f"it was saved). {WAYS_OUT}")
        # The data may move (data.path is not a training setting), but not change: continued on other texts, or
        # found finished, a run would report on data it did not train on. A run that trained nothing yet starts
        # afresh below, whatever it read; folders from before the check have no fingerprint.
        last = run_dir / files.LAST
        trained = last.is_file() or (status.get("state") == FINISHED and (run_dir / files.METRICS).is_file())
        if trained and data is not None and status.get("data") not in (None, data):
            raise RunFolderError(
                f"{run_dir} holds a run trained on other data: the files at data.path={settings.data.path} differ "
                f"from those it read; nothing was changed. {WAYS_OUT}")
        if status.get("state") == FINISHED and (run_dir / files.METRICS).is_file() and (
                not last.is_file() or settings.trainer.epochs in (None, saved.get("trainer.epochs"))):
            log.info(f"{run_dir} already holds this run, finished: nothing to train (overwrite=true trains it again)")
            return Start(finished=read_metrics(run_dir), attempt=attempt - 1)
        if last.is_file():
            state = _load_state(last, f"continue the run in {run_dir}")
            _check_epochs(state, settings)
            log.info(f"continuing the run in {run_dir} after epoch {state['epoch']} (attempt {attempt})")
            return Start(state=state, in_place=True, attempt=attempt)
        if settings.resume is not None and not resumes_itself:  # killed before its first epoch: resume still holds
            return Start(state=resume_state(settings), attempt=attempt)
        log.info(f"{run_dir} holds a run that finished no epoch: starting it afresh")
        return Start(attempt=attempt)
    if overwrite and has_run:
        log.info(f"overwrite=true: deleting the run in {run_dir} and starting afresh")
    if settings.resume is not None:
        return Start(state=resume_state(settings), attempt=1)
    return Start(attempt=1)


def launch_id() -> str | None:
    """What stays the same when Slurm requeues a job (and differs between two submissions of it)."""
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        return f"slurm {os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID')}"
    return f"slurm {os.environ['SLURM_JOB_ID']}" if os.environ.get("SLURM_JOB_ID") else None


# What a stopped run's summary row and page advise (the run's own log prints the exact command).
HOW_TO_CONTINUE = ("run the same command again into its folder (hydra.run.dir=<the folder>; a sweep's job: the "
                   "sweep's command with hydra.sweep.dir=<the sweep folder>) to continue it")


def train_command(overrides: Sequence[str], folders: dict[str, str | Path]) -> str:
    """`python -m train` with `overrides` as given and `folders` (resume=, hydra.run.dir=), quoted for the shell and,
    where a path holds what Hydra's syntax reads as syntax (a space, a comma, brackets), for Hydra too."""
    def value(path: str | Path) -> str:
        text = str(path)
        if re.fullmatch(r"[\w./@%+:-]+", text):
            return text
        # Hydra's quoted strings: a quote is escaped, and so are the backslashes before a quote or the end.
        return '"' + re.sub(r'(\\*)("|$)', lambda m: m[1] * 2 + ("\\" + m[2] if m[2] else ""), text) + '"'

    return join(["python", "-m", "train", *overrides, *(f"{key}={value(path)}" for key, path in folders.items())])


def sweep_command(sweep_dir: Path) -> str | None:
    """The sweep's own command into its folder, from the multirun.yaml Hydra wrote there: what continues every job of
    an interrupted sweep (finished jobs find their runs and train nothing). None where the folder has no record."""
    try:
        overrides = yaml.safe_load((sweep_dir / files.MULTIRUN).read_text())["hydra"]["overrides"]
        task, hydra = list(overrides["task"]), list(overrides["hydra"])
    except (OSError, yaml.YAMLError, TypeError, KeyError):
        return None
    # -m stands for hydra.mode=MULTIRUN, and the folder is named last, as the other printed commands name theirs.
    hydra = [o for o in hydra if not o.startswith(("hydra.mode=", "hydra.sweep.dir="))]
    return train_command(["-m", *hydra, *task], {"hydra.sweep.dir": sweep_dir})


def differences(saved: dict, now: dict, keys: list[str], where: str) -> str:
    return "; ".join(f"{k}={show(saved[k])} {where}, {show(now[k])} now" for k in keys)


def _check_epochs(state: dict, settings: TrainSettings) -> None:
    if settings.trainer.epochs is not None and state["epoch"] > settings.trainer.epochs:  # null: the run's own
        raise RunFolderError(f"trainer.epochs={settings.trainer.epochs}, but the run to continue has already trained "
                             f"{state['epoch']} epochs; give trainer.epochs={state['epoch']} or more.")


def _load_state(path: Path, what: str) -> dict:
    try:
        return load_training_state(path)
    except UserError as e:
        raise UserError(f"Cannot {what}: {e} To start it afresh instead: overwrite=true.") from e


def resume_state(settings: TrainSettings) -> dict:
    """The training state of another run folder (`resume=`), after checking that this run asks for the same
    training; the message of a refusal is the command that resumes it."""
    state = load_training_state(Path(settings.resume).expanduser() / files.LAST)
    saved, now = ADDED_SINCE | flat(state["metadata"]["config"]), flat(asdict(settings))
    changed = changed_settings(saved, now)
    if changed:
        # Its own command line, plus the value it had for each setting it took by default (a default may have moved).
        original = state["metadata"]["overrides"]
        given = {o.split("=", 1)[0].lstrip("+~") for o in original}
        repeat = original + [f"{k}={show(saved[k])}" for k in changed if k not in given]
        raise UserError(f"resume={settings.resume} continues a run with other settings "
                        f"({differences(saved, now, changed, 'then')}). Resume it with its own: "
                        f"{train_command(repeat, {'resume': settings.resume})}")
    trained_on = read_status(Path(settings.resume).expanduser()).get("data")
    data = source_fingerprint(settings.data.path)
    if None not in (trained_on, data) and trained_on != data:
        raise UserError(f"resume={settings.resume} continues a run trained on other data: the files at "
                        f"data.path={settings.data.path} differ from those it read. Point data.path at the data it "
                        "trained on, or start a new run on this data without resume=.")
    _check_epochs(state, settings)
    log.info(f"resuming {settings.resume} after epoch {state['epoch']}")
    return state


def _clear(run_dir: Path, settings: TrainSettings) -> None:
    # TensorBoard's folder is a setting (logger.tensorboard.subdir): the one this run writes, and the one the run it
    # replaces wrote, go too; only a folder below run_dir, never run_dir itself or one outside it.
    try:
        previous = (files.read_config(run_dir) or {})["logger"]["tensorboard"]["subdir"]
    except (KeyError, TypeError):  # no run here, or one killed writing its config
        previous = None
    event_dirs = {settings.logger.tensorboard.subdir, previous}
    event_dirs = [d for d in event_dirs if isinstance(d, str) and d.strip(". /") and ".." not in Path(d).parts
                  and not Path(d).is_absolute()]
    for pattern in (*files.RUN_FILES, *event_dirs):
        for path in run_dir.glob(pattern):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


@contextmanager
def _lock(run_dir: Path) -> Iterator[None]:
    # flock, not a lock file's existence: the kernel releases it when the holder dies, so a SIGKILLed or preempted
    # run never leaves the folder locked.
    with (run_dir / files.LOCK).open("a") as f:
        # A reader's brief probe (_locked) is no reason to refuse. Nor is the previous attempt of this very Slurm job:
        # Slurm can start a requeued job while the process it killed is still exiting, and refusing would end the job
        # with nothing trained. It is waited for, a while.
        requeued = launch_id() is not None and read_status(run_dir).get("launch") == launch_id()
        deadline = time.monotonic() + (REQUEUE_PATIENCE_S if requeued else 1.4)
        for tries in itertools.count():
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    status = read_status(run_dir)
                    raise RunFolderError(
                        f"Another process (pid {status.get('pid', '?')} on {status.get('host', '?')}) is running in "
                        f"{run_dir}. Wait for it to finish, stop it, or choose another folder "
                        "(hydra.run.dir=<folder>).") from None
                if requeued and tries == 3:  # once, when a probe would have let go by now
                    log.info(f"waiting up to {REQUEUE_PATIENCE_S:.0f} s for {run_dir}, held by another process of "
                             f"this Slurm job (its previous attempt, if Slurm requeued it)")
                time.sleep(min(0.1 * 3 ** tries, 5.0, max(deadline - time.monotonic(), 0)))
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _locked(run_dir: Path) -> bool:
    if not (run_dir / files.LOCK).exists():
        return False
    with (run_dir / files.LOCK).open("a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
