"""TinyBERT data augmentation by masked-LM word replacement.

For every whole-word token of a sentence (a CJK character, or a WordPiece word without `##` pieces),
the MLM predicts top-K candidates with that token masked (one batched forward pass per sentence).
Each augmented copy then replaces every such token, independently with probability p, by a random
candidate (Jiao et al. 2020, Alg. 1; the GloVe branch for multi-piece words is left out: those words
are kept as they are). The label is copied unchanged.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Sequence

import numpy as np
import torch

from ..errors import ConfigError
from ..modeling.optimize import optimize_for_inference

log = logging.getLogger("bertfam")


class MLMAugmenter:
    def __init__(self, mlm_model, tokenizer, top_k: int = 15, p_replace: float = 0.4, n_aug: int = 20,
                 max_length: int = 128, seed: int = 0):
        if mlm_model.mlm is None:
            raise ConfigError("data augmentation needs a model with a masked-LM head (task mlm or pretraining)")
        if tokenizer.mask_token_id is None:
            raise ConfigError("data augmentation: the vocabulary has no [MASK] token")
        if not 0.0 <= p_replace <= 1.0 or top_k < 1 or n_aug < 0:
            raise ConfigError("augmentation: need 0 <= p <= 1, top_k >= 1, n_aug >= 0")
        self.model, self.tok = optimize_for_inference(mlm_model.eval()), tokenizer
        self.top_k, self.p, self.n_aug, self.max_length = top_k, p_replace, n_aug, max_length
        self.rng = np.random.default_rng(seed)
        self.special = torch.tensor(sorted(tokenizer.all_special_ids))
        # candidates are whole words only: no specials, no ## continuation pieces, no [unused] slots
        V = mlm_model.config.vocab_size
        toks = tokenizer.convert_ids_to_tokens(range(min(V, tokenizer.vocab_size)))
        self.banned = torch.ones(V, dtype=torch.bool)
        self.banned[: len(toks)] = torch.tensor([t is None or t.startswith("##") or (t.startswith("[") and
                                                 t.endswith("]")) for t in toks])
        self.banned[self.special[self.special < V]] = True

    @torch.no_grad()
    def candidates(self, ids: list) -> dict:
        """{position: top-K replacement ids} for every whole-word position of `ids` (with specials)."""
        toks = self.tok.convert_ids_to_tokens(ids)
        pos = [i for i, t in enumerate(toks) if ids[i] not in self.special.tolist() and not t.startswith("##")
               and (i + 1 == len(toks) or not toks[i + 1].startswith("##"))]
        if not pos:
            return {}
        x = torch.tensor(ids).repeat(len(pos), 1)  # (P, T): one masked copy per position
        x[torch.arange(len(pos)), torch.tensor(pos)] = self.tok.mask_token_id
        device = next(self.model.parameters()).device
        h = self.model.backbone(x.to(device)).last_hidden_state[torch.arange(len(pos)), torch.tensor(pos)]  # (P, H)
        logits = self.model.mlm(h).float()  # (P, V)
        logits[:, self.banned.to(logits.device)] = float("-inf")
        top = logits.topk(min(self.top_k, logits.shape[1]), dim=-1).indices.cpu()  # (P, K)
        return {p: top[k].tolist() for k, p in enumerate(pos)}

    def augment_text(self, text: str) -> list[str]:
        ids = self.tok(text, max_length=self.max_length, truncation=True, padding=False,
                       return_tensors=None)["input_ids"]
        cands = self.candidates(ids)
        out = []
        for _ in range(self.n_aug):
            new = list(ids)
            for p, c in cands.items():
                if self.rng.random() < self.p:
                    new[p] = c[self.rng.integers(len(c))]
            out.append(self.tok.decode(new, skip_special_tokens=True))
        return out

    def augment(self, examples: Sequence) -> list:
        """The originals followed by n_aug copies of each (text_a and text_b augmented independently)."""
        out = list(examples)
        for k, ex in enumerate(examples):
            if getattr(ex, "tokens", None) is not None:
                raise ConfigError("data augmentation works on sentence tasks only (token tags would misalign)")
            a = self.augment_text(ex.text_a)
            b = self.augment_text(ex.text_b) if ex.text_b is not None else [None] * len(a)
            out += [dataclasses.replace(ex, guid=f"{ex.guid}-aug{i}", text_a=x, text_b=y)
                    for i, (x, y) in enumerate(zip(a, b))]
            if (k + 1) % 200 == 0:
                log.info("augmented %d / %d examples", k + 1, len(examples))
        return out
