"""The attention core, softmax(q kᵀ / √d + mask) v, by one of two kernels, and up to which length one wins.

- "sdpa":   torch's scaled_dot_product_attention (on CPU its flash kernel: no (T, T) score matrix kept);
- "matmul": two batched matmuls and a softmax, the (B, h, T, T) scores materialised.

Both compute the same thing; which is faster depends on the CPU and the dtype. In bfloat16 on an AMD EPYC
Zen 4 (AVX512_BF16, no AMX), 1,024 tokens a batch, 12 heads of 64, ms per call (best of 8 after 3 warm-ups,
2 threads; the shapes `matmul_up_to` probes):
```
    B x T       16 x 64   8 x 128   4 x 256   2 x 512
    sdpa          2.80      3.78      5.96     11.38
    matmul        1.20      1.89      3.45      6.96
```
(oneDNN's bf16 batched matmul uses the dot-product instructions; SDPA's flash kernel gains less from them.)
The scores must go into a reused buffer and the softmax run in place: with a fresh (B, h, T, T) tensor per
call the page faults made "matmul" slower than SDPA from length 256 on, by how much depending on what the
process had allocated before. On an Intel Xeon with AMX SDPA's bf16 flash kernel was the faster one
(docs/int8_kernels.md; measured before the buffer, so the probe decides there too), and in float32 the two are level at 128 and SDPA wins beyond, so float models keep
SDPA everywhere (matmul_up_to 0). Static int8 layers with bf16 attention ask `matmul_up_to` (a probe of a
fraction of a second, once per process, dtype and thread count): sequences up to that length take
"matmul", longer ones SDPA.
"""
from __future__ import annotations

import math
import threading
from typing import Optional

import torch
import torch.nn.functional as F

from ..utils import best_time

CORES = ("sdpa", "matmul")
PROBE_LENGTHS = (64, 128, 256, 512)  # probed in this order, each as a batch of PROBE_TOKENS tokens
PROBE_TOKENS, PROBE_HEADS, PROBE_HEAD_DIM = 1024, 12, 64
PROBE_REPS = 3
MARGIN = 0.10  # "matmul" must beat SDPA by more than 10 % at a length to take it: SDPA keeps less memory
_CHOSEN: dict = {}  # (dtype, threads) -> matmul_up_to


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: Optional[torch.Tensor] = None,
           dropout_p: float = 0.0, matmul_up_to: int = 0) -> torch.Tensor:
    """softmax(q kᵀ / √d + mask) v: q, k, v (..., T, d) (views allowed), mask additive (float, broadcastable
    to (..., T, T)) or boolean (True = may attend), or None. Sequences of at most `matmul_up_to` keys take the
    "matmul" core (inference only: it writes into buffers), longer ones, dropout and autograd SDPA."""
    if k.shape[-2] > matmul_up_to or dropout_p > 0.0 or (torch.is_grad_enabled() and q.requires_grad):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)  # (..., T, d)
    if q.dim() != 4:
        return _matmul_core(q, k, v, mask)
    # in chunks of whole sequences whose scores fit SCORES_BYTES, computed in one reused buffer: a fresh
    # (B, h, T, T) tensor per call costs page faults that can make this core slower than SDPA
    B, h, T, S = q.shape[0], q.shape[1], q.shape[2], k.shape[-2]
    step = max(1, SCORES_BYTES // (h * T * S * q.element_size()))
    if step >= B:
        return _matmul_core(q, k, v, mask)
    out = torch.empty(q.shape[:-1] + (v.shape[-1],), dtype=q.dtype, device=q.device)  # (B, h, T, d)
    for b in range(0, B, step):
        m = mask if mask is None or mask.shape[0] == 1 else mask[b:b + step]
        _matmul_core(q[b:b + step], k[b:b + step], v[b:b + step], m, out=out[b:b + step])
    return out


SCORES_BYTES = 16 << 20  # the most a chunk's (B, h, T, T) scores take: each thread keeps one such buffer
_BUFFERS = threading.local()


def _matmul_core(q, k, v, mask, out=None):
    """softmax(q kᵀ / √d + mask) v as two matmuls, the scores in this thread's reused buffer, softmax in place
    (aten's softmax reads each row before writing it: tests/test_attention_core.py checks it stays so)."""
    shape = q.shape[:-1] + (k.shape[-2],)  # (..., T, S)
    s = torch.matmul(q, k.transpose(-1, -2), out=_scores_buffer(shape, q)).mul_(1.0 / math.sqrt(q.shape[-1]))
    if mask is not None:
        s = s.masked_fill_(~mask, torch.finfo(s.dtype).min) if mask.dtype == torch.bool else s.add_(mask)
    p = torch.ops.aten._softmax.out(s, -1, False, out=s)
    return torch.matmul(p, v) if out is None else torch.matmul(p, v, out=out)  # (..., T, d)


def _scores_buffer(shape: torch.Size, like: torch.Tensor) -> torch.Tensor:
    n = math.prod(shape)
    buf = getattr(_BUFFERS, "scores", None)
    if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
        buf = torch.empty(n, dtype=like.dtype, device=like.device)
        _BUFFERS.scores = buf
    return buf[:n].view(shape)


def core_of(core: str) -> int:
    """A core by name as attend's `matmul_up_to`: "sdpa" 0 (never matmul), "matmul" every length."""
    if core not in CORES:
        raise ValueError(f"attention core {core!r} not in {', '.join(CORES)}")
    return 0 if core == "sdpa" else 1 << 62


def matmul_up_to(dtype: torch.dtype, threads: Optional[int] = None) -> int:
    """The longest of PROBE_LENGTHS up to which "matmul" beats SDPA by MARGIN at every probed length, for
    attention in `dtype` with `threads` intra-op threads (default: torch's now); 0 where it never does.
    Measured once per process (best of PROBE_REPS after a warm-up; it stops at the first length "matmul"
    loses, since its (T, T) softmax only grows) and remembered."""
    threads = threads or torch.get_num_threads()
    key = (dtype, threads)
    if key not in _CHOSEN:
        _CHOSEN[key] = _probe(dtype, threads)
    return _CHOSEN[key]


def _probe(dtype: torch.dtype, threads: int) -> int:
    before, kept = torch.get_num_threads(), getattr(_BUFFERS, "scores", None)
    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    up_to = 0
    try:
        for T in PROBE_LENGTHS:
            shape = (max(1, PROBE_TOKENS // T), PROBE_HEADS, T, PROBE_HEAD_DIM)
            q, k, v = (torch.randn(shape, generator=g).to(dtype) for _ in range(3))
            t = {c: _best_time(lambda c=c: attend(q, k, v, matmul_up_to=core_of(c))) for c in CORES}
            if not t["matmul"] < (1.0 - MARGIN) * t["sdpa"]:
                break
            up_to = T
    finally:
        torch.set_num_threads(before)
        _BUFFERS.scores = kept  # the probe's 12.6 MB of scores are not the model's to keep
    return up_to


def _best_time(fn) -> float:
    with torch.inference_mode():
        fn()  # warm-up: oneDNN primitives, the scores buffer
        return best_time(fn, PROBE_REPS)
