"""TinyBERT losses (Jiao et al., 2020), each exactly zero when student and teacher agree.

* embedding / hidden-state MSE: MSE(h_S W, h_T) over real tokens, W a learnable projection when the
  widths differ (identity otherwise);
* attention MSE on the unnormalised scores: the backbone returns the masked pre-softmax scores, whose
  masked entries hold a huge negative number; only (query, key) pairs that are both visible count;
* prediction: soft cross-entropy with temperature t, minus the teacher's entropy (a constant for the
  student): KL(p_T || p_S), the same gradient as TinyBERT's soft CE, and 0 at the optimum.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F


def pair_mask(attention_mask: Optional[torch.Tensor], B: int, T: int, device=None) -> torch.Tensor:
    """(B, 1, T, T) bool: query and key both real (2-D padding mask) or visible (3-D K-BERT matrix)."""
    if attention_mask is None:
        return torch.ones((B, 1, T, T), dtype=torch.bool, device=device)
    m = attention_mask.bool()
    if m.dim() == 2:
        return (m[:, :, None] & m[:, None, :])[:, None]
    return m[:, None]


def token_mask(attention_mask: Optional[torch.Tensor], B: int, T: int, device=None) -> torch.Tensor:
    """(B, T) bool of real tokens (a 3-D visibility matrix: rows that see anything)."""
    if attention_mask is None:
        return torch.ones((B, T), dtype=torch.bool, device=device)
    m = attention_mask.bool()
    return m if m.dim() == 2 else m.any(-1)


def hidden_mse(student: torch.Tensor, teacher: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """student, teacher (B, T, H) (student already projected); mask (B, T) bool."""
    if student.shape != teacher.shape:
        raise ValueError(f"hidden MSE: student {tuple(student.shape)} vs teacher {tuple(teacher.shape)}")
    w = mask.to(student.dtype).unsqueeze(-1)  # (B, T, 1)
    return ((student - teacher) ** 2 * w).sum() / (w.sum() * student.shape[-1]).clamp_min(1)


def attention_mse(student: torch.Tensor, teacher: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """student, teacher (B, heads, T, T) raw scores; valid (B, 1, T, T) bool. Masked entries are
    replaced by 0 in both (as TinyBERT does) and excluded from the mean."""
    if student.shape != teacher.shape:
        raise ValueError(f"attention MSE: student {tuple(student.shape)} vs teacher {tuple(teacher.shape)}")
    v = valid.expand_as(student)
    diff = torch.where(v, student - teacher, torch.zeros((), dtype=student.dtype, device=student.device))
    return (diff ** 2).sum() / v.sum().clamp_min(1)


def soft_cross_entropy(student_logits: torch.Tensor, teacher_logits: torch.Tensor, temperature: float = 1.0,
                       mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    """KL(softmax(t/T) || softmax(s/T)) = soft CE - H(teacher), averaged over rows (logits (..., C)).
    mask (...) bool selects rows (token tasks)."""
    s = F.log_softmax(student_logits.float() / temperature, dim=-1)
    t_log = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    kl = (t_log.exp() * (t_log - s)).sum(-1)  # (...)
    if mask is not None:
        kl = kl[mask]
    return kl.mean() if kl.numel() else kl.sum()


def uniform_layer_map(student_layers: int, teacher_layers: int) -> list[int]:
    """g(m) = m * N / M for m = 1..M (teacher layer counted from 1; 0 would be the embeddings)."""
    return [m * teacher_layers // student_layers for m in range(1, student_layers + 1)]
