from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import HEAD_TASKS, ModelConfig
from .attention import extended_mask
from .embeddings import Embeddings
from .encoder import Encoder
from .heads import ClassificationHead, MLMHead, PairHead, SpanHead, TokenHead
from .varlen import Packed, pack_info, repad, unpad
from . import varlen

TASKS = HEAD_TASKS
IGNORE = -100


def _tracing() -> bool:
    return torch.compiler.is_compiling() or torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def _env_unpad() -> bool:
    """BERTFAM_PADDED=1 forces the padded path everywhere (e.g. to compare against it)."""
    return os.environ.get("BERTFAM_PADDED", "0") in ("", "0", "false", "no")


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
    """The backbone: embeddings, encoder, pooler (dense + tanh on the first token).

    Unpadded by default: with a (B, T) padding mask that has padding, the batch is packed into its N
    real tokens (see varlen.py) and nothing is computed for padding; `last_hidden_state` is re-padded
    with zeros at padding positions. The padded path runs when it is needed for exact outputs
    (a (B, T, T) visibility matrix, output_attentions / output_hidden_states, a sequence whose first
    position is padding) or when asked for: `unpad=False` per call, `model.unpad = False`, or the
    environment variable BERTFAM_PADDED=1.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.unpad = _env_unpad()

    def forward(self, input_ids: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                task_type_ids: Optional[torch.Tensor] = None, inputs_embeds: Optional[torch.Tensor] = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                unpad: Optional[bool] = None) -> ModelOutput:
        return self.encode(input_ids, attention_mask, token_type_ids, position_ids, task_type_ids, inputs_embeds,
                           output_hidden_states, output_attentions, unpad)[0]

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
               task_type_ids=None, inputs_embeds=None, output_hidden_states=False, output_attentions=False,
               unpad=None) -> tuple[ModelOutput, Optional[Packed], torch.Tensor]:
        """(output, packing plan or None, final hidden states: (N, H) packed or (B, T, H) padded)."""
        if input_ids is None and inputs_embeds is None:
            raise ValueError("give input_ids or inputs_embeds")
        ids = input_ids if input_ids is not None else torch.zeros(inputs_embeds.shape[:2], dtype=torch.long,
                                                                  device=inputs_embeds.device)
        if attention_mask is None and input_ids is not None and self.config.position_offset:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        use_unpad = self.unpad if unpad is None else unpad
        if _tracing():  # export / compile / jit: one static graph, no data-dependent branches
            use_unpad = False
        elif attention_mask is not None and attention_mask.dim() == 2 and bool(attention_mask.all()):
            attention_mask = None  # no padding at all: unmasked attention is the same and faster
        if (use_unpad and attention_mask is not None and attention_mask.dim() == 2 and not output_hidden_states
                and not output_attentions and bool(attention_mask[:, 0].all())):
            return self._encode_packed(ids, attention_mask, token_type_ids, position_ids, task_type_ids,
                                       inputs_embeds)
        x = self.embeddings(ids, token_type_ids, position_ids, task_type_ids, inputs_embeds)  # (B, T, H)
        mask = extended_mask(attention_mask, x.dtype)
        h, hidden, scores = self.encoder(x, mask, output_hidden_states, output_attentions)
        pooled = torch.tanh(self.pooler(h[:, 0]))  # (B, H)
        out = ModelOutput(last_hidden_state=h, pooler_output=pooled, hidden_states=hidden, attentions=scores,
                          embedding_output=x if output_hidden_states else None)
        return out, None, h

    def _encode_packed(self, ids, attention_mask, token_type_ids, position_ids, task_type_ids, inputs_embeds):
        p = pack_info(attention_mask)
        B, T = ids.shape
        if position_ids is None:
            position_ids = self.embeddings.position_ids_for(ids)  # on the padded grid (RoBERTa counts)

        def pick(t):  # (B, T, ...) or broadcastable (1, T, ...) -> (1, N, ...)
            return None if t is None else unpad(t.expand(B, T, *t.shape[2:]), p).unsqueeze(0)

        x = self.embeddings(pick(ids), pick(token_type_ids), pick(position_ids), pick(task_type_ids),
                            pick(inputs_embeds))[0]  # (N, H)
        h, _, _ = self.encoder(x, p)  # (N, H)
        pooled = torch.tanh(self.pooler(h.index_select(0, p.first)))  # (B, H)
        return ModelOutput(last_hidden_state=repad(h, p), pooler_output=pooled), p, h


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
                output_hidden_states: bool = False, output_attentions: bool = False,
                unpad: Optional[bool] = None) -> ModelOutput:
        """labels: class ids (B,), regression targets (B,), tag ids (B, T) or MLM targets (B, T) with -100
        for ignored positions. masked_positions (B, T) bool: MLM logits only where True (faster).
        unpad: None = the backbone's default (unpadded whenever that gives the same numbers); False forces
        the padded path. Logits at padding positions are zero in the unpadded path."""
        if unpad is not False and not _tracing() and \
                not self._unpad_exact(attention_mask, labels, masked_positions, start_positions):
            unpad = False
        out, p, h = self.backbone.encode(input_ids, attention_mask, token_type_ids, position_ids, task_type_ids,
                                         inputs_embeds, output_hidden_states, output_attentions, unpad)
        pooled = out.pooler_output
        if self.mlm is not None:
            self._mlm(out, h, pooled, labels, pair_labels, masked_positions, p)
        elif self.classifier is not None:
            first = h.index_select(0, p.first).unsqueeze(1) if p is not None else h  # (B, 1 or T, H)
            out.logits = self.classifier(first, pooled)
            if labels is not None:
                if self.task == "regression":
                    out.loss = F.mse_loss(out.logits.squeeze(-1), labels.to(out.logits.dtype))
                else:
                    out.loss = F.cross_entropy(out.logits, labels)
        elif self.token is not None:
            logits = self.token(h)  # (N, C) packed or (B, T, C)
            out.logits = repad(logits, p) if p is not None else logits
            if labels is not None:
                targets = varlen.unpad(labels, p) if p is not None else labels.flatten()  # `unpad` is the flag here
                out.loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets, ignore_index=IGNORE)
        elif self.span is not None:
            self._span(out, out.last_hidden_state, pooled, start_positions, end_positions, answerable_labels, p, h)
        return out

    def _unpad_exact(self, attention_mask, labels, masked_positions, start_positions) -> bool:
        """False where the unpadded path would change a loss: targets on padding positions (MLM/token labels,
        masked positions) or a span loss, whose softmax runs over every position, padding included."""
        if attention_mask is None or attention_mask.dim() != 2:
            return True  # nothing to unpad (the backbone decides)
        pad = ~attention_mask.bool()  # (B, T)
        if not bool(pad.any()):
            return True
        if self.span is not None and start_positions is not None:
            return False
        if self.task in ("mlm", "pretraining", "token") and labels is not None and labels.dim() == 2 \
                and bool((labels[pad] != IGNORE).any()):
            return False
        return masked_positions is None or not bool(masked_positions[pad].any())

    def _mlm(self, out, h, pooled, labels, pair_labels, masked_positions, p=None) -> None:
        if masked_positions is not None:
            sel = unpad(masked_positions, p) if p is not None else masked_positions  # (N,) or (B, T) bool
            logits = out.logits = self.mlm(h[sel])  # (N_masked, V), same row order in both layouts
            targets = labels[masked_positions] if labels is not None else None
        else:
            logits = self.mlm(h)  # (N, V) packed or (B, T, V)
            out.logits = repad(logits, p) if p is not None else logits
            targets = None if labels is None else unpad(labels, p) if p is not None else labels
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=IGNORE)
        if self.pair is not None:
            out.pair_logits = self.pair(pooled)
            if pair_labels is not None:
                pl = F.cross_entropy(out.pair_logits, pair_labels)
                loss = pl if loss is None else loss + pl
        out.loss = loss

    def _span(self, out, h, pooled, start_positions, end_positions, answerable_labels, p=None, packed_h=None) -> None:
        if p is not None:  # per-token logits on real tokens only, re-padded to (B, T)
            start, end, ans = self.span(packed_h, pooled)
            start, end = repad(start, p), repad(end, p)
        else:
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
