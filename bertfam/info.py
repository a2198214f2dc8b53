"""Human-readable summary of a checkpoint (used by `bertfam info`)."""
from __future__ import annotations

import dataclasses

from .loading import from_pretrained


def describe(path: str) -> str:
    model = from_pretrained(path)
    cfg = model.config
    counts = model.num_parameters()
    lines = [f"path: {path}", f"family: {cfg.family}", f"head: {cfg.head.task or 'none (backbone)'}"]
    if cfg.head.task in ("classification", "token"):
        lines.append(f"labels: {cfg.head.num_labels} {cfg.head.labels[:20]}")
    lines.append("config:")
    for f in dataclasses.fields(cfg):
        if f.name != "head":
            lines.append(f"  {f.name}: {getattr(cfg, f.name)}")
    lines.append("parameters:")
    for k in ("total", "embeddings", "encoder", "pooler", "heads"):
        lines.append(f"  {k}: {counts[k]:,}")
    tok = model.tokenizer
    lines.append(f"tokenizer: {type(tok.backend.model).__name__ + ', ' + str(tok.vocab_size) + ' entries' if tok else 'none'}")
    return "\n".join(lines)
