"""The unpadded ("varlen") layout: a padded batch packed into its real tokens.

A batch (B, T) with a padding mask becomes one (N, H) tensor of its N real tokens plus cumulative
sequence lengths `cu_seqlens` (B + 1,), as in FlashAttention's varlen API. Embeddings, projections,
FFN and LayerNorm are per-token, so they run on the N real tokens only (no work on padding);
attention runs per sequence. Heads use `repad` only where they must return (B, T, ...) tensors.

Attention kernels for the packed layout (`ATTENTION_KERNELS`); the model's one packing setting picks one
(layout.PACKING: "auto" = `default_kernel(device)`, or a kernel by name):
- "loop":  one SDPA call per sequence on views of the packed qkv (no padding, no copies of K/V);
- "njt":   nested jagged tensors + SDPA (on CUDA this dispatches to flash/efficient varlen kernels;
           on CPU PyTorch unbinds it into the same per-sequence loop, with extra overhead);
- "pad":   re-pad q/k/v to (B, heads, T_max, d) for attention only, one masked SDPA call;
- "block": one SDPA call over all N tokens with a block-diagonal (N, N) mask (O(N^2) work).
benchmarks/varlen_kernels.py measures them; docs/varlen_kernels.md has the numbers.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F

from . import fused_attention
from .attention_core import attend

ATTENTION_KERNELS = ("loop", "njt", "pad", "block")


@dataclass
class Packed:
    """Where the real tokens of a padded (B, T) batch sit, and how to run attention on them."""

    indices: torch.Tensor  # (N,) positions of the real tokens in the flattened (B * T) grid, row-major
    cu_seqlens: torch.Tensor  # (B + 1,) int64: tokens of sequence b are rows cu[b]:cu[b+1] of the packed tensor
    lengths: list  # B python ints
    batch: int
    seq_len: int
    kernel: str = "loop"

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])

    @property
    def max_len(self) -> int:
        return max(self.lengths)

    @property
    def first(self) -> torch.Tensor:
        """(B,) packed row of each sequence's first real token ([CLS] under right padding)."""
        return self.cu_seqlens[:-1]


def pack_info(attention_mask: torch.Tensor, kernel: Optional[str] = None) -> Packed:
    """Packing plan for a (B, T) padding mask (1 / True = real token)."""
    B, T = attention_mask.shape
    m = attention_mask.bool()
    lengths = m.sum(1)  # (B,)
    cu = F.pad(torch.cumsum(lengths, 0), (1, 0))  # (B + 1,)
    indices = torch.nonzero(m.reshape(-1), as_tuple=False).squeeze(1)  # (N,)
    return Packed(indices, cu, lengths.tolist(), B, T, kernel or default_kernel(attention_mask.device))


def default_kernel(device: torch.device) -> str:
    """The kernel of packing "auto": per-sequence SDPA on CPU (with "pad" the fastest there, and no copies:
    docs/varlen_kernels.md),
    nested jagged SDPA on CUDA (it dispatches to the flash / memory-efficient varlen kernels)."""
    return "njt" if device.type == "cuda" else "loop"


def unpad(x: torch.Tensor, p: Packed) -> torch.Tensor:
    """(B, T, ...) -> (N, ...) real tokens in row-major order."""
    return x.reshape(p.batch * p.seq_len, *x.shape[2:]).index_select(0, p.indices)


def repad(x: torch.Tensor, p: Packed, fill: float = 0.0) -> torch.Tensor:
    """(N, ...) -> (B, T, ...), `fill` at padding positions."""
    out = x.new_full((p.batch * p.seq_len, *x.shape[1:]), fill)
    out.index_copy_(0, p.indices, x)
    return out.view(p.batch, p.seq_len, *x.shape[1:])


def attention(qkv: torch.Tensor, p: Packed, dropout_p: float = 0.0,
              out: Optional[torch.Tensor] = None, matmul_up_to: int = 0, fused: bool = False) -> torch.Tensor:
    """Self-attention inside each sequence. qkv: (N, 3, heads, d) -> context (N, heads * d).
    `out` (N, heads, d): a buffer to write the context into (the "loop" kernel uses it, others copy).
    `matmul_up_to` (attention_core.attend): "loop" and "pad" compute softmax(q kᵀ) v of sequences (loop) or
    batches (pad) of at most that many keys as two matmuls; "njt" and "block" are SDPA by definition (nested
    tensors; one call over a block mask). `fused` (set by optimize_for_inference): the fused CPU kernel
    (fused_attention.py) whatever the packing kernel, where it takes this qkv."""
    N, _, h, d = qkv.shape
    if fused and fused_attention.usable(qkv, dropout_p):
        return fused_attention.varlen_attention(qkv, p.cu_seqlens, out=out).view(N, h * d)
    if p.kernel == "loop":
        return _attn_loop(qkv, p, dropout_p, out, matmul_up_to).reshape(N, h * d)
    if p.kernel == "pad":
        ctx = _attn_pad(qkv, p, dropout_p, matmul_up_to)
    else:
        ctx = {"njt": _attn_njt, "block": _attn_block}[p.kernel](qkv, p, dropout_p)
    return (ctx if out is None else out.copy_(ctx)).reshape(N, h * d)


def _attn_loop(qkv, p, dropout_p, out=None, matmul_up_to=0):
    if out is None:
        out = torch.empty(qkv.shape[0], qkv.shape[2], qkv.shape[3], dtype=qkv.dtype, device=qkv.device)  # (N, h, d)
    bounds = p.cu_seqlens.tolist()
    for s, e in zip(bounds[:-1], bounds[1:]):
        q, k, v = qkv[s:e].permute(1, 2, 0, 3).unsqueeze(1)  # each (1, h, L, d), views
        out[s:e] = attend(q, k, v, None, dropout_p, matmul_up_to)[0].transpose(0, 1)
    return out


def _attn_njt(qkv, p, dropout_p):
    def nt(t):  # (N, h, d) -> nested (B, h, j, d); SDPA on nested tensors wants contiguous values
        nested = torch.nested.nested_tensor_from_jagged(t.contiguous(), p.cu_seqlens, max_seqlen=p.max_len)
        return nested.transpose(1, 2)

    q, k, v = (nt(t) for t in qkv.unbind(1))
    return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p).transpose(1, 2).values()


def _attn_pad(qkv, p, dropout_p, matmul_up_to=0):
    # a compact grid (B, T_max): sequence b's j-th real token at column j, whatever the original holes
    lengths = torch.tensor(p.lengths, device=qkv.device)
    keep = torch.arange(p.max_len, device=qkv.device) < lengths[:, None]  # (B, T_max)
    sub = pack_info(keep, p.kernel)
    x = repad(qkv, sub).permute(2, 0, 3, 1, 4)  # (3, B, h, T_max, d)
    mask = keep[:, None, None, :]  # (B, 1, 1, T_max): keys only
    ctx = attend(x[0], x[1], x[2], mask, dropout_p, matmul_up_to)
    return unpad(ctx.transpose(1, 2), sub)  # (N, h, d)


def _attn_block(qkv, p, dropout_p):
    seq = torch.repeat_interleave(torch.arange(p.batch, device=qkv.device),
                                  torch.tensor(p.lengths, device=qkv.device))  # (N,)
    mask = seq[:, None] == seq[None, :]  # (N, N)
    q, k, v = qkv.permute(1, 2, 0, 3)  # each (h, N, d)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p).transpose(0, 1)
