"""Checkpoint I/O: what a model directory holds, read without building a model.

- `read_weights(dir)`: the tensors (model.safetensors, else pytorch_model.bin; `weights_file` names it);
- `load_config(dir)` / `resolve_config(spec)`: the ModelConfig of a directory, a config JSON (bertfam or
  Hugging Face) or a preset name;
- `with_task(cfg, task, head_kwargs)`: that config with the head a caller asks for;
- `load_state(model, sd, ...)`: a state dict into a model (one built on the meta device takes the tensors
  themselves; what the checkpoint lacks is initialised);
- `read_tokenizer(dir, cfg)`: the directory's tokenizer, if it has one.

`bertfam.from_pretrained` (`checkpoint/loading.py`) and the multimodal loaders are built from these;
nothing in this module imports `modeling/`.
"""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional

import torch

from ..config import ENCODER, LOAD_TASKS, TASK_ALIASES, HeadConfig, head_task, ModelConfig, preset, read_json, with_training_info
from ..convert.hf import config_from_hf
from ..errors import CheckpointError, ConfigError, TokenizerError
from ..tokenization import Tokenizer

log = logging.getLogger("bertfam")
CONFIG_FILE = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "vocab.txt")


# ---------------------------------------------------------------------------- weights
def weights_file(path: str) -> Optional[str]:
    """The weights file `read_weights` reads in a checkpoint directory (None when it has none)."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if os.path.isfile(os.path.join(path, name)):
            return os.path.join(path, name)
    return None


def read_weights(path: str) -> tuple[dict, str]:
    """Tensors of a checkpoint directory: model.safetensors, else pytorch_model.bin. Returns (state dict,
    the file read)."""
    st, pt = os.path.join(path, "model.safetensors"), os.path.join(path, "pytorch_model.bin")
    if os.path.isfile(st):
        from safetensors.torch import load_file

        try:
            return load_file(st), st
        except Exception as e:  # safetensors raises SafetensorError / OSError on bad files
            raise CheckpointError(f"{st}: corrupt or unreadable weights ({str(e).splitlines()[0]})") from None
    if os.path.isfile(pt):
        try:
            sd = torch.load(pt, map_location="cpu", weights_only=True)
        except Exception as e:
            raise CheckpointError(f"{pt}: corrupt or unreadable weights ({str(e).splitlines()[0]})") from None
        if not isinstance(sd, dict):
            raise CheckpointError(f"{pt}: expected a state dict")
        return sd, pt
    raise CheckpointError(f"{path}: no model.safetensors or pytorch_model.bin")


# ---------------------------------------------------------------------------- configs
def is_native(d: dict) -> bool:
    """A config.json that bertfam wrote, or a hand-written one in bertfam's field names ("family" where
    Hugging Face has "model_type"); else a Hugging Face one."""
    return "bertfam_config_version" in d or ("family" in d and "model_type" not in d)


def config_from_dict(d: dict, source: str) -> ModelConfig:
    """A bertfam or Hugging Face config.json's mapping as a ModelConfig."""
    return ModelConfig.from_dict(d, source=source) if is_native(d) else config_from_hf(d, source=source)


def load_config(path: str) -> tuple[ModelConfig, bool]:
    """(config, native?) of a checkpoint directory (its training_info.json in config.head.info)."""
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: model directory not found")
    cpath = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(cpath):
        raise CheckpointError(f"{path}: no config.json (is this a model directory?)")
    d = read_json(cpath)
    return with_training_info(config_from_dict(d, cpath), path), is_native(d)


def resolve_config(spec: str, **overrides) -> ModelConfig:
    """A preset name, a model directory or a path to a JSON file (bertfam or Hugging Face config)."""
    if os.path.isdir(spec):
        spec = os.path.join(spec, CONFIG_FILE)
    if spec.endswith(".json") or os.path.isfile(spec):
        cfg = config_from_dict(read_json(spec), spec)
        return cfg.replace(**overrides) if overrides else cfg
    return preset(spec, **overrides)


def with_task(cfg: ModelConfig, task: Optional[str], head_kwargs: dict) -> tuple[ModelConfig, bool]:
    """Config with the requested head (None keeps the saved one, "encoder" drops it, another task gets a new
    one; head_kwargs replace head fields). Returns (config, head_is_new)."""
    task = head_task(task)
    if task is not None and task not in LOAD_TASKS:
        raise ConfigError(f"unknown task {task!r}; valid tasks: {', '.join(LOAD_TASKS)} "
                          f"(or the pipeline names {', '.join(TASK_ALIASES)})")
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
        new = new or any(k in head_kwargs for k in ("num_labels", "labels", "answerability", "pair_objective")) \
            or head_kwargs.get("classifier_pooling", head.classifier_pooling) != cfg.head.classifier_pooling
    return dataclasses.replace(cfg, head=head), new


# ---------------------------------------------------------------------------- state
def fit_head(model, sd: dict, source: str, saved_task: Optional[str], saved_labels: list, relabel: bool,
             drop_mismatched: bool) -> bool:
    """Leave out of `sd` the saved head weights that cannot serve the model's head, which is then initialised
    anew (re-heading); True when any were left out. relabel: the caller asked for labels, and those differ
    from the saved ones (names, count or order) on the same task: the whole saved head goes, its rows meant
    other labels. drop_mismatched: head weights whose shape is not the model's go (a new head, or
    ignore_mismatched_sizes). The backbone's weights always stay: a mismatch there is load_state's error."""
    head = model.config.head
    parts = tuple(f"{name}." for name in (model.head.parts if model.head is not None else {}))
    if relabel and head.task == saved_task and saved_labels and list(head.labels) != list(saved_labels):
        keys = [k for k in sd if k.startswith(parts)]
        log.warning("%s: labels %s replace the checkpoint's %s: its %s head (%d tensors) is not loaded, a new one "
                    "is initialised", source, _short(head.labels), _short(saved_labels), saved_task, len(keys))
    elif drop_mismatched:
        own = model.state_dict()
        keys = [k for k in sd if k.startswith(parts) and k in own and tuple(sd[k].shape) != tuple(own[k].shape)]
        for k in keys:
            log.warning("%s: %s has shape %s, the new head needs %s: initialised anew", source, k,
                        tuple(sd[k].shape), tuple(own[k].shape))
    else:
        return False
    for k in keys:
        del sd[k]
    return bool(keys)


def _short(labels: list) -> str:
    return "[" + ", ".join(map(str, labels[:5])) + (", ..." if len(labels) > 5 else "") + "]"


def load_state(model, sd: dict, source: str, allow_missing_head: bool, seed: int = 0) -> None:
    """Load sd into model (a TaskModel or subclass; consuming sd). A model on the meta device takes the
    tensors themselves (cast to the model's dtype); its parameters missing from sd are then allocated and
    initialised (`materialise`)."""
    own = model.state_dict()
    for k, v in sd.items():
        if k in own and tuple(own[k].shape) != tuple(v.shape):
            if k == "backbone.embeddings.word.weight" and own[k].shape[1:] == v.shape[1:]:
                raise CheckpointError(f"{source}: vocab size mismatch: config.json says vocab_size "
                                      f"{own[k].shape[0]} but the weights hold {v.shape[0]} embeddings")
            raise CheckpointError(f"{source}: weight {k} has shape {tuple(v.shape)} but config.json implies "
                                  f"{tuple(own[k].shape)}")
        # floats convert into each other (a float16 file loads as float32); int8 weights must be int8
        if k in own and own[k].dtype != v.dtype and not (own[k].is_floating_point() and v.is_floating_point()):
            raise CheckpointError(f"{source}: weight {k} has dtype {str(v.dtype).replace('torch.', '')} but "
                                  f"config.json implies {str(own[k].dtype).replace('torch.', '')}")
    missing = [k for k in own if k not in sd]
    backbone_missing = [k for k in missing if k.startswith("backbone.") and not k.startswith("backbone.pooler.")]
    if backbone_missing:
        first = backbone_missing[0]
        raise CheckpointError(f"{source}: missing weight {first} ({len(backbone_missing)} backbone weights "
                              f"missing){_int8_hint(first, sd)}")
    if missing:
        if not allow_missing_head:
            raise CheckpointError(f"{source}: missing head weight {missing[0]}{_int8_hint(missing[0], sd)}")
        # as transformers does: name the new weights, so that an untrained head is not mistaken for a trained one
        log.warning("%s: %d %s head weight(s) not in the checkpoint, newly initialised: %s; train the model "
                    "before trusting its predictions", source, len(missing), model.task,
                    ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else ""))
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
        materialise(model, seed)


def _int8_hint(key: str, sd: dict) -> str:
    """Why a weight may be missing: the file and config.json disagree on int8 quantization."""
    base, _, name = key.rpartition(".")
    if name in ("weight_int8", "weight_scale") and f"{base}.weight" in sd:
        return (f"; the file holds the float {base}.weight but config.json records int8 quantization "
                "(a float checkpoint under an int8 config.json?)")
    if name == "weight" and f"{base}.weight_int8" in sd:
        return (f"; the file holds the int8 {base}.weight_int8 but config.json has no quantization record for it "
                "(an int8 checkpoint under a float config.json?)")
    return ""


def materialise(model, seed: int) -> None:
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


# ---------------------------------------------------------------------------- tokenizer
def read_tokenizer(path: str, cfg: ModelConfig) -> Optional[Tokenizer]:
    """The directory's tokenizer (tokenizer.json or vocab.txt), None when it has neither; TokenizerError
    when it has more entries than the model's vocabulary."""
    if not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
        return None
    tok = Tokenizer.from_pretrained(path)
    if tok.vocab_size > cfg.vocab_size:
        raise TokenizerError(f"{path}: tokenizer has {tok.vocab_size} entries but the model's vocab_size is "
                             f"{cfg.vocab_size}")
    return tok
