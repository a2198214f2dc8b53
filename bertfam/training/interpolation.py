"""Weight-space interpolation of a fine-tuned model with the model it started from (WiSE-FT, Wortsman et al.,
"Robust fine-tuning of zero-shot models", 2022): theta = a * theta_base + (1 - a) * theta_tuned.

Why: fine-tuning on a small, narrow set (the ~450 real DuReader-checklist questions of a fold) moves a reader
towards that set's habits (long same-topic passages, nearly all titled) and away from what the broad stage
learned (a short passage that states the answer). Mixing the weights back keeps much of both, at no cost at
inference: one model of the same size. The two models must share architecture and every tensor's shape.
"""
from __future__ import annotations

from typing import Mapping

import torch

from ..errors import ConfigError


def interpolate_(model: torch.nn.Module, base_state: Mapping[str, torch.Tensor], base_weight: float) -> None:
    """In place: every floating-point tensor of model's state becomes base_weight * base + (1 - base_weight) *
    its own value (integer buffers, e.g. position ids, stay the model's). ConfigError unless 0 <= base_weight
    <= 1 and base_state has exactly the model's tensors, shape for shape."""
    if not 0.0 <= base_weight <= 1.0:
        raise ConfigError(f"base weight must be in [0, 1], got {base_weight}")
    own = model.state_dict()
    missing, extra = sorted(set(own) - set(base_state)), sorted(set(base_state) - set(own))
    if missing or extra:
        raise ConfigError(f"interpolation: the base lacks {missing[:3]} / has extra {extra[:3]} tensors")
    bad = [k for k, v in own.items() if tuple(v.shape) != tuple(base_state[k].shape)]
    if bad:
        raise ConfigError(f"interpolation: shapes differ for {bad[:3]}")
    with torch.no_grad():
        for k, v in own.items():  # state_dict tensors share storage with the parameters and buffers
            if v.is_floating_point():
                v.mul_(1.0 - base_weight).add_(base_state[k].to(v.dtype), alpha=base_weight)
