from __future__ import annotations

from typing import Optional

import torch
from torch import nn

from ..config import ModelConfig


def embedding(num: int, dim: int, padding_idx: Optional[int] = None) -> nn.Embedding:
    """nn.Embedding, built without its own N(0, 1) init on the meta device (from_pretrained builds there and
    loads every row): on meta that init runs a Python reference of normal_ that imports torch._dynamo, about
    1.3 s of every process that loads a model. Elsewhere it is nn.Embedding as it is (init_weights redoes it)."""
    if torch.empty(0).is_meta:  # the default device (a `with torch.device("meta")` block)
        return nn.Embedding(num, dim, padding_idx=padding_idx, _weight=torch.empty(num, dim))
    return nn.Embedding(num, dim, padding_idx=padding_idx)


class Embeddings(nn.Module):
    """token + segment + learned position (+ ERNIE task type), summed, LayerNorm, dropout.

    With `embedding_size` < `hidden_size` (ALBERT) the sum lives in the small width E and is
    projected to H afterwards (`project`), which is what makes the embedding matrix V x E cheap.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        E = cfg.emb_size
        self.cfg = cfg
        self.word = embedding(cfg.vocab_size, E, padding_idx=cfg.pad_token_id)
        # RoBERTa keeps a padding row in the position table too
        self.position = embedding(cfg.max_position_embeddings, E,
                                  padding_idx=cfg.pad_token_id if cfg.position_offset else None)
        self.token_type = embedding(cfg.type_vocab_size, E) if cfg.type_vocab_size > 0 else None
        self.task_type = embedding(cfg.task_type_vocab_size, E) if cfg.use_task_id else None
        self.norm = nn.LayerNorm(E, eps=cfg.layer_norm_eps)
        self.dropout = nn.Dropout(cfg.hidden_dropout_prob)
        self.project = nn.Linear(E, cfg.hidden_size) if E != cfg.hidden_size else None

    def position_ids_for(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Default positions: 0..T-1, or RoBERTa's pad-skipping count starting at position_offset."""
        B, T = input_ids.shape
        if self.cfg.position_offset:
            real = input_ids.ne(self.cfg.pad_token_id).long()  # (B, T)
            return torch.cumsum(real, dim=1) * real + self.cfg.pad_token_id
        return torch.arange(T, device=input_ids.device).unsqueeze(0).expand(B, T)

    def forward(self, input_ids: torch.Tensor, token_type_ids: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None, task_type_ids: Optional[torch.Tensor] = None,
                inputs_embeds: Optional[torch.Tensor] = None) -> torch.Tensor:
        return self.normalize(self.combine(input_ids, token_type_ids, position_ids, task_type_ids, inputs_embeds))

    def combine(self, input_ids: torch.Tensor, token_type_ids: Optional[torch.Tensor] = None,
                position_ids: Optional[torch.Tensor] = None, task_type_ids: Optional[torch.Tensor] = None,
                inputs_embeds: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The summed tables before LayerNorm, (B, T, E); separate so that multimodal inputs can join the
        sequence before the one LayerNorm (multimodal/model.py)."""
        x = self.word(input_ids) if inputs_embeds is None else inputs_embeds  # (B, T, E)
        if position_ids is None:
            position_ids = self.position_ids_for(input_ids)
        x = x + self.position(position_ids)
        if self.token_type is not None:
            if token_type_ids is None:
                token_type_ids = torch.zeros_like(input_ids)
            x = x + self.token_type(token_type_ids)
        if self.task_type is not None:
            if task_type_ids is None:
                task_type_ids = torch.zeros_like(input_ids)
            x = x + self.task_type(task_type_ids)
        return x

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """LayerNorm + dropout (+ the E -> H projection): (..., E) -> (..., H)."""
        x = self.dropout(self.norm(x))
        return self.project(x) if self.project is not None else x
