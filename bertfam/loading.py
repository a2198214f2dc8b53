"""`from_pretrained`: bertfam directories and Hugging Face directories, same entry point."""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

import torch

from .config import ENCODER, LOAD_TASKS, HeadConfig, ModelConfig, read_json
from .errors import CheckpointError, ConfigError, TokenizerError
from .modeling.model import TaskModel

log = logging.getLogger("bertfam")


def is_native(d: dict) -> bool:
    return "bertfam_config_version" in d


def load_config(path: str) -> tuple[ModelConfig, bool]:
    """(config, native?) of a checkpoint directory."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: model directory not found")
    cpath = os.path.join(path, "config.json")
    if not os.path.isfile(cpath):
        raise CheckpointError(f"{path}: no config.json (is this a model directory?)")
    d = read_json(cpath)
    if is_native(d):
        return ModelConfig.from_dict(d, source=cpath), True
    from .convert.hf import config_from_hf

    return config_from_hf(d, source=cpath), False


def _with_task(cfg: ModelConfig, task: Optional[str], head_kwargs: dict) -> tuple[ModelConfig, bool]:
    """Config with the requested head. Returns (config, head_is_new)."""
    if task is not None and task not in LOAD_TASKS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(LOAD_TASKS)}")
    head = cfg.head
    new = False
    if task == ENCODER:
        head = HeadConfig()  # no head: its weights in the checkpoint are simply not loaded
    elif task is not None and task != head.task:
        keep = {"classifier_pooling": head.classifier_pooling} if task in ("classification", "regression") else {}
        if task == "pretraining":
            keep["pair_objective"] = "sop" if cfg.family == "albert" else ("nsp" if cfg.family != "roberta" else None)
        head = HeadConfig(task=task, **keep)
        new = True
    if head_kwargs:
        try:
            head = dataclasses.replace(head, **head_kwargs)
        except TypeError as e:
            raise ConfigError(f"unknown head option: {e}") from None
        if head.labels and head.num_labels != len(head.labels):
            head.num_labels = len(head.labels)
        new = new or any(k in head_kwargs for k in ("num_labels", "labels", "answerability", "pair_objective"))
    return dataclasses.replace(cfg, head=head), new


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
    cfg, head_new = _with_task(cfg, task, head_kwargs)
    relabelled = (native and saved_task == cfg.head.task and bool(saved_labels) and "labels" in head_kwargs
                  and list(cfg.head.labels) != saved_labels)
    # Built on the meta device: the loaded tensors become the parameters (no random init, no second copy
    # of the weights), and only what the checkpoint lacks (a new head) is allocated and initialised.
    with torch.device("meta"):
        model = TaskModel(cfg)
    from .convert.hf import read_weights, state_from_hf

    sd, wpath = read_weights(path)
    if not native:
        sd, _ = state_from_hf(cfg, sd, wpath, consume=True)
    if relabelled:
        dropped = _drop_head(sd)
        log.warning("%s: labels %s replace the checkpoint's %s: its %s head (%d tensors) is not loaded, a new one "
                    "is initialised", path, _short(cfg.head.labels), _short(saved_labels), saved_task, dropped)
    elif ignore_mismatched_sizes or head_new:
        _drop_mismatched_head(model, sd, wpath)
    _load_state(model, sd, wpath, allow_missing_head=head_new or relabelled or ignore_mismatched_sizes
                or saved_task != cfg.head.task or not native, seed=seed)
    if load_tokenizer:
        model.tokenizer = _maybe_tokenizer(path, cfg)
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
    backbone's must match, so those stay and _load_state reports them."""
    own = model.state_dict()
    for k in [k for k in sd if not k.startswith("backbone.") and k in own]:
        if tuple(sd[k].shape) != tuple(own[k].shape):
            log.warning("%s: %s has shape %s, the new head needs %s: initialised anew", source, k,
                        tuple(sd[k].shape), tuple(own[k].shape))
            del sd[k]


def _load_state(model: TaskModel, sd: dict, source: str, allow_missing_head: bool, seed: int = 0) -> None:
    """Load sd into model (consuming sd). A model on the meta device takes the tensors themselves
    (cast to the model's dtype); its parameters missing from sd are then allocated and initialised."""
    own = model.state_dict()
    for k, v in sd.items():
        if k in own and tuple(own[k].shape) != tuple(v.shape):
            if k == "backbone.embeddings.word.weight" and own[k].shape[1:] == v.shape[1:]:
                raise CheckpointError(f"{source}: vocab size mismatch: config.json says vocab_size "
                                      f"{own[k].shape[0]} but the weights hold {v.shape[0]} embeddings")
            raise CheckpointError(f"{source}: weight {k} has shape {tuple(v.shape)} but config.json implies "
                                  f"{tuple(own[k].shape)}")
    missing = [k for k in own if k not in sd]
    backbone_missing = [k for k in missing if k.startswith("backbone.") and not k.startswith("backbone.pooler.")]
    if backbone_missing:
        raise CheckpointError(f"{source}: missing weight {backbone_missing[0]} "
                              f"({len(backbone_missing)} backbone weights missing)")
    if missing:
        if not allow_missing_head:
            raise CheckpointError(f"{source}: missing head weight {missing[0]}")
        log.info("%s: new %s head initialised randomly (%d tensors)", source, model.task, len(missing))
    unexpected = [k for k in sd if k not in own]
    if unexpected:
        log.info("%s: %d weight(s) not used by the %s head, e.g. %s", source, len(unexpected), model.task,
                 unexpected[0])
    meta = any(p.is_meta for p in model.parameters())
    keep = {}
    for k in list(sd):  # pop as we go so a float16 checkpoint is never held twice
        v = sd.pop(k)
        if k in own:
            keep[k] = v.to(own[k].dtype) if meta and v.dtype != own[k].dtype else v
    with torch.no_grad():
        model.load_state_dict(keep, strict=False, assign=meta)
    if meta:
        _materialise(model, seed)


def _materialise(model: TaskModel, seed: int) -> None:
    """Allocate and initialise (as TaskModel.init_weights would) the parameters still on the meta device."""
    torch.manual_seed(seed)
    for m in model.modules():
        own = dict(m.named_parameters(recurse=False))
        if not any(p.is_meta for p in own.values()):
            continue
        loaded = {n: p for n, p in own.items() if not p.is_meta}
        m.to_empty(device="cpu", recurse=False)
        model._init_module(m)
        for n, p in loaded.items():  # a module only partly in the checkpoint keeps what was loaded
            setattr(m, n, p)


def _maybe_tokenizer(path: str, cfg: ModelConfig):
    if not any(os.path.isfile(os.path.join(path, f)) for f in ("tokenizer.json", "vocab.txt")):
        return None
    from .tokenization import Tokenizer

    tok = Tokenizer.from_pretrained(path)
    if tok.vocab_size > cfg.vocab_size:
        raise TokenizerError(f"{path}: tokenizer has {tok.vocab_size} entries but the model's vocab_size is "
                             f"{cfg.vocab_size}")
    return tok
