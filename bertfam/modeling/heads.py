"""Task heads. Each maps backbone outputs to logits; losses live in TaskModel."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .activations import ACT


class MLMHead(nn.Module):
    """transform (dense H->E, act, LayerNorm) then the decoder tied to the word embeddings + bias."""

    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding):
        super().__init__()
        E = cfg.emb_size
        self.dense = nn.Linear(cfg.hidden_size, E)
        self.act = ACT[cfg.hidden_act]
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.bias = nn.Parameter(torch.zeros(cfg.vocab_size))
        self.word = [word_embeddings]  # a list so the tied matrix is not registered twice

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        h = self.norm(self.act(self.dense(hidden)))  # (..., E)
        return F.linear(h, self.word[0].weight, self.bias)  # (..., V)


class PairHead(nn.Module):
    """NSP / SOP: 2-way classifier on the pooled [CLS]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.classifier = nn.Linear(cfg.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)  # (B, 2)


class ClassificationHead(nn.Module):
    """Sequence classification / regression.

    pooling="pooler": dropout + linear on the pooler output (BERT, ALBERT, ERNIE).
    pooling="cls_dense": dense + tanh + linear on the [CLS] hidden state (RoBERTa).
    """

    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        self.pooling = cfg.head.classifier_pooling
        p = cfg.head.classifier_dropout if cfg.head.classifier_dropout is not None else cfg.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size) if self.pooling == "cls_dense" else None
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor, pooled: Optional[torch.Tensor]) -> torch.Tensor:
        if self.dense is not None:
            x = torch.tanh(self.dense(self.dropout(hidden[:, 0])))
        else:
            x = pooled
        return self.classifier(self.dropout(x))  # (B, num_labels)


class TokenHead(nn.Module):
    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        p = cfg.head.classifier_dropout if cfg.head.classifier_dropout is not None else cfg.hidden_dropout_prob
        self.dropout = nn.Dropout(p)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden))  # (B, T, num_labels)


class SpanHead(nn.Module):
    """Start/end logits per token, plus an optional answerable/unanswerable classifier on [CLS]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.qa = nn.Linear(cfg.hidden_size, 2)
        self.answerable = nn.Linear(cfg.hidden_size, 2) if cfg.head.answerability else None

    def forward(self, hidden: torch.Tensor, pooled: Optional[torch.Tensor]):
        start, end = self.qa(hidden).unbind(-1)  # (B, T) each
        ans = self.answerable(pooled) if self.answerable is not None and pooled is not None else None
        return start, end, ans  # ans: (B, 2), index 1 = answerable
