"""Multimodal members on the one bertfam encoder.

`MultimodalModel` is a `TaskModel` (same backbone, same heads, same saving) plus a `FeatureAdapter`.
The joint input is built the way VisualBERT builds it:

    text:     word(ids) + position(pos) + token_type(types)            (the backbone's own tables)
    features: projection(f) [+ box(b)] + feature_position(fpos) + feature_type(ftype)   (adapter)
    x = dropout(LayerNorm(concat(text, features)))   # the backbone's LayerNorm, once over both parts

then the backbone's encoder and pooler run on x with one mask covering both parts. VideoBERT needs no
adapter: its visual words are ordinary token ids appended to the text vocabulary.
"""
from __future__ import annotations

import os
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..config import ModelConfig
from ..errors import CheckpointError, ConfigError
from ..modeling.attention import extended_mask
from ..modeling.model import IGNORE, ModelOutput, TaskModel
from .config import CONFIG_NAME, MultimodalConfig

TASKS = (None, "mlm", "pretraining", "span", "classification")
CODEBOOK_NAME = "codebook.npz"


class FeatureAdapter(nn.Module):
    """Continuous feature vectors -> embedding-width vectors with their own segment and position tables
    (HF VisualBERT: visual_projection, visual_token_type_embeddings, visual_position_embeddings)."""

    def __init__(self, cfg: ModelConfig, mm: MultimodalConfig):
        super().__init__()
        E = cfg.emb_size
        self.mm = mm
        self.projection = nn.Linear(mm.feature_dim, E)
        self.token_type = nn.Embedding(max(cfg.type_vocab_size, mm.feature_type_id + 1), E)
        self.position = nn.Embedding(mm.max_features, E)
        self.box = nn.Linear(mm.box_dim, E) if mm.box_dim else None

    def forward(self, features: torch.Tensor, boxes: Optional[torch.Tensor] = None,
                type_ids: Optional[torch.Tensor] = None, position_ids: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, N, _ = features.shape
        if N > self.position.num_embeddings and position_ids is None and self.mm.feature_positions == "sequential":
            raise ConfigError(f"{N} feature vectors but the feature position table holds "
                              f"{self.position.num_embeddings}")
        x = self.projection(features)  # (B, N, E)
        if self.box is not None:
            if boxes is None:
                raise ConfigError("this model was built with box_dim > 0: give boxes with the features")
            x = x + self.box(boxes.to(x.dtype))
        if position_ids is None:
            pos = torch.arange(N, device=x.device) if self.mm.feature_positions == "sequential" else \
                torch.zeros(N, dtype=torch.long, device=x.device)
            position_ids = pos.unsqueeze(0).expand(B, N)
        if type_ids is None:
            type_ids = torch.full((B, N), self.mm.feature_type_id, dtype=torch.long, device=x.device)
        return x + self.position(position_ids) + self.token_type(type_ids)  # (B, N, E)

    @torch.no_grad()
    def copy_text_tables(self, embeddings: nn.Module) -> None:
        """VisualBERT's special_visual_initialize: start the feature segment/position tables as copies
        of the text ones (the encoder already knows what those vectors mean)."""
        for ours, text in ((self.token_type, embeddings.token_type), (self.position, embeddings.position)):
            if text is not None:
                n = min(ours.num_embeddings, text.num_embeddings)
                ours.weight[:n].copy_(text.weight[:n])


class MultimodalModel(TaskModel):
    """TaskModel + FeatureAdapter. Heads (cfg.head.task): mlm, pretraining (MLM + sentence-feature match
    through the pair head), span (extractive QA over the text part), classification."""

    def __init__(self, cfg: ModelConfig, mm: MultimodalConfig):
        if cfg.head.task not in TASKS:
            raise ConfigError(f"multimodal task {cfg.head.task!r} not in {TASKS[1:]}")
        super().__init__(cfg)
        self.mm = mm
        self.adapter = FeatureAdapter(cfg, mm) if mm.uses_adapter else None
        self.codebook = None  # video: the visual-word Codebook, saved beside the weights
        if mm.modality == "video" and cfg.vocab_size != mm.text_vocab_size + mm.codebook_size:
            raise ConfigError(f"video: vocab_size {cfg.vocab_size} != text vocabulary {mm.text_vocab_size} + "
                              f"{mm.codebook_size} visual words")

    def init_weights(self, seed: Optional[int] = None) -> "MultimodalModel":
        super().init_weights(seed)
        if self.adapter is not None:
            self.adapter.copy_text_tables(self.backbone.embeddings)
        return self

    # ------------------------------------------------------------------ encoding
    def embed(self, input_ids: torch.Tensor, token_type_ids: Optional[torch.Tensor],
              position_ids: Optional[torch.Tensor], features: torch.Tensor, boxes=None, feature_type_ids=None,
              feature_position_ids=None) -> torch.Tensor:
        """Joint embeddings (B, T + N, H) of the text tokens and the feature vectors."""
        E = self.backbone.embeddings
        if position_ids is None:
            position_ids = E.position_ids_for(input_ids)
        x = E.word(input_ids) + E.position(position_ids)  # (B, T, E)
        if E.token_type is not None:
            x = x + E.token_type(token_type_ids if token_type_ids is not None else torch.zeros_like(input_ids))
        if E.task_type is not None:
            x = x + E.task_type(torch.zeros_like(input_ids))
        v = self.adapter(features.to(x.dtype), boxes, feature_type_ids, feature_position_ids)  # (B, N, E)
        x = E.dropout(E.norm(torch.cat([x, v], dim=1)))  # one LayerNorm over the joint sequence
        return E.project(x) if E.project is not None else x  # (B, T + N, H)

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, features=None,
               feature_mask=None, boxes=None, feature_type_ids=None, feature_position_ids=None,
               output_hidden_states: bool = False, output_attentions: bool = False) -> ModelOutput:
        if features is None:  # video (visual words are token ids) or text alone: the backbone as it is
            return self.backbone(input_ids, attention_mask, token_type_ids, position_ids,
                                 output_hidden_states=output_hidden_states, output_attentions=output_attentions)
        if self.adapter is None:
            raise ConfigError("this model has no feature adapter (video models take visual words as input_ids)")
        if features.dim() != 3 or features.shape[-1] != self.mm.feature_dim:
            raise ConfigError(f"features must be (B, N, {self.mm.feature_dim}), got {tuple(features.shape)}")
        B, T = input_ids.shape
        N = features.shape[1]
        am = attention_mask if attention_mask is not None else torch.ones(B, T, dtype=torch.long,
                                                                          device=input_ids.device)
        fm = feature_mask if feature_mask is not None else torch.ones(B, N, dtype=am.dtype, device=am.device)
        mask = torch.cat([am.to(fm.dtype), fm], dim=1)  # (B, T + N): one mask over both parts
        x = self.embed(input_ids, token_type_ids, position_ids, features, boxes, feature_type_ids,
                       feature_position_ids)
        h, hidden, scores = self.backbone.encoder(x, extended_mask(mask, x.dtype), output_hidden_states,
                                                  output_attentions)[:3]
        pooled = torch.tanh(self.backbone.pooler(h[:, 0]))  # (B, H)
        return ModelOutput(last_hidden_state=h, pooler_output=pooled, hidden_states=hidden, attentions=scores,
                           embedding_output=x if output_hidden_states else None)

    # ------------------------------------------------------------------ forward
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, features=None,
                feature_mask=None, boxes=None, feature_type_ids=None, feature_position_ids=None, labels=None,
                pair_labels=None, start_positions=None, end_positions=None, answerable_labels=None,
                masked_positions=None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> ModelOutput:
        """Text (B, T) + features (B, N, D) with feature_mask (B, N). last_hidden_state is (B, T + N, H);
        MLM labels / masked_positions (B, T) and span positions index the TEXT part. pair_labels follow
        VisualBERT / BERT NSP: 0 = the text belongs to these features, 1 = it does not."""
        if input_ids is None:
            raise ConfigError("multimodal models need input_ids (the text part, at least [CLS])")
        out = self.encode(input_ids, attention_mask, token_type_ids, position_ids, features, feature_mask, boxes,
                          feature_type_ids, feature_position_ids, output_hidden_states, output_attentions)
        T = input_ids.shape[1]
        h_text, pooled = out.last_hidden_state[:, :T], out.pooler_output  # (B, T, H), (B, H)
        if self.mlm is not None:
            self._mm_mlm(out, h_text, pooled, labels, pair_labels, masked_positions)
        elif self.span is not None:
            self._mm_span(out, h_text, pooled, start_positions, end_positions, answerable_labels)
        elif self.classifier is not None:
            out.logits = self.classifier(h_text, pooled)  # (B, C)
            if labels is not None:
                out.loss = F.cross_entropy(out.logits, labels)
        return out

    def _mm_mlm(self, out, h, pooled, labels, pair_labels, masked_positions) -> None:
        if labels is not None and labels.shape[1] != h.shape[1]:
            labels = labels[:, :h.shape[1]]  # VisualBERT-style labels over text + features: text part only
        if masked_positions is not None:
            out.logits = self.mlm(h[masked_positions])  # (N_masked, V)
            targets = labels[masked_positions] if labels is not None else None
        else:
            out.logits = self.mlm(h)  # (B, T, V)
            targets = labels
        losses = []
        if targets is not None and targets.numel() and bool(targets.ne(IGNORE).any()):
            losses.append(F.cross_entropy(out.logits.reshape(-1, out.logits.shape[-1]), targets.reshape(-1),
                                          ignore_index=IGNORE))
        if self.pair is not None:
            out.pair_logits = self.pair(pooled)  # (B, 2)
            if pair_labels is not None:
                losses.append(F.cross_entropy(out.pair_logits, pair_labels))
        if losses:
            out.loss = sum(losses)
        elif labels is not None:  # nothing to predict in this batch: a zero loss that still has a graph
            out.loss = out.logits.sum() * 0.0

    def _mm_span(self, out, h, pooled, start_positions, end_positions, answerable_labels) -> None:
        start, end, ans = self.span(h, pooled)  # (B, T) each, (B, 2) or None
        out.start_logits, out.end_logits, out.answerable_logits = start, end, ans
        out.logits = torch.stack([start, end], dim=-1)
        if start_positions is None or end_positions is None:
            return
        T = start.shape[1]  # positions outside the text window are ignored (as BertForQuestionAnswering)
        loss = (F.cross_entropy(start, start_positions.clamp(0, T), ignore_index=T)
                + F.cross_entropy(end, end_positions.clamp(0, T), ignore_index=T)) / 2
        if ans is not None:
            if answerable_labels is None:
                answerable_labels = (start_positions > 0).long()
            loss = loss + F.cross_entropy(ans, answerable_labels)
        out.loss = loss

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, path: str, tokenizer=None) -> None:
        """config.json + model.safetensors + tokenizer (as TaskModel) + multimodal.json."""
        super().save_pretrained(path, tokenizer)
        self.mm.save(os.path.join(path, CONFIG_NAME))
        if self.codebook is not None:
            self.codebook.save(os.path.join(path, CODEBOOK_NAME))


def build_multimodal(cfg: ModelConfig, mm: MultimodalConfig, seed: Optional[int] = None) -> MultimodalModel:
    return MultimodalModel(cfg, mm).init_weights(seed)


def load_multimodal(path: str, task: Optional[str] = None, *, seed: int = 0, **head_kwargs) -> MultimodalModel:
    """A multimodal model directory written by save_pretrained, or a Hugging Face VisualBERT directory.
    task: as bertfam.from_pretrained (None keeps the saved head; another task gets a fresh head)."""
    from ..convert.hf import read_weights
    from ..loading import _load_state, _maybe_tokenizer, _with_task, load_config

    mm = MultimodalConfig.in_dir(path) if os.path.isdir(path) else None
    if mm is None:
        from .hf import is_hf_visualbert, load_hf_visualbert

        if os.path.isdir(path) and is_hf_visualbert(path):
            return load_hf_visualbert(path, task=task, seed=seed, **head_kwargs)
        if not os.path.isdir(path):
            raise CheckpointError(f"{path}: model directory not found")
        raise CheckpointError(f"{path}: no {CONFIG_NAME} (not a multimodal model directory; to start from a text "
                              "checkpoint use init_from_text)")
    cfg, _ = load_config(path)
    saved_task = cfg.head.task
    cfg, head_new = _with_task(cfg, task, head_kwargs)
    model = MultimodalModel(cfg, mm).init_weights(seed)
    sd, wpath = read_weights(path)
    _load_state(model, sd, wpath, allow_missing_head=head_new or saved_task != cfg.head.task)
    model.tokenizer = _maybe_tokenizer(path, cfg)
    if os.path.isfile(os.path.join(path, CODEBOOK_NAME)):
        from .codebook import Codebook

        model.codebook = Codebook.load(os.path.join(path, CODEBOOK_NAME))
    return model.eval()


@torch.no_grad()
def init_from_text(model: MultimodalModel, path: str) -> list[str]:
    """Copy a text checkpoint's backbone (and MLM head, where the model has one) into `model`; a larger
    vocabulary (VideoBERT's visual words) keeps its fresh rows for the new ids. Returns the copied keys."""
    from ..loading import from_pretrained

    src = from_pretrained(path, load_tokenizer=False)
    own = model.state_dict()
    copied = []
    for k, v in src.state_dict().items():
        if k not in own:
            continue
        t = own[k]
        if t.shape == v.shape:
            t.copy_(v)
        elif t.dim() == v.dim() and t.shape[1:] == v.shape[1:] and t.shape[0] > v.shape[0]:
            t[: v.shape[0]].copy_(v)  # word embeddings / MLM bias: the text rows come first
        else:
            raise CheckpointError(f"{path}: weight {k} has shape {tuple(v.shape)}, the model needs {tuple(t.shape)}")
        copied.append(k)
    if model.adapter is not None:
        model.adapter.copy_text_tables(model.backbone.embeddings)
    return copied
