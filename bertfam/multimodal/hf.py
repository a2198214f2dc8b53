"""Hugging Face VisualBERT <-> bertfam multimodal models.

VisualBERT's encoder, pooler and pre-training heads carry BERT's parameter names under the prefix
`visual_bert.`, so the BERT rows of `convert.hf.key_table` map them; the visual embeddings
(`visual_projection`, `visual_token_type_embeddings`, `visual_position_embeddings`) map to the adapter.
Conversion only: the model is built and loaded in `multimodal/loading.py` (`load_multimodal`).
"""
from __future__ import annotations

import json
import logging
import os
from typing import Optional

import torch

from ..config import read_json
from ..convert.hf import config_from_hf, config_to_hf, key_table, normalize_hf_keys
from ..errors import CheckpointError, ConfigError
from .config import MultimodalConfig

log = logging.getLogger("bertfam")
_ARCH_TASK = {"VisualBertModel": None, "VisualBertForPreTraining": "pretraining"}
_ADAPTER = [("adapter.projection.weight", "embeddings.visual_projection.weight"),
            ("adapter.projection.bias", "embeddings.visual_projection.bias"),
            ("adapter.token_type.weight", "embeddings.visual_token_type_embeddings.weight"),
            ("adapter.position.weight", "embeddings.visual_position_embeddings.weight")]


def is_hf_visualbert(path: str) -> bool:
    p = os.path.join(path, "config.json")
    return os.path.isfile(p) and read_json(p).get("model_type") == "visual_bert"


def configs_from_hf(d: dict, source: str, task: Optional[str] = None):
    """(ModelConfig, MultimodalConfig) of a VisualBertConfig dict."""
    if d.get("bypass_transformer"):
        raise ConfigError(f"{source}: bypass_transformer=True (text-only encoder + one extra layer) is not supported")
    arch = (d.get("architectures") or ["VisualBertModel"])[0]
    if task is None:
        if arch not in _ARCH_TASK:
            log.warning("%s: %s head is not supported; loading the VisualBERT backbone only", source, arch)
        task = _ARCH_TASK.get(arch)
    bert = dict(d, model_type="bert", architectures=["BertModel"], position_embedding_type="absolute")
    cfg = config_from_hf(bert, source, task=task).replace(family="visualbert")
    cfg.head.answerability = task == "span" and cfg.head.answerability
    mm = MultimodalConfig(modality="image", feature_dim=int(d.get("visual_embedding_dim", 512)),
                          feature_positions="zero", feature_type_id=1,
                          max_features=int(d.get("max_position_embeddings", 512)))
    return cfg, mm


def _visualbert_key_table(cfg, base: str) -> list[tuple[str, list[str]]]:
    return key_table(cfg, base) + [(ours, [base + theirs]) for ours, theirs in _ADAPTER]


def state_from_hf_visualbert(cfg, sd: dict, source: str) -> dict:
    """Hugging Face VisualBERT weights under bertfam names (those of the key table the checkpoint holds; what
    it lacks, a new head, is the loader's to initialise)."""
    sd = normalize_hf_keys(sd)
    base = "visual_bert." if any(k.startswith("visual_bert.") for k in sd) else ""
    if not any(k.startswith(base + "embeddings.visual_projection") for k in sd):
        raise CheckpointError(f"{source}: no {base}embeddings.visual_projection weights (not a VisualBERT checkpoint)")
    ours = {}
    for our_key, hf_keys in _visualbert_key_table(cfg, base):
        if all(k in sd for k in hf_keys):
            ts = [sd[k] for k in hf_keys]
            ours[our_key] = ts[0] if len(ts) == 1 else torch.cat(ts, 0)
    return ours


def export_hf_visualbert(model, out_dir: str) -> None:
    """Write a directory transformers loads as VisualBertModel (no head) or VisualBertForPreTraining."""
    from safetensors.torch import save_file

    from ..utils import atomic_write, atomic_write_text

    cfg, mm = model.config, model.mm
    plain_image = mm.modality == "image" and not mm.box_dim and mm.feature_positions == "zero"
    if not plain_image or cfg.head.task not in _ARCH_TASK.values():
        raise ConfigError("VisualBERT export needs an image model without boxes, zero feature positions and no head "
                          "or the pretraining head")
    d = config_to_hf(cfg.replace(family="bert"))
    arch = "VisualBertForPreTraining" if cfg.head.task == "pretraining" else "VisualBertModel"
    d.update(model_type="visual_bert", architectures=[arch], visual_embedding_dim=mm.feature_dim,
             bypass_transformer=False, special_visual_initialize=False)
    base = "visual_bert." if cfg.head.task else ""
    sd = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    out = {}
    for our_key, hf_keys in _visualbert_key_table(cfg, base):
        if our_key in sd:
            for k, part in zip(hf_keys, sd[our_key].chunk(len(hf_keys), 0)):
                out[k] = part.contiguous()
    if cfg.head.task == "pretraining":
        out["cls.predictions.decoder.weight"] = sd["backbone.embeddings.word.weight"].clone()
        out["cls.predictions.decoder.bias"] = sd["mlm.bias"].clone()
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "model.safetensors"), lambda tmp: save_file(out, tmp, metadata={"format": "pt"}))
    atomic_write_text(os.path.join(out_dir, "config.json"), json.dumps(d, indent=2) + "\n")
    if model.tokenizer is not None:
        model.tokenizer.save_pretrained(out_dir)
