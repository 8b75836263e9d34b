"""The benchmark runs end to end in its quick form, and counts FLOPs the way its report claims."""

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor

import pandas as pd
import pytest

import commands
from conftest import REPO, load_script, require, settings_for
from mha_textclf.attention import build_attention
from mha_textclf.benchmark import Case, attention_flops, naive_memory_gb, ratios
from mha_textclf.settings import BY_TEXT_LENGTH


@pytest.mark.unit
def test_flops_of_full_attention_grow_quadratically_and_cls_only_linearly():
    B, C = 2, 8
    assert attention_flops(B, 1, 1, C) == 3 * (2 * B * C * C * 4 + 2 * B * C * 2)
    full = [attention_flops(B, T, T, C) for T in (256, 512, 1024)]
    cls_only = [attention_flops(B, 1, T, C) for T in (256, 512, 1024)]
    assert full[2] / full[1] > 3.5 and cls_only[2] / cls_only[1] == pytest.approx(2, rel=0.01)


@pytest.mark.parametrize(("steps", "timed", "median"), [
    ([1.0, 1.0, 10.0, 1.0, 1.0, 1.0], 5, 1.0),  # 5 timed steps: their median, not their mean (2.8 s)
    ([15.0, 10.0, 1.0, 1.0, 1.0], 2, 12.5),  # no more steps once 20 s of them were measured
])
def test_a_case_is_the_median_of_its_timed_steps_after_an_untimed_warm_up(monkeypatch, steps, timed, median):
    """A case's time is the median over up to 5 steps (at most ~20 s of them) after a warm-up. The clock is a stand-in
    that makes each timed step last the given seconds; the layer counts its calls."""
    from types import SimpleNamespace

    from mha_textclf import benchmark

    durations, clock = iter(steps), {"now": 0.0, "running": False}

    def perf_counter():  # start and end of each timed step, in turn
        if clock["running"]:
            clock["now"] += next(durations)
        clock["running"] = not clock["running"]
        return clock["now"]

    calls = []

    def counted(*args, **kwargs):
        layer = build_attention(*args, **kwargs)
        layer.register_forward_hook(lambda *_: calls.append(1))
        return layer

    monkeypatch.setattr(benchmark, "time", SimpleNamespace(perf_counter=perf_counter))
    monkeypatch.setattr(benchmark, "build_attention", counted)
    row = benchmark.measure(Case("efficient", "full", T=8, B=2, d_model=8, n_heads=2))  # repeats, max_seconds: defaults
    assert (row["repeats_done"], row["ms"]) == (timed, 1e3 * median)
    assert len(calls) == timed + 1  # the warm-up step, untimed


@pytest.mark.unit
def test_a_case_pads_its_texts_at_random_each_keeping_half_to_all_of_its_tokens(monkeypatch):
    """A case is forward+backward of one attention layer (B=32, C=64, 8 heads of size 8) with random padding and no
    compaction, the raw cost of each variant at length T: the layer gets every one of the T positions as keys, with a
    padding mask at the end of each row, of its own random length (a row keeps more than half of the T tokens, up to all
    of them); not a batch without padding."""
    from mha_textclf import benchmark

    masks, backward, real_build = [], [], benchmark.build_attention

    def build(*args, **kwargs):  # the layer under test, each call's keys and mask noted, and each backward pass
        layer = real_build(*args, **kwargs)
        layer.register_forward_pre_hook(lambda module, args, kwargs: masks.append(
            (args[1].shape[1], kwargs["key_padding_mask"].clone())), with_kwargs=True)
        layer.register_full_backward_hook(lambda module, grad_input, grad_output: backward.append(grad_output[0]))
        return layer

    monkeypatch.setattr(benchmark, "build_attention", build)
    benchmark.measure(Case("efficient", "full", T=64, B=32, d_model=8, n_heads=2, repeats=1))
    (keys, mask), _ = masks  # the warm-up step and one timed step, on the same batch
    assert len(backward) == 2 and backward[0].shape == (32, 64, 8)  # forward+backward, each step
    assert keys == 64 and mask.shape == (32, 64)
    kept = (~mask).sum(1)
    assert all(row.tolist() == [False] * n + [True] * (64 - n) for row, n in zip(mask, kept.tolist(), strict=True))
    assert kept.min() > 32 and kept.max() <= 64 and mask.any() and len(set(kept.tolist())) > 8


@pytest.mark.unit
@pytest.mark.parametrize("variant", ["efficient", "torch"])
def test_a_case_s_attention_kernel_attends_over_all_t_keys_padding_included(monkeypatch, variant):
    """A case is the raw cost of each variant at length T, with no compaction: compaction leaves the layer as it is and
    only hands it fewer tokens, so the layer is measured without it. The layer itself trims no padding: the kernel
    (scaled_dot_product_attention) gets every one of the T keys, and so does its mask."""
    import torch.nn.functional as F

    from mha_textclf import benchmark

    keys, real_sdpa = [], F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, *args, **kwargs):
        keys.append((k.shape[-2], None if attn_mask is None else attn_mask.shape[-1]))
        return real_sdpa(q, k, v, attn_mask, *args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    benchmark.measure(Case(variant, "full", T=64, B=32, d_model=8, n_heads=2, repeats=1))
    assert keys == [(64, 64)] * 2  # the warm-up step and one timed step


@pytest.mark.unit
def test_a_cls_only_case_asks_the_layer_for_the_cls_query_alone_and_a_full_case_for_every_query(monkeypatch):
    """Each variant is measured with full attention and with cls_only (benchmark.py's Case: "full: every query attends
    (B, nh, T, T); cls_only: the [CLS] query alone (B, nh, 1, T)"): each variant's layer is handed the first position
    alone as its query in a cls_only case, every position in a full one, against all T keys either way; not full
    attention cut to [CLS] afterwards."""
    import torch

    from mha_textclf import benchmark

    calls, real_build = [], benchmark.build_attention

    def build(variant, *args, **kwargs):  # the layer under test, each call's query and keys noted
        layer = real_build(variant, *args, **kwargs)
        layer.register_forward_pre_hook(lambda module, args, kwargs: calls.append(
            (variant, args[0].detach().clone(), args[1].detach().clone())), with_kwargs=True)
        return layer

    monkeypatch.setattr(benchmark, "build_attention", build)
    for variant in ("naive", "efficient", "torch"):
        for mode in ("full", "cls_only"):
            calls.clear()
            benchmark.measure(Case(variant, mode, T=8, B=2, d_model=8, n_heads=2, repeats=1))
            assert [built for built, _, _ in calls] == [variant] * 2  # the warm-up step and one timed step
            for _, query, keys in calls:
                assert keys.shape == (2, 8, 8)
                assert torch.equal(query, keys[:, :1] if mode == "cls_only" else keys), (variant, mode)


def test_memory_is_measured_in_mib_the_kernel_s_kb_over_1024():
    """metrics.json's `stages` give the process's peak memory during each stage in MiB, as the summaries' MB columns and
    the benchmark's tables read them: the kernel's VmRSS and VmHWM (kB) over 1024, read here from /proc/self/status
    around each call (not over 1000: 2.4% more, and every number in MB off by it)."""
    import mmap
    from pathlib import Path

    import torch

    from mha_textclf.memory import peak_memory_mb, reset_peak_memory

    status = Path("/proc/self/status")
    require(status.is_file(), "the process's memory in kB needs Linux's /proc/self/status")

    def kb(field: str) -> int:
        return next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith(f"{field}:"))

    cpu = torch.device("cpu")
    before = kb("VmRSS")
    now = reset_peak_memory(cpu)
    assert min(before, kb("VmRSS")) / 1024 - 1 <= now <= max(before, kb("VmRSS")) / 1024 + 1
    # 64 MiB of new pages, every one written: resident. A fresh mapping, not the heap, which may hand back pages a
    # test before this one freed and that are still resident (then the peak would not move).
    block = mmap.mmap(-1, 64 * 2**20)
    block.write(b"\1" * len(block))
    low = kb("VmHWM")
    peak = peak_memory_mb(cpu)
    high = kb("VmHWM")
    block.close()
    assert low / 1024 <= peak <= high / 1024
    assert peak - now > 50  # the peak since the reset holds the block (at hundreds of MiB, 2.4% is many MiB)


@pytest.mark.unit
def test_peak_memory_is_the_rise_of_the_peak_during_the_steps(monkeypatch):
    """A case's peak memory is the rise of the process's peak RSS during its steps, not the process's whole footprint
    (here 500 MB in use before the steps, a peak of 530 MB during them)."""
    from mha_textclf import benchmark

    calls, real_build = [], benchmark.build_attention

    def build(*args, **kwargs):  # the layer under test, each forward pass noted
        layer = real_build(*args, **kwargs)
        layer.register_forward_hook(lambda *_: calls.append("step"))
        return layer

    monkeypatch.setattr(benchmark, "build_attention", build)
    monkeypatch.setattr(benchmark, "reset_peak_memory", lambda device: calls.append("reset") or 500.0)
    # Each step raises the peak by 10 MB: a peak read early, or a reset late, gives another number.
    monkeypatch.setattr(benchmark, "peak_memory_mb",
                        lambda device: calls.append("peak") or 500.0 + 10 * calls.count("step"))
    row = benchmark.measure(Case("efficient", "full", T=8, B=2, d_model=8, n_heads=2, repeats=2))
    assert calls == ["reset", "step", "step", "step", "peak"]  # reset before the warm-up, read after the last step
    assert row["peak_mb"] == 30.0


@pytest.mark.unit
def test_on_cuda_every_timed_step_is_synchronised_before_the_clock_and_memory_is_max_memory_allocated(monkeypatch):
    """On CUDA every timed step is synchronised before the clock is read, and a case's peak memory is
    max_memory_allocated. Faked: torch.cuda's synchronize and memory counters, asked with a CUDA device (GPU kernels are
    queued, so a clock read before synchronising times the queueing alone); and the order of a case's steps,
    synchronisations and clock reads, recorded on the CPU."""
    import time

    import torch

    from mha_textclf import benchmark

    asked, mib = [], 2**20
    cuda = torch.device("cuda")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: asked.append(("synchronize", device)))
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device=None: asked.append(("reset", device)))
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 100 * mib)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device=None: 160 * mib)
    benchmark._sync(cuda)
    assert benchmark.reset_peak_memory(cuda) == 100.0 and benchmark.peak_memory_mb(cuda) == 160.0
    assert asked == [("synchronize", cuda), ("reset", cuda)]

    calls, real_build, real_clock = [], benchmark.build_attention, time.perf_counter

    def build(*args, **kwargs):
        layer = real_build(*args, **kwargs)
        layer.register_forward_hook(lambda *_: calls.append("step"))
        return layer

    monkeypatch.setattr(benchmark, "build_attention", build)
    monkeypatch.setattr(benchmark, "_sync", lambda device: calls.append("sync"))
    monkeypatch.setattr(benchmark.time, "perf_counter", lambda: calls.append("clock") or real_clock())
    benchmark.measure(Case("efficient", "full", T=8, B=2, d_model=8, n_heads=2, repeats=2))
    assert calls == ["sync", "step", "sync"] + ["clock", "step", "sync", "clock"] * 2


@pytest.mark.unit
def test_every_case_and_the_matmul_peak_are_measured_in_a_fresh_process(monkeypatch):
    """run() hands each case (variant × mode × T) to the fresh-process runner, never measures one itself; and the
    naive case past the memory budget is skipped."""
    from mha_textclf import benchmark

    handed = []

    def in_fresh_process(function, *args):
        handed.append((function, *args))
        return 100.0 if function is benchmark.matmul_peak_gflops else {"ms": 1.0, "peak_mb": 0.0, "gflops": 5.0}

    monkeypatch.setattr(benchmark, "_in_fresh_process", in_fresh_process)
    monkeypatch.setattr(benchmark, "measure", lambda case: pytest.fail("a case measured in the benchmark's process"))
    results, peaks = benchmark.run([64, 2048], 32, ["cpu"], log=lambda line: None)
    cases = [args[0] for function, *args in handed if function is not benchmark.matmul_peak_gflops]
    assert handed[0] == (benchmark.matmul_peak_gflops, "cpu") and peaks == {"cpu": 100.0}
    assert sorted((c.variant, c.mode, c.T) for c in cases) == sorted(
        (v, m, t) for v in ("naive", "efficient", "torch") for m in ("full", "cls_only") for t in (64, 2048)
        if (v, m, t) != ("naive", "full", 2048))  # ~13 GB: over the 8 GB budget
    assert len(results) == len(cases) and (results["pct_of_peak"] == 5.0).all()


@pytest.mark.unit
def test_each_device_s_cases_are_put_against_that_device_s_own_matmul_peak(monkeypatch):
    """benchmark.py's docstring: "Achieved GFLOP/s is put against a matmul peak measured on the same device"; with a GPU
    present the benchmark measures CUDA beside the CPU. With the CPU and CUDA asked for (faked: a GPU whose matmul peak
    is 10× the CPU's, and cases 10× as fast), each device's peak is measured on it, its cases run on it, and each case's
    share of the peak is 5%."""
    from mha_textclf import benchmark

    handed, peak = [], {"cpu": 100.0, "cuda": 1000.0}

    def in_fresh_process(function, *args):
        handed.append((function, *args))
        if function is benchmark.matmul_peak_gflops:
            return peak[args[0]]
        return {"device": args[0].device, "ms": 1.0, "peak_mb": 0.0, "gflops": peak[args[0].device] / 20}

    monkeypatch.setattr(benchmark, "_in_fresh_process", in_fresh_process)
    results, peaks = benchmark.run([64], 32, ["cpu", "cuda"], log=lambda line: None)
    assert [args for function, *args in handed if function is benchmark.matmul_peak_gflops] == [["cpu"], ["cuda"]]
    assert peaks == peak
    cases = [args[0] for function, *args in handed if function is not benchmark.matmul_peak_gflops]
    assert sorted(c.device for c in cases) == ["cpu"] * 6 + ["cuda"] * 6
    assert sorted(results["device"]) == ["cpu"] * 6 + ["cuda"] * 6 and (results["pct_of_peak"] == 5.0).all()


@pytest.mark.unit
def test_each_case_is_the_documented_layer_of_width_64_with_8_heads_of_size_8(monkeypatch):
    """A case is forward+backward of one attention layer (B=32, C=64, 8 heads of size 8, random padding, no compaction),
    timed as the median over up to 5 steps, at most ~20 s of them: every case run() hands on, and the layer it builds
    from one (attention.py's own width and heads)."""
    from mha_textclf import benchmark

    handed = []

    def in_fresh_process(function, *args):
        handed.append(args)
        return 100.0 if function is benchmark.matmul_peak_gflops else {"ms": 1.0, "peak_mb": 0.0, "gflops": 5.0}

    monkeypatch.setattr(benchmark, "_in_fresh_process", in_fresh_process)
    benchmark.run([64], 32, ["cpu"], log=lambda line: None)
    cases = [args[0] for args in handed[1:]]
    assert len(cases) == 6
    for case in cases:
        assert (case.B, case.d_model, case.n_heads, case.repeats, case.max_seconds) == (32, 64, 8, 5, 20.0)
    for case in cases:
        layer = build_attention(case.variant, case.d_model, case.n_heads)
        assert (layer.d_model, layer.n_heads, layer.head_dim) == (64, 8, 8), case.variant


@pytest.mark.unit
def test_ratios_put_each_time_over_the_one_the_docs_name():
    """ratios.csv puts each time over the one it is compared with: efficient / torch, naive / efficient, full /
    cls_only."""
    ms = {("efficient", "full"): 2.0, ("torch", "full"): 5.0, ("naive", "full"): 8.0,
          ("efficient", "cls_only"): 0.5, ("torch", "cls_only"): 0.8, ("naive", "cls_only"): 4.0}
    results = pd.DataFrame([{"device": "cpu", "T": 64, "variant": v, "mode": m, "ms": t} for (v, m), t in ms.items()])
    (row,) = ratios(results).to_dict("records")
    assert (row.pop("device"), row.pop("T")) == ("cpu", 64)
    assert row == pytest.approx({"efficient/torch (full)": 0.4, "efficient/torch (cls_only)": 0.625,
                                 "naive/efficient (full)": 4.0, "full/cls_only (naive)": 2.0,
                                 "full/cls_only (efficient)": 4.0, "full/cls_only (torch)": 6.25})
    # A case the run skipped (naive full at T=2048, ~13 GB) leaves its ratios blank ("n/a"), not 0 or inf.
    skipped = pd.concat([results, results.assign(T=2048, ms=results["ms"] * 32)[lambda r: r["variant"] != "naive"]])
    at_2048 = ratios(skipped).set_index("T").loc[2048]
    assert at_2048[["naive/efficient (full)", "full/cls_only (naive)"]].isna().all()
    assert at_2048["full/cls_only (efficient)"] == pytest.approx(4.0)


def test_the_script_prints_a_case_the_run_skipped_as_n_a(tmp_path, monkeypatch, capsys):
    """A case the run skipped (naive at T=2048) shows as "n/a" in the script's printout, in every table, never NaN."""
    from types import SimpleNamespace

    from mha_textclf import benchmark

    ms = {("efficient", "full"): 2.0, ("torch", "full"): 5.0, ("naive", "full"): 8.0,
          ("efficient", "cls_only"): 0.5, ("torch", "cls_only"): 0.8, ("naive", "cls_only"): 4.0}
    results = pd.DataFrame([{"device": "cpu", "T": T, "variant": v, "mode": m, "ms": t, "peak_mb": 1.0,
                             "pct_of_peak": 10.0} for T in (64, 2048) for (v, m), t in ms.items()
                            if not (T == 2048 and v == "naive")])
    monkeypatch.setattr(benchmark, "run", lambda *a, **k: (results, {"cpu": 100.0}))
    monkeypatch.setattr(benchmark, "plot", lambda results: SimpleNamespace(savefig=lambda *a, **k: None))
    assert load_script("benchmark").main(["--devices", "cpu", "--out", str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "NaN" not in printed and "nan" not in printed
    ratios_at_2048 = next(line for line in printed.split("ratios (time)")[1].splitlines() if " 2048 " in line)
    assert ratios_at_2048.count("n/a") == 2  # naive/efficient (full) and full/cls_only (naive)
    assert printed.split("ratios (time)")[0].count("n/a") == 3 * 2  # two naive cells in each of the three tables


@pytest.mark.unit
def test_with_a_gpu_the_plot_adds_a_cuda_panel_and_ratios_keep_each_device_apart():
    """With a GPU present the benchmark adds a CUDA panel: benchmark.png has one panel per device, each drawing its own
    device's times, and ratios.csv puts each time over the same device's (a CUDA run's times here are a tenth of the
    CPU's, and its efficient/torch ratio another)."""
    from mha_textclf.benchmark import plot

    ms = {("efficient", "full"): 2.0, ("torch", "full"): 5.0, ("naive", "full"): 8.0,
          ("efficient", "cls_only"): 0.5, ("torch", "cls_only"): 0.8, ("naive", "cls_only"): 4.0}
    speed = {"cpu": 1.0, "cuda": 0.1}
    results = pd.DataFrame([{"device": device, "T": T, "B": 32, "variant": v, "mode": m,
                             "ms": t * factor * T / 64 * (2.0 if device == "cuda" and v == "efficient" else 1.0)}
                            for device, factor in speed.items() for T in (64, 128) for (v, m), t in ms.items()])
    figure = plot(results)
    assert [ax.get_title() for ax in figure.axes] == ["cpu, B=32", "cuda, B=32"]
    for ax, factor in zip(figure.axes, speed.values(), strict=True):
        drawn = {line.get_label(): list(line.get_ydata()) for line in ax.get_lines()}
        assert drawn["torch full"] == pytest.approx([5.0 * factor, 10.0 * factor])
    table = ratios(results).set_index(["device", "T"])
    assert list(table.index) == [("cpu", 64), ("cpu", 128), ("cuda", 64), ("cuda", 128)]
    assert list(table["efficient/torch (full)"]) == pytest.approx([0.4, 0.4, 0.8, 0.8])
    assert list(table["full/cls_only (torch)"]) == pytest.approx([6.25] * 4)


@pytest.mark.unit
def test_the_naive_memory_estimate_is_the_documented_13_gb_at_t_2048():
    """Its (B, nh, T, T) scores, masked scores and weights: about 13 GB at T=2048 (B=32, 8 heads), which the default
    8 GB budget skips, and 3.2 GB at T=1024, which it runs."""
    assert naive_memory_gb(Case("naive", "full", 2048)) == pytest.approx(12.9, abs=0.05)  # ~13 GB: skipped
    assert naive_memory_gb(Case("naive", "full", 1024)) == pytest.approx(3.2, abs=0.05)
    assert naive_memory_gb(Case("naive", "cls_only", 2048)) == pytest.approx(12.9 / 2048, abs=1e-4)  # one query row


class MeasuredError(Exception):
    """Raised in place of the measurements: what the script asked for is all the test needs."""


@pytest.mark.parametrize(("argv", "expected"), [
    # By default: T = 64 ... 2048, B=32, up to 5 steps, and naive at 2048 (~13 GB) skipped: an 8 GB budget.
    ([], ([64, 128, 256, 512, 1024, 2048], 32, 5, 8.0)),
    (["--quick"], ([16, 32], 4, 2, 8.0)),  # its --help: T 16 32, B 4, 2 repeats
])
def test_the_benchmark_measures_the_documented_sizes(argv, expected, tmp_path, monkeypatch):

    import torch

    from mha_textclf import benchmark

    asked = {}

    def run(seq_lens, B, devices, repeats, memory_budget_gb):
        asked.update(sizes=(seq_lens, B, repeats, memory_budget_gb), devices=devices)
        raise MeasuredError

    monkeypatch.setattr(benchmark, "run", run)
    monkeypatch.chdir(tmp_path)
    script = load_script("benchmark")
    with pytest.raises(MeasuredError):
        script.main(argv)
    assert asked["sizes"] == expected
    assert asked["devices"] == ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    (out,) = (tmp_path / "outputs" / "benchmark").iterdir()  # --out's default: outputs/benchmark/<date>_<time>/
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d", out.name)


@pytest.mark.parametrize("gpu", [True, False])
def test_the_benchmark_measures_the_cpu_and_cuda_where_pytorch_sees_a_gpu(gpu, tmp_path, monkeypatch):
    """scripts/benchmark.py --help: `--devices` "default: cpu, plus cuda when available", so that a GPU, where there is
    one, adds a CUDA panel. Both answers, whatever this machine has."""
    import torch

    from mha_textclf import benchmark

    asked = {}

    def run(seq_lens, B, devices, repeats, memory_budget_gb):
        asked["devices"] = devices
        raise MeasuredError

    monkeypatch.setattr(benchmark, "run", run)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpu)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *args: "a GPU")  # named in the machine line
    with pytest.raises(MeasuredError):
        load_script("benchmark").main(["--out", str(tmp_path)])
    assert asked["devices"] == (["cpu", "cuda"] if gpu else ["cpu"])


@pytest.fixture(scope="module")
def ran(data_dir, tmp_path_factory):
    """Both scripts, side by side (each spends seconds importing; this machine has two cores)."""
    out = tmp_path_factory.mktemp("benchmark")
    scripts = {"benchmark": (["scripts/benchmark.py", "--quick", "--devices", "cpu", "--out", str(out)], {}),
               "profile": (["scripts/profile_step.py", "experiment=smoke", "trainer.batch_size=4"],
                           {"BBC_NEWS_PATH": str(data_dir)})}
    with ThreadPoolExecutor(2) as pool:
        futures = {name: pool.submit(commands.run, args, cwd=REPO, env=os.environ | env, timeout=600)
                   for name, (args, env) in scripts.items()}
        return {name: future.result() for name, future in futures.items()} | {"out": out}


@pytest.mark.slow
def test_quick_benchmark_writes_measurements_ratios_and_plot(ran):
    result, tmp_path = ran["benchmark"], ran["out"]
    assert result.returncode == 0, result.stderr[-3000:]
    results = pd.read_csv(tmp_path / "benchmark.csv")
    assert len(results) == 3 * 2 * 2  # variants × modes × T
    assert set(results["variant"]) == {"naive", "efficient", "torch"} and set(results["T"]) == {16, 32}
    assert (results["ms"] > 0).all() and (results["peak_mb"] >= 0).all() and (results["gflops"] > 0).all()
    naive = results[(results["variant"] == "naive") & (results["mode"] == "full") & (results["T"] == 32)]
    assert naive["peak_mb"].item() > 0  # the naive variant's per-head (B, T, T) tensors show up
    ratios = pd.read_csv(tmp_path / "ratios.csv")
    assert {"efficient/torch (full)", "naive/efficient (full)", "full/cls_only (efficient)"} <= set(ratios.columns)
    assert (tmp_path / "benchmark.png").stat().st_size > 0
    assert "ratios (time)" in result.stdout and "% of matmul peak" in result.stdout


@pytest.mark.slow
def test_quick_benchmark_s_ratios_csv_holds_the_ratios_of_its_benchmark_csv_and_nothing_else(ran):
    """The benchmark writes benchmark.csv, ratios.csv and benchmark.png. ratios.csv is the side-by-side ratios of the
    times in benchmark.csv, computed again here from that file: one row per device and T, the device, T and the ratio
    columns alone (no index column pandas would add)."""
    tmp_path = ran["out"]
    expected = ratios(pd.read_csv(tmp_path / "benchmark.csv"))
    written = pd.read_csv(tmp_path / "ratios.csv")
    assert list(written.columns) == list(expected.columns) == ["device", "T", *expected.columns[2:]]
    pd.testing.assert_frame_equal(written, expected, check_exact=False, rtol=1e-12)


@pytest.mark.slow
def test_profile_step_compares_the_masked_and_the_compacted_step(ran):
    result = ran["profile"]
    assert result.returncode == 0, result.stderr[-3000:]
    assert "## masked (every token):" in result.stdout and "## compacted (visible tokens only):" in result.stdout
    assert result.stdout.count("| operator | calls per step | self ms per step | share |") == 2


def test_profile_step_answers_help_a_mistake_and_unreadable_data_without_profiling_or_a_traceback(monkeypatch, capsys,
                                                                                                  tmp_path):
    """A UserError is reported without a traceback, and every command answers --help: profile_step.py prints its usage,
    a misspelt setting gets the train command's one message and exit 2, data it cannot read its UserError's advice and
    exit 1, none of them after profiling a step."""
    script = load_script("profile_step")
    monkeypatch.setattr(script, "profile_steps", lambda settings: pytest.fail("profiled"))
    assert script.main(["--help"]) == 0
    assert capsys.readouterr().out.startswith(script.__doc__)
    with pytest.raises(SystemExit) as exited:
        script.main(["modle=naive"])
    assert exited.value.code == 2 and "did you mean model=naive?" in capsys.readouterr().err
    monkeypatch.setattr(script, "profile_steps", load_script("profile_step").profile_steps)
    assert script.main([f"data.path={tmp_path / 'nowhere'}"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"data.path={str(tmp_path / 'nowhere')!r} does not exist.") and "Traceback" not in err

@pytest.mark.slow
def test_profile_step_profiles_the_masked_then_the_compacted_step_on_the_same_batches(data_dir, monkeypatch, capsys):
    """profile_step.py profiles one training step both ways on the same batches: the masked computation (compact off),
    then compaction, each after the same warm-up steps; each table lists the operators by self time, most first,
    attention's own kernels (SDPA's forward and backward) among them, under the time of one profiled step ("masked
    (every token): <n> ms per step") and with each operator's share of the step's self time."""
    script = load_script("profile_step")
    steps, seconds, real_step = [], [], script.step

    def step(model, optimizer, batch, trainer):
        steps.append((model.compact, batch))
        start = time.perf_counter()
        real_step(model, optimizer, batch, trainer)
        seconds.append(time.perf_counter() - start)

    profilers, real_profile = [], script.profile

    def profile(*args, **kwargs):
        profilers.append(real_profile(*args, **kwargs))
        return profilers[-1]

    monkeypatch.setattr(script, "step", step)
    monkeypatch.setattr(script, "profile", profile)
    assert script.main(["experiment=smoke", "trainer.batch_size=4", f"data.path={data_dir}"]) == 0
    per_mode = script.STEPS + script.WARMUP
    assert [compact for compact, _ in steps] == [False] * per_mode + [True] * per_mode
    masked, compacted = [batch for _, batch in steps[:per_mode]], [batch for _, batch in steps[per_mode:]]
    assert all(a is b for a, b in zip(masked, compacted, strict=True))
    printed = capsys.readouterr().out
    assert printed.index("## masked (every token):") < printed.index("## compacted (visible tokens only):")
    profiled = [seconds[script.WARMUP:per_mode], seconds[per_mode + script.WARMUP:]]  # after each warm-up
    for table, timed, profiler in zip(printed.split("## ")[1:], profiled, profilers, strict=True):
        # "<n> ms per step": the profiled steps' time over their number. Each step is timed here, inside the script's
        # clock, so the script's figure is at least their mean (to its rounding), and more only by the loop around them.
        reference = 1e3 * sum(timed) / len(timed)
        assert reference - 0.05 <= float(re.search(r"([\d.]+) ms per step", table).group(1)) < 1.5 * reference + 1
        rows = [line.split(" | ") for line in table.splitlines() if line.startswith("| `")]
        operators = [row[0].strip("| `") for row in rows]
        self_ms, shares = [float(row[2]) for row in rows], [int(row[3].rstrip("%| ")) for row in rows]
        assert len(rows) == 12 and self_ms == sorted(self_ms, reverse=True) and shares == sorted(shares, reverse=True)
        assert sum("scaled_dot_product" in name for name in operators) >= 2, table  # its forward and backward
        assert 0 < sum(shares) <= 100 + len(shares)  # shares of one step, each rounded
        # "share": of the self time of every operator in the step, not only of the operators listed.
        self_us = {e.key: e.self_cpu_time_total for e in profiler.key_averages()}
        assert len(self_us) > len(rows)
        assert "Optimizer.step#AdamW.step" in self_us  # a training step: training's optimiser, AdamW, steps in it
        assert shares == [int(f"{100 * self_us[name] / sum(self_us.values()):.0f}") for name in operators]
        # "self ms": an operator's self time over the profiled steps, per step.
        assert self_ms == [float(f"{self_us[name] / 1e3 / script.STEPS:.1f}") for name in operators]
        # Per step, both: on one thread the operators' self times of a step add up to no more than the step took.
        per_step = float(re.search(r"([\d.]+) ms per step", table).group(1))
        assert sum(self_ms) <= per_step + 0.05 * len(rows), table


@pytest.mark.slow
def test_profile_step_builds_the_model_train_builds_where_the_corpus_decides_the_settings(data_dir, monkeypatch,
                                                                                          capsys):
    """With data=own every setting that adapts is left null: the script decides the vocabulary and the settings of long
    or short texts as train does (bbc-news cut at 128 tokens: long texts), then profiles that model. It takes "any
    training setting, as for python -m train" (its docstring): `python scripts/profile_step.py model=naive` profiles the
    naive variant, with PE if asked."""
    script = load_script("profile_step")
    models = []
    monkeypatch.setattr(script, "step", lambda model, optimizer, batch, trainer: models.append(model))
    assert script.main(["experiment=smoke", "trainer.batch_size=4", "data=own", f"data.path={data_dir}",
                        "model=naive", "pe=true"]) == 0
    run = settings_for("experiment=smoke", "data=own", f"data.path={data_dir}")
    assert run.model.d_model is None and run.tokenizer.vocab_size is None
    assert all(type(model.attention) is type(build_attention("naive", 8, 2)) for model in models)  # masked, compacted
    assert all(model.config.attention == "naive" and model.config.pe is True for model in models)
    config = models[0].config
    assert config.d_model == BY_TEXT_LENGTH["model.d_model"][1]
    assert config.token_dropout == BY_TEXT_LENGTH["model.token_dropout"][1]
    assert f"token dropout {config.token_dropout:g}," in capsys.readouterr().out
