from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .attention import extended_mask
from .embeddings import Embeddings
from .encoder import Encoder
from .heads import ClassificationHead, MLMHead, PairHead, SpanHead, TokenHead

TASKS = ("mlm", "pretraining", "classification", "regression", "token", "span")
IGNORE = -100


@dataclass
class ModelOutput:
    last_hidden_state: Optional[torch.Tensor] = None  # (B, T, H)
    pooler_output: Optional[torch.Tensor] = None  # (B, H)
    hidden_states: Optional[list] = None  # L+1 tensors (B, T, H), embeddings first
    attentions: Optional[list] = None  # raw attention scores (B, heads, T, T) per layer
    logits: Optional[torch.Tensor] = None
    loss: Optional[torch.Tensor] = None
    pair_logits: Optional[torch.Tensor] = None  # pretraining: NSP/SOP (B, 2)
    start_logits: Optional[torch.Tensor] = None  # span: (B, T)
    end_logits: Optional[torch.Tensor] = None
    answerable_logits: Optional[torch.Tensor] = None  # span: (B, 2)
    embedding_output: Optional[torch.Tensor] = None  # (B, T, H) embeddings (TinyBERT distils it)

    def __getitem__(self, key: str):
        return getattr(self, key)


class BertfamModel(nn.Module):
    """The backbone: embeddings, encoder, pooler (dense + tanh on the first token)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)

    def forward(self, input_ids: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                task_type_ids: Optional[torch.Tensor] = None, inputs_embeds: Optional[torch.Tensor] = None,
                output_hidden_states: bool = False, output_attentions: bool = False) -> ModelOutput:
        if input_ids is None and inputs_embeds is None:
            raise ValueError("give input_ids or inputs_embeds")
        ids = input_ids if input_ids is not None else torch.zeros(inputs_embeds.shape[:2], dtype=torch.long,
                                                                  device=inputs_embeds.device)
        if attention_mask is None and input_ids is not None and self.config.position_offset:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        x = self.embeddings(ids, token_type_ids, position_ids, task_type_ids, inputs_embeds)  # (B, T, H)
        mask = extended_mask(attention_mask, x.dtype)
        h, hidden, scores = self.encoder(x, mask, output_hidden_states, output_attentions)
        pooled = torch.tanh(self.pooler(h[:, 0]))  # (B, H)
        return ModelOutput(last_hidden_state=h, pooler_output=pooled, hidden_states=hidden, attentions=scores,
                           embedding_output=x if output_hidden_states else None)


class TaskModel(nn.Module):
    """backbone + optional head + loss (computed only when labels are given)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.backbone = BertfamModel(cfg)
        task = cfg.head.task
        self.tokenizer = None  # attached by from_pretrained; written by save_pretrained
        self.mlm = self.pair = self.classifier = self.token = self.span = None
        if task in ("mlm", "pretraining"):
            self.mlm = MLMHead(cfg, self.backbone.embeddings.word)
            if task == "pretraining" and cfg.head.pair_objective:
                self.pair = PairHead(cfg)
        elif task in ("classification", "regression"):
            self.classifier = ClassificationHead(cfg, 1 if task == "regression" else cfg.head.num_labels)
        elif task == "token":
            self.token = TokenHead(cfg, cfg.head.num_labels)
        elif task == "span":
            self.span = SpanHead(cfg)
        elif task is not None:
            raise ValueError(f"unknown task {task!r}; known: {TASKS}")

    @property
    def task(self) -> Optional[str]:
        return self.config.head.task

    def init_weights(self, seed: Optional[int] = None) -> "TaskModel":
        if seed is not None:
            torch.manual_seed(seed)
        self.apply(self._init_module)
        return self

    def _init_module(self, m: nn.Module) -> None:
        std = self.config.initializer_range
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, 0.0, std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, 0.0, std)
            if m.padding_idx is not None:
                with torch.no_grad():
                    m.weight[m.padding_idx].zero_()
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, MLMHead):
            nn.init.zeros_(m.bias)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                task_type_ids=None, inputs_embeds=None, labels=None, pair_labels=None, start_positions=None,
                end_positions=None, answerable_labels=None, masked_positions=None,
                output_hidden_states: bool = False, output_attentions: bool = False) -> ModelOutput:
        """labels: class ids (B,), regression targets (B,), tag ids (B, T) or MLM targets (B, T) with -100
        for ignored positions. masked_positions (B, T) bool: MLM logits only where True (faster)."""
        out = self.backbone(input_ids, attention_mask, token_type_ids, position_ids, task_type_ids, inputs_embeds,
                            output_hidden_states, output_attentions)
        h, pooled = out.last_hidden_state, out.pooler_output
        if self.mlm is not None:
            self._mlm(out, h, pooled, labels, pair_labels, masked_positions)
        elif self.classifier is not None:
            out.logits = self.classifier(h, pooled)
            if labels is not None:
                if self.task == "regression":
                    out.loss = F.mse_loss(out.logits.squeeze(-1), labels.to(out.logits.dtype))
                else:
                    out.loss = F.cross_entropy(out.logits, labels)
        elif self.token is not None:
            out.logits = self.token(h)
            if labels is not None:
                out.loss = F.cross_entropy(out.logits.flatten(0, 1), labels.flatten(), ignore_index=IGNORE)
        elif self.span is not None:
            self._span(out, h, pooled, start_positions, end_positions, answerable_labels)
        return out

    def _mlm(self, out, h, pooled, labels, pair_labels, masked_positions) -> None:
        if masked_positions is not None:
            out.logits = self.mlm(h[masked_positions])  # (N_masked, V)
            targets = labels[masked_positions] if labels is not None else None
        else:
            out.logits = self.mlm(h)  # (B, T, V)
            targets = labels
        loss = None
        if targets is not None:
            loss = F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), targets.reshape(-1),
                                   ignore_index=IGNORE)
        if self.pair is not None:
            out.pair_logits = self.pair(pooled)
            if pair_labels is not None:
                pl = F.cross_entropy(out.pair_logits, pair_labels)
                loss = pl if loss is None else loss + pl
        out.loss = loss

    def _span(self, out, h, pooled, start_positions, end_positions, answerable_labels) -> None:
        start, end, ans = self.span(h, pooled)
        out.start_logits, out.end_logits, out.answerable_logits = start, end, ans
        out.logits = torch.stack([start, end], dim=-1)  # (B, T, 2)
        if start_positions is None or end_positions is None:
            return
        T = start.shape[1]
        # positions outside the window are ignored, as in BertForQuestionAnswering
        sp = start_positions.clamp(0, T)
        ep = end_positions.clamp(0, T)
        loss = (F.cross_entropy(start, sp, ignore_index=T) + F.cross_entropy(end, ep, ignore_index=T)) / 2
        if ans is not None:
            if answerable_labels is None:  # windows whose target is [CLS] (index 0) hold no answer
                answerable_labels = (start_positions > 0).long()
            loss = loss + F.cross_entropy(ans, answerable_labels)
        out.loss = loss

    # --------------------------------------------------------------- saving
    def save_pretrained(self, path: str, tokenizer=None) -> None:
        """Write config.json, model.safetensors (each atomically) and the tokenizer files."""
        from safetensors.torch import save_file

        from ..utils import atomic_write

        os.makedirs(path, exist_ok=True)
        state = {k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}
        atomic_write(os.path.join(path, "model.safetensors"),
                     lambda tmp: save_file(state, tmp, metadata={"format": "pt", "producer": "bertfam"}))
        self.config.save(os.path.join(path, "config.json"))
        tok = tokenizer if tokenizer is not None else self.tokenizer
        if tok is not None:
            tok.save_pretrained(path)

    def num_parameters(self) -> dict:
        """Counts of unique parameters: total, embeddings, encoder (+ pooler), heads."""
        seen, counts = set(), {"total": 0, "embeddings": 0, "encoder": 0, "pooler": 0, "heads": 0}
        for name, p in self.named_parameters():
            if id(p) in seen:
                continue
            seen.add(id(p))
            n = p.numel()
            counts["total"] += n
            part = name.split(".")[1] if name.startswith("backbone.") else "heads"
            counts[part if part in counts else "heads"] += n
        return counts


def build_model(cfg: ModelConfig, seed: Optional[int] = None) -> TaskModel:
    """A randomly initialised model for `cfg` (heads from cfg.head)."""
    return TaskModel(cfg).init_weights(seed)
