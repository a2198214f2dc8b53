"""Prediction helpers: length-grouped batching under torch.inference_mode, and optional torch.compile
(`compile_layers`, one form of optimize.optimize_for_inference).

The batches are `data.batching.length_batches` (longest first), the one length-sorted batching of the
package; results come back in the caller's order. The unpadded encoder already skips padding, so grouping
mostly helps the padded engines and the tokenizer-side cost; it is cheap either way.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence

import torch

from ..data.batching import length_batches
from .optimize import optimize_for_inference


def predict_grouped(fn: Callable[[list[int]], Iterable], lengths: Sequence[int], batch_size: int,
                    max_tokens: Optional[int] = None) -> list:
    """Run fn(batch_indices) -> per-example results on length-grouped batches (longest first; max_tokens
    caps batch size x longest length) under inference_mode; the results in the original order."""
    out: list = [None] * len(lengths)
    with torch.inference_mode():
        for idx in length_batches(lengths, batch_size, max_tokens=max_tokens):
            for i, r in zip(idx, fn(idx)):
                out[i] = r
    return out


def compile_layers(model: torch.nn.Module, **compile_kwargs) -> torch.nn.Module:
    """torch.compile the token-wise blocks of every encoder layer, in place: the same as
    `optimize_for_inference(model, compile=True, **compile_kwargs)` (see modeling/optimize.py)."""
    return optimize_for_inference(model, compile=True, **compile_kwargs)
