"""Sweeps on a real Slurm cluster: the single-node one of scripts/slurm_up.sh (the `slurm_cluster` fixture).

Skipped where it cannot run (not root, not Debian/Ubuntu); CI runs them. Every test that needs the cluster is here, in
one module, so that pytest-xdist's --dist loadscope runs them all in one worker, the one that starts the cluster (when
it was not up) and stops it at its end."""

import ipaddress
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import commands
from conftest import REPO, load_script, run_train
from mha_textclf.runs import files
from mha_textclf.runs.metrics import RunMetrics
from search_fakes import assert_reports_describe, load_tiny_study, trial_folders_in, worker_command

pytestmark = [pytest.mark.slow, pytest.mark.slurm]

# A run in seconds: every stage, on a sliver of the data.
TINY = ["trainer.epochs=1", "data.max_train_samples=100", "data.max_eval_samples=50", "data.max_length=128",
        "probes.attention=[]"]


def slurm(*command: str, env: dict[str, str]) -> str:
    return subprocess.run(command, env=os.environ | env, capture_output=True, text=True, check=True,
                          timeout=60).stdout


def on_slurm(cluster, partition: bool = True) -> list[str]:
    """A multirun whose runs go to the cluster, one 1-CPU job each; without `partition`, to its default partition."""
    return ["-m", "hydra/launcher=slurm", *[f"hydra.launcher.partition={cluster.partition}"] * partition,
            "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"]


def wait_for_epochs(sweep: Path, epochs: int, timeout: float = 300) -> Path:
    """The sweep's first run folder, once its history.csv holds `epochs` epochs."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for history in sweep.glob("0_*/history.csv"):
            if len(history.read_text().splitlines()) > epochs:  # a header, then one line per epoch
                return history.parent
        time.sleep(0.2)
    raise AssertionError(f"no run in {sweep} reached {epochs} epochs within {timeout} s")


def final_job_states(job_id: str, env: dict[str, str], timeout: float = 60) -> list[str]:
    """`JobID|State` of each allocation of a job, once none is still pending, running or completing.

    submitit returns a task's result as soon as the task has written it, while its job is still exiting; and
    slurmdbd records the job's end a moment after slurmctld sees it. So the sweep can be back before accounting says
    COMPLETED for its last task, and a single `sacct` would race it."""
    deadline = time.monotonic() + timeout
    while True:
        states = slurm("sacct", "--jobs", job_id, "--allocations", "--noheader", "--parsable2",
                       "--format=JobID,State", env=env).split()
        if not any(s.endswith(("|PENDING", "|RUNNING", "|COMPLETING", "|REQUEUED")) for s in states) \
                or time.monotonic() > deadline:
            return states
        time.sleep(0.5)


@pytest.fixture(scope="module", autouse=True)
def three_variant_sweep(slurm_cluster, data_dir, tmp_path_factory):
    """A three-variant sweep on the cluster, started when the module starts: its jobs run while the other tests wait
    for Slurm (a requeue holds a job back for seconds), and its test reads it at the end."""
    sweep = tmp_path_factory.mktemp("three-variants") / "sweep"
    launcher = commands.start(["-m", "train", *on_slurm(slurm_cluster), "model=naive,efficient,torch", *TINY,
                               f"hydra.sweep.dir={sweep}"], cwd=REPO,
                              env=os.environ | {"BBC_NEWS_PATH": str(data_dir)} | slurm_cluster.env)
    yield launcher, sweep
    launcher.kill()


# Long enough (about a second an epoch) to be caught mid-run.
EPOCHS = 8  # the signal comes after epoch 3: five more to go, seconds for Slurm to deliver it
LONG = ["model=efficient", f"trainer.epochs={EPOCHS}", "data.max_train_samples=600", "data.max_eval_samples=100",
        "data.max_length=256", "probes.attention=[]"]
SAME_RESULTS = ["epoch", "train_loss", "val_loss", "val_accuracy", "lr", "train_tokens"]  # not the timings
INTERRUPTS = {"SIGUSR2": ["scancel", "--signal=USR2"],  # preemption: the run stops, then submitit requeues the job
              "SIGTERM": ["scontrol", "requeue"]}  # a requeue by the cluster: SIGTERM, then Slurm starts it again


def wait_for_submitit_job(sweep: Path, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = [p.name for p in (sweep / ".submitit").glob("*") if p.is_dir() and p.name.isdigit()]
        if jobs:
            return jobs[0]
        time.sleep(0.2)
    raise AssertionError(f"no Slurm job submitted from {sweep} within {timeout} s")


def what_happened(run_dir: Path) -> str:
    """The run's status.json, the end of its log and of its jobs' logs: what a failure needs to be understood."""
    logs = [run_dir / files.STATUS, run_dir / files.TRAIN_LOG, *sorted(run_dir.parent.glob(".submitit/*/*_log.*"))]
    return "\n".join(f"--- {path}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-25:])
                     for path in logs if path.is_file())


def test_an_interrupted_job_is_requeued_and_ends_with_the_uninterrupted_history(slurm_cluster, data_dir, tmp_path):
    """Preemption (USR2) and a requeue by the cluster (SIGTERM), each on its own job, both at once (most of the time is
    Slurm's requeue delay): each job continues in place, its sweep ends with its summary, and the run's history is that
    of the same run never interrupted, every epoch once. They name no partition: a job goes to the cluster's default
    partition unless hydra.launcher.partition names one."""
    launchers, sweeps = {}, {}
    for signal_name in INTERRUPTS:
        sweeps[signal_name] = tmp_path / signal_name
        launchers[signal_name] = commands.start(
            ["-m", "train", *on_slurm(slurm_cluster, partition=False), *LONG,
             f"hydra.sweep.dir={sweeps[signal_name]}"], cwd=REPO,
            env=os.environ | {"BBC_NEWS_PATH": str(data_dir)} | slurm_cluster.env, merge_stderr=True)
    try:
        jobs = {}
        for signal_name, command in INTERRUPTS.items():
            wait_for_epochs(sweeps[signal_name], 3)
            jobs[signal_name] = wait_for_submitit_job(sweeps[signal_name])
            slurm(*command, jobs[signal_name], env=slurm_cluster.env)
        # Meanwhile, the same run never interrupted, with the jobs' one thread.
        reference = run_train(*LONG, "trainer.num_threads=1", f"hydra.run.dir={tmp_path / 'reference'}",
                              data_dir=data_dir)
        assert reference.returncode == 0, reference.stderr[-3000:]
        outputs = {name: launcher.communicate(timeout=600)[0] for name, launcher in launchers.items()}
    finally:
        for launcher in launchers.values():
            launcher.kill()
    expected = pd.read_csv(tmp_path / "reference" / "history.csv")
    for signal_name, sweep in sweeps.items():
        assert launchers[signal_name].returncode == 0, outputs[signal_name][-3000:]
        # Slurm did requeue it
        assert "Restarts=1" in slurm("scontrol", "show", "job", jobs[signal_name], env=slurm_cluster.env)
        run_dir = next(sweep.glob("0_*"))
        assert pd.read_csv(sweep / "summary.csv")["status"].tolist() == ["ok"], what_happened(run_dir)
        history = pd.read_csv(run_dir / "history.csv")
        assert history["epoch"].tolist() == list(range(1, EPOCHS + 1))
        log = (run_dir / "train.log").read_text()
        assert "continuing the run in" in log and log.count(f"epoch 1/{EPOCHS}:") == 1  # no epoch trained twice
        # Either way the run itself caught the signal and stopped after its step, not the launcher mid-epoch.
        assert f"{signal_name} received: stopping after this step" in log
        assert RunMetrics.read(run_dir / "metrics.json").interrupted_by is None
        pd.testing.assert_frame_equal(history[SAME_RESULTS], expected[SAME_RESULTS])


def test_a_three_variant_sweep_runs_as_slurm_jobs(slurm_cluster, three_variant_sweep):
    launcher, sweep = three_variant_sweep
    stdout, stderr = launcher.communicate(timeout=600)
    result = subprocess.CompletedProcess(launcher.args, launcher.returncode, stdout, stderr)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    runs = pd.read_csv(sweep / "summary.csv")
    assert sorted(runs["model"]) == ["efficient", "naive", "torch"] and set(runs["status"]) == {"ok"}
    assert (sweep / "summary.md").read_text().count("| ok |") == 3

    # They ran as Slurm jobs: one job array, whose submitit files stay in the sweep folder (the launcher's default
    # submitit_folder), and whose three tasks Slurm's accounting records as COMPLETED.
    env = slurm_cluster.env
    array_id = next(p.name for p in (sweep / ".submitit").iterdir() if p.is_dir() and p.name.isdigit())
    assert sorted(final_job_states(array_id, env=env)) == [f"{array_id}_{task}|COMPLETED" for task in range(3)]
    # Each job trained with the CPUs Slurm gave it, not with all the machine's.
    assert {RunMetrics.read(sweep / d / "metrics.json").threads for d in runs["run_dir"]} == {1}

    # The cluster is still up and its node still takes jobs.
    assert "is UP" in slurm("scontrol", "ping", env=env)
    node_state = slurm("sinfo", "--noheader", "--Node", "--format=%T", env=env).strip()
    assert node_state in {"idle", "mixed", "allocated", "completing"}, node_state


def test_a_slurm_array_of_workers_finishes_one_study_together(slurm_cluster, data_dir, tmp_path):
    partition = slurm_cluster.partition
    render = load_script("render_docs")  # the Slurm array example, as rendered into the docs
    options, arguments = render.SLURM_ARRAY_OPTIONS, render.SLURM_ARRAY_ARGUMENTS
    study_dir, n_trials = tmp_path / "tiny", 6
    options = [re.sub(r"^--array=.*", "--array=1-2", o).replace("<partition>", partition)
               .replace("outputs/search/", f"{tmp_path}/") for o in options]
    worker = shlex.join([sys.executable, *worker_command(study_dir, data_dir, n_trials), *arguments])
    # Not `sbatch --wait`: it polls at 2, then 8, then 32 s, so it returned half a minute after the workers ended.
    submitted = subprocess.run(["sbatch", "--parsable", *options, "--wrap", worker], cwd=REPO, capture_output=True,
                               text=True, timeout=60, env=os.environ | slurm_cluster.env)
    assert submitted.returncode == 0, submitted.stderr
    array_id = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 900
    while slurm("squeue", "--noheader", "--array", f"--jobs={array_id}", env=slurm_cluster.env).strip():
        assert time.monotonic() < deadline, f"the array {array_id} did not end within 900 s"
        time.sleep(0.5)
    states = final_job_states(array_id, env=slurm_cluster.env)
    logs = [path.read_text() for path in sorted(tmp_path.glob("*.out"))]
    assert [s.rpartition("|")[2] for s in states] == ["COMPLETED"] * 2 and len(logs) == 2, (states, logs)
    study = load_tiny_study(study_dir)
    trial_states = [t.state.name for t in study.trials]
    assert trial_states.count("COMPLETE") + trial_states.count("PRUNED") in (n_trials, n_trials + 1) \
        and "RUNNING" not in trial_states
    assert all(trial_folders_in(log) for log in logs), logs  # both array tasks worked on the study
    assert_reports_describe(study, study_dir)


def test_slurm_s_commands_find_the_cluster_without_slurm_conf_through_the_etc_link(slurm_cluster):
    """When /etc/slurm/slurm.conf does not exist, scripts/slurm_up.sh links it to its own config, so that Slurm's
    commands and the launcher find the cluster without SLURM_CONF; otherwise it prints a SLURM_CONF=... line to export.
    The other tests pass SLURM_CONF, so they would not notice the link missing."""
    etc, conf = Path("/etc/slurm/slurm.conf"), Path(slurm_cluster.env["SLURM_CONF"])
    assert etc.exists(), "scripts/slurm_up.sh left /etc/slurm/slurm.conf missing instead of linking its own config"
    if not etc.is_symlink():
        return  # the machine's own config was there first and stays; the fixture read the SLURM_CONF line instead
    assert etc.resolve() == conf.resolve()
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    partitions = subprocess.run(["sinfo", "--noheader", "--format=%R"], env=env, capture_output=True, text=True,
                                check=True, timeout=60).stdout.split()
    assert slurm_cluster.partition in partitions


def test_slurm_up_takes_its_state_folder_from_the_argument_before_slurm_state_dir(slurm_cluster, tmp_path):
    """scripts/slurm_up.sh keeps the cluster's state in the folder given as an argument, else in $SLURM_STATE_DIR, else
    in /tmp/mha-textclf-slurm: the argument first, then the variable. Asked of the cluster that is up, which the script
    then finds "already up" in the folder it was told, and leaves as it is."""
    state = Path(slurm_cluster.env["SLURM_CONF"]).parent
    # The fixture ran the script with no argument: the variable's folder, else the default.
    assert state == Path(os.environ.get("SLURM_STATE_DIR", "/tmp/mha-textclf-slurm")).resolve()
    script = str(REPO / "scripts" / "slurm_up.sh")
    for argument, variable in (([str(state)], str(tmp_path / "elsewhere")), ([], str(state))):
        up = subprocess.run(["bash", script, *argument], env=os.environ | {"SLURM_STATE_DIR": variable},
                            capture_output=True, text=True, timeout=120)
        assert up.returncode == 0 and "already up" in up.stderr, (argument, variable, up.stderr[-2000:])
        assert f"state in {state}." in up.stdout
    assert not (tmp_path / "elsewhere").exists()


def listening_addresses(port: int) -> set[str]:
    """The local addresses on which some process listens on TCP `port` (from /proc/net/tcp and tcp6)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # The kernel writes each 32-bit word in host (little-endian) order.
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                found.add(str(ipaddress.ip_address(raw)))
    return found


def test_slurmctld_and_slurmd_listen_on_127_0_0_1_only(slurm_cluster):
    """slurmctld and slurmd listen on 127.0.0.1 only: their ports (from the cluster's slurm.conf) are bound to loopback,
    not to every interface (0.0.0.0 or ::)."""
    conf = Path(slurm_cluster.env["SLURM_CONF"]).read_text()
    for key in ("SlurmctldPort", "SlurmdPort"):
        port = int(re.search(rf"^{key}=(\d+)$", conf, re.MULTILINE)[1])
        assert listening_addresses(port) == {"127.0.0.1"}, key


def test_the_cluster_has_one_partition_debug_holding_this_machine_s_cpus_and_memory(slurm_cluster):
    """The cluster has one partition, debug, holding this machine with its real CPUs and memory (the name a user types
    as hydra.launcher.partition=debug)."""
    (line,) = slurm("sinfo", "--noheader", "--format=%R %N %c %m", env=slurm_cluster.env).splitlines()
    partition, _, cpus, memory_mb = line.split()
    assert partition == slurm_cluster.partition == "debug"
    assert int(cpus) == os.cpu_count()
    total_mb = int(re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)[1]) / 1024
    assert 0.9 * total_mb <= int(memory_mb) <= total_mb
