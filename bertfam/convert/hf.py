"""Hugging Face <-> bertfam: configs and parameter names for BERT, RoBERTa, ALBERT and ERNIE.

One table (`key_table`) lists, for a config, every bertfam parameter and the Hugging Face
parameter(s) it corresponds to; import and export both read it, so they cannot drift apart. What differs
by head (architecture name, head weights, pooler, labels, the tied decoder) is one `HFHead` per head name in
`HF_HEADS`; this module asks it and never which head it converts.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..config import HeadConfig, ModelConfig
from ..errors import CheckpointError, ConfigError

log = logging.getLogger("bertfam")

HF_TYPES = {"bert": "bert", "roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta",
            "albert": "albert", "ernie": "ernie"}
_HF_PREFIX = {"bert": "Bert", "roberta": "Roberta", "albert": "Albert", "ernie": "Ernie"}
_COPY = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
         "hidden_act", "hidden_dropout_prob", "attention_probs_dropout_prob", "max_position_embeddings",
         "type_vocab_size", "initializer_range", "layer_norm_eps", "pad_token_id")


# ----------------------------------------------------------------------------- configs
def config_from_hf(d: dict, source: str = "config.json", task: Optional[str] = None) -> ModelConfig:
    mt = d.get("model_type")
    if mt is None and all(k in d for k in ("hidden_size", "num_hidden_layers", "vocab_size")):
        # original TinyBERT / old Google-BERT exports carry no model_type: they are BERT architecture
        mt = "bert"
        d = dict(d, model_type="bert")
        tiny = any(k in d for k in ("emb_size", "structure", "pre_trained"))
    else:
        tiny = False
    if mt not in HF_TYPES:
        raise ConfigError(f"{source}: unsupported model_type {mt!r} (bertfam reads {', '.join(sorted(HF_TYPES))})")
    family = HF_TYPES[mt]
    pet = d.get("position_embedding_type", "absolute")
    if pet != "absolute":
        raise ConfigError(f"{source}: position_embedding_type {pet!r} is not supported (only 'absolute')")
    kw = {k: d[k] for k in _COPY if k in d and d[k] is not None}
    if "hidden_act" in kw and kw["hidden_act"] == "gelu_python":
        kw["hidden_act"] = "gelu"
    kw["family"] = "tinybert" if tiny else family
    if family == "roberta":
        kw["position_offset"] = int(d.get("pad_token_id", 1)) + 1
    if family == "albert":
        kw["embedding_size"] = d.get("embedding_size", 128)
        kw["num_hidden_groups"] = d.get("num_hidden_groups", 1)
        kw["inner_group_num"] = d.get("inner_group_num", 1)
    if family == "ernie" and d.get("use_task_id"):
        kw["use_task_id"] = True
        kw["task_type_vocab_size"] = d.get("task_type_vocab_size", 3)
    arch = (d.get("architectures") or [""])[0]
    if task is None:
        task = next((t for suffix, t in _ARCH_TASK.items() if arch.endswith(suffix)), None)
    head = HeadConfig(task=task)
    if task == "pretraining":
        head.pair_objective = "sop" if family == "albert" else "nsp"
    id2label = d.get("id2label") or {}
    if id2label:
        head.num_labels = len(id2label)
        head.labels = [str(id2label.get(str(i), id2label.get(i, f"LABEL_{i}"))) for i in range(len(id2label))]
    elif "num_labels" in d:
        head.num_labels = int(d["num_labels"])
    if task == "classification" and (d.get("problem_type") == "regression" or head.num_labels == 1):
        head.task = "regression"
        head.num_labels = 1
    if family == "roberta":
        head.classifier_pooling = "cls_dense"
    cd = d.get("classifier_dropout", d.get("classifier_dropout_prob"))
    if cd is not None:
        head.classifier_dropout = float(cd)
    head.answerability = False  # Hugging Face QA heads have no answerability classifier
    kw["head"] = head
    return ModelConfig(**kw)


def hf_architecture(cfg: ModelConfig) -> str:
    fam = _HF_PREFIX.get(cfg.family, "Bert")
    spec = HF_HEADS[cfg.head.task]
    if spec.without_pair is not None and not _has_pair_head(cfg):
        return fam + spec.without_pair
    return fam + spec.suffix


def _has_pair_head(cfg: ModelConfig) -> bool:
    """A pre-training head with an NSP/SOP classifier that Hugging Face's *ForPreTraining holds."""
    return cfg.head.task == "pretraining" and bool(cfg.head.pair_objective) and cfg.family != "roberta"


def config_to_hf(cfg: ModelConfig) -> dict:
    mt = cfg.family if cfg.family in _HF_PREFIX else "bert"
    d = {k: getattr(cfg, k) for k in _COPY}
    d.update(model_type=mt, architectures=[hf_architecture(cfg)], position_embedding_type="absolute")
    if mt == "albert":
        d.update(embedding_size=cfg.emb_size, num_hidden_groups=cfg.groups, inner_group_num=cfg.inner_group_num)
    elif cfg.embedding_size not in (None, cfg.hidden_size) or cfg.groups != cfg.num_hidden_layers:
        raise ConfigError(f"a {cfg.family} config with factorized embeddings or shared layers has no "
                          "Hugging Face BERT equivalent; set family='albert'")
    if mt == "roberta":
        d.update(bos_token_id=0, eos_token_id=2)
    if mt == "ernie":
        d.update(use_task_id=cfg.use_task_id, task_type_vocab_size=cfg.task_type_vocab_size)
    elif cfg.use_task_id:
        raise ConfigError("task-type embeddings (use_task_id) need family='ernie' for Hugging Face export")
    h = cfg.head
    spec = HF_HEADS[h.task]
    if spec.num_labels is not None:
        n = spec.num_labels(h)
        labels = h.labels if len(h.labels) == n else [f"LABEL_{i}" for i in range(n)]
        d["id2label"] = {str(i): l for i, l in enumerate(labels)}
        d["label2id"] = {l: i for i, l in enumerate(labels)}
        if spec.problem_type is not None:
            d["problem_type"] = spec.problem_type
    if h.classifier_dropout is not None:
        d["classifier_dropout_prob" if mt == "albert" else "classifier_dropout"] = h.classifier_dropout
    return d


# ----------------------------------------------------------------------------- parameter names
def _ln(ours: str, theirs: str) -> list[tuple[str, list[str]]]:
    return [(f"{ours}.weight", [f"{theirs}.weight"]), (f"{ours}.bias", [f"{theirs}.bias"])]


def key_table(cfg: ModelConfig, base: str) -> list[tuple[str, list[str]]]:
    """(bertfam key, [HF keys]) for every bertfam parameter. `base` is the HF prefix of the backbone
    ("bert.", "roberta.", "albert.", "ernie." or "" for a bare *Model checkpoint). Several HF keys are
    concatenated along dim 0 (the fused QKV projection)."""
    t: list[tuple[str, list[str]]] = []
    E, albert = "backbone.embeddings", cfg.family == "albert"
    t += [(f"{E}.word.weight", [f"{base}embeddings.word_embeddings.weight"]),
          (f"{E}.position.weight", [f"{base}embeddings.position_embeddings.weight"])]
    if cfg.type_vocab_size > 0:
        t.append((f"{E}.token_type.weight", [f"{base}embeddings.token_type_embeddings.weight"]))
    if cfg.use_task_id:
        t.append((f"{E}.task_type.weight", [f"{base}embeddings.task_type_embeddings.weight"]))
    t += _ln(f"{E}.norm", f"{base}embeddings.LayerNorm")
    if cfg.emb_size != cfg.hidden_size:
        t += _ln(f"{E}.project", f"{base}encoder.embedding_hidden_mapping_in")
    n = cfg.inner_group_num
    for i in range(cfg.groups * n):
        ours = f"backbone.encoder.layers.{i}"
        if albert:
            L = f"{base}encoder.albert_layer_groups.{i // n}.albert_layers.{i % n}"
            q, k, v, o = (f"{L}.attention.{x}" for x in ("query", "key", "value", "dense"))
            names = dict(attn_norm=f"{L}.attention.LayerNorm", ffn_in=f"{L}.ffn", ffn_out=f"{L}.ffn_output",
                         ffn_norm=f"{L}.full_layer_layer_norm")
        else:
            L = f"{base}encoder.layer.{i}"
            q, k, v = (f"{L}.attention.self.{x}" for x in ("query", "key", "value"))
            o = f"{L}.attention.output.dense"
            names = dict(attn_norm=f"{L}.attention.output.LayerNorm", ffn_in=f"{L}.intermediate.dense",
                         ffn_out=f"{L}.output.dense", ffn_norm=f"{L}.output.LayerNorm")
        t += [(f"{ours}.attn.qkv.{p}", [f"{q}.{p}", f"{k}.{p}", f"{v}.{p}"]) for p in ("weight", "bias")]
        t += _ln(f"{ours}.attn.out", o)
        for our_name, hf_name in names.items():
            t += _ln(f"{ours}.{our_name}", hf_name)
    t += _ln("backbone.pooler", f"{base}pooler" + ("" if albert else ".dense"))
    return t + _head_table(cfg)


def _head_table(cfg: ModelConfig) -> list[tuple[str, list[str]]]:
    return HF_HEADS[cfg.head.task].keys(cfg)


def _mlm_keys(cfg: ModelConfig) -> list[tuple[str, list[str]]]:
    p = {"roberta": ("lm_head.dense", "lm_head.layer_norm", "lm_head.bias"),
         "albert": ("predictions.dense", "predictions.LayerNorm", "predictions.bias")}.get(
        cfg.family, ("cls.predictions.transform.dense", "cls.predictions.transform.LayerNorm", "cls.predictions.bias"))
    return _ln("mlm.dense", p[0]) + _ln("mlm.norm", p[1]) + [("mlm.bias", [p[2]])]


def _pretraining_keys(cfg: ModelConfig) -> list[tuple[str, list[str]]]:
    t = _mlm_keys(cfg)
    if _has_pair_head(cfg):
        t += _ln("pair.classifier", "sop_classifier.classifier" if cfg.family == "albert" else "cls.seq_relationship")
    return t


def _classifier_keys(cfg: ModelConfig) -> list[tuple[str, list[str]]]:
    if cfg.head.classifier_pooling == "cls_dense":
        return _ln("classifier.dense", "classifier.dense") + _ln("classifier.classifier", "classifier.out_proj")
    return _ln("classifier.classifier", "classifier")


def _decoder_name(cfg: ModelConfig) -> str:
    return {"roberta": "lm_head.decoder", "albert": "predictions.decoder"}.get(cfg.family, "cls.predictions.decoder")


@dataclass(frozen=True)
class HFHead:
    """A bertfam head (or none) as Hugging Face has it."""

    suffix: str  # of the architecture class name: Bert + ForMaskedLM
    keys: Callable[[ModelConfig], list]  # (bertfam key, [HF keys]) of the head's weights
    pooler: Callable[[ModelConfig], bool]  # whether the HF class holds the backbone's pooler
    num_labels: Optional[Callable] = None  # HeadConfig -> labels config.json lists (id2label); None: none
    problem_type: Optional[str] = None  # config.json's problem_type
    decoder: Optional[Callable[[ModelConfig], str]] = None  # the tied MLM decoder's HF name (written explicitly)
    without_pair: Optional[str] = None  # the suffix when the config has no NSP/SOP classifier


def _no_keys(cfg: ModelConfig) -> list:
    return []


def _pooler_unless_roberta(cfg: ModelConfig) -> bool:
    return cfg.family != "roberta"  # RoBERTa's classification head reads [CLS], HF's has no pooler


def _no_pooler(cfg: ModelConfig) -> bool:
    return False  # HF's *ForMaskedLM/Token/QA omit the pooler


# head task (None: a bare backbone) -> its Hugging Face form
HF_HEADS: dict = {
    None: HFHead("Model", _no_keys, pooler=lambda cfg: True),
    "mlm": HFHead("ForMaskedLM", _mlm_keys, _no_pooler, decoder=_decoder_name),
    # *ForPreTraining holds a pooler for its pair classifier; MLM only (RoBERTa, --pair none) exports as ForMaskedLM
    "pretraining": HFHead("ForPreTraining", _pretraining_keys, _has_pair_head, decoder=_decoder_name,
                          without_pair="ForMaskedLM"),
    "classification": HFHead("ForSequenceClassification", _classifier_keys, _pooler_unless_roberta,
                             num_labels=lambda h: h.num_labels),
    "regression": HFHead("ForSequenceClassification", _classifier_keys, _pooler_unless_roberta,
                         num_labels=lambda h: 1, problem_type="regression"),
    "token": HFHead("ForTokenClassification", lambda cfg: _ln("token.classifier", "classifier"), _no_pooler,
                    num_labels=lambda h: h.num_labels),
    "span": HFHead("ForQuestionAnswering", lambda cfg: _ln("span.qa", "qa_outputs"), _no_pooler),
}


def _arch_tasks() -> dict:
    """HF architecture suffix -> head task, for reading a config: the first head of each suffix (a regression
    head is told from classification by problem_type), then the HF heads bertfam has none of."""
    out: dict = {}
    for task, h in HF_HEADS.items():
        out.setdefault(h.suffix, task)
    return {**out, "ForNextSentencePrediction": None, "ForMultipleChoice": None, "ForCausalLM": None,
            "LMHeadModel": None}


_ARCH_TASK = _arch_tasks()


def _is_head_key(k: str) -> bool:
    # the pooler belongs with the heads here: HF's *ForMaskedLM/Token/QA (and RoBERTa's classifier) omit it
    return not k.startswith("backbone.") or k.startswith("backbone.pooler.")


def hf_has_pooler(cfg: ModelConfig) -> bool:
    return HF_HEADS[cfg.head.task].pooler(cfg)


# ----------------------------------------------------------------------------- state dicts
_IGNORABLE = ("position_ids", "decoder.weight", "decoder.bias", "fit_dense", "token_type_ids",
              "cls.predictions.decoder", "lm_head.decoder", "predictions.decoder")


def detect_base(keys) -> str:
    for base in ("bert.", "roberta.", "albert.", "ernie."):
        if any(k.startswith(base + "embeddings.") for k in keys):
            return base
    if any(k.startswith("embeddings.") for k in keys):
        return ""
    raise CheckpointError("no BERT-family embeddings found in the weights (expected keys like "
                          "'bert.embeddings.word_embeddings.weight')")


def normalize_hf_keys(sd: dict) -> dict:
    """Old TF-converted checkpoints name LayerNorm parameters gamma/beta."""
    out = {}
    for k, v in sd.items():
        if k.endswith(".gamma"):
            k = k[: -len("gamma")] + "weight"
        elif k.endswith(".beta"):
            k = k[: -len("beta")] + "bias"
        out[k] = v
    return out


def state_from_hf(cfg: ModelConfig, sd: dict, source: str, consume: bool = False) -> tuple[dict, list[str]]:
    """Map HF weights to bertfam names. Returns (state dict, bertfam head keys that were absent).
    consume: empty sd as it goes, so fused q/k/v copies never coexist with a second full set of weights."""
    norm = normalize_hf_keys(sd)
    if consume:
        sd.clear()
    sd = norm
    base = detect_base(sd.keys())
    ours, used, missing_head = {}, set(), []
    for our_key, hf_keys in key_table(cfg, base):
        if not all(k in sd for k in hf_keys):
            if _is_head_key(our_key):
                missing_head.append(our_key)
                continue
            absent = [k for k in hf_keys if k not in sd]
            raise CheckpointError(f"{source}: missing weight {absent[0]} for the {cfg.family} configuration")
        tensors = [sd[k] for k in hf_keys]
        ours[our_key] = tensors[0] if len(tensors) == 1 else torch.cat(tensors, 0)
        used.update(hf_keys)
        if consume and len(tensors) > 1:
            for k in hf_keys:
                sd[k] = None  # the fused copy replaces them
    extra = [k for k in sd if k not in used and not any(s in k for s in _IGNORABLE)]
    if extra:
        log.warning("%s: %d weight(s) not used by bertfam, e.g. %s", source, len(extra), extra[0])
    return ours, missing_head


def state_to_hf(cfg: ModelConfig, sd: dict) -> dict:
    """bertfam weights -> the key names of hf_architecture(cfg) (tied decoder written explicitly)."""
    task = cfg.head.task
    base = "" if task is None else {"roberta": "roberta.", "albert": "albert.", "ernie": "ernie."}.get(cfg.family, "bert.")
    out = {}
    pooler = hf_has_pooler(cfg)
    for our_key, hf_keys in key_table(cfg, base):
        if our_key not in sd or (our_key.startswith("backbone.pooler.") and not pooler):
            continue
        t = sd[our_key]
        parts = t.chunk(len(hf_keys), 0) if len(hf_keys) > 1 else [t]
        for k, p in zip(hf_keys, parts):
            out[k] = p.contiguous()
    decoder = HF_HEADS[task].decoder
    if decoder is not None:
        dec = decoder(cfg)
        out[f"{dec}.weight"] = sd["backbone.embeddings.word.weight"].clone()
        out[f"{dec}.bias"] = sd["mlm.bias"].clone()
    return out


# ----------------------------------------------------------------------------- files
def export_hf(model, out_dir: str) -> None:
    """Write a directory `transformers` loads with AutoModel / the matching *For* class."""
    from safetensors.torch import save_file

    from ..utils import atomic_write, atomic_write_text

    cfg = model.config
    if cfg.quantization is not None:
        raise ConfigError("convert --to hf: the model is int8 (bertfam's own format); convert its float original")
    if cfg.head.task in ("classification", "regression") and cfg.head.classifier_pooling == "mean":
        raise ConfigError("convert --to hf: a classifier on the token mean (classifier_pooling 'mean') has no "
                          "Hugging Face *ForSequenceClassification equivalent (they read [CLS])")
    if cfg.head.task == "span" and cfg.head.answerability:
        log.warning("the answerability classifier has no Hugging Face equivalent and is not exported")
    d = config_to_hf(cfg)
    sd = state_to_hf(cfg, {k: v.detach().cpu() for k, v in model.state_dict().items()})
    os.makedirs(out_dir, exist_ok=True)
    atomic_write(os.path.join(out_dir, "model.safetensors"),
                 lambda tmp: save_file(sd, tmp, metadata={"format": "pt"}))
    atomic_write_text(os.path.join(out_dir, "config.json"), json.dumps(d, indent=2, ensure_ascii=False))
    if model.tokenizer is not None:
        model.tokenizer.save_pretrained(out_dir)
