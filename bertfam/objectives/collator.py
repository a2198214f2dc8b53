"""Batching of pre-training instances, with dynamic (per-batch) or static (pre-computed) masking.

Dynamic masking draws its randomness from torch's global RNG (one seed per batch), which the trainer
checkpoints and restores: a resumed run masks exactly as an uninterrupted one would, and every
epoch masks the same instance differently (RoBERTa). Static instances already carry `labels`
(masked once per dupe at preprocessing time, as the original BERT).
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from .masking import IGNORE, Masker


class PretrainCollator:
    def __init__(self, masker: Masker, pad_id: int, pair: bool, masked_positions: bool = True,
                 pad_to_multiple_of: Optional[int] = None):
        self.masker = masker
        self.pad_id = pad_id
        self.pair = pair
        self.masked_positions = masked_positions  # MLM logits only on masked tokens (faster head)
        self.pad_to_multiple_of = pad_to_multiple_of

    def mask(self, ex: dict, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        if "labels" in ex:  # static: masked at preprocessing time
            return np.asarray(ex["input_ids"], np.int64), np.asarray(ex["labels"], np.int64)
        return self.masker(ex["input_ids"], ex["flags"], rng)

    def __call__(self, examples: Sequence[dict]) -> dict:
        rng = None
        if any("labels" not in ex for ex in examples):  # static batches leave the RNG untouched
            rng = np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))  # checkpointed torch RNG
        masked = [self.mask(ex, rng) for ex in examples]
        T = max(len(ids) for ids, _ in masked)
        if self.pad_to_multiple_of:
            m = self.pad_to_multiple_of
            T = -(-T // m) * m
        B = len(examples)
        input_ids = np.full((B, T), self.pad_id, np.int64)
        labels = np.full((B, T), IGNORE, np.int64)
        attn = np.zeros((B, T), np.int64)
        types = np.zeros((B, T), np.int64)
        for i, ((ids, lab), ex) in enumerate(zip(masked, examples)):
            n = len(ids)
            input_ids[i, :n], labels[i, :n], attn[i, :n] = ids, lab, 1
            if ex.get("a_len", 0):
                types[i, int(ex["a_len"]):n] = 1  # segment B
        batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attn),
                 "token_type_ids": torch.from_numpy(types), "labels": torch.from_numpy(labels)}
        if self.masked_positions:
            batch["masked_positions"] = batch["labels"].ne(IGNORE)  # (B, T) bool
        if self.pair:
            batch["pair_labels"] = torch.tensor([int(ex["pair_label"]) for ex in examples], dtype=torch.long)
        return batch


def mask_static(instances: Sequence[dict], masker: Masker, seed: int) -> list[dict]:
    """Instances with fixed masked input_ids + labels (static masking; also the eval slice)."""
    rng = np.random.default_rng(seed)
    out = []
    for ex in instances:
        ids, labels = masker(ex["input_ids"], ex["flags"], rng)
        out.append(dict(ex, input_ids=ids.astype(np.int32), labels=labels.astype(np.int32)))
    return out
