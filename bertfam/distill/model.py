"""Student + frozen teacher + projection in one module that the shared Trainer trains like any model.

stage "general": Transformer-layer distillation on corpus text (embeddings, hidden states, attention
scores of the backbones; heads unused). stage "intermediate": the same on task data with a fine-tuned
teacher. stage "prediction": soft cross-entropy on the logits only (TinyBERT's second task stage).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from ..errors import ConfigError
from ..modeling.model import ModelOutput, TaskModel
from ..modeling.optimize import optimize_for_inference
from . import losses as L

STAGES = ("general", "intermediate", "prediction")
PROJ_PREFIX = "distill.proj."  # projection weights inside a checkpoint's model.safetensors


@dataclass
class DistillConfig:
    stage: str = "intermediate"
    layer_map: Optional[list] = None  # teacher layer (1..N) for student layer m = 1..M; None: m * N / M
    temperature: float = 1.0
    emb_weight: float = 1.0
    hidden_weight: float = 1.0
    attn_weight: float = 1.0
    pred_weight: float = 1.0
    hard_label_weight: float = 0.0  # prediction stage: + w * CE with the gold labels (0 = pure TinyBERT)
    projection: str = "auto"  # auto: a learnable W when widths differ | none: widths must match
    head_mismatch: str = "error"  # attention heads differ: error | mean (compare head-averaged scores)

    def validate(self) -> None:
        if self.stage not in STAGES:
            raise ConfigError(f"distillation stage {self.stage!r} not in {STAGES}")
        if self.projection not in ("auto", "none"):
            raise ConfigError(f"projection {self.projection!r} not in auto, none")
        if self.head_mismatch not in ("error", "mean"):
            raise ConfigError(f"head_mismatch {self.head_mismatch!r} not in error, mean")
        if not self.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {self.temperature}")


class DistillModel(nn.Module):
    def __init__(self, student: TaskModel, teacher: TaskModel, cfg: Optional[DistillConfig] = None):
        super().__init__()
        cfg = cfg or DistillConfig()
        cfg.validate()
        self.cfg, self.student, self.teacher = cfg, student, teacher
        S, T = student.config, teacher.config
        self.layer_map = self._layer_map(S.num_hidden_layers, T.num_hidden_layers)
        self.proj = None
        if cfg.stage != "prediction" and S.hidden_size != T.hidden_size:
            if cfg.projection == "none":
                rel = "wider" if S.hidden_size > T.hidden_size else "narrower"
                raise ConfigError(f"the student (hidden {S.hidden_size}) is {rel} than the teacher (hidden "
                                  f"{T.hidden_size}) and no projection was allowed: use projection 'auto'")
            self.proj = nn.Linear(S.hidden_size, T.hidden_size)  # W_h: student width -> teacher width
            nn.init.normal_(self.proj.weight, 0.0, S.initializer_range)
            nn.init.zeros_(self.proj.bias)
        if cfg.stage != "prediction" and cfg.attn_weight and S.num_attention_heads != T.num_attention_heads \
                and cfg.head_mismatch == "error":
            raise ConfigError(f"student has {S.num_attention_heads} attention heads, teacher "
                              f"{T.num_attention_heads}: use head_mismatch 'mean' or attn_weight 0")
        if cfg.stage == "prediction":
            self._check_heads(S, T)
        teacher.requires_grad_(False)
        optimize_for_inference(teacher).eval()  # it only predicts: no-grad forwards reuse buffers

    def _layer_map(self, M: int, N: int) -> list:
        lm = list(self.cfg.layer_map) if self.cfg.layer_map else L.uniform_layer_map(M, N)
        if len(lm) != M:
            raise ConfigError(f"layer map {lm} has {len(lm)} entries but the student has {M} layers")
        bad = [g for g in lm if not (isinstance(g, int) and 1 <= g <= N)]
        if bad:
            raise ConfigError(f"layer map entry {bad[0]!r} outside the teacher's layers 1..{N}")
        return lm

    @staticmethod
    def _check_heads(S, T) -> None:
        if S.head.task is None or S.head.task != T.head.task:
            raise ConfigError(f"prediction-layer distillation needs the same head on both: student "
                              f"{S.head.task!r}, teacher {T.head.task!r}")
        if S.head.task != "regression" and S.head.num_labels != T.head.num_labels:
            raise ConfigError(f"student has {S.head.num_labels} labels, teacher {T.head.num_labels}")

    # ---------------------------------------------------------------- what the Trainer sees
    @property
    def config(self):
        return self.student.config

    @property
    def tokenizer(self):
        return self.student.tokenizer

    @property
    def backbone(self):  # layer count for layer-wise lr decay
        return self.student.backbone

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # the teacher never drops out
        return self

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, labels=None,
                **_ignored) -> ModelOutput:
        """Extra batch keys (MLM labels, masked_positions ...) are ignored. Returns the student's logits and
        the total loss; `out.parts` holds each loss term (detached floats) for logging."""
        inter = self.cfg.stage != "prediction"
        kw = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                  position_ids=position_ids, output_hidden_states=inter, output_attentions=inter)
        general = self.cfg.stage == "general"  # heads are not used: run the backbones only
        with torch.no_grad():
            t = self.teacher.backbone(**kw) if general else self.teacher(**kw)
        hard = labels if self.cfg.stage == "prediction" and self.cfg.hard_label_weight else None
        s = self.student.backbone(**kw) if general else self.student(**kw, labels=hard)
        parts = self.intermediate_losses(s, t, attention_mask) if inter else self.prediction_losses(s, t,
                                                                                                   attention_mask)
        total = sum(parts.values())
        out = ModelOutput(loss=total, logits=s.logits)
        out.parts = {k: float(v.detach()) for k, v in parts.items()}
        return out

    # ---------------------------------------------------------------- losses
    def _project(self, h: torch.Tensor) -> torch.Tensor:
        return self.proj(h) if self.proj is not None else h  # (B, T, H_teacher)

    def intermediate_losses(self, s: ModelOutput, t: ModelOutput, attention_mask) -> dict:
        c = self.cfg
        B, T = s.hidden_states[0].shape[:2]
        tok = L.token_mask(attention_mask, B, T, s.hidden_states[0].device)
        valid = L.pair_mask(attention_mask, B, T, s.hidden_states[0].device)
        out = {}
        if c.emb_weight:
            out["emb"] = c.emb_weight * L.hidden_mse(self._project(s.hidden_states[0]), t.hidden_states[0], tok)
        if c.hidden_weight:
            out["hidden"] = c.hidden_weight * sum(
                L.hidden_mse(self._project(s.hidden_states[m]), t.hidden_states[g], tok)
                for m, g in enumerate(self.layer_map, 1))
        if c.attn_weight:
            out["attn"] = c.attn_weight * sum(
                L.attention_mse(*self._heads(s.attentions[m - 1], t.attentions[g - 1]), valid)
                for m, g in enumerate(self.layer_map, 1))
        return out

    def _heads(self, sa: torch.Tensor, ta: torch.Tensor) -> tuple:
        if sa.shape[1] != ta.shape[1]:  # head_mismatch "mean": (B, 1, T, T) each
            return sa.mean(1, keepdim=True), ta.mean(1, keepdim=True)
        return sa, ta

    def prediction_losses(self, s: ModelOutput, t: ModelOutput, attention_mask) -> dict:
        c = self.cfg
        if self.student.task == "regression":
            pred = torch.nn.functional.mse_loss(s.logits.float(), t.logits.float())
        else:
            rows = None
            if s.logits.dim() == 3:  # token task: real tokens only
                rows = L.token_mask(attention_mask, *s.logits.shape[:2], s.logits.device)
            pred = L.soft_cross_entropy(s.logits, t.logits, c.temperature, rows)
        out = {"pred": c.pred_weight * pred}
        if s.loss is not None:
            out["hard"] = c.hard_label_weight * s.loss
        return out

    # ---------------------------------------------------------------- saving / resuming
    def state_dict(self, *args, **kwargs):
        """The student's weights (plain names) + the projection under `distill.proj.`; never the teacher."""
        sd = self.student.state_dict(*args, **kwargs)
        if self.proj is not None:
            sd.update({PROJ_PREFIX + k: v for k, v in self.proj.state_dict().items()})
        return sd

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        proj = {k[len(PROJ_PREFIX):]: v for k, v in state_dict.items() if k.startswith(PROJ_PREFIX)}
        own = {k: v for k, v in state_dict.items() if not k.startswith(PROJ_PREFIX)}
        if proj and self.proj is not None:
            self.proj.load_state_dict(proj, strict=strict)
        return self.student.load_state_dict(own, strict=strict, assign=assign)

    def save_pretrained(self, path: str, tokenizer=None, dtype: str = "float32") -> None:
        """A checkpoint: the student's directory whose weights file also carries the projection
        (from_pretrained ignores those extra tensors). `student.save_pretrained` writes a clean one."""
        TaskModel.save_pretrained(self, path, tokenizer if tokenizer is not None else self.tokenizer, dtype)

