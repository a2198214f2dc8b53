"""The embedding job of `bertfam embed`: token and sentence vectors of a text file (tasks.embed).

- `run_embed(EmbedConfig)`: PREFIX.cls.npy / PREFIX.mean.npy (row i: line i of the input) and, with
  `tokens`, PREFIX.jsonl; returns the paths written.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass
class EmbedConfig:
    """Vectors of `model` for every line of `input` ('a ||| b': a pair), written under the prefix `out`:
    `layers` (0: embeddings, -1: last), `pooling` (cls and/or mean; empty: both)."""

    model: str
    input: str
    out: str
    layers: Sequence[int] = (-1,)
    pooling: Sequence[str] = ("cls", "mean")
    tokens: bool = False
    max_length: int = 128
    batch_size: int = 32
    int8: bool = False


def run_embed(cfg: EmbedConfig) -> list:
    """Embed and write; returns the paths written."""
    from ..tasks.embed import embed_file

    return embed_file(cfg.model, cfg.input, cfg.out, layers=cfg.layers, pooling=cfg.pooling, tokens=cfg.tokens,
                      max_length=cfg.max_length, batch_size=cfg.batch_size, int8=cfg.int8)
