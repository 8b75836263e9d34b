"""How fast and how memory-hungry each attention variant is: forward+backward of one attention layer per batch.

Every case runs in a fresh process, so that one case's allocator state or caches cannot flatter the next.
Peak memory is what the forward+backward steps add at their peak over what was in use before them: on CPU the
kernel's peak resident set, reset just before the steps (/proc/self/clear_refs), on CUDA `max_memory_allocated`.
Time is the median over repeats after a warm-up step; CUDA work is synchronised before the clock is read. Achieved
GFLOP/s is put against a matmul peak measured on the same device, to show how far from the machine's limit each
variant runs.
"""

from __future__ import annotations

import math
import multiprocessing
import statistics
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import torch

from mha_textclf.attention import VARIANTS, build_attention
from mha_textclf.memory import peak_memory_mb, reset_peak_memory

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.figure import Figure

# Each case runs in a freshly spawned process that imports this module: pandas and matplotlib are imported where the
# parent process needs them, so that a case starts with torch alone.

MODES = ("full", "cls_only")


@dataclass(frozen=True)
class Case:
    variant: str
    mode: str  # full: every query attends (B, nh, T, T); cls_only: the [CLS] query alone (B, nh, 1, T)
    T: int
    B: int = 32
    d_model: int = 64
    n_heads: int = 8
    device: str = "cpu"
    repeats: int = 5
    max_seconds: float = 20.0  # stop repeating once this much time was measured (at least one timed step)


def attention_flops(B: int, Tq: int, Tk: int, C: int) -> float:
    """Matmul FLOPs of one forward + backward pass (backward ≈ 2 × forward): the work the layer has to do."""
    projections = 2 * B * Tq * C * C * 2 + 2 * B * Tk * C * C * 2  # W_q and W_o on queries, W_k and W_v on keys
    attention = 2 * B * Tq * Tk * C * 2  # q kᵀ and weights @ v, summed over heads (nh · hs = C)
    return 3.0 * (projections + attention)


def naive_memory_gb(case: Case) -> float:
    """Rough size of what the naive variant keeps for backward: scores, masked scores and weights per head."""
    Tq = 1 if case.mode == "cls_only" else case.T
    return 3 * case.B * case.n_heads * Tq * case.T * 4 / 1e9


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(case: Case) -> dict:
    """Time and peak memory of forward+backward for one case, in this process (call it in a fresh one)."""
    device = torch.device(case.device)
    torch.manual_seed(0)
    attention = build_attention(case.variant, case.d_model, case.n_heads).to(device)
    x = torch.randn(case.B, case.T, case.d_model, device=device, requires_grad=True)
    # Realistic padding: every row keeps between half and all of its tokens.
    lengths = torch.randint(case.T // 2 + 1, case.T + 1, (case.B,), device=device)
    mask = torch.arange(case.T, device=device)[None, :] >= lengths[:, None]  # (B, T), True = padding
    Tq = 1 if case.mode == "cls_only" else case.T
    upstream = torch.randn(case.B, Tq, case.d_model, device=device)

    def step():
        query = x[:, :1] if case.mode == "cls_only" else x
        out, _ = attention(query, x, x, key_padding_mask=mask)
        out.backward(upstream)
        x.grad = None
        attention.zero_grad(set_to_none=True)

    _sync(device)
    baseline = reset_peak_memory(device)
    step()  # warm-up: allocator, kernel selection, lazy initialisation
    _sync(device)
    times = []
    while len(times) < case.repeats and (not times or sum(times) < case.max_seconds):
        start = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = attention_flops(case.B, Tq, case.T, case.d_model)
    return asdict(case) | {"ms": 1e3 * seconds, "repeats_done": len(times),
                           "peak_mb": max(peak_memory_mb(device) - baseline, 0.0), "gflops": flops / seconds / 1e9}


def matmul_peak_gflops(device: str = "cpu", n: int = 2048, repeats: int = 5) -> float:
    """GFLOP/s of a large float32 matmul: what this device can do at best for the benchmark's dtype."""
    dev = torch.device(device)
    a, b = torch.randn(n, n, device=dev), torch.randn(n, n, device=dev)
    a @ b
    _sync(dev)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        _sync(dev)
        times.append(time.perf_counter() - start)
    return 2 * n**3 / statistics.median(times) / 1e9


def _in_fresh_process(function, *args):
    """Run one case in a new process. Where it can, forkserver forks it from a server that imported torch (and the
    modules a case's process re-imports) once and never ran a kernel: the same clean start as spawn, without paying
    the imports again for every case."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["torch", "pandas", "matplotlib.figure", "mha_textclf.benchmark"])
    else:
        context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(function, args)


def run(seq_lens: list[int], B: int, devices: list[str], variants: list[str] | None = None, repeats: int = 5,
        memory_budget_gb: float = 8.0, log=print) -> tuple[pd.DataFrame, dict[str, float]]:
    """All cases (variant × mode × T × device), each in a fresh process; and each device's matmul peak."""
    import pandas as pd

    variants = variants or list(VARIANTS)
    rows, peaks = [], {}
    for device in devices:
        peaks[device] = _in_fresh_process(matmul_peak_gflops, device)
        log(f"{device}: float32 matmul peak {peaks[device]:.1f} GFLOP/s")
        for T in seq_lens:
            for mode in MODES:
                for variant in variants:
                    case = Case(variant, mode, T, B=B, device=device, repeats=repeats)
                    if variant == "naive" and naive_memory_gb(case) > memory_budget_gb:
                        log(f"skip {variant:9s} {mode:8s} T={T:5d}: needs ~{naive_memory_gb(case):.0f} GB "
                            f"(> --memory-budget-gb {memory_budget_gb:g})")
                        continue
                    row = _in_fresh_process(measure, case)
                    row["pct_of_peak"] = 100 * row["gflops"] / peaks[device]
                    rows.append(row)
                    log(f"{device} {variant:9s} {mode:8s} T={T:5d}: {row['ms']:9.2f} ms  {row['peak_mb']:8.1f} MB  "
                        f"{row['gflops']:7.1f} GFLOP/s ({row['pct_of_peak']:.0f}% of peak)")
    return pd.DataFrame(rows), peaks


def ratios(results: pd.DataFrame) -> pd.DataFrame:
    """Side-by-side time ratios per device and T, from one run: efficient/torch, naive/efficient, full/cls_only."""
    import pandas as pd

    ms = results.pivot_table(index=["device", "T"], columns=["variant", "mode"], values="ms")
    out = pd.DataFrame(index=ms.index)

    def ratio(a, b):
        return ms[a] / ms[b] if a in ms.columns and b in ms.columns else math.nan

    out["efficient/torch (full)"] = ratio(("efficient", "full"), ("torch", "full"))
    out["efficient/torch (cls_only)"] = ratio(("efficient", "cls_only"), ("torch", "cls_only"))
    out["naive/efficient (full)"] = ratio(("naive", "full"), ("efficient", "full"))
    for variant in VARIANTS:
        out[f"full/cls_only ({variant})"] = ratio((variant, "full"), (variant, "cls_only"))
    return out.reset_index()


def plot(results: pd.DataFrame) -> Figure:
    """Time per forward+backward against T, log-log, one line per variant and mode, one panel per device."""
    from matplotlib.figure import Figure

    devices = list(results["device"].unique())
    fig = Figure(figsize=(6.5 * len(devices), 4.5), layout="constrained")
    axes = fig.subplots(1, len(devices), squeeze=False)[0]
    for ax, device in zip(axes, devices, strict=True):
        subset = results[results["device"] == device]
        for i, variant in enumerate(VARIANTS):
            for mode, style in zip(MODES, ("-", "--"), strict=True):
                line = subset[(subset["variant"] == variant) & (subset["mode"] == mode)].sort_values("T")
                if not line.empty:
                    ax.plot(line["T"], line["ms"], style, marker="o", color=f"C{i}", label=f"{variant} {mode}")
        ax.set(xscale="log", yscale="log", xlabel="sequence length T", ylabel="ms per forward+backward",
               title=f"{device}, B={int(subset['B'].iloc[0])}")
        ax.set_xticks(sorted(subset["T"].unique()), [str(t) for t in sorted(subset["T"].unique())])
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    return fig
