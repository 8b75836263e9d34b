"""summary.md: the answer first (each variant over its seeds, then paired comparisons against a reference variant and
of pe=true against pe=false, with intervals and verdicts), the sweep's own times, every metric by group, one row per
run."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mha_textclf.runs import files
from mha_textclf.sweeps.collect import (
    NO_PE,
    PE_TEXT,
    SECONDS_TO,
    adapted_values,
    epoch_seconds,
    finished,
    setting_columns,
    setting_text,
    time_columns,
)
from mha_textclf.sweeps.compare import (
    RULES,
    Interval,
    accuracy_verdict,
    paired_t,
    speed_ratio,
    speed_verdict,
)
from mha_textclf.sweeps.record import JobRecord, SweepRecord

REFERENCE = "efficient"  # what the other variants are compared against, when the sweep has it


def answers(folder: Path, runs: pd.DataFrame, groups: pd.DataFrame, reference: str = REFERENCE) -> list[Answer]:
    """The answer for each dataset of the sweep, in the order the groups list them: what summary.md and summary.html
    both show."""
    if groups.empty:
        return []
    return [answer(folder, runs, groups, dataset, reference) for dataset in groups["dataset"].drop_duplicates()]


def summary_markdown(folder: Path, runs: pd.DataFrame, groups: pd.DataFrame, reference: str = REFERENCE,
                     found: list[Answer] | None = None) -> str:
    """summary.md; `found`: the answers (`answers`), where the caller has them already."""
    parts = ["# Sweep summary", "", overview(runs), ""]
    for each in answers(folder, runs, groups, reference) if found is None else found:
        parts += answer_markdown(each)
    parts += sweep_markdown(folder, runs)
    if not groups.empty:
        readable = readable_groups(groups, setting_columns(runs))
        parts += ["## By dataset, model, pe and varying settings: every metric (mean ± std over runs)", "",
                  markdown_table(readable), ""]
    parts += ["## Runs", "", markdown_table(readable_runs(folder, runs)), ""]
    failed = runs[runs["status"] == "failed"]
    if not failed.empty:
        parts += ["## Failed runs", ""] + [f"- `{r.run_dir}`: {r.error}" for r in failed.itertuples()] + [""]
    return "\n".join(parts)


def overview(runs: pd.DataFrame) -> str:
    counts = runs["status"].value_counts()
    states = ", ".join(f"{counts[s]} {s}" for s in ("ok", "interrupted", "failed") if s in counts)
    return (f"{len(runs)} runs ({states}). The answer first, then the sweep's own times, every metric by group, and "
            "every run.")


def _pm(mean: float, std: float, fmt: str) -> str:
    """mean ± std; a single run has no spread to report: its value alone, not a misleading "± nan" or "± 0"."""
    if pd.isna(mean):
        return ""
    return f"{mean:{fmt}}" if pd.isna(std) else f"{mean:{fmt}} ± {std:{fmt}}"


def _times(ratio: float) -> str:
    return "" if pd.isna(ratio) else f"{ratio:.2f}×"


def _variant_label(row, settings: list[str]) -> dict[str, str]:
    return {"model": row["model"], "pe": row["pe"],
            **{c: setting_text(row[c]) for c in settings}}


@dataclass
class Answer:
    """The answer for one dataset, as tables of text: summary.md shows them, and so do the docs' result tables."""

    dataset: str
    variants: pd.DataFrame  # each variant over its runs: speed, memory, accuracy
    repeats: bool  # some variant ran a seed more than once: its ± is between repeats, not seeds
    memory_note: str
    reference: str | None  # the variant the others are paired against; None with a single variant
    why: str  # why that one
    against: pd.DataFrame | None  # each other variant against the reference, paired over shared seeds
    pe: pd.DataFrame | None  # pe=True against pe=False, paired over shared seeds
    # The epoch-time ratio of each row of `against` and of `pe`, as numbers: (comparison, variant, ratio).
    ratios: list[tuple[str, str, Interval]] = field(default_factory=list)


def answer(folder: Path, runs: pd.DataFrame, groups: pd.DataFrame, dataset: str,
           reference: str = REFERENCE) -> Answer:
    """Each variant over its runs on `dataset`, then the paired comparisons and their verdicts."""
    settings = setting_columns(runs)
    table = groups[groups["dataset"] == dataset].reset_index(drop=True)
    has_cuda = table["peak_cuda_mb_mean"].notna().any()
    rows = []
    for _, g in table.iterrows():
        rows.append(_variant_label(g, settings) | {
            "runs": g["runs"], "seeds": g["seeds"],
            "median epoch s": _pm(g["median_epoch_seconds_mean"], g["median_epoch_seconds_std"], ".2f"),
            "epoch time vs fastest": _times(g["epoch_time_vs_fastest"]),
            "tokens/s vs fastest": _times(g["tokens_per_second_vs_fastest"]),
            "peak RSS in training, MB": _pm(g["peak_rss_mb_mean"], g["peak_rss_mb_std"], ",.0f"),
            **({"peak CUDA in training, MB": _pm(g["peak_cuda_mb_mean"], g["peak_cuda_mb_std"], ",.0f")}
               if has_cuda else {}),
            **{name: _pm(g[f"{metric}_mean"], g[f"{metric}_std"], ".4f") for name, metric in [
                ("val accuracy", "val_accuracy"), ("test accuracy", "test_accuracy"),
                ("val macro-F1", "val_macro_f1"), ("test macro-F1", "test_macro_f1")]},
        })
    done = finished(runs)
    done = done[done["dataset"] == dataset]
    models = list(dict.fromkeys(table.loc[table["pe"] != NO_PE, "model"]))
    ref, why, against, ratios = None, "", None, []
    if len(models) > 1:
        ref = reference if reference in models else _fastest_model(table)
        why = ("the reference" if ref == reference else
               f"{reference}, the reference, is not in this sweep, so the fastest variant")
        paired = []
        for key, variant in _variants(done, settings):
            model, pe, *rest = key
            if model == ref:
                continue
            base = _select(done, ref, pe, settings, rest)
            label = _variant_label({"model": model, "pe": pe, **dict(zip(settings, rest, strict=True))}, settings)
            cells, ratio = _paired(folder, variant, base)
            paired.append(label | cells)
            if ratio is not None and np.isfinite(ratio.estimate):  # no epochs: nothing to draw
                ratios.append((f"against {ref}", _label_text(label), ratio))
        against = pd.DataFrame(paired)
    pe_rows = []
    for key, variant in _variants(done, settings):
        model, pe, *rest = key
        if pe != PE_TEXT[True]:
            continue
        base = _select(done, model, PE_TEXT[False], settings, rest)
        if not base.empty:
            label = _variant_label({"model": model, "pe": "True vs False", **dict(zip(settings, rest, strict=True))},
                                   settings)
            cells, ratio = _paired(folder, variant, base)
            pe_rows.append(label | cells)
            if ratio is not None and np.isfinite(ratio.estimate):
                ratios.append(("pe=True against pe=False", _label_text(label), ratio))
    return Answer(dataset, pd.DataFrame(rows), bool((table["runs"] > table["seeds"]).any()),
                  _memory_note(folder, runs), ref, why, against, pd.DataFrame(pe_rows) if pe_rows else None, ratios)


def _label_text(label: dict[str, str]) -> str:
    """A variant's label as one line: `naive, pe=True, trainer.lr=0.001`."""
    model, pe, *rest = label.items()
    return ", ".join([model[1], f"pe={pe[1]}", *(f"{k}={v}" for k, v in rest)])


# The sentences around the answer's tables, shared by summary.md and summary.html.
VARIANTS_NOTE = ("Each variant over its runs: mean ± std over the runs (no ± for a single run); `seeds` counts "
                 "distinct seeds, and runs beyond them are repeats of a seed. Epoch time is the median training epoch "
                 "(validation excluded); times and tokens/s are relative to the fastest variant on this dataset.")
REPEATS_NOTE = ("Some variants ran a seed more than once: their ± is the spread between repeats (timing, "
                "non-determinism), not between seeds.")
PE_HEADING = "pe=True against pe=False, paired over shared seeds"


def against_heading(found: Answer) -> str:
    return f"Against {found.reference} ({found.why}), paired over shared seeds"


def against_note(found: Answer) -> str:
    ref = found.reference
    return (f"Each row: the variant against {ref} with the same pe and settings; a ratio above 1 means more seconds "
            f"per epoch than {ref}.")


def answer_markdown(found: Answer) -> list[str]:
    """The answer for one dataset (`answer`) as summary.md shows it."""
    parts = [f"## The answer: {found.dataset}", "", VARIANTS_NOTE, "", markdown_table(found.variants), ""]
    if found.repeats:
        parts += [REPEATS_NOTE, ""]
    parts += [found.memory_note, ""]
    if found.against is not None:
        parts += [f"### {against_heading(found)}", "", against_note(found), "", markdown_table(found.against), ""]
    if found.pe is not None:
        parts += [f"### {PE_HEADING}", "", markdown_table(found.pe), ""]
    if found.against is not None or found.pe is not None:
        parts += [f"How to read the comparisons: {RULES}", ""]
    return parts


def _fastest_model(table: pd.DataFrame) -> str:
    trained = table[table["pe"] != NO_PE]
    return trained.sort_values("median_epoch_seconds_mean", na_position="last")["model"].iloc[0]


def _variants(done: pd.DataFrame, settings: list[str]):
    trained = done[done["pe"] != NO_PE]
    yield from trained.groupby(["model", "pe", *settings], sort=True, dropna=False)


def _select(done: pd.DataFrame, model: str, pe: str, settings: list[str], values: list) -> pd.DataFrame:
    mask = (done["model"] == model) & (done["pe"] == pe)
    for column, value in zip(settings, values, strict=True):
        mask &= done[column] == value
    return done[mask]


def _paired(folder: Path, variant: pd.DataFrame, reference: pd.DataFrame) -> tuple[dict[str, str], Interval | None]:
    """The verdicts of `variant` against `reference` over the seeds both have (a seed's repeats pooled or averaged),
    and the epoch-time ratio they state (None without a shared seed)."""
    shared = sorted(set(variant["seed"]) & set(reference["seed"]))
    if not shared:
        return {"shared seeds": "0", "epoch time": "no shared seed: nothing to pair", "val accuracy": "",
                "test accuracy": ""}, None

    def epochs(runs: pd.DataFrame, seed) -> np.ndarray:  # every epoch of the seed's runs, repeats pooled
        return np.concatenate([epoch_seconds(folder / d) for d in runs.loc[runs["seed"] == seed, "run_dir"]])

    def accuracy(runs: pd.DataFrame, split: str) -> pd.Series:
        return runs.groupby("seed")[f"{split}_accuracy"].mean()

    ratio = speed_ratio([(epochs(variant, s), epochs(reference, s)) for s in shared])
    cells = {"shared seeds": str(len(shared)), "epoch time": speed_verdict(ratio)}
    for split in ("val", "test"):
        differences = (accuracy(variant, split) - accuracy(reference, split))[shared]
        n_articles = float(pd.concat([variant, reference])[f"{split}_samples"].mean())
        cells[f"{split} accuracy"] = accuracy_verdict(paired_t(differences.tolist()), n_articles)
    return cells, ratio


def _memory_note(folder: Path, runs: pd.DataFrame) -> str:
    """What the memory column measures, and when it cannot be compared across variants."""
    note = ("Peak RSS is the whole process's resident memory at its highest while training (`stages.fit` in "
            "metrics.json)")
    jobs = [JobRecord.read(folder / d) for d in runs["run_dir"]]
    processes = {(j.host, j.pid) for j in jobs if j is not None}
    timed = sum(j is not None for j in jobs)
    if timed > len(processes):
        jobs_here = f"{timed} jobs" if timed == len(runs) else f"{timed} sweep jobs (of the {len(runs)} runs)"
        return (note + f": here {jobs_here} shared {_processes(len(processes))} (the basic launcher runs every "
                "job in the sweep's own process), so a later job's peak includes what earlier jobs left behind, and "
                "it does not compare variants. For that, run each job in a fresh process "
                "(`hydra/launcher=submitit_local`; joblib reuses its workers), or see `scripts/benchmark.py`.")
    return note + "."


def _processes(n: int) -> str:
    return "one process" if n == 1 else f"{n} processes"


def sweep_markdown(folder: Path, runs: pd.DataFrame) -> list[str]:
    """The sweep's own times (sweep.json, each job's job.json) beside the training seconds its runs measured."""
    sweep = SweepRecord.read(folder)
    records = [JobRecord.read(folder / d) for d in runs["run_dir"]]
    jobs = [j for j in records if j is not None]
    if sweep is None and not jobs:
        return []
    # The share compares like with like: the training seconds of the runs whose job wall time is known (a single run
    # summarised beside a sweep has no job.json), and of those only what the job itself trained.
    trained = [(*_trained_in_job(folder / d, job, seconds), job) for d, job, seconds
               in zip(runs["run_dir"], records, runs["train_seconds"], strict=True) if job is not None]
    known = [(seconds, whole, job) for seconds, whole, job in trained if seconds is not None]
    train = float(np.nansum([seconds for seconds, _, _ in known]))
    earlier = sum(not whole for _, whole, _ in known)
    unknown = len(trained) - len(known)
    job_total = sum(j.wall_seconds for _, _, j in known)
    lines = ["## The sweep", ""]
    if len(jobs) < len(runs):  # summarised beside other runs: what follows is about the sweep jobs alone
        lines += [f"{len(jobs)} of the {len(runs)} runs here are sweep jobs (they have a job.json); the times below "
                  "are theirs.", ""]
    if sweep is not None:
        lines.append(f"Wall time {sweep.wall_seconds:,.1f} s from Hydra starting the sweep (after Python's start-up) "
                     f"to the end of its last job ({len(sweep.jobs)} jobs, {sweep.launcher.rpartition('.')[2]}; "
                     "`sweep.json` has every job).")
    else:
        span = pd.to_datetime([j.ended_at for j in jobs]).max() - pd.to_datetime([j.started_at for j in jobs]).min()
        lines.append(f"No sweep.json (the sweep did not reach its end, or this folder is not one sweep): its jobs ran "
                     f"from the first start to the last end in {span.total_seconds():,.1f} s.")
    share = f" ({train / job_total:.0%})" if job_total else ""
    lines += ["", f"The jobs' own wall times add up to {job_total:,.1f} s; training passes took {train:,.1f} s of "
              f"them{share}, the rest went to loading data, the tokenizer, validation, reports "
              f"and probes. Each job's wall time is the `job s` column of the runs table, beside `train s`."
              + (f" {earlier} of the jobs found their run trained, in full or in part, by an earlier attempt (a sweep "
                 "run again, a run continued): only the epochs they trained themselves count here, while `train s` "
                 "is the whole run's." if earlier else "")
              + (f" {unknown} job(s) left out: their run was continued after the job ended (by a command of its own), "
                 "so what the job itself trained is not recorded." if unknown else ""), ""]
    return lines


def _trained_in_job(run_dir: Path, job: JobRecord, run_seconds: float) -> tuple[float | None, bool]:
    """The training seconds `job` did itself (None: not recorded), and whether they are the whole run's. status.json
    dates the run's latest attempt and counts the epochs it started from: an attempt from before the job means the job
    found the run trained; one within it trained the epochs after those; one after it (the run continued by a command
    of its own) leaves what the job trained unknown. A folder whose status.json does not say: the run's own."""
    status = files.read_status(run_dir)
    if "started_at" not in status:
        return run_seconds, True
    # status.json keeps whole seconds, job.json milliseconds: an attempt in the job's first second is the job's.
    attempt = pd.Timestamp(status["started_at"])
    if attempt < pd.Timestamp(job.started_at).floor("s"):
        return 0.0, False
    if attempt > pd.Timestamp(job.ended_at):
        return None, False
    if not status.get("started_from_epoch"):  # (a run from before the key: as if from the start)
        return run_seconds, True
    history = files.read_history(run_dir)
    own = float(history["train_seconds"].iloc[status["started_from_epoch"]:].sum()) if history is not None else 0.0
    return own, False


def readable_groups(groups: pd.DataFrame, settings: list[str]) -> pd.DataFrame:
    def pm(metric: str, fmt: str) -> pd.Series:
        return pd.Series([_pm(m, s, fmt) for m, s in zip(groups[f"{metric}_mean"], groups[f"{metric}_std"],
                                                           strict=True)])

    def reached(column: str) -> pd.Series:
        # A baseline has no epochs, so no time to an accuracy: blank, not "not reached".
        text, counts = pm(column, ".1f"), groups[f"{column}_count"]
        return pd.Series(["" if epochs == 0 else "not reached" if k == 0 else
                          text[i] + ("" if k == runs else f" ({k} of {runs} runs)")
                          for i, (k, runs, epochs) in enumerate(zip(counts, groups["runs"], groups["epochs_max"],
                                                                    strict=True))])

    levels = [c.removesuffix("_count") for c in groups.columns if c.startswith(SECONDS_TO) and c.endswith("_count")]
    times = {f"s to val acc {c.removeprefix(SECONDS_TO)}": reached(c) for c in levels}
    settings = {c: groups[c].map(setting_text) for c in settings}
    return pd.DataFrame({
        "dataset": groups["dataset"], "model": groups["model"], "pe": groups["pe"], **settings,
        "runs": groups["runs"], "seeds": groups["seeds"],
        "val accuracy": pm("val_accuracy", ".4f"), "test accuracy": pm("test_accuracy", ".4f"),
        "val macro-F1": pm("val_macro_f1", ".4f"), "test macro-F1": pm("test_macro_f1", ".4f"),
        "train s": pm("train_seconds", ".1f"),
        **({"job s": pm("job_seconds", ".1f")} if groups["job_seconds_mean"].notna().any() else {}),
        "median epoch s": pm("median_epoch_seconds", ".2f"),
        "epoch time vs fastest": groups["epoch_time_vs_fastest"].map(_times),
        **times,
    })


def readable_runs(folder: Path, runs: pd.DataFrame) -> pd.DataFrame:
    shown = runs.drop(columns=["error", "val_samples", "test_samples"]).copy()
    if shown["peak_cuda_mb"].isna().all():
        shown = shown.drop(columns=["peak_cuda_mb"])
    if shown["job_seconds"].isna().all():
        shown = shown.drop(columns=["job_seconds"])

    def fmt(spec: str):
        return lambda v: "" if pd.isna(v) else f"{v:{spec}}"

    for column in ("val_accuracy", "val_macro_f1", "test_accuracy", "test_macro_f1"):
        shown[column] = shown[column].map(fmt(".4f"))
    for column in ("train_seconds", "job_seconds", "median_epoch_seconds", *time_columns(runs)):
        if column in shown:
            shown[column] = shown[column].map(fmt(".1f"))
    for column in ("tokens_per_second", "peak_rss_mb", "peak_cuda_mb"):
        if column in shown:
            shown[column] = shown[column].map(fmt(",.0f"))
    shown["pe"] = shown["pe"].map(lambda v: "" if v is None or pd.isna(v) else str(v))
    for column in setting_columns(runs):
        shown[column] = shown[column].map(setting_text)
    # A value the run decided from its corpus is null in the table, so that its seeds group together: say what ran.
    for row, run_dir in enumerate(runs["run_dir"]):
        for key, value in adapted_values(folder / run_dir).items():
            if key in shown and shown[key].iloc[row] == "None":
                shown.loc[shown.index[row], key] = f"{setting_text(str(value))} (adapted)"
    return shown.rename(columns={
        "val_accuracy": "val accuracy", "val_macro_f1": "val macro-F1", "test_accuracy": "test accuracy",
        "test_macro_f1": "test macro-F1", "train_seconds": "train s", "job_seconds": "job s",
        "median_epoch_seconds": "median epoch s", "tokens_per_second": "tokens/s", "peak_rss_mb": "peak RSS MB",
        "peak_cuda_mb": "peak CUDA MB", "run_dir": "run folder",
    } | {c: f"s to val acc {c.removeprefix(SECONDS_TO)}" for c in time_columns(runs)})


def markdown_table(frame: pd.DataFrame) -> str:
    """A GitHub-flavoured Markdown table (pandas' to_markdown would need the tabulate package for this alone); a `|` in
    a cell is escaped, so that it stays in its cell."""
    cells = [[str(c) for c in frame.columns]] + [["" if pd.isna(v) else str(v).replace("|", "\\|") for v in row]
                                                 for row in frame.itertuples(index=False)]
    lines = ["| " + " | ".join(row) + " |" for row in cells]
    lines.insert(1, "|" + "|".join("---" for _ in frame.columns) + "|")
    return "\n".join(lines)
