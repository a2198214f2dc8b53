"""AdamW parameter groups (no decay on bias/LayerNorm, optional layer-wise lr decay) and schedules."""
from __future__ import annotations

import re
from typing import Optional

import torch
from torch import nn


def _depth(name: str, num_layers: int) -> int:
    """0 = embeddings, 1..L = encoder layers, L+1 = pooler and heads."""
    if ".embeddings." in name or name.startswith("embeddings."):
        return 0
    m = re.search(r"encoder\.layers\.(\d+)\.", name)
    if m:
        return int(m.group(1)) + 1
    return num_layers + 1


def param_groups(model: nn.Module, lr: float, weight_decay: float = 0.01,
                 layerwise_lr_decay: Optional[float] = None, head_lr: Optional[float] = None) -> list[dict]:
    """Bias and LayerNorm weights get no weight decay. With layer-wise decay d, a parameter at depth k
    (embeddings 0, layers 1..L, heads L+1) trains with lr * d ** (L + 1 - k). head_lr: the peak lr of the
    pooler and heads (depth L+1) instead: a new head on an encoder whose states are small (e5's unit-scale
    embeddings, contrastive temperature 0.01) needs far larger steps than the pretrained layers."""
    cfg = getattr(model, "config", None)
    n_layers = len(getattr(getattr(getattr(model, "backbone", None), "encoder", None), "layers", [])) or \
        (cfg.num_hidden_layers if cfg is not None else 0)
    groups: dict[tuple, dict] = {}
    seen = set()
    for name, p in model.named_parameters():
        if not p.requires_grad or id(p) in seen:
            continue
        seen.add(id(p))
        no_decay = p.dim() < 2 or "norm" in name.lower()
        scale = 1.0
        if layerwise_lr_decay is not None:
            scale = layerwise_lr_decay ** (n_layers + 1 - _depth(name, n_layers))
        at = lr * scale
        if head_lr is not None and _depth(name, n_layers) == n_layers + 1:
            at = head_lr
        key = (no_decay, at)
        g = groups.setdefault(key, {"params": [], "weight_decay": 0.0 if no_decay else weight_decay, "lr": at})
        g["params"].append(p)
    return list(groups.values())


def linear_schedule(optimizer: torch.optim.Optimizer, warmup_steps: int, total_steps: int):
    """Linear warm-up from 0 to the peak lr, then linear decay to 0 at total_steps."""
    def f(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / max(1, warmup_steps)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, f)
