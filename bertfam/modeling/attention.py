from __future__ import annotations

import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from . import fused_attention, varlen
from .attention_core import attend
from .varlen import Packed


def extended_mask(attention_mask: Optional[torch.Tensor], dtype: torch.dtype) -> Optional[torch.Tensor]:
    """Turn a (B, T) padding mask or a (B, T, T) visibility matrix (1 = may attend) into an
    additive float mask broadcastable to (B, heads, T, T). None stays None (attend everywhere)."""
    if attention_mask is None:
        return None
    if attention_mask.dim() == 2:
        m = attention_mask[:, None, None, :]  # (B, 1, 1, T): keys only
    elif attention_mask.dim() == 3:
        m = attention_mask[:, None, :, :]  # (B, 1, T, T): query x key visibility (K-BERT)
    else:
        raise ValueError(f"attention_mask must be (B, T) or (B, T, T), got shape {tuple(attention_mask.shape)}")
    m = m.to(torch.bool) if m.dtype != torch.bool else m
    # a large negative number rather than -inf so that a fully masked row cannot produce NaN
    return torch.zeros(m.shape, dtype=dtype, device=m.device).masked_fill(~m, torch.finfo(dtype).min)


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection and PyTorch SDPA."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        H = cfg.hidden_size
        self.heads = cfg.num_attention_heads
        self.head_dim = cfg.head_dim
        self.qkv = nn.Linear(H, 3 * H)  # rows: [query; key; value]
        self.out = nn.Linear(H, H)
        self.p_drop = cfg.attention_probs_dropout_prob
        # sequences up to this many keys compute softmax(q kᵀ) v as two matmuls, longer ones through SDPA
        # (attention_core): 0 = SDPA always; a static int8 layer's bf16 attention sets what this CPU's probe
        # found faster (int8_static.set_attention_dtype). Not a weight, not saved.
        self.matmul_up_to = 0
        # softmax(q kᵀ) v by the fused CPU kernel (fused_attention.py) where it takes the batch: unpadded or
        # packed, inference only. optimize_for_inference sets it; not a weight, not saved.
        self.fused_attention = False

    def forward(self, x: torch.Tensor, mask: Optional[torch.Tensor | Packed],
                need_scores: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """x: (B, T, H) with an additive mask (or None), or packed real tokens (N, H) with a `Packed` plan."""
        ctx, scores = self.context(x, mask, need_scores)
        return self.out(ctx), scores

    def context(self, x: torch.Tensor, mask: Optional[torch.Tensor | Packed],
                need_scores: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
        """The attention context before the output projection, x's shape ((B, T, H) or (N, H)), and the raw
        scores if asked; apart so that a static int8 layer can fuse the residual add into `out`."""
        p_drop = self.p_drop if self.training else 0.0
        if isinstance(mask, Packed):
            qkv = self.qkv(x).view(x.shape[0], 3, self.heads, self.head_dim)  # (N, 3, h, d)
            return varlen.attention(qkv, mask, p_drop, matmul_up_to=self.matmul_up_to,
                                    fused=self.fused_attention), None  # (N, H)
        B, T, H = x.shape
        qkv = self.qkv(x)  # (B, T, 3H)
        if self.fused_attention and mask is None and not need_scores:
            packed = qkv.view(B * T, 3, self.heads, self.head_dim)  # an unpadded batch: sequences every T rows
            if fused_attention.usable(packed, p_drop):
                return fused_attention.varlen_attention(packed, fused_attention.uniform_bounds(B, T)).view(B, T, H), None
        qkv = qkv.view(B, T, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each (B, heads, T, d)
        scores = None
        if need_scores:
            # TinyBERT distils the raw (pre-softmax, masked) scores, so compute them explicitly
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)  # (B, h, T, T)
            if mask is not None:
                scores = scores + mask
            probs = F.dropout(torch.softmax(scores, dim=-1), p_drop, self.training)
            ctx = torch.matmul(probs, v)
        else:
            if mask is not None and mask.is_floating_point() and mask.dtype != q.dtype:
                mask = mask.to(q.dtype)  # bf16 attention of a static int8 layer: SDPA wants one dtype
            ctx = attend(q, k, v, mask, p_drop, self.matmul_up_to)  # (B, h, T, d)
        return ctx.transpose(1, 2).reshape(B, T, H), scores  # (B, T, H)
