"""report.html: one run on one page, from the files in its folder (docs/runs.md), never from numbers computed again.

It answers, in this order: what state the run is in, how good it is (the headline metrics, the most confused classes,
calibration), how training went (loss curves), per class (precision, recall, F1, confusion matrices), whether its
probabilities can be trusted (the reliability diagram), which texts it gets wrong (the most confident mistakes
first), what the heads attend to and whether word order matters (the probes), and the settings it ran with. A run
that failed or was cut short, or a folder from an older version, shows what it has and lists what it lacks.
"""

from __future__ import annotations

import csv
import json
import logging
from dataclasses import dataclass
from pathlib import Path

from mha_textclf.pages.render import Image, png_file, write_page
from mha_textclf.runs import files
from mha_textclf.runs.lifecycle import HOW_TO_CONTINUE, folder_state
from mha_textclf.runs.metrics import METRICS_FORMAT, RunMetrics, read_metrics
from mha_textclf.settings import flat

log = logging.getLogger(__name__)

WORST_ERRORS = 25  # the page lists this many of errors.csv's most confident mistakes
TEXT_SHOWN = 400  # characters of a text the page shows (errors.csv has it whole)
SPLITS = ("val", "test")


@dataclass
class RunPage:
    path: Path
    missing: list[tuple[str, str]]  # the files the page would show that the folder lacks, and what that means


def write_run_page(run_dir: str | Path) -> RunPage | None:
    """Write report.html into `run_dir`. Never raises: a page that cannot be made is a warning, not a lost run (it
    is written after everything else, by a run that may be failing already)."""
    run_dir = Path(run_dir)
    try:
        context = run_context(run_dir)
        return RunPage(write_page(run_dir / files.REPORT_PAGE, "run.html.j2", **context), context["missing"])
    except Exception as e:  # whatever went wrong, the run's own files are already safe
        log.warning(f"could not write {run_dir / files.REPORT_PAGE}: {type(e).__name__}: {e}")
        return None


def run_context(run_dir: Path) -> dict:
    """Everything run.html.j2 shows, read from the folder's files; `missing` says which are absent and what that
    means."""
    missing: list[tuple[str, str]] = []
    metrics = _metrics(run_dir, missing)
    status = files.read_status(run_dir)
    config = files.read_config(run_dir, hydra_fallback=True) or {}
    # No status.json: a baseline (it keeps none), or a run refused before it claimed the folder (error.txt says why).
    state = folder_state(run_dir) or ("failed" if (run_dir / files.ERROR).exists() else
                                      "finished" if metrics else "unknown")
    trained = metrics is None or metrics.epochs > 0  # a TF-IDF baseline has no epochs, loss curve or probabilities
    error = (run_dir / files.ERROR).read_text().strip() if (run_dir / files.ERROR).exists() else status.get("message")

    def image(name: str, title: str, why: str, caption: str = "") -> Image | None:
        found = png_file(run_dir / name, title, caption)
        if found is None:
            missing.append((name, why))
        return found

    unfinished = "the run stopped before its reports" if metrics is None else ""
    older = unfinished or (f"not written by the version that made this run ({metrics.format}: errors and "
                           f"calibration came with {METRICS_FORMAT})" if metrics.format != METRICS_FORMAT else
                           "not in the folder (deleted?)")
    loss_curve = image(files.LOSS_CURVE, "Loss per epoch", unfinished or "no finished epoch") if trained else None
    confusion = [found for split in SPLITS
                 if (found := image(files.confusion_matrix(split), f"Confusion matrix: {split}",
                                    unfinished or "not written"))]
    reliability = (image(files.RELIABILITY, "Reliability", older,
                         "Each dot: a bin of texts by confidence; a calibrated model's dots lie on the diagonal. The "
                         "bars count the texts per bin.") if trained else None)
    errors = _errors(run_dir, missing, older) if trained else None
    attention = [png_file(path, "Attention: " + path.stem.removeprefix("attention_").replace("_", " "))
                 for path in sorted(run_dir.glob(files.attention_map("*")))]
    return {
        "run_dir": run_dir, "name": run_dir.name, "state": state, "status": status, "error": error,
        "metrics": metrics, "headline": _headline(metrics) if metrics else [],
        "facts": _facts(metrics, config) if metrics else _facts_from_config(config),
        "confused": {split: getattr(metrics, split).confused for split in SPLITS} if metrics else {},
        "calibration": metrics.calibration if metrics else None,
        "per_class": {split: rows for split in SPLITS if (rows := _per_class(run_dir, split, missing, unfinished))},
        "loss_curve": loss_curve, "confusion": confusion, "reliability": reliability, "errors": errors,
        "worst": WORST_ERRORS, "attention": attention, "order_probe": _order_probe(run_dir, missing),
        "settings": sorted(flat(config).items()), "missing": missing, "how_to_continue": HOW_TO_CONTINUE,
    }


def _metrics(run_dir: Path, missing: list) -> RunMetrics | None:
    try:
        return read_metrics(run_dir)
    except OSError:
        missing.append((files.METRICS, "the run has not finished its reports (still running, cut short or failed)"))
    except (ValueError, TypeError, KeyError) as e:
        missing.append((files.METRICS, f"unreadable: {e}"))
    return None


def _headline(metrics: RunMetrics) -> list[dict]:
    calibration = metrics.calibration or {}
    rows = []
    for split in SPLITS:
        m = getattr(metrics, split)
        ece = calibration.get(split) or {}
        rows.append({"split": split, "texts": m.n_samples, "accuracy": f"{m.accuracy:.4f}",
                     "macro-F1": f"{m.macro_f1:.4f}", "loss": "" if m.loss is None else f"{m.loss:.4f}",
                     "ECE": _number(ece.get("ece")), "ECE after temperature": _number(ece.get("ece_calibrated"))})
    return rows


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _facts(metrics: RunMetrics, config: dict) -> list[tuple[str, str]]:
    temperature = (metrics.calibration or {}).get("temperature")
    facts = [("dataset", f"{metrics.dataset} ({metrics.train_samples} training texts, {len(metrics.class_names)} "
                         "classes)"),
             ("model", f"{metrics.model}, pe={metrics.pe}, seed {metrics.seed}, {metrics.params:,} parameters"),
             ("epochs", f"{metrics.epochs} (reported model: epoch {metrics.reported_epoch}; lowest validation loss: "
                        f"epoch {metrics.best_epoch})" if metrics.epochs else "none (a baseline)"),
             ("training", f"{metrics.train_seconds:.1f} s on {metrics.device}"
                          + (f", {metrics.tokens_per_second:,.0f} tokens/s" if metrics.tokens_per_second else "")),
             ("calibration temperature", f"{temperature:.3f} (fitted on validation; predict applies it)"
              if temperature else "none")]
    facts += [(f"decided from the corpus: {key}", why) for key, why in metrics.adapted.items()]
    return [*facts, ("finished at", metrics.finished_at)]


def _facts_from_config(config: dict) -> list[tuple[str, str]]:
    model = config.get("model") or {}
    return [("model", f"{model.get('attention')}, pe={config.get('pe')}, seed {config.get('seed')}"),
            ("data", str((config.get("data") or {}).get("path")))]


# What a file the page reads may hold that this version cannot read: the page shows the rest, and says so.
UNREADABLE = (ValueError, TypeError, KeyError, AttributeError)


def _per_class(run_dir: Path, split: str, missing: list, why: str) -> list[dict] | None:
    name = files.classification_report(split, "json")
    report = _json(run_dir / name)
    if report is None:
        missing.append((name, why or "not written"))
        return None
    try:
        return [{"class": c, "precision": f"{r['precision']:.4f}", "recall": f"{r['recall']:.4f}",
                 "F1": f"{r['f1-score']:.4f}", "texts": int(r["support"])}
                for c, r in report.items() if isinstance(r, dict) and c not in ("macro avg", "weighted avg")]
    except UNREADABLE as e:
        missing.append((name, f"unreadable: {type(e).__name__}: {e}"))
        return None


def _errors(run_dir: Path, missing: list, why: str) -> list[dict] | None:
    path = run_dir / files.ERRORS
    try:
        with path.open(newline="") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            text = row["text"]
            row["shown"] = text if len(text) <= TEXT_SHOWN else text[:TEXT_SHOWN].rstrip() + " …"
            row["rank"] = -float(row["confidence"] or 0)  # a classifier without probabilities leaves it blank
            for column in ("split", "position", "true", "predicted", "runner_up"):
                row[column] = row[column] or ""
    except OSError:
        missing.append((files.ERRORS, why))
        return None
    except UNREADABLE as e:
        missing.append((files.ERRORS, f"unreadable: {type(e).__name__}: {e}"))
        return None
    return sorted(rows, key=lambda row: row["rank"])  # most confident mistakes first, either split


def _order_probe(run_dir: Path, missing: list) -> dict | None:
    probe = _json(run_dir / files.ORDER_PROBE)
    if probe is None:
        return None
    try:
        float(probe["max_abs_difference"]), bool(probe["pe"])
        if not all(isinstance(p, dict) for p in probe["probabilities"].values()):
            raise ValueError("probabilities are not one table per text")
    except UNREADABLE as e:
        missing.append((files.ORDER_PROBE, f"unreadable: {type(e).__name__}: {e}"))
        return None
    return probe


def _json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
