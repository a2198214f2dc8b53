"""A fused attention kernel for CPU inference: softmax(q kᵀ / √d) v inside each sequence, in one pass.

torch's cores (attention_core: SDPA, or two batched matmuls and a softmax) either keep the whole (B, h, T, T)
score matrix in memory or, in SDPA's flash kernel, compute it slowly in bfloat16 on CPUs without AMX, and both
need q, k, v laid out as (B, h, T, d) copies of the projection's output. This kernel
(`csrc/fused_attention.cpp`) reads q, k and v where the QKV projection wrote them, a packed (N, 3, h, d)
tensor with the sequences' bounds (`cu_seqlens`, as varlen.Packed holds them; an unpadded (B, T) batch is the
same with bounds every T), and for each (sequence, head) packs K and V once, then takes query rows eight at
a time: their scores stay in L1 in fp32, the softmax is computed there and multiplied into V at once, and the
context is written as (N, h, d), which is already the (N, H) the output projection reads.

- float32 (FMAs: 16 lanes with AVX-512, 8 with AVX2 + FMA, the two builds of one source) and bfloat16
  (AVX512_BF16 dot products, what static int8 layers compute attention in, AVX-512 build only); head_dim 32 or
  64 (e5-small, bert-base, bert-mini); scores, softmax and sums in fp32 for both.
- exp by a degree-6 polynomial (relative error about 2e-7): in float32 the outputs differ from SDPA's by
  float rounding (about 1e-6 relative), not bit for bit; in bfloat16 they are closer to the exact result
  than the two-matmul core, whose scores and probabilities are rounded to bf16.
- Inference only: no dropout, no mask other than the sequences' bounds, no autograd.

The kernel is compiled on first use with the C++ compiler torch.utils.cpp_extension finds (about 25 s, then
cached in ~/.cache/torch_extensions, one directory per build and torch installation, `build_directory`;
`make venv` builds it). Where it cannot run (neither AVX-512 nor AVX2 + FMA, bfloat16 without AVX512_BF16,
not x86-64 Linux, no compiler) `available` says False, once
with a warning naming why when a build failed, and callers keep torch's cores. `optimize_for_inference`
switches it on (`fused_attention=None`: where available and `faster_here`, a short probe against torch's
attention; True: wherever available); nothing else does.
"""
from __future__ import annotations

import hashlib
import logging
import math
import os
import platform
import threading
import time
from typing import Optional

import torch

from ..utils import cpu_flags

log = logging.getLogger(__name__)

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "fused_attention.cpp")
HEAD_DIMS = (32, 64)
NAME = "bertfam_fused_attention"
STALE_LOCK_S = 600  # a build takes ~25 s: a lock this old is a killed build's
# the two builds of csrc/fused_attention.cpp: AVX-512 (float32 and bfloat16) and AVX2 + FMA (float32 only)
CFLAGS = {
    "avx512": ["-O3", "-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mavx512bf16", "-mfma", "-fopenmp"],
    "avx2": ["-O3", "-mavx2", "-mfma", "-fopenmp"],
}
_LOCK = threading.Lock()
_MODULE: dict = {}  # build ("avx512" / "avx2") -> its module, or None after a failed build; "why" -> the failure


def variant() -> Optional[str]:
    """The build this CPU runs: "avx512" (AVX-512F/BW/VL), "avx2" (AVX2 and FMA), or None (not x86-64 Linux,
    or neither)."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return None
    flags = cpu_flags()
    if {"avx512f", "avx512bw", "avx512vl"} <= set(flags):
        return "avx512"
    return "avx2" if {"avx2", "fma"} <= set(flags) else None


def cpu_supports(dtype: torch.dtype) -> bool:
    """Whether this CPU runs the kernel in `dtype`: float32 with either build, bfloat16 with the AVX-512 one on
    a CPU with AVX512_BF16."""
    if dtype == torch.bfloat16:
        return variant() == "avx512" and "avx512_bf16" in cpu_flags()
    return dtype == torch.float32 and variant() is not None


def _extension(build: Optional[str] = None):
    """The compiled kernel of `build` (default: this CPU's `variant`), built on first call, then torch's cached
    build; None where it cannot be built."""
    build = build or variant()
    if build is None:
        return None
    with _LOCK:
        if build not in _MODULE:
            try:
                from torch.utils.cpp_extension import load

                _MODULE[build] = load(f"{NAME}_{build}", [SOURCE], extra_cflags=CFLAGS[build],
                                      extra_ldflags=["-fopenmp"], build_directory=build_directory(build),
                                      verbose=False)
            except Exception as e:  # no compiler, no headers, a failed build: torch's cores stay
                _MODULE[build] = None
                _MODULE["why"] = (str(e).strip().splitlines() or [repr(e)])[-1][:200]
                log.warning("fused attention kernel unavailable, torch's attention used instead: %s", _MODULE["why"])
        return _MODULE[build]


def build_directory(build: Optional[str] = None) -> str:
    """Where the kernel is built and cached: torch's extension root ($TORCH_EXTENSIONS_DIR, else
    ~/.cache/torch_extensions) / bertfam_fused_attention_<variant>-<torch version>-<hash of torch's location>;
    torch rebuilds it when the source changes. A build killed half-way leaves torch's lock file behind, on
    which every later build would wait for ever: one older than STALE_LOCK_S is removed."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                                   "torch_extensions")
    # one directory per torch installation: torch's rebuild check hashes the include paths, so two virtual
    # environments sharing one directory would rebuild over each other's build at every switch (~25 s)
    where = hashlib.sha1(os.path.dirname(os.path.abspath(torch.__file__)).encode()).hexdigest()[:10]
    d = os.path.join(root, f"{NAME}_{build or variant()}-{torch.__version__}-{where}")
    os.makedirs(d, exist_ok=True)
    lock = os.path.join(d, "lock")
    try:
        if time.time() - os.path.getmtime(lock) > STALE_LOCK_S:
            os.remove(lock)
    except OSError:
        pass  # no lock, or another process removed it first
    return d


def available(dtype: torch.dtype = torch.float32, head_dim: int = 64) -> bool:
    """Whether the kernel runs here for attention in `dtype` with heads of `head_dim` (building it if needed)."""
    return head_dim in HEAD_DIMS and cpu_supports(dtype) and _extension() is not None


PROBE_LENGTHS = (128, 512)  # each as a batch of PROBE_TOKENS tokens, against torch's core for that dtype
PROBE_TOKENS, PROBE_REPS = 1024, 3
_FASTER: dict = {}  # (heads, head_dim, threads) -> whether the kernel won the probe


def faster_here(heads: int, head_dim: int, threads: Optional[int] = None) -> bool:
    """Whether the kernel beats torch's attention on this CPU for heads x head_dim, at every PROBE_LENGTHS and in
    every dtype it runs here (float32 against SDPA; bfloat16, where it runs, against the core static int8
    layers use, attention_core.matmul_up_to): a probe of a fraction of a second, once per process and shape.
    The AVX2 build has been measured only on an AVX-512 CPU, so where it is the one that runs, this decides."""
    threads = threads or torch.get_num_threads()
    key = (heads, head_dim, threads)
    if key not in _FASTER:
        dtypes = [dt for dt in (torch.float32, torch.bfloat16) if available(dt, head_dim)]
        _FASTER[key] = bool(dtypes) and all(_probe(dt, heads, head_dim, threads) for dt in dtypes)
    return _FASTER[key]


def _probe(dtype: torch.dtype, heads: int, head_dim: int, threads: int) -> bool:
    from .attention_core import attend, matmul_up_to

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    try:
        up_to = matmul_up_to(dtype) if dtype == torch.bfloat16 else 0
        for T in PROBE_LENGTHS:
            B = max(1, PROBE_TOKENS // T)
            qkv = torch.randn(B * T, 3, heads, head_dim, generator=g).to(dtype)
            cu = uniform_bounds(B, T)
            out = torch.empty(B * T, heads, head_dim, dtype=dtype)

            def torch_core():  # what varlen.attention's "loop" does: one call per sequence on views
                for b in range(B):
                    q, k, v = qkv[b * T:(b + 1) * T].permute(1, 2, 0, 3).unsqueeze(1)  # each (1, h, T, d)
                    attend(q, k, v, None, 0.0, up_to)

            with torch.inference_mode():
                fused = _timed(lambda: varlen_attention(qkv, cu, out=out))
                if not fused < _timed(torch_core):
                    return False
        return True
    finally:
        torch.set_num_threads(before)


def _timed(fn) -> float:
    from ..utils import best_time

    fn()  # warm-up
    return best_time(fn, PROBE_REPS)


def why_unavailable() -> Optional[str]:
    """The build failure, if a build was tried and failed; None otherwise."""
    return _MODULE.get("why")


def usable(qkv: torch.Tensor, dropout_p: float = 0.0) -> bool:
    """Whether `varlen_attention` takes this (N, 3, h, d) qkv: CPU, float32 / bfloat16, d 32 or 64,
    contiguous, no dropout, no autograd, not inside an export, compile or jit trace (the kernel is no torch op:
    a graph would not hold it), and the kernel available."""
    if (torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()
            or torch.onnx.is_in_onnx_export()):
        return False
    return (qkv.device.type == "cpu" and dropout_p == 0.0 and qkv.dim() == 4 and qkv.shape[1] == 3
            and qkv.shape[-1] in HEAD_DIMS and qkv.dtype in (torch.float32, torch.bfloat16)
            and not (torch.is_grad_enabled() and qkv.requires_grad) and qkv.is_contiguous()
            and available(qkv.dtype, qkv.shape[-1]))


def varlen_attention(qkv: torch.Tensor, cu_seqlens: torch.Tensor, out: Optional[torch.Tensor] = None,
                     scale: Optional[float] = None) -> torch.Tensor:
    """softmax(q kᵀ · scale) v inside each sequence: qkv (N, 3, h, d) packed tokens (contiguous), cu_seqlens
    (B + 1,) sequence bounds from 0 to N -> context (N, h, d) in qkv's dtype, written into `out` if given
    (contiguous (N, h, d)). scale: default 1/√d. Check `usable(qkv)` first."""
    ext = _extension()
    if ext is None:
        raise RuntimeError(f"fused attention kernel unavailable: {why_unavailable()}")
    N, _, h, d = qkv.shape
    if out is None:
        out = torch.empty(N, h, d, dtype=qkv.dtype, device=qkv.device)
    cu = cu_seqlens if cu_seqlens.dtype == torch.int64 and cu_seqlens.is_contiguous() else \
        cu_seqlens.to(torch.int64).contiguous()
    ext.varlen_attention(qkv, cu, 1.0 / math.sqrt(d) if scale is None else float(scale), out)
    return out


def uniform_bounds(batch: int, length: int) -> torch.Tensor:
    """cu_seqlens of `batch` unpadded sequences of `length` tokens: 0, T, 2T, ..., B·T."""
    return torch.arange(0, (batch + 1) * length, length, dtype=torch.int64)


def build() -> int:
    """Build (or load the cached build of) this CPU's kernel; print one line saying which; 0 either way (a
    machine without AVX2 or a compiler runs torch's cores). `make venv` calls it."""
    v = variant()
    if v is None:
        print("fused attention: not built (this CPU has neither AVX-512 nor AVX2 + FMA; torch's attention is used)")
        return 0
    ok = _extension() is not None
    print(f"fused attention: built ({v}{', float32 and bfloat16' if cpu_supports(torch.bfloat16) else ', float32'})"
          if ok else f"fused attention: not built ({why_unavailable()}); torch's attention is used")
    return 0
