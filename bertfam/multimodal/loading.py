"""Loading multimodal models: bertfam multimodal directories, Hugging Face VisualBERT directories, and a text
checkpoint's backbone copied into a new multimodal model. Built on the checkpoint I/O of bertfam/checkpoint/;
`multimodal/hf.py` converts, `multimodal/model.py` defines the model, this module puts the two together."""
from __future__ import annotations

import os
from typing import Optional

import torch

from ..checkpoint import (CONFIG_FILE, fit_head, from_pretrained, load_config, load_state, read_tokenizer,
                          read_weights, with_task)
from ..config import read_json
from ..errors import CheckpointError
from .codebook import Codebook
from .config import CONFIG_NAME, MultimodalConfig
from .hf import configs_from_hf, is_hf_visualbert, state_from_hf_visualbert
from .model import CODEBOOK_NAME, MultimodalModel


def load_multimodal(path: str, task: Optional[str] = None, *, seed: int = 0, **head_kwargs) -> MultimodalModel:
    """A multimodal model directory written by save_pretrained, or a Hugging Face VisualBERT directory.
    task: as bertfam.from_pretrained (None keeps the saved head; another task gets a fresh head)."""
    mm = MultimodalConfig.in_dir(path) if os.path.isdir(path) else None
    if mm is None:
        if os.path.isdir(path) and is_hf_visualbert(path):
            return load_hf_visualbert(path, task=task, seed=seed, **head_kwargs)
        if not os.path.isdir(path):
            raise CheckpointError(f"{path}: model directory not found")
        raise CheckpointError(f"{path}: no {CONFIG_NAME} (not a multimodal model directory; to start from a text "
                              "checkpoint use init_from_text)")
    cfg, _ = load_config(path)
    saved_task, saved_labels = cfg.head.task, list(cfg.head.labels)
    cfg, head_new = with_task(cfg, task, head_kwargs)
    model = MultimodalModel(cfg, mm).init_weights(seed)
    sd, wpath = read_weights(path)
    refit = fit_head(model, sd, wpath, saved_task, saved_labels, "labels" in head_kwargs, head_new)
    load_state(model, sd, wpath, allow_missing_head=head_new or refit or saved_task != cfg.head.task)
    model.tokenizer = read_tokenizer(path, cfg)
    if os.path.isfile(os.path.join(path, CODEBOOK_NAME)):
        model.codebook = Codebook.load(os.path.join(path, CODEBOOK_NAME))
    return model.eval()


def load_hf_visualbert(path: str, task: Optional[str] = None, seed: int = 0, **head_kwargs) -> MultimodalModel:
    """A MultimodalModel with the weights of a Hugging Face VisualBertModel / VisualBertForPreTraining dir."""
    cpath = os.path.join(path, CONFIG_FILE)
    cfg, mm = configs_from_hf(read_json(cpath), cpath)
    saved_task = cfg.head.task
    cfg, head_new = with_task(cfg, task, head_kwargs)
    model = MultimodalModel(cfg, mm).init_weights(seed)
    sd, wpath = read_weights(path)
    load_state(model, state_from_hf_visualbert(cfg, sd, wpath), wpath,
               allow_missing_head=head_new or saved_task != cfg.head.task)
    model.tokenizer = read_tokenizer(path, cfg)
    return model.eval()


@torch.no_grad()
def init_from_text(model: MultimodalModel, path: str) -> list[str]:
    """Copy a text checkpoint's backbone (and MLM head, where the model has one) into `model`; a larger
    vocabulary (VideoBERT's visual words) keeps its fresh rows for the new ids. Returns the copied keys."""
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
