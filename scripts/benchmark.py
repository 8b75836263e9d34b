"""Benchmark the attention variants: forward+backward time and peak memory, full attention vs cls_only, over T.

    python scripts/benchmark.py                 # T in 64..2048, B=32, CPU (and CUDA when present)
    python scripts/benchmark.py --quick         # tiny sizes, seconds (what CI runs)

Prints the measurements and the side-by-side ratios, and writes benchmark.csv, ratios.csv and benchmark.png into
--out (default outputs/benchmark/<date>_<time>/).
"""

import argparse
import platform
import sys
import time
from pathlib import Path

import pandas as pd
import torch

from mha_textclf import benchmark


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-lens", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048])
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5, help="timed steps per case (median reported)")
    parser.add_argument("--devices", nargs="+", default=None, help="default: cpu, plus cuda when available")
    parser.add_argument("--memory-budget-gb", type=float, default=8.0,
                        help="skip naive cases whose (B, nh, T, T) tensors would need more than this")
    parser.add_argument("--quick", action="store_true", help="tiny sizes for a smoke test: T 16 32, B 4, 2 repeats")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.quick:
        args.seq_lens, args.batch_size, args.repeats = [16, 32], 4, 2
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    if "cuda" in devices and not torch.cuda.is_available():
        parser.error("--devices cuda, but PyTorch sees no CUDA GPU")
    out = args.out or Path("outputs/benchmark") / time.strftime("%Y-%m-%d_%H-%M-%S")
    out.mkdir(parents=True, exist_ok=True)

    cpu = platform.processor() or platform.machine()
    machine = f"{cpu}, {torch.get_num_threads()} threads, torch {torch.__version__}"
    if torch.cuda.is_available():
        machine += f", {torch.cuda.get_device_name()}"
    print(f"machine: {machine}")
    results, peaks = benchmark.run(args.seq_lens, args.batch_size, devices, repeats=args.repeats,
                                   memory_budget_gb=args.memory_budget_gb)
    ratios = benchmark.ratios(results)
    results.to_csv(out / "benchmark.csv", index=False)
    ratios.to_csv(out / "ratios.csv", index=False)
    benchmark.plot(results).savefig(out / "benchmark.png", dpi=110)

    # A case the run skipped (naive at T=2048) prints as n/a, as the docs' tables show it.
    with pd.option_context("display.width", 200, "display.max_columns", 20, "display.float_format", "{:.2f}".format):
        table = results.pivot_table(index=["device", "T"], columns=["variant", "mode"], values="ms")
        print("\nms per forward+backward (median)\n" + table.to_string(na_rep="n/a"))
        print("\npeak MB\n" + results.pivot_table(index=["device", "T"], columns=["variant", "mode"],
                                                   values="peak_mb").to_string(na_rep="n/a"))
        print("\n% of matmul peak (" + ", ".join(f"{d}: {p:.0f} GFLOP/s" for d, p in peaks.items()) + ")\n"
              + results.pivot_table(index=["device", "T"], columns=["variant", "mode"],
                                    values="pct_of_peak").to_string(na_rep="n/a"))
        print("\nratios (time)\n" + ratios.to_string(index=False, na_rep="n/a"))
    print(f"\nwrote {out / 'benchmark.csv'}, {out / 'ratios.csv'}, {out / 'benchmark.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
