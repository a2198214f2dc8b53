"""`from_pretrained`: bertfam directories and Hugging Face directories, same entry point (a text model built
from the checkpoint I/O of `checkpoint/io.py`)."""
from __future__ import annotations

import logging
import os
from typing import Optional

import torch

from ..config import STORAGE_ONLY_METHODS
from .io import fit_head, load_config, load_state, read_tokenizer, read_weights, with_task
from ..convert.hf import state_from_hf
from ..modeling.int8 import dequantize_int8
from ..modeling.int8_static import quantize_as_recorded
from ..modeling.model import TaskModel

log = logging.getLogger("bertfam")


def from_pretrained(path: str, task: Optional[str] = None, *, load_tokenizer: bool = True,
                    seed: int = 0, ignore_mismatched_sizes: bool = False, dequantize: bool = False,
                    **head_kwargs) -> TaskModel:
    """Load a bertfam or Hugging Face checkpoint directory.

    task: None keeps the checkpoint's own head (if any); "encoder" drops it (the bare backbone); a
    different task ("classification", "token", "span", "mlm", "pretraining", "regression") adds a freshly
    initialised head (num_labels=..., labels=[...] in head_kwargs). Any other task raises ConfigError
    naming the valid ones. The model is returned in eval mode.

    Re-heading: labels=[...] that differ from a fine-tuned checkpoint's own (other names, count or order)
    give a new head for them; the saved head is not loaded (its rows meant other labels), the backbone
    is. ignore_mismatched_sizes=True does the same for any head weight whose shape differs from the
    config's (as transformers' option); without it such a weight is a CheckpointError.

    An int8 checkpoint (config.json's `quantization`, written by `bertfam quantize`) loads straight into the
    int8 modules (modeling/int8.py; a static-int8 one: modeling/int8_static.py, its calibrated activation
    scales included): inference only, CPU only. Its tensors are checked against the record:
    a missing int8 tensor, one of another dtype or shape, or float weights under an int8 config.json are a
    CheckpointError naming the file and the tensor. dequantize=True turns such a model back into float
    modules (the int8 rounding stays) so that it can be trained: the training commands pass it. A
    weight-int8 checkpoint (`bertfam quantize --weights-only`) is int8 on disk only: it always loads as float
    modules.
    """
    cfg, native = load_config(path)
    saved_task, saved_labels = cfg.head.task, list(cfg.head.labels)
    cfg, head_new = with_task(cfg, task, head_kwargs)
    # Built on the meta device: the loaded tensors become the parameters (no random init, no second copy
    # of the weights), and only what the checkpoint lacks (a new head) is allocated and initialised.
    with torch.device("meta"):
        model = TaskModel(cfg)
        if cfg.quantization is not None:  # an int8 checkpoint: int8 modules first, so its int8 tensors land in them
            quantize_as_recorded(model, cfg.quantization)
    sd, wpath = read_weights(path)
    if not native:
        sd, _ = state_from_hf(cfg, sd, wpath, consume=True)
    refit = fit_head(model, sd, wpath, saved_task, saved_labels, "labels" in head_kwargs and native,
                     head_new or ignore_mismatched_sizes)
    load_state(model, sd, wpath, allow_missing_head=head_new or refit or ignore_mismatched_sizes
               or saved_task != cfg.head.task or not native, seed=seed)
    if load_tokenizer:
        model.tokenizer = read_tokenizer(path, cfg)
    if cfg.quantization is not None and (dequantize or cfg.quantization.method in STORAGE_ONLY_METHODS):
        log.info("%s: int8 checkpoint (%s, %s) turned back into float weights%s", path, cfg.quantization.method,
                 "+".join(cfg.quantization.modules), " for training" if dequantize else "")
        dequantize_int8(model)
    model.name_or_path = os.path.abspath(path)  # where it came from: files that travel with it (an MRC verifier) are found there
    return model.eval()
