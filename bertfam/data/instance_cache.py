"""Memory-mappable cache of pre-training instances (`bertfam pretrain-data`).

Layout of a cache directory (written to a temporary directory, then renamed into place):
  meta.json                  what built it (objective, masking, max_seq_len, dupe_factor, counts ...)
  {split}.tokens.bin         int32, all instances' input_ids back to back (masked when static)
  {split}.labels.bin         int32, MLM targets (-100 = not predicted); absent for unmasked caches
  {split}.flags.bin          uint8, word/entity unit flags (lets a cache be re-masked dynamically)
  {split}.index.npy          int64 (N, 4): offset, length, a_len (segment B start), pair_label
  tokenizer files            the tokenizer the ids belong to
split is "train" or "eval". Reading maps the .bin files with numpy.memmap, so a cache larger than
memory trains fine.
"""
from __future__ import annotations

import json
import os
import shutil
from typing import Iterable, Optional

import numpy as np

from ..errors import DataError
from ..utils import atomic_write_text

SPLITS = ("train", "eval")
META = "meta.json"


class _SplitWriter:
    def __init__(self, d: str, split: str, static: bool):
        self.d, self.split, self.static = d, split, static
        self.files = {k: open(os.path.join(d, f"{split}.{k}.bin"), "wb")
                      for k in (("tokens", "labels", "flags") if static else ("tokens", "flags"))}
        self.index: list[tuple[int, int, int, int]] = []
        self.offset = 0

    def add(self, ex: dict) -> None:
        n = len(ex["input_ids"])
        self.files["tokens"].write(np.asarray(ex["input_ids"], np.int32).tobytes())
        self.files["flags"].write(np.asarray(ex["flags"], np.uint8).tobytes())
        if self.static:
            self.files["labels"].write(np.asarray(ex["labels"], np.int32).tobytes())
        self.index.append((self.offset, n, int(ex.get("a_len", 0)), int(ex.get("pair_label", -1))))
        self.offset += n

    def close(self) -> int:
        for f in self.files.values():
            f.close()
        np.save(os.path.join(self.d, f"{self.split}.index.npy"), np.asarray(self.index, np.int64).reshape(-1, 4))
        return len(self.index)


def write_cache(out_dir: str, items: Iterable[tuple[str, dict]], meta: dict, static: bool,
                tokenizer=None) -> dict:
    """Write ("train"|"eval", instance) items to out_dir atomically; returns meta with counts."""
    parent = os.path.dirname(os.path.abspath(out_dir))
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, "." + os.path.basename(os.path.abspath(out_dir)) + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        writers = {s: _SplitWriter(tmp, s, static) for s in SPLITS}
        for split, ex in items:
            writers[split].add(ex)
        counts = {s: w.close() for s, w in writers.items()}
        meta = dict(meta, static=static, counts=counts, format_version=1)
        atomic_write_text(os.path.join(tmp, META), json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        shutil.rmtree(out_dir, ignore_errors=True)
        os.replace(tmp, out_dir)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return meta


def read_meta(cache_dir: str) -> dict:
    path = os.path.join(cache_dir, META)
    if not os.path.isfile(path):
        raise DataError(f"{cache_dir}: not an instance cache (no {META}; build one with `bertfam pretrain-data`)")
    with open(path, encoding="utf-8") as f:
        return json.load(f)


class InstanceCache:
    """Map-style dataset over one split of a cache; items are instance dicts (numpy arrays)."""

    def __init__(self, cache_dir: str, split: str = "train"):
        self.meta = read_meta(cache_dir)
        self.static = bool(self.meta.get("static"))
        idx_path = os.path.join(cache_dir, f"{split}.index.npy")
        if not os.path.isfile(idx_path):
            raise DataError(f"{cache_dir}: split {split!r} missing")
        self.index = np.load(idx_path, mmap_mode="r")  # (N, 4)
        self.arrays = {}
        for key, dtype in (("tokens", np.int32), ("labels", np.int32), ("flags", np.uint8)):
            p = os.path.join(cache_dir, f"{split}.{key}.bin")
            if os.path.isfile(p) and os.path.getsize(p) > 0:
                self.arrays[key] = np.memmap(p, dtype=dtype, mode="r")

    def __len__(self) -> int:
        return int(self.index.shape[0])

    def __getitem__(self, i: int) -> dict:
        off, n, a_len, pair = (int(v) for v in self.index[i])
        ex = {"input_ids": np.array(self.arrays["tokens"][off:off + n]),
              "flags": np.array(self.arrays["flags"][off:off + n]), "a_len": a_len, "pair_label": pair}
        if self.static:
            ex["labels"] = np.array(self.arrays["labels"][off:off + n])
        return ex

    def lengths(self) -> list[int]:
        return [int(n) for n in self.index[:, 1]]


def load_split(cache_dir: str, split: str) -> Optional[InstanceCache]:
    c = InstanceCache(cache_dir, split)
    return c if len(c) else None
