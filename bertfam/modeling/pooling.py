"""Sentence vectors from per-token states: one definition of mean pooling for the heads, the embedding
pipeline and command, the MRC verifier and the demo."""
from __future__ import annotations

from typing import Optional

import torch


def mean_pool(states: torch.Tensor, mask: Optional[torch.Tensor], dim: int = -2) -> torch.Tensor:
    """Mean of the real tokens' states along the token axis `dim` of `states` ((B, T, H) -> (B, H), or
    (B, L, T, H) -> (B, L, H) with dim=2); mask: (B, T), 1/True for a real token (None: all are). A row
    without any real token gives zeros, not NaN."""
    if mask is None:
        return states.mean(dim)
    dim = dim % states.dim()
    shape = [mask.shape[0]] + [1] * (states.dim() - 1)  # mask's (B, T) placed on axes 0 and dim
    shape[dim] = mask.shape[1]
    m = mask.reshape(shape).to(states.dtype)
    return (states * m).sum(dim) / m.sum(dim).clamp(min=1)
