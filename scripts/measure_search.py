"""The same study run by one worker and by two on this machine, one torch thread each: wall time, finished trials and
best value; and what a trial's data, tokenizer and encoding stages cost when built and when reused.

    python scripts/measure_search.py                  # the accuracy study (40 trials), 1 worker, then 2
    python scripts/measure_search.py n_trials=16      # any setting of python -m search, given to every worker

Run it from the repository root on an otherwise idle machine. Each study is new (outputs/search/measure_<n>_workers,
removed first), and the tokenizer is learned once beforehand, so that no study pays for it. Prints the numbers of
docs/search.md ("Measured") as Markdown.
"""

import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from mha_textclf import cli

PREPARATION = ("data", "tokenizer", "encode")  # the stages a trial can reuse from the worker's earlier trials


def run_study(workers: int, argv: list[str]) -> tuple[Path, float]:
    study = f"measure_{workers}_workers"
    study_dir = Path("outputs/search") / study
    shutil.rmtree(study_dir, ignore_errors=True)
    command = [sys.executable, "-m", "search", f"study={study}", "num_threads=1", *argv]
    start = time.perf_counter()
    processes = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
    codes = [process.wait() for process in processes]
    wall = time.perf_counter() - start
    if any(codes):
        sys.exit(f"a worker of {study} exited with {codes}; see {study_dir}/search.log")
    return study_dir, wall


def preparation_seconds(study_dir: Path) -> tuple[list[float], list[float]]:
    """Seconds of a trial's data, tokenizer and encoding stages: for trials that built them, and trials that reused."""
    built, reused = [], []
    for trial in sorted(study_dir.glob("trial_*")):
        if not (trial / "metrics.json").is_file():
            continue  # failed
        stages = json.loads((trial / "metrics.json").read_text())["stages"]
        seconds = sum(stages[name]["seconds"] for name in PREPARATION)
        (reused if "encodings: reused" in (trial / "train.log").read_text() else built).append(seconds)
    return built, reused


def main(argv: list[str]) -> int:
    if {"-h", "--help"} & set(argv):
        print(f"{__doc__}\nEvery setting, its default and meaning: python -m search --help")
        return 0
    cli.check_command_line("search", argv)  # a mistake: one message, exit 2, before any study is removed or run
    with tempfile.TemporaryDirectory() as warmup:  # the tokenizer into the disk cache, as an earlier run leaves it
        subprocess.run([sys.executable, "-m", "train", "model.cls_only=true", "trainer.epochs=1",
                        f"hydra.run.dir={warmup}"], check=True, stdout=subprocess.DEVNULL)
    print("| workers | wall | finished trials (pruned) | best val accuracy (trial) |")
    print("|---|---|---|---|")
    built, reused, durations = [], [], []
    for workers in (1, 2):
        study_dir, wall = run_study(workers, argv)
        best = json.loads((study_dir / "best.json").read_text())
        counts = best["trials"]
        finished = counts.get("complete", 0) + counts.get("pruned", 0)
        print(f"| {workers} | {wall:.0f} s | {finished} ({counts.get('pruned', 0)}) | "
              f"{best['val_accuracy']:.4f} ({best['best_trial']}) |")
        b, r = preparation_seconds(study_dir)
        built, reused = built + b, reused + r
        trials = pd.read_csv(study_dir / "trials.csv")
        durations += pd.to_timedelta(trials["duration"].dropna()).dt.total_seconds().tolist()
    print(f"\ndata + tokenizer + encode per trial: {statistics.mean(built):.2f} s when built ({len(built)} trials), "
          f"{statistics.mean(reused):.2f} s when reused ({len(reused)} trials); a whole trial: "
          f"{statistics.median(durations):.1f} s (median of {len(durations)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
