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
from torch import nn

from ..config import ModelConfig
from ..errors import ConfigError
from ..modeling.attention import extended_mask
from ..modeling.embeddings import embedding
from ..modeling.layout import EncoderOutput
from ..modeling.model import ModelOutput, TaskModel
from .config import CONFIG_NAME, MultimodalConfig

# the heads (modeling.heads.HEADS names, None: none) a multimodal model can carry
MULTIMODAL_HEADS = (None, "mlm", "pretraining", "span", "classification")
CODEBOOK_NAME = "codebook.npz"


class FeatureAdapter(nn.Module):
    """Continuous feature vectors -> embedding-width vectors with their own segment and position tables
    (HF VisualBERT: visual_projection, visual_token_type_embeddings, visual_position_embeddings)."""

    def __init__(self, cfg: ModelConfig, mm: MultimodalConfig):
        super().__init__()
        E = cfg.emb_size
        self.mm = mm
        self.projection = nn.Linear(mm.feature_dim, E)
        self.token_type = embedding(max(cfg.type_vocab_size, mm.feature_type_id + 1), E)
        self.position = embedding(mm.max_features, E)
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
        if cfg.head.task not in MULTIMODAL_HEADS:
            raise ConfigError(f"multimodal task {cfg.head.task!r} not in {MULTIMODAL_HEADS[1:]}")
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
        x = E.combine(input_ids, token_type_ids, position_ids)  # (B, T, E), before the LayerNorm
        v = self.adapter(features.to(x.dtype), boxes, feature_type_ids, feature_position_ids)  # (B, N, E)
        return E.normalize(torch.cat([x, v], dim=1))  # one LayerNorm over the joint sequence

    def encode(self, input_ids, attention_mask=None, token_type_ids=None, position_ids=None, features=None,
               feature_mask=None, boxes=None, feature_type_ids=None, feature_position_ids=None,
               output_hidden_states: bool = False, output_attentions: bool = False,
               head_needs_padding=None) -> EncoderOutput:
        """Text alone or video (visual words are token ids): the backbone as it is, packed where exact.
        With features: the joint (B, T + N) sequence, padded."""
        if features is None:
            return self.backbone.encode(input_ids, attention_mask, token_type_ids, position_ids,
                                        output_hidden_states=output_hidden_states,
                                        output_attentions=output_attentions, head_needs_padding=head_needs_padding)
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
                                                  output_attentions)  # (B, T + N, H)
        return EncoderOutput(h, self.backbone.pool(h[:, 0]), None, hidden, scores,
                             x if output_hidden_states else None)

    # ------------------------------------------------------------------ forward
    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, position_ids=None, features=None,
                feature_mask=None, boxes=None, feature_type_ids=None, feature_position_ids=None, labels=None,
                pair_labels=None, start_positions=None, end_positions=None, answerable_labels=None,
                masked_positions=None, output_hidden_states: bool = False,
                output_attentions: bool = False) -> ModelOutput:
        """Text (B, T) + features (B, N, D) with feature_mask (B, N). last_hidden_state is (B, T + N, H);
        MLM labels / masked_positions (B, T) and span positions index the TEXT part. pair_labels follow
        VisualBERT / BERT NSP: 0 = the text belongs to these features, 1 = it does not. The heads are
        TaskModel's (modeling/heads.py), run on the text part."""
        if input_ids is None:
            raise ConfigError("multimodal models need input_ids (the text part, at least [CLS])")
        T = input_ids.shape[1]
        if labels is not None and labels.dim() == 2 and labels.shape[1] != T:
            labels = labels[:, :T]  # VisualBERT-style labels over text + features: the text part only
        targets = dict(labels=labels, pair_labels=pair_labels, start_positions=start_positions,
                       end_positions=end_positions, answerable_labels=answerable_labels,
                       masked_positions=masked_positions)
        enc = self.encode(input_ids, attention_mask, token_type_ids, position_ids, features, feature_mask, boxes,
                          feature_type_ids, feature_position_ids, output_hidden_states, output_attentions,
                          self._head_needs_padding(targets))
        text = enc if features is None else EncoderOutput(enc.states[:, :T], enc.pooled)  # (B, T, H)
        return ModelOutput.of(enc, self._run_head(text, targets))

    # ------------------------------------------------------------------ saving
    def save_pretrained(self, path: str, tokenizer=None, dtype: str = "float32") -> None:
        """config.json + model.safetensors + tokenizer (as TaskModel) + multimodal.json."""
        super().save_pretrained(path, tokenizer, dtype)
        self.mm.save(os.path.join(path, CONFIG_NAME))
        if self.codebook is not None:
            self.codebook.save(os.path.join(path, CODEBOOK_NAME))


def build_multimodal(cfg: ModelConfig, mm: MultimodalConfig, seed: Optional[int] = None) -> MultimodalModel:
    return MultimodalModel(cfg, mm).init_weights(seed)
