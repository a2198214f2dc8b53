"""What the machine and the process can do and hold, read by the benchmarks beside their timings: memory
of this process (/proc, Linux) and the machine's compute ceilings (fp32 matmul, int8 GEMM), against which
an engine's useful FLOP/s are read."""
from __future__ import annotations

import os
import platform
import resource
import statistics
import time

from .engines import versions


# ----------------------------------------------------------------------------- memory
def status_mb(field: str = "VmRSS") -> float:
    """A /proc/self/status field in MB: VmRSS (resident now) or VmHWM (peak resident); NaN if absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # the kernel reports KiB
    return float("nan")


def rss_mb() -> float:
    return status_mb("VmRSS")


def vm_hwm_mb() -> float:
    return status_mb("VmHWM")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- ceilings
def matmul_gflops(m: int = 1024, k: int = 768, n: int = 3072, reps: int = 5) -> float:
    """fp32 GFLOP/s of one BERT-shaped matmul (FFN input), the best of `reps`."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * m * k * n / min(ts) / 1e9


def int8_gops(m: int = 2048, k: int = 1024, n: int = 1024, reps: int = 5, best: bool = True) -> float:
    """int8 GOP/s of torch's dynamic-quantized linear (torch.ops.quantized.linear_dynamic: quantizes the
    fp32 input per call, int8 x int8 -> int32 GEMM, dequantizes), the kernel of quantize_dynamic's
    nn.Linear replacement; 2*m*k*n operations a call. Best of `reps` (or median with best=False)."""
    import torch

    w = torch.randn(n, k)
    qw = torch.quantize_per_tensor(w, float(w.abs().max()) / 127, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qw, None)
    x = torch.randn(m, k)
    for _ in range(2):
        torch.ops.quantized.linear_dynamic(x, packed, True)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.ops.quantized.linear_dynamic(x, packed, True)
        ts.append(time.perf_counter() - t0)
    t = min(ts) if best else statistics.median(ts)
    return 2 * m * k * n / t / 1e9


def ceilings(scale: float = 1.0, reps: int = 5) -> dict:
    """fp32 matmul GFLOP/s of torch here (the median of each of a square and two BERT-shaped products) and
    int8 GOP/s of its dynamic-quantized linear (a square-ish and the two BERT-shaped products), each with its
    best product as the ceiling. `scale`: the products' rows (1 for measuring, smaller for a smoke test)."""
    import torch

    res = {}
    r = scale
    for m, k, n in [(round(2048 * r), 2048, 2048), (round(1024 * r), 768, 3072), (round(1024 * r), 3072, 768)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        ts = []
        for _ in range(max(5, reps)):
            t0 = time.perf_counter()
            a @ b
            ts.append(time.perf_counter() - t0)
        res[f"{m}x{k}x{n}"] = 2 * m * k * n / statistics.median(ts) / 1e9
    i8 = {f"{m}x{k}x{n}": int8_gops(m, k, n, reps=max(5, reps), best=False)
          for m, k, n in [(round(2048 * r), 1024, 1024), (round(1024 * r), 768, 3072), (round(1024 * r), 3072, 768)]}
    return {"gflops": res, "ceiling": max(res.values()), "int8_gops": i8, "int8_ceiling": max(i8.values())}


# ----------------------------------------------------------------------------- the machine
def cpu_simd() -> tuple[str, list[str]]:
    """The CPU's model name and its SIMD flags (avx*, amx*, *vnni*), from /proc/cpuinfo."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("flags")), [])
    return cpu, [f for f in flags if f.startswith(("avx", "amx")) or "vnni" in f]


def cpu_family(path: str = "/proc/cpuinfo") -> int | None:
    """The CPU's family number (/proc/cpuinfo's "cpu family"), None where it has none: a virtual machine's
    model name can be only "AMD EPYC", and the family is what tells its generation."""
    try:
        with open(path) as f:
            line = next((ln for ln in f if ln.startswith("cpu family")), None)
        return int(line.split(":", 1)[1]) if line else None
    except (OSError, ValueError):
        return None


# AMD's families with AVX-512: 25 (0x19) is Zen 3 and Zen 4, and only Zen 4 has AVX-512; 26 (0x1A) is Zen 5,
# whose AVX-512 runs at full 512-bit width (Zen 4 splits it in two halves): different tables
AMD_AVX512_GENERATIONS = {25: "zen4", 26: "zen5"}


def page_stem(cpu: str, simd: list, family: int | None = None) -> str:
    """The report's file name for this CPU kind: docs keep one table per kind, so a run on one machine never
    overwrites another's. AVX2-only machines keep the historical `benchmarks`; AVX-512 ones get their own
    page, e.g. `benchmarks-xeon-avx512-amx`, and an AMD EPYC its generation from the family
    (`benchmarks-epyc-zen4-avx512`; `benchmarks-epyc-avx512` where the family is unknown)."""
    if "avx512f" not in simd:
        return "benchmarks"
    vendor = "epyc" if "EPYC" in cpu else "xeon" if "Xeon" in cpu else "cpu"
    if vendor == "epyc" and family is not None:
        vendor += "-" + AMD_AVX512_GENERATIONS.get(family, f"family{family}")
    return f"benchmarks-{vendor}-avx512" + ("-amx" if any(f.startswith("amx") for f in simd) else "")


def environment(threads: int, spin: bool) -> dict:
    """The machine and libraries a run measured on, and its thread settings, for the report."""
    import onnxruntime
    import torch
    import transformers

    cpu, simd = cpu_simd()
    v = versions()
    return {"cpu": cpu, "cpu_family": cpu_family(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
            "openvino": v["openvino"], "nncf": v["nncf"], "simd": simd,
            "torch_quantized_engine": torch.backends.quantized.engine,
            "threads": threads, "idle_threads": "busy-wait (library defaults)" if spin else
            "sleep (OMP_WAIT_POLICY=PASSIVE for torch, allow_spinning=0 for onnxruntime; OpenVINO has no "
            "such switch)"}
