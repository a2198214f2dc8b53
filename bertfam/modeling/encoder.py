from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..config import ModelConfig
from .activations import ACT
from .attention import SelfAttention


class Layer(nn.Module):
    """Post-LN transformer layer: x = LN(x + Attn(x)); x = LN(x + FFN(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H = cfg.hidden_size
        self.attn = SelfAttention(cfg)
        self.attn_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.ffn_in = nn.Linear(H, cfg.intermediate_size)
        self.ffn_out = nn.Linear(cfg.intermediate_size, H)
        self.ffn_norm = nn.LayerNorm(H, eps=cfg.layer_norm_eps)
        self.act = ACT[cfg.hidden_act]
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)

    def forward(self, x: torch.Tensor, mask, need_scores: bool = False):
        """x: (B, T, H) with an additive mask (or None), or packed (N, H) with a varlen.Packed plan.
        The only forward here; optimize.py swaps in a buffer-reusing subclass for prediction."""
        a, scores = self.attn(x, mask, need_scores)
        return self.ffn_block(self.attn_residual(x, a)), scores

    # the token-wise parts, separate so that optimize_for_inference(compile=True) can torch.compile them
    def attn_residual(self, x: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.attn_norm(x + self.dropout(a))  # (..., H)

    def ffn_block(self, x: torch.Tensor) -> torch.Tensor:
        f = self.ffn_out(self.act(self.ffn_in(x)))
        return self.ffn_norm(x + self.dropout(f))  # (..., H)


class Encoder(nn.Module):
    """`num_hidden_layers` layer applications over `groups x inner_group_num` distinct layers.

    BERT: one group per layer (no sharing). ALBERT: layer i runs group i // (layers / groups);
    a group is `inner_group_num` layers applied in turn. Same code path for both.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.layers = nn.ModuleList(Layer(cfg) for _ in range(cfg.groups * cfg.inner_group_num))
        self.per_group = cfg.num_hidden_layers // cfg.groups

    def schedule(self) -> list[list[int]]:
        """For each of the num_hidden_layers steps, the indices of the distinct layers it runs."""
        n = self.cfg.inner_group_num
        return [[g * n + j for j in range(n)] for g in (i // self.per_group for i in range(self.cfg.num_hidden_layers))]

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor], output_hidden_states: bool = False,
                output_attentions: bool = False):
        hidden = [x] if output_hidden_states else None
        scores_all = [] if output_attentions else None
        for step in self.schedule():
            for idx in step:
                x, scores = self.layers[idx](x, mask, output_attentions)
                if output_attentions:
                    scores_all.append(scores)
            if output_hidden_states:
                hidden.append(x)
        return x, hidden, scores_all
