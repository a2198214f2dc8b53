"""Task heads: logits and, given labels, the loss, from an `EncoderOutput` in either layout.

Two levels. The weights are small nn.Modules (`MLMPredictor`, `PairClassifier`, `SequenceClassifier`,
`TokenClassifier`, `SpanClassifier`) that the model registers under the checkpoint's names (`mlm.*`,
`pair.*`, `classifier.*`, `token.*`, `span.*`). A `Head` (one class per task, `HEADS`) holds those modules
in `parts` and does the rest: which states they read, the loss, and whether a batch's targets need the
padded layout. TaskModel and MultimodalModel both run their head this way.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from .activations import ACT
from .layout import EncoderOutput

IGNORE = -100


# ---------------------------------------------------------------- weights
class MLMPredictor(nn.Module):
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
        return self.decode(self.norm(self.act(self.dense(hidden))))  # (..., E) -> (..., V)

    def decode(self, h: torch.Tensor) -> torch.Tensor:
        """The decoder tied to the word embeddings, + bias: (..., E) -> (..., V). int8.Int8MLMPredictor runs it
        on int8 rows."""
        return F.linear(h, self.word[0].weight, self.bias)


class PairClassifier(nn.Module):
    """NSP / SOP: 2-way classifier on the pooled [CLS]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.classifier = nn.Linear(cfg.hidden_size, 2)

    def forward(self, pooled: torch.Tensor) -> torch.Tensor:
        return self.classifier(pooled)  # (B, 2)


def _dropout(cfg: ModelConfig) -> nn.Dropout:
    return nn.Dropout(cfg.head.classifier_dropout if cfg.head.classifier_dropout is not None
                      else cfg.hidden_dropout_prob)


class SequenceClassifier(nn.Module):
    """pooling="pooler": dropout + linear on the pooler output (BERT, ALBERT, ERNIE).
    pooling="cls_dense": dense + tanh + linear on the [CLS] hidden state (RoBERTa).
    pooling="mean": dropout + linear on the mean of the real tokens' states: an encoder trained for
    mean-pooled sentence embeddings (e5) carries its signal there, not in [CLS] or an untrained pooler."""

    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        self.pooling = cfg.head.classifier_pooling
        self.dropout = _dropout(cfg)
        self.dense = nn.Linear(cfg.hidden_size, cfg.hidden_size) if self.pooling == "cls_dense" else None
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)

    def forward(self, first: torch.Tensor, pooled: torch.Tensor, mean: Optional[torch.Tensor] = None) -> torch.Tensor:
        """first: (B, H) [CLS] states; pooled: (B, H) pooler output; mean: (B, H) token mean ("mean" pooling)."""
        if self.pooling == "mean":
            return self.classifier(self.dropout(mean))
        x = torch.tanh(self.dense(self.dropout(first))) if self.dense is not None else pooled
        return self.classifier(self.dropout(x))  # (B, num_labels)


class TokenClassifier(nn.Module):
    def __init__(self, cfg: ModelConfig, num_labels: int):
        super().__init__()
        self.dropout = _dropout(cfg)
        self.classifier = nn.Linear(cfg.hidden_size, num_labels)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.dropout(hidden))  # (..., num_labels)


class SpanClassifier(nn.Module):
    """Start/end logits per token, plus an optional answerable/unanswerable classifier on the pooled [CLS]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.qa = nn.Linear(cfg.hidden_size, 2)
        self.answerable = nn.Linear(cfg.hidden_size, 2) if cfg.head.answerability else None

    def forward(self, hidden: torch.Tensor, pooled: torch.Tensor):
        start, end = self.qa(hidden).unbind(-1)  # (...) each
        ans = self.answerable(pooled) if self.answerable is not None else None
        return start, end, ans  # ans: (B, 2), index 1 = answerable


# ---------------------------------------------------------------- heads
class Head:
    """One task's logic over its weight modules (`parts`, registered on the model, not here).

    `forward(enc, **batch)` returns the ModelOutput fields it fills (logits ..., and `loss` when the batch
    has labels); `needs_padding(pad, **batch)` says whether the batch's targets sit on padding, where the
    packed layout has no states, so the model must run it padded. Unused batch keys are ignored."""

    task: str = ""

    def __init__(self) -> None:
        self.parts: dict[str, nn.Module] = {}

    def needs_padding(self, pad: torch.Tensor, **batch) -> bool:
        """pad: (B, T) bool, True at padding positions."""
        return False

    def forward(self, enc: EncoderOutput, **batch) -> dict:
        raise NotImplementedError

    def __call__(self, enc: EncoderOutput, **batch) -> dict:
        return self.forward(enc, **batch)


def _labels_on_padding(labels: Optional[torch.Tensor], pad: torch.Tensor) -> bool:
    return labels is not None and labels.dim() == 2 and bool((labels[pad] != IGNORE).any())


def _total(losses: list) -> Optional[torch.Tensor]:
    if not losses:
        return None
    total = losses[0]
    for x in losses[1:]:
        total = total + x
    return total


class MLMHead(Head):
    """Masked LM. labels (B, T) with -100 where ignored; masked_positions (B, T) bool: logits only there
    ((M, V), faster), else (B, T, V). A batch with labels but nothing to predict gets a zero loss."""

    task = "mlm"

    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding):
        super().__init__()
        self.mlm = self.parts["mlm"] = MLMPredictor(cfg, word_embeddings)
        self.pair: Optional[PairClassifier] = None

    def needs_padding(self, pad, labels=None, masked_positions=None, **_) -> bool:
        return _labels_on_padding(labels, pad) or (masked_positions is not None and bool(masked_positions[pad].any()))

    def forward(self, enc, labels=None, masked_positions=None, pair_labels=None, **_) -> dict:
        if masked_positions is not None:
            logits = out_logits = self.mlm(enc.at(masked_positions))  # (M, V)
            targets = labels[masked_positions] if labels is not None else None  # (M,)
        else:
            logits = self.mlm(enc.tokens())  # (N, V) or (B, T, V)
            out_logits = enc.repad(logits)  # (B, T, V)
            targets = enc.align(labels) if labels is not None else None
        out, losses = {"logits": out_logits}, []
        if targets is not None and targets.numel() and bool(targets.ne(IGNORE).any()):
            losses.append(F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                          ignore_index=IGNORE))
        if self.pair is not None:
            out["pair_logits"] = self.pair(enc.pooled)  # (B, 2)
            if pair_labels is not None:
                losses.append(F.cross_entropy(out["pair_logits"], pair_labels))
        out["loss"] = _total(losses)
        if out["loss"] is None and labels is not None:  # nothing to predict: a zero loss that has a graph
            out["loss"] = logits.sum() * 0.0
        return out


class PretrainingHead(MLMHead):
    """MLM + the NSP / SOP pair classifier (pair_labels (B,)) when cfg.head.pair_objective is set."""

    task = "pretraining"

    def __init__(self, cfg: ModelConfig, word_embeddings: nn.Embedding):
        super().__init__(cfg, word_embeddings)
        if cfg.head.pair_objective:
            self.pair = self.parts["pair"] = PairClassifier(cfg)


class ClassificationHead(Head):
    """labels (B,) class ids; logits (B, C)."""

    task = "classification"

    def __init__(self, cfg: ModelConfig, num_labels: Optional[int] = None):
        super().__init__()
        n = num_labels if num_labels is not None else cfg.head.num_labels
        self.classifier = self.parts["classifier"] = SequenceClassifier(cfg, n)

    def forward(self, enc, labels=None, **_) -> dict:
        mean = enc.mean() if self.classifier.pooling == "mean" else None
        logits = self.classifier(enc.first(), enc.pooled, mean)  # (B, C)
        return {"logits": logits, "loss": None if labels is None else self.loss(logits, labels)}

    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, labels)


class RegressionHead(ClassificationHead):
    """labels (B,) float targets; logits (B, 1); mean squared error."""

    task = "regression"

    def __init__(self, cfg: ModelConfig):
        super().__init__(cfg, 1)

    def loss(self, logits, labels):
        return F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))


class TokenHead(Head):
    """labels (B, T) tag ids, -100 ignored; logits (B, T, C), zeros at padding when packed."""

    task = "token"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.token = self.parts["token"] = TokenClassifier(cfg, cfg.head.num_labels)

    def needs_padding(self, pad, labels=None, **_) -> bool:
        return _labels_on_padding(labels, pad)

    def forward(self, enc, labels=None, **_) -> dict:
        logits = self.token(enc.tokens())  # (N, C) or (B, T, C)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), enc.align(labels).reshape(-1),
                                   ignore_index=IGNORE)
        return {"logits": enc.repad(logits), "loss": loss}


class SpanHead(Head):
    """Extractive QA: start/end logits (B, T), logits (B, T, 2), answerable_logits (B, 2) with
    answerability. Loss: (start CE + end CE) / 2 (+ answerability CE); positions outside the window are
    ignored, as in BertForQuestionAnswering."""

    task = "span"

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.span = self.parts["span"] = SpanClassifier(cfg)

    def needs_padding(self, pad, start_positions=None, **_) -> bool:
        return start_positions is not None  # the softmax runs over every position, padding included

    def forward(self, enc, start_positions=None, end_positions=None, answerable_labels=None, **_) -> dict:
        start, end, ans = self.span(enc.tokens(), enc.pooled)
        start, end = enc.repad(start), enc.repad(end)  # (B, T) each
        out = {"start_logits": start, "end_logits": end, "answerable_logits": ans,
               "logits": torch.stack([start, end], dim=-1)}  # (B, T, 2)
        if start_positions is not None and end_positions is not None:
            out["loss"] = self.loss(start, end, ans, start_positions, end_positions, answerable_labels)
        return out

    @staticmethod
    def loss(start, end, ans, start_positions, end_positions, answerable_labels=None) -> torch.Tensor:
        T = start.shape[1]
        loss = (F.cross_entropy(start, start_positions.clamp(0, T), ignore_index=T)
                + F.cross_entropy(end, end_positions.clamp(0, T), ignore_index=T)) / 2
        if ans is not None:
            if answerable_labels is None:  # windows whose target is [CLS] (index 0) hold no answer
                answerable_labels = (start_positions > 0).long()
            loss = loss + F.cross_entropy(ans, answerable_labels)
        return loss


HEADS: dict[str, type] = {h.task: h for h in (MLMHead, PretrainingHead, ClassificationHead, RegressionHead,
                                              TokenHead, SpanHead)}
HEAD_PARTS = ("mlm", "pair", "classifier", "token", "span")  # attribute (and checkpoint) names, in this order


def build_head(cfg: ModelConfig, word_embeddings: nn.Embedding) -> Optional[Head]:
    """The head of cfg.head.task (None: a bare encoder)."""
    task = cfg.head.task
    if task is None:
        return None
    if task not in HEADS:
        raise ValueError(f"unknown task {task!r}; known: {tuple(HEADS)}")
    cls = HEADS[task]
    return cls(cfg, word_embeddings) if issubclass(cls, MLMHead) else cls(cfg)
