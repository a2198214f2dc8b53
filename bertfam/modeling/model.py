from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..config import ModelConfig
from .attention import SelfAttention, extended_mask
from .embeddings import Embeddings
from .encoder import Encoder
from .heads import HEAD_PARTS, IGNORE, MLMPredictor, build_head  # noqa: F401  (IGNORE: re-exported)
from .layout import PACKED_IS_NOT_A_SETTING, EncoderOutput, NotASetting, check_packing, choose_layout
from .varlen import unpad

log = logging.getLogger("bertfam")

SAVE_DTYPES = {"float32": torch.float32, "float16": torch.float16}  # weights on disk


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

    @classmethod
    def of(cls, enc: EncoderOutput, head_fields: Optional[dict] = None) -> "ModelOutput":
        """The backbone's fields from `enc` (per-token states re-padded), plus a head's."""
        return cls(last_hidden_state=enc.padded(), pooler_output=enc.pooled, hidden_states=enc.hidden_states,
                   attentions=enc.attentions, embedding_output=enc.embedding_output, **(head_fields or {}))


class BertfamModel(nn.Module):
    """The backbone: embeddings, encoder, pooler (dense + tanh on the first token).

    Packed by default: with a (B, T) padding mask that has padding, the batch runs as its N real tokens
    (see varlen.py) and nothing is computed for padding; `last_hidden_state` is re-padded with zeros at
    padding positions. layout.choose_layout decides, once per forward: padded where that is needed for
    exact outputs, or where `packing` (the model's, or a call's `packing=`; layout.PACKING) says "padded".
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.embeddings = Embeddings(cfg)
        self.encoder = Encoder(cfg)
        self.pooler = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.packing = "auto"

    packed = NotASetting(PACKED_IS_NOT_A_SETTING)  # the one layout switch is `packing`

    @property
    def packing(self) -> str:
        """The layout setting for this model's forwards (layout.PACKING); checked when set, so a typo fails
        here and not at the first batch with padding."""
        return self._packing

    @packing.setter
    def packing(self, value: str) -> None:
        self._packing = check_packing(value)

    def forward(self, input_ids: Optional[torch.Tensor] = None, attention_mask: Optional[torch.Tensor] = None,
                token_type_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None,
                task_type_ids: Optional[torch.Tensor] = None, inputs_embeds: Optional[torch.Tensor] = None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                packing: Optional[str] = None) -> ModelOutput:
        return ModelOutput.of(self.encode(input_ids, attention_mask, token_type_ids, position_ids, task_type_ids,
                                          inputs_embeds, output_hidden_states, output_attentions, packing))

    def encode(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
               task_type_ids=None, inputs_embeds=None, output_hidden_states=False, output_attentions=False,
               packing: Optional[str] = None, head_needs_padding=None) -> EncoderOutput:
        """The final hidden states in the layout chosen for this batch (packing: None = self.packing).
        head_needs_padding: (B, T) padding mask -> bool, the head's say (see layout.choose_layout)."""
        if input_ids is None and inputs_embeds is None:
            raise ValueError("give input_ids or inputs_embeds")
        ids = input_ids if input_ids is not None else torch.zeros(inputs_embeds.shape[:2], dtype=torch.long,
                                                                  device=inputs_embeds.device)
        if attention_mask is None and input_ids is not None and self.config.position_offset:
            attention_mask = input_ids.ne(self.config.pad_token_id)
        packing = self.packing if packing is None else check_packing(packing)
        attention_mask, plan = choose_layout(attention_mask, packing, output_hidden_states or output_attentions,
                                             head_needs_padding)
        if plan is not None:
            return self._encode_packed(ids, plan, token_type_ids, position_ids, task_type_ids, inputs_embeds)
        x = self.embeddings(ids, token_type_ids, position_ids, task_type_ids, inputs_embeds)  # (B, T, H)
        h, hidden, scores = self.encoder(x, extended_mask(attention_mask, x.dtype), output_hidden_states,
                                         output_attentions)  # (B, T, H)
        mask = attention_mask.bool() if attention_mask is not None and attention_mask.dim() == 2 else None
        return EncoderOutput(h, self.pool(h[:, 0]), None, hidden, scores, x if output_hidden_states else None, mask)

    def _encode_packed(self, ids, p, token_type_ids, position_ids, task_type_ids, inputs_embeds) -> EncoderOutput:
        B, T = ids.shape
        if position_ids is None:
            position_ids = self.embeddings.position_ids_for(ids)  # on the padded grid (RoBERTa counts)

        def pick(t):  # (B, T, ...) or broadcastable (1, T, ...) -> (1, N, ...)
            return None if t is None else unpad(t.expand(B, T, *t.shape[2:]), p).unsqueeze(0)

        x = self.embeddings(pick(ids), pick(token_type_ids), pick(position_ids), pick(task_type_ids),
                            pick(inputs_embeds))[0]  # (N, H)
        h, _, _ = self.encoder(x, p)  # (N, H)
        return EncoderOutput(h, self.pool(h.index_select(0, p.first)), p)

    def pool(self, first: torch.Tensor) -> torch.Tensor:
        """The pooler: dense + tanh on the first token's states, (B, H) -> (B, H)."""
        return torch.tanh(self.pooler(first))


class TaskModel(nn.Module):
    """backbone + optional head (heads.py), whose loss is computed only when labels are given.

    `head` holds the task's logic; its weight modules are registered here under the checkpoint's names
    (`mlm`, `pair`, `classifier`, `token`, `span`; None where the task has none)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.config = cfg
        self.backbone = BertfamModel(cfg)
        self.tokenizer = None  # attached by from_pretrained; written by save_pretrained
        self.name_or_path: Optional[str] = None  # the directory from_pretrained read
        self.head = build_head(cfg, self.backbone.embeddings.word)
        parts = self.head.parts if self.head is not None else {}
        for name in HEAD_PARTS:  # in this order: the parameter order of older checkpoints and optimizers
            setattr(self, name, parts.get(name))

    @property
    def task(self) -> Optional[str]:
        return self.config.head.task

    packed = NotASetting(PACKED_IS_NOT_A_SETTING)

    @property
    def packing(self) -> str:
        """The backbone's layout setting (BertfamModel.packing), where it lives; here for convenience."""
        return self.backbone.packing

    @packing.setter
    def packing(self, value: str) -> None:
        self.backbone.packing = value

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
        elif isinstance(m, MLMPredictor):
            nn.init.zeros_(m.bias)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None,
                task_type_ids=None, inputs_embeds=None, labels=None, pair_labels=None, start_positions=None,
                end_positions=None, answerable_labels=None, masked_positions=None,
                output_hidden_states: bool = False, output_attentions: bool = False,
                packing: Optional[str] = None) -> ModelOutput:
        """labels: class ids (B,), regression targets (B,), tag ids (B, T) or MLM targets (B, T) with -100
        for ignored positions. masked_positions (B, T) bool: MLM logits only where True (faster).
        packing: None = the model's setting (`packing`, "auto" unless set: packed whenever that gives the
        same numbers); "padded" forces the padded path for this call. Logits at padding positions are zero
        in the packed path."""
        targets = dict(labels=labels, pair_labels=pair_labels, start_positions=start_positions,
                       end_positions=end_positions, answerable_labels=answerable_labels,
                       masked_positions=masked_positions)
        enc = self.backbone.encode(input_ids, attention_mask, token_type_ids, position_ids, task_type_ids,
                                   inputs_embeds, output_hidden_states, output_attentions, packing,
                                   self._head_needs_padding(targets))
        return ModelOutput.of(enc, self._run_head(enc, targets))

    def _head_needs_padding(self, targets: dict):
        if self.head is None:
            return None
        return lambda pad: self.head.needs_padding(pad, **targets)

    def _run_head(self, enc: EncoderOutput, targets: dict) -> dict:
        return self.head(enc, **targets) if self.head is not None else {}

    # --------------------------------------------------------------- saving
    def save_pretrained(self, path: str, tokenizer=None, dtype: str = "float32") -> None:
        """Write config.json, model.safetensors (each atomically) and the tokenizer files. dtype "float16"
        stores the floating-point weights at half size (they load back as float32); the model is unchanged."""
        from safetensors.torch import save_file

        from ..utils import atomic_write

        if dtype not in SAVE_DTYPES:
            raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
        os.makedirs(path, exist_ok=True)
        cast = SAVE_DTYPES[dtype]
        state = {k: (v.detach().to(cast) if v.is_floating_point() else v.detach()).contiguous().cpu()
                 for k, v in self.state_dict().items()}
        atomic_write(os.path.join(path, "model.safetensors"),
                     lambda tmp: save_file(state, tmp, metadata={"format": "pt", "producer": "bertfam"}))
        self.config.save(os.path.join(path, "config.json"))
        tok = tokenizer if tokenizer is not None else self.tokenizer
        if tok is not None:
            tok.save_pretrained(path)
        # (DistillModel saves through this method too: it has no name_or_path)
        _copy_side_directories(self.config, getattr(self, "name_or_path", None), path)

    def num_parameters(self) -> dict:
        """Counts of unique parameters: total, embeddings, encoder (+ pooler), heads. An int8 model's weights
        are buffers (`weight_int8`, plus the int8 linears' biases; modeling/int8.py): counted as the float
        parameters they replace, so an int8 model counts as its float original."""
        seen, counts = set(), {"total": 0, "embeddings": 0, "encoder": 0, "pooler": 0, "heads": 0}
        buffers = dict(self.named_buffers())
        int8 = [(n, b) for n, b in buffers.items() if n.endswith(".weight_int8")
                or (n.endswith(".bias") and n[:-len("bias")] + "weight_int8" in buffers)]
        for name, p in [*self.named_parameters(), *int8]:
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


def set_attention_dropout(model: nn.Module, p: float) -> None:
    """Set the attention-probability dropout of `model` (its config and every self-attention layer) to p.
    p = 0 lets PyTorch's SDPA run its fused (flash) CPU kernel in training; with p > 0 it falls back to the
    math path, which draws a (B, heads, T, T) random mask per layer (2.3x slower steps for e5-small)."""
    if not 0.0 <= p < 1.0:
        raise ValueError(f"attention dropout must be in [0, 1), got {p}")
    if hasattr(model, "config"):
        model.config.attention_probs_dropout_prob = p
    for m in model.modules():
        if isinstance(m, SelfAttention):
            m.p_drop = p


_SAID_MISSING: set = set()  # (model home, side directory) already warned about


def _copy_side_directories(cfg: ModelConfig, home: Optional[str], path: str) -> None:
    """The directories the head says belong to it (HeadConfig.side_directories, next to config.json) go with
    the model; a required one that is missing is a warning."""
    import shutil

    if home is None:
        return
    for name, required in cfg.head.side_directories():
        src, dst = os.path.join(home, name), os.path.join(path, name)
        if not os.path.isdir(src):
            if required and (home, name) not in _SAID_MISSING:  # once: a training run saves many checkpoints
                _SAID_MISSING.add((home, name))
                log.warning("%s: the model's %s directory is not there; %s is written without it", home, name, path)
        elif os.path.abspath(src) != os.path.abspath(dst):
            shutil.copytree(src, dst, dirs_exist_ok=True)
