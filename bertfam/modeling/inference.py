"""Prediction helpers: length-grouped batching under torch.inference_mode, and optional torch.compile
(`compile_layers`, one form of optimize.optimize_for_inference).

Sorting examples by length before batching keeps padding (and, in the padded path, wasted attention)
small; results come back in the caller's order. The unpadded encoder already skips padding, so grouping
mostly helps the padded engines and the tokenizer-side cost; it is cheap either way.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import torch

from .optimize import optimize_for_inference


def prediction_batches(lengths: Sequence[int], batch_size: int,
                           max_tokens: Optional[int] = None) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first (a too-big batch fails early).

    max_tokens caps batch_size x longest length, so batches of short texts can hold more of them."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches, cur = [], []
    for i in order:
        longest = lengths[cur[0]] if cur else lengths[i]
        if cur and (len(cur) >= batch_size or (max_tokens and (len(cur) + 1) * longest > max_tokens)):
            batches.append(cur)
            cur = []
        cur.append(i)
    if cur:
        batches.append(cur)
    return batches


def predict_grouped(fn: Callable[[list[int]], Iterable], lengths: Sequence[int], batch_size: int,
                    max_tokens: Optional[int] = None) -> list:
    """Run fn(batch_indices) -> per-example results on length-grouped batches under inference_mode;
    the results in the original order."""
    out: list = [None] * len(lengths)
    with torch.inference_mode():
        for idx in prediction_batches(lengths, batch_size, max_tokens):
            for i, r in zip(idx, fn(idx)):
                out[i] = r
    return out


def compile_layers(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    """torch.compile the token-wise blocks of every encoder layer, in place: the same as
    `optimize_for_inference(model, compile=True, **compile_kwargs)` (see modeling/optimize.py)."""
    return optimize_for_inference(model, compile=True, **compile_kwargs)
