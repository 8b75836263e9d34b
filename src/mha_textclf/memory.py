"""Peak memory: the process's resident set on the CPU (Linux: VmHWM, reset through /proc/self/clear_refs), what torch
allocated on a CUDA device."""

from __future__ import annotations

import resource
from pathlib import Path

import torch


def _proc_status_mb(field: str) -> float:
    """A memory field of /proc/self/status (VmRSS: resident now, VmHWM: resident at peak) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024  # reported in kB
    raise OSError(f"no {field} in /proc/self/status")


def reset_peak_memory(device: torch.device) -> float:
    """Start a fresh peak-memory measurement; returns the memory in use now (MB): on CUDA what torch allocated, on
    the CPU the process's resident set."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device) / 2**20
    try:  # Linux: writing 5 to clear_refs resets the peak resident set (VmHWM) to the current one
        Path("/proc/self/clear_refs").write_text("5")
        return _proc_status_mb("VmRSS")
    except OSError:  # elsewhere: the process's lifetime peak, a lower bound of the step's own
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def peak_memory_mb(device: torch.device) -> float:
    """The peak since `reset_peak_memory` (MB), in the same terms."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    try:
        return _proc_status_mb("VmHWM")
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux and BSD report kB
