from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..config import ModelConfig
from .activations import ACT
from .attention import SelfAttention
from .scratch import Scratch, activate_, enabled, linear_into


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
        self.reuse_buffers = True  # see scratch.py; inference.compile_layers turns it off

    def forward(self, x: torch.Tensor, mask, need_scores: bool = False, scratch: Optional[Scratch] = None):
        """x: (B, T, H) with an additive mask, or packed (N, H) with a varlen.Packed plan.

        With `scratch` (no autograd; see scratch.py) the big intermediates go to reused buffers."""
        if scratch is not None and self.reuse_buffers and not need_scores:
            return self._forward_reusing(x, mask, scratch), None
        a, scores = self.attn(x, mask, need_scores)
        return self.ffn_block(self.attn_residual(x, a)), scores

    def _forward_reusing(self, x: torch.Tensor, mask, scratch: Scratch) -> torch.Tensor:
        """Same kernels and operation order as attn_residual / ffn_block in eval mode (dropout is the
        identity there), so the result is bit-for-bit the same. Two buffers for every layer: "wide"
        holds QKV + the attention context, then (both dead by then) the FFN activation; "proj" holds
        the attention output projection, then the FFN output."""
        H, I = x.shape[-1], self.ffn_in.out_features
        x2 = x.reshape(-1, H)  # (M, H), M = B * T or N
        M = x2.shape[0]
        wide = scratch.get("wide", (M * max(4 * H, I),), x2)
        proj = scratch.get("proj", (M, H), x2)
        a = self.attn.forward_into(x, mask, wide[:3 * M * H].view(M, 3 * H), wide[3 * M * H:4 * M * H].view(M, H),
                                   proj)  # (M, H) in proj
        x1 = self.attn_norm(a.add_(x2))  # x + a (addition commutes bit for bit)
        f = activate_(self.act, linear_into(self.ffn_in, x1, wide[:M * I].view(M, I)))  # (M, I)
        g = linear_into(self.ffn_out, f, proj)  # (M, H)
        return self.ffn_norm(g.add_(x1)).view(x.shape)

    # the token-wise parts, separate so that `inference.compile_layers` can fuse them with torch.compile
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
        # no-grad prediction: one set of buffers for the big intermediates of all layers (scratch.py)
        scratch = Scratch() if enabled() and not self.training and not output_attentions else None
        for step in self.schedule():
            for idx in step:
                x, scores = self.layers[idx](x, mask, output_attentions, scratch)
                if output_attentions:
                    scores_all.append(scores)
            if output_hidden_states:
                hidden.append(x)
        return x, hidden, scores_all
