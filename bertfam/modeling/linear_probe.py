"""linear="auto": which fp32 projection kernel (linear.py) is fastest here, measured once and cached.

The probe times every kernel this torch has (linear.KERNELS) on the model's own projection shapes (each
distinct in x out, e.g. bert-base's 768x2304, 768x768, 768x3072, 3072x768) at PROBE_ROWS row counts, best of
PROBE_REPS after one warm-up call, and picks per shape the kernel with the least total time over the row
counts (ties and near-ties, within TIE, go to aten: the plain path, no extra memory). A kernel that raises
(an op missing from the build, a oneDNN path this CPU cannot run) or gives a wrong result is skipped for
that shape. Cost for bert-base's four shapes: 42 GFLOP (10 passes over 320 rows x 6.5M weights), about
0.3 s at the ~150-180 GFLOP/s of 2 quiet cores (docs/benchmarks.md ceilings); not yet timed on a quiet
machine (benchmarks/linear_kernels.py prints it).

The choice is cached in a JSON file, `cache_path()`: $XDG_CACHE_HOME/bertfam/linear_kernels.json, else
~/.cache/bertfam/linear_kernels.json; one entry per (CPU model name + flags, torch version, thread count,
shapes), so another machine sharing the home directory, a torch upgrade or another thread count probes
again. Written atomically with the umask's mode (utils.atomic_write_text). An unreadable or malformed file
is ignored with one warning line and rewritten. An unwritable cache directory only costs a probe per load.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import time
from typing import Iterable, Optional

import torch

from ..utils import atomic_write_text, best_time
from . import linear as L

log = logging.getLogger("bertfam")

PROBE_ROWS = (64, 256)  # a short batch, and one MKL_CHUNK of a long one (rows of the (M, K) input)
PROBE_REPS = 2
TIE = 0.03  # a kernel must beat aten by more than 3 % in the probe to be chosen over it
CACHE_NAME = "linear_kernels.json"
CACHE_FORMAT = 1


def cache_path() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "bertfam", CACHE_NAME)


def cpu_id() -> tuple[str, str]:
    """(CPU model name, its flags) from /proc/cpuinfo; platform.processor() and '' where there is none."""
    model, flags = "", ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if not model and line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                elif not flags and line.startswith(("flags", "Features")):
                    flags = " ".join(sorted(line.split(":", 1)[1].split()))
                if model and flags:
                    break
    except OSError:
        pass
    return model or platform.processor() or platform.machine(), flags


def cache_key(shapes: Iterable[str], threads: Optional[int] = None) -> tuple[str, dict]:
    """(key, what it stands for): a hash of the CPU model + flags, torch version, thread count and shapes."""
    model, flags = cpu_id()
    facts = {"cpu": model, "flags_sha1": hashlib.sha1(flags.encode()).hexdigest()[:16],
             "torch": torch.__version__, "threads": int(threads or torch.get_num_threads()),
             "shapes": sorted(set(shapes))}
    return hashlib.sha1(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:20], facts


def _read(path: str) -> dict:
    """The cache's entries; {} for a missing file; {} with one warning for an unreadable or malformed one."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not (isinstance(data, dict) and data.get("format") == CACHE_FORMAT
                and isinstance(data.get("entries"), dict)):
            raise ValueError("not a bertfam linear-kernel cache")
        return data["entries"]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.warning("linear kernel cache %s ignored and rewritten (%s)", path, str(e).splitlines()[0][:120])
        return {}


def _valid(choice) -> bool:
    return isinstance(choice, dict) and all(isinstance(k, str) and v in L.KERNELS for k, v in choice.items())


def choose(shapes: Iterable[str], path: Optional[str] = None) -> dict:
    """shape_class -> kernel for these projection shapes on this machine: from the cache, else probed and
    cached. `path`: the cache file (default cache_path())."""
    shapes = sorted(set(shapes))
    path = path or cache_path()
    key, facts = cache_key(shapes)
    entries = _read(path)
    hit = entries.get(key)
    if isinstance(hit, dict) and _valid(hit.get("choice")) and set(hit["choice"]) == set(shapes):
        return dict(hit["choice"])
    result = probe(shapes)
    entries[key] = {**facts, "choice": result["choice"], "seconds": result["seconds"],
                    "probe_s": result["probe_s"], "skipped": result["skipped"], "probed_at": time.time()}
    try:
        atomic_write_text(path, json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=1,
                                           sort_keys=True) + "\n")
    except OSError as e:  # a read-only home: probe again next time rather than fail the load
        log.warning("linear kernel cache %s not written (%s)", path, e)
    return dict(result["choice"])


def probe(shapes: Iterable[str], rows: Optional[Iterable[int]] = None, reps: Optional[int] = None,
          kernels: Iterable[str] = L.KERNELS) -> dict:
    """Time each kernel on random weights of each shape ('in x out'). Returns {"choice": shape -> kernel,
    "seconds": shape -> kernel -> summed best time, "skipped": shape -> kernel -> why, "probe_s": total}."""
    t_start = time.perf_counter()
    rows, reps = PROBE_ROWS if rows is None else tuple(rows), PROBE_REPS if reps is None else reps
    gen = torch.Generator().manual_seed(0)
    choice, seconds, skipped = {}, {}, {}
    for shape in sorted(set(shapes)):
        K, N = (int(v) for v in shape.split("x"))
        w = torch.randn(N, K, generator=gen) * 0.02
        b = torch.randn(N, generator=gen) * 0.02
        xs = [torch.randn(m, K, generator=gen) for m in rows]
        with torch.inference_mode():
            refs = [torch.addmm(b, x, w.t()) for x in xs]  # what every kernel must give
        seconds[shape], skipped[shape] = {}, {}
        for kernel in kernels:
            why = None if L.kernel_ops_present(kernel) else "op not in this torch build"
            total = 0.0
            if why is None:
                try:
                    total = sum(_time_one(kernel, x, w, b, reps, ref) for x, ref in zip(xs, refs))
                except Exception as e:  # noqa: BLE001 (an unsupported CPU path raises anything)
                    why = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            if why is not None:
                skipped[shape][kernel] = why
            else:
                seconds[shape][kernel] = total
        times = seconds[shape]
        best = min(times, key=times.get) if times else "aten"
        if best != "aten" and "aten" in times and times[best] > times["aten"] * (1 - TIE):
            best = "aten"
        choice[shape] = best
    return {"choice": choice, "seconds": seconds, "skipped": skipped, "probe_s": time.perf_counter() - t_start}


def _time_one(kernel: str, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, reps: int,
              ref: torch.Tensor) -> float:
    """Best of `reps` calls after a warm-up one, whose result is checked against `ref` (addmm's)."""
    with torch.inference_mode():
        out = torch.empty_like(ref)
        if kernel == "aten":
            fn = lambda: torch.addmm(b, x, w.t(), out=out)  # noqa: E731  (as the buffer reuse calls it)
        else:
            p = L.pack(kernel, w)
            fn = lambda: L.packed_linear(kernel, x, p, w, b, out)  # noqa: E731
        y = fn()
        err = float((y - ref).abs().max())
        if not err <= 1e-4 * max(1.0, float(ref.abs().max())):
            raise RuntimeError(f"wrong result (max |diff| {err:.2e} from addmm)")
        return best_time(fn, reps)
