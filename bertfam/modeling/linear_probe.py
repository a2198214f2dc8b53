"""linear="auto": which fp32 projection kernel (linear.py) is fastest here, at which row counts, measured once
and cached.

The probe times every kernel this torch has (linear.KERNELS) on the model's own projection shapes (each
distinct in x out, e.g. bert-base's 768x2304, 768x768, 768x3072, 3072x768) at PROBE_ROWS row counts, best of
PROBE_REPS after one warm-up call (more, up to PROBE_MAX_REPS, at the
smaller row counts, whose calls are short and noisy). Per shape the candidate is the packed kernel with the least total time over
the row counts; at each row count it must beat aten (the plain path, no extra memory) by more than TIE, else
aten runs there. Each probed count stands for the rows nearest to it on a log scale (boundaries at the
geometric means of neighbouring counts), so the choice is the candidate everywhere (a kernel name), aten
everywhere, or the candidate for some row ranges only ({"kernel": k, "rows": [[lo, hi], ...]},
linear.parse_spec). Why row counts matter: on an AMD EPYC Zen 3 (AVX2) oneDNN's packed kernel beats addmm at
64 rows and loses by 12-20 % at 1,024 (one full batch of 8 x 128 tokens), and choosing from 64 and 256 rows
alone made the whole bert-base encoder 7 % slower than plain addmm there (docs/benchmarks.md). A kernel that
raises (an op missing from the build, a oneDNN path this CPU cannot run) or gives a wrong result is skipped
for that shape. Cost for bert-base's four shapes: about 8,000 rows per kernel (warm-ups included) x 7.1M
weights x 3 kernels, 340 GFLOP: 2.4-2.6 s on 2 Zen 3 cores (0.6 s for multilingual-e5-small's shapes),
paid once per machine and thread count.

The choice is cached in a JSON file, `cache_path()`: $XDG_CACHE_HOME/bertfam/linear_kernels.json, else
~/.cache/bertfam/linear_kernels.json; one entry per (CPU model name + flags, torch version, thread count,
shapes), so another machine sharing the home directory, a torch upgrade or another thread count probes
again. Written atomically with the umask's mode (utils.atomic_write_text). An unreadable or malformed file
is ignored with one warning line and rewritten; a file of an older format (choices made without the row
counts) is replaced without a warning.
"""
from __future__ import annotations

import functools
import hashlib
import json
import logging
import math
import os
import platform
import time
from typing import Iterable, Optional

import torch

from ..utils import atomic_write_text
from . import linear as L

log = logging.getLogger("bertfam")

# rows of the (M, K) input: a short batch, one MKL_CHUNK, a full batch of 8 x 128 (or 2 x 512) tokens
PROBE_ROWS = (64, 256, 1024)
PROBE_REPS = 4  # at the largest row count; smaller ones get more (best of up to PROBE_MAX_REPS): short
PROBE_MAX_REPS = 8  # calls are noisier, and the rows at which a packed kernel wins are often the short ones
TIE = 0.03  # a kernel must beat aten by more than 3 % at a row count to run there instead of it
CACHE_NAME = "linear_kernels.json"
CACHE_FORMAT = 2  # 1: one kernel per shape, probed at 64 and 256 rows


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
        if isinstance(data, dict) and isinstance(data.get("format"), int) and 0 < data["format"] < CACHE_FORMAT:
            return {}  # an older bertfam's cache: its choices are probed anew and the file rewritten
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
    if not isinstance(choice, dict):
        return False
    try:
        return all(isinstance(k, str) and L.parse_spec(v) for k, v in choice.items())
    except ValueError:
        return False


def choose(shapes: Iterable[str], path: Optional[str] = None, refresh: bool = False) -> dict:
    """shape_class -> spec (a kernel, or a kernel with row ranges) for these projection shapes on this
    machine: from the cache, else probed and cached. `path`: the cache file (default cache_path()); `refresh`:
    probe again and replace the cached entry (one probed while other work slowed the machine)."""
    shapes = sorted(set(shapes))
    path = path or cache_path()
    key, facts = cache_key(shapes)
    entries = _read(path)
    hit = cached_entry(shapes, path, entries)
    if hit is not None and not refresh:
        return dict(hit["choice"])
    result = probe(shapes)
    entries[key] = {**facts, "choice": result["choice"], "rows": result["rows"], "seconds": result["seconds"],
                    "probe_s": result["probe_s"], "skipped": result["skipped"], "probed_at": time.time()}
    try:
        atomic_write_text(path, json.dumps({"format": CACHE_FORMAT, "entries": entries}, indent=1,
                                           sort_keys=True) + "\n")
    except OSError as e:  # a read-only home: probe again next time rather than fail the load
        log.warning("linear kernel cache %s not written (%s)", path, e)
    return dict(result["choice"])


def cached_entry(shapes: Iterable[str], path: Optional[str] = None, entries: Optional[dict] = None) -> Optional[dict]:
    """The cache's valid entry for these shapes on this machine (choice, rows, seconds, probe_s, probed_at),
    or None."""
    shapes = sorted(set(shapes))
    key, _ = cache_key(shapes)
    hit = (_read(path or cache_path()) if entries is None else entries).get(key)
    if isinstance(hit, dict) and _valid(hit.get("choice")) and set(hit["choice"]) == set(shapes):
        return hit
    return None


def probe(shapes: Iterable[str], rows: Optional[Iterable[int]] = None, reps: Optional[int] = None,
          kernels: Iterable[str] = L.KERNELS) -> dict:
    """Time each kernel on random weights of each shape ('in x out') at each row count, the kernels' calls
    interleaved (a slow spell of the machine hits them alike). Returns {"choice": shape -> spec (module
    docstring), "rows": the row counts, "seconds": shape -> kernel -> [best time per row count], "skipped":
    shape -> kernel -> why, "probe_s": total}."""
    t_start = time.perf_counter()
    rows, reps = tuple(sorted(PROBE_ROWS if rows is None else rows)), PROBE_REPS if reps is None else reps
    gen = torch.Generator().manual_seed(0)
    choice, seconds, skipped = {}, {}, {}
    for shape in sorted(set(shapes)):
        K, N = (int(v) for v in shape.split("x"))
        w = torch.randn(N, K, generator=gen) * 0.02
        b = torch.randn(N, generator=gen) * 0.02
        xs = [torch.randn(m, K, generator=gen) for m in rows]
        with torch.inference_mode():
            refs = [torch.addmm(b, x, w.t()) for x in xs]  # what every kernel must give
        calls, skipped[shape] = {}, {}
        for kernel in kernels:
            why = None if L.kernel_ops_present(kernel) else "op not in this torch build"
            if why is None:
                try:
                    calls[kernel] = _calls(kernel, xs, w, b, refs)
                except Exception as e:  # noqa: BLE001 (an unsupported CPU path raises anything)
                    why = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
            if why is not None:
                skipped[shape][kernel] = why
        best = [_race({k: c[i] for k, c in calls.items()}, _reps_at(m, rows, reps)) for i, m in enumerate(rows)]
        seconds[shape] = {k: [t[k] for t in best] for k in calls}
        choice[shape] = decide(rows, seconds[shape])
    return {"choice": choice, "rows": list(rows), "seconds": seconds, "skipped": skipped,
            "probe_s": time.perf_counter() - t_start}


def _reps_at(m: int, rows: tuple, reps: int) -> int:
    """Repetitions at m rows: `reps` at the largest count, more for fewer rows (up to PROBE_MAX_REPS)."""
    return max(reps, min(PROBE_MAX_REPS, reps * (rows[-1] // max(m, 1))))


def decide(rows: tuple, times: dict):
    """One shape's choice from its probe times (kernel -> [seconds per row count of `rows`, ascending]): the
    packed kernel that saves the most against aten (summed relative savings over the row counts where it is
    faster), run where it beats aten by more than TIE; each row count's verdict holds for the rows nearest it
    on a log scale. (Not the least total time: that is the largest row count's alone.)"""
    packed = [k for k in times if k != "aten"]
    if not packed:
        return "aten"
    if "aten" not in times:  # aten cannot fail; a fake probe without it takes the fastest packed kernel
        return min(packed, key=lambda k: sum(times[k]))
    cand = max(packed, key=lambda k: sum(max(0.0, 1 - c / a) for c, a in zip(times[k], times["aten"])))
    wins = [c < a * (1 - TIE) for c, a in zip(times[cand], times["aten"])]
    if all(wins):
        return cand
    if not any(wins):
        return "aten"
    # boundaries between neighbouring probed counts: their geometric mean, rounded up
    cuts = [0] + [math.ceil(math.sqrt(lo * hi)) for lo, hi in zip(rows, rows[1:])] + [None]
    ranges: list = []
    for i, win in enumerate(wins):
        if not win:
            continue
        if ranges and ranges[-1][1] == cuts[i]:
            ranges[-1][1] = cuts[i + 1]  # adjoining the range before: extend it
        else:
            ranges.append([cuts[i], cuts[i + 1]])
    return {"kernel": cand, "rows": ranges}


def _calls(kernel: str, xs: list, w: torch.Tensor, b: torch.Tensor, refs: list) -> list:
    """One zero-argument call per input of `xs` running `kernel` (as the buffer reuse calls it), each called
    once here (the warm-up) and its result checked against addmm's `refs`: RuntimeError if wrong."""
    p = None if kernel == "aten" else L.pack(kernel, w)
    fns = []
    with torch.inference_mode():
        for x, ref in zip(xs, refs):
            out = torch.empty_like(ref)
            if p is None:
                fn = functools.partial(torch.addmm, b, x, w.t(), out=out)
            else:
                fn = functools.partial(L.packed_linear, kernel, x, p, w, b, out)
            err = float((fn() - ref).abs().max())
            if not err <= 1e-4 * max(1.0, float(ref.abs().max())):
                raise RuntimeError(f"wrong result (max |diff| {err:.2e} from addmm)")
            fns.append(fn)
    return fns


def _race(fns: dict, reps: int) -> dict:
    """kernel -> the shortest of `reps` timed calls of fns[kernel], the kernels taking turns in a rotating
    order within each repetition."""
    names = list(fns)
    best = {k: float("inf") for k in names}
    with torch.inference_mode():
        for r in range(reps):
            for k in names[r % len(names):] + names[:r % len(names)]:
                t0 = time.perf_counter()
                fns[k]()
                best[k] = min(best[k], time.perf_counter() - t0)
    return best
