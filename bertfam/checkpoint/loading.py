"""`from_pretrained`: bertfam directories and Hugging Face directories, same entry point (a text model built
from the checkpoint I/O of `checkpoint/io.py`)."""
from __future__ import annotations

import logging
from typing import Optional

import torch

from .io import load_config, load_state, read_tokenizer, read_weights, with_task
from ..convert.hf import state_from_hf
from ..modeling.model import TaskModel

log = logging.getLogger("bertfam")


def from_pretrained(path: str, task: Optional[str] = None, *, load_tokenizer: bool = True,
                    seed: int = 0, ignore_mismatched_sizes: bool = False, **head_kwargs) -> TaskModel:
    """Load a bertfam or Hugging Face checkpoint directory.

    task: None keeps the checkpoint's own head (if any); "encoder" drops it (the bare backbone); a
    different task ("classification", "token", "span", "mlm", "pretraining", "regression") adds a freshly
    initialised head (num_labels=..., labels=[...] in head_kwargs). Any other task raises ConfigError
    naming the valid ones. The model is returned in eval mode.

    Re-heading: labels=[...] that differ from a fine-tuned checkpoint's own (other names, count or order)
    give a new head for them; the saved head is not loaded (its rows meant other labels), the backbone
    is. ignore_mismatched_sizes=True does the same for any head weight whose shape differs from the
    config's (as transformers' option); without it such a weight is a CheckpointError.
    """
    cfg, native = load_config(path)
    saved_task, saved_labels = cfg.head.task, list(cfg.head.labels)
    cfg, head_new = with_task(cfg, task, head_kwargs)
    relabelled = (native and saved_task == cfg.head.task and bool(saved_labels) and "labels" in head_kwargs
                  and list(cfg.head.labels) != saved_labels)
    # Built on the meta device: the loaded tensors become the parameters (no random init, no second copy
    # of the weights), and only what the checkpoint lacks (a new head) is allocated and initialised.
    with torch.device("meta"):
        model = TaskModel(cfg)
    sd, wpath = read_weights(path)
    if not native:
        sd, _ = state_from_hf(cfg, sd, wpath, consume=True)
    if relabelled:
        dropped = _drop_head(sd)
        log.warning("%s: labels %s replace the checkpoint's %s: its %s head (%d tensors) is not loaded, a new one "
                    "is initialised", path, _short(cfg.head.labels), _short(saved_labels), saved_task, dropped)
    elif ignore_mismatched_sizes or head_new:
        _drop_mismatched_head(model, sd, wpath)
    load_state(model, sd, wpath, allow_missing_head=head_new or relabelled or ignore_mismatched_sizes
               or saved_task != cfg.head.task or not native, seed=seed)
    if load_tokenizer:
        model.tokenizer = read_tokenizer(path, cfg)
    return model.eval()


def _short(labels: list) -> str:
    return "[" + ", ".join(map(str, labels[:5])) + (", ..." if len(labels) > 5 else "") + "]"


def _drop_head(sd: dict) -> int:
    head = [k for k in sd if not k.startswith("backbone.")]
    for k in head:
        del sd[k]
    return len(head)


def _drop_mismatched_head(model: TaskModel, sd: dict, source: str) -> None:
    """Head weights whose shape is not the config's are left out (they are then initialised anew); the
    backbone's must match, so those stay and load_state reports them."""
    own = model.state_dict()
    for k in [k for k in sd if not k.startswith("backbone.") and k in own]:
        if tuple(sd[k].shape) != tuple(own[k].shape):
            log.warning("%s: %s has shape %s, the new head needs %s: initialised anew", source, k,
                        tuple(sd[k].shape), tuple(own[k].shape))
            del sd[k]
