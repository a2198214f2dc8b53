"""Memory readings of the current process from /proc (Linux), shared by the benchmarks."""
from __future__ import annotations


def status_mb(field: str = "VmRSS") -> float:
    """A /proc/self/status field in MB: VmRSS (resident now) or VmHWM (peak resident); NaN if absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # the kernel reports KiB
    return float("nan")
