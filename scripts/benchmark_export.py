"""Torch eager against its ONNX export (fp32 and int8), side by side in one run: per-text latency at batch 1 on one
thread, throughput at batch 64, peak memory of a process that serves, and file size.

    python scripts/benchmark_export.py outputs/runs/<run>                  # exports the run first if it has none
    python scripts/benchmark_export.py outputs/runs/<run> --record         # also docs/results/export.json (README)

Each backend is measured in a fresh process of its own, so that its peak memory is what serving with it costs: the
torch process imports the training stack (as python -m predict does), the ONNX processes only mha_textclf.serving.
Latency is the model call on a 128-token text (the tokenizer's time apart), over the test split's texts cut to 128
tokens; throughput is texts per second from text to probabilities over the whole test split, 64 texts a call.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("torch", "onnx", "onnx-int8")
TOKENS = 128


def measure(backend: str, run_dir: Path, texts_file: Path, repeats: int) -> dict:
    """In this process: load `backend`, time it, report the process's peak memory."""
    import numpy as np

    split = json.loads(texts_file.read_text())
    texts, labels = split["texts"], np.asarray(split["labels"])
    if backend == "torch":
        import torch

        from mha_textclf.inference import load_run, predict_proba
        from mha_textclf.tokenizer.encoding import encode

        torch.set_num_threads(1)
        run = load_run(run_dir)
        ids = [torch.as_tensor(row[:TOKENS], dtype=torch.long)[None] for row in
               encode(run.tokenizer, texts, run.model.config.max_length) if len(row) >= TOKENS]

        def call(one):
            with torch.no_grad():
                return run.model(one)

        def texts_to_probabilities(batch):
            return predict_proba(run.model, run.tokenizer, batch, batch_size=64)
    else:
        from mha_textclf.serving import ExportedModel

        model = ExportedModel.load(run_dir, int8=backend == "onnx-int8", threads=1)
        # A batch at a time, as predict_proba encodes: a tokenizer's encodings of long texts are large.
        ids = [row[:TOKENS][None] for start in range(0, len(texts), 64)
               for row in model.encode(texts[start : start + 64]) if len(row) >= TOKENS]

        def call(one):
            return model.session.run(["logits"], {"input_ids": one})[0]

        def texts_to_probabilities(batch):
            return model.predict_proba(batch, batch_size=64)
    for one in ids[:20]:  # warm up: first calls allocate
        call(one)
    latencies = []
    for _ in range(repeats):
        for one in ids:
            start = time.perf_counter()
            call(one)
            latencies.append(time.perf_counter() - start)
    start = time.perf_counter()
    predicted = texts_to_probabilities(texts).argmax(axis=1)
    throughput = len(texts) / (time.perf_counter() - start)
    return {"backend": backend, "texts": len(ids), "p50_ms": float(np.percentile(latencies, 50) * 1e3),
            "p99_ms": float(np.percentile(latencies, 99) * 1e3), "texts_per_second": throughput,
            "accuracy": float((predicted == labels).mean()),
            "peak_rss_mb": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM, not getrusage's ru_maxrss, which Linux carries over an exec from
    the process that forked it (the parent here, which loaded the data stack)."""
    try:
        status = Path("/proc/self/status").read_text().splitlines()
        line = next(line for line in status if line.startswith("VmHWM:"))
        return int(line.split()[1]) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="a finished training run folder")
    parser.add_argument("--repeats", type=int, default=5, help="passes over the 128-token texts for latency")
    parser.add_argument("--record", action="store_true", help="write docs/results/export.json for the README")
    parser.add_argument("--child", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--texts", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    run_dir = args.run_dir.resolve()
    if args.child:
        print(json.dumps(measure(args.child, run_dir, args.texts, args.repeats)))
        return 0
    sys.path.insert(0, str(REPO / "src"))
    from mha_textclf.errors import UserError
    from mha_textclf.serving import EXPORT, EXPORT_JSON, MODEL_INT8, MODEL_ONNX

    if not (run_dir / EXPORT / EXPORT_JSON).is_file():
        from mha_textclf.export import export_run
        from mha_textclf.settings import ExportSettings

        try:
            export_run(ExportSettings(run_dir=str(run_dir)))
        except UserError as e:
            raise SystemExit(str(e)) from None
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        texts = Path(folder) / "texts.json"
        texts.write_text(json.dumps(test_split(run_dir)))
        for backend in BACKENDS:  # one after the other: two at once would share the cores
            result = subprocess.run([sys.executable, __file__, str(run_dir), "--child", backend, "--texts",
                                     str(texts), "--repeats", str(args.repeats)], capture_output=True, text=True)
            if result.returncode:
                raise SystemExit(f"measuring {backend} failed:\n{result.stderr[-3000:]}")
            rows.append(json.loads(result.stdout.strip().splitlines()[-1]))
    sizes = {"torch": run_dir / "model.pt", "onnx": run_dir / EXPORT / MODEL_ONNX,
             "onnx-int8": run_dir / EXPORT / MODEL_INT8}
    torch_row = rows[0]
    columns = ["backend", "p50 ms (batch 1, 1 thread, 128 tokens)", "p99 ms", "texts/s (batch 64)",
               "peak RSS MB", "peak vs torch", "file MB", "test accuracy"]
    table = [[r["backend"], f"{r['p50_ms']:.3f}", f"{r['p99_ms']:.3f}", f"{r['texts_per_second']:.0f}",
              f"{r['peak_rss_mb']:.0f}", f"{r['peak_rss_mb'] / torch_row['peak_rss_mb']:.2f}×",
              f"{sizes[r['backend']].stat().st_size / 1e6:.2f}", f"{r['accuracy']:.4f}"] for r in rows]
    print("| " + " | ".join(columns) + " |\n|" + "---|" * len(columns))
    for row in table:
        print("| " + " | ".join(row) + " |")
    p50 = {r["backend"]: r["p50_ms"] for r in rows}
    print(f"\nlatency ratio torch / onnx-int8: {p50['torch'] / p50['onnx-int8']:.2f}×, "
          f"onnx / onnx-int8: {p50['onnx'] / p50['onnx-int8']:.2f}× ({rows[0]['texts']} texts of {TOKENS} tokens)")
    if args.record:
        path = REPO / "docs" / "results" / "export.json"
        path.write_text(json.dumps({"run": run_dir.name, "machine": cpu_name(), "texts": rows[0]["texts"],
                                    "tables": {"backends": {"columns": columns, "rows": table}}},
                                   indent=1, ensure_ascii=False) + "\n")
        print(f"recorded {path}")
    return 0


def test_split(run_dir: Path) -> dict:
    """The run's test split (the measuring processes read it from a file: they must not import the data stack)."""
    import yaml

    from mha_textclf.data.corpus import load_corpus
    from mha_textclf.settings import DataSettings

    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    test = load_corpus(DataSettings(**config["data"]), config["seed"]).test
    return {"texts": list(test.texts), "labels": [int(label) for label in test.labels]}


def cpu_name() -> str:
    try:
        cpuinfo = Path("/proc/cpuinfo").read_text().splitlines()
        return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.machine()


if __name__ == "__main__":
    sys.exit(main())
