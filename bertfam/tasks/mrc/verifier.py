"""A question-passage verifier for the no-answer rule, of one of two kinds (told apart by the model's head):

- relevance (an encoder without a head): the cosine of the question's and the passage's sentence embeddings
  from a retrieval encoder (multilingual-e5: mean-pooled last layer, "query: " / "passage: " prefixes);
- pair classifier (a 2-label `classification` head, e.g. `bertfam finetune --task custom --labels no,yes`
  on question-passage pairs, `recipes/mrc_verifier_pairs.py`): P(the passage answers), label "yes" (else
  the second label) of the pair [CLS] question [SEP] title passage [SEP].

Why a second model: the reader's own answerability signals (span null score, the [CLS] classifier) are
trained on a few thousand constructed negatives; an e5 encoder was trained to rank passages that answer a
search question above passages that do not (DuReader retrieval among its data), which is exactly
DuReader-checklist's in-domain unanswerable case (a same-topic passage that does not answer). Measured on
the checklist demo: AUC 0.81-0.87 for the cosine alone against 0.76-0.87 for the reader's classifier (see
the model card); the predictor uses it as a third test, tuned on dev like the others.

The verifier is any directory `from_pretrained` reads (an int8 checkpoint too); the MRC model names it in
`head.mrc.verifier`, relative to its own directory, so the two travel together.
"""
from __future__ import annotations

import os
from typing import Optional, Sequence

import numpy as np
import torch

from ...errors import ConfigError
from ...modeling.int8 import is_int8
from ...modeling.optimize import optimize_for_inference


class RelevanceVerifier:
    """scores(items) -> (N,): cosines in [-1, 1] of embed(query_prefix + question) and
    embed(passage_prefix + title + " " + passage), or, for a pair classifier, P(answers) in [0, 1].

    batch_size None: 1 for an int8 verifier, which quantizes its activations with one scale per batch
    tensor, so that in a batch a text's score would depend on its neighbours (measured: one demo answer
    flipped between batchings); 16 for a float one, whose scores do not depend on the batch."""

    def __init__(self, model, query_prefix: str = "query: ", passage_prefix: str = "passage: ",
                 max_length: int = 512, max_query_length: int = 64, batch_size: Optional[int] = None):
        if model.tokenizer is None:
            raise ConfigError("the verifier model directory has no tokenizer")
        head = model.config.head
        self.kind = "pair" if head.task == "classification" else "relevance"
        if self.kind == "pair":
            if len(head.labels) != 2:
                raise ConfigError(f"a pair-classifier verifier needs 2 labels (no, yes), this one has {head.labels}")
            self.positive = head.labels.index("yes") if "yes" in head.labels else 1
            query_prefix = passage_prefix = ""  # trained without them
            max_length = head.finetune.max_length if head.finetune is not None else max_length
        elif head.task is not None:
            raise ConfigError(f"a verifier is an encoder or a 2-label classifier; this model has a {head.task!r} head")
        self.model = optimize_for_inference(model.eval())
        self.tokenizer = model.tokenizer
        self.query_prefix, self.passage_prefix = query_prefix, passage_prefix
        self.max_length = min(max_length, model.config.max_sequence_length)
        self.max_query_length = min(max_query_length, self.max_length)
        self.batch_size = batch_size or (1 if is_int8(model) else 16)

    @classmethod
    def load(cls, path: str, **kw) -> "RelevanceVerifier":
        from ...checkpoint import from_pretrained

        if not os.path.isdir(path):
            raise ConfigError(f"verifier directory {path} not found")
        from ...checkpoint.io import load_config

        pair = load_config(path)[0].head.task == "classification"
        return cls(from_pretrained(path, task=None if pair else "encoder"), **kw)

    def scores(self, items: Sequence[dict]) -> np.ndarray:
        if not items:
            return np.zeros(0, dtype=np.float32)
        if self.kind == "pair":
            return self._pair_probs(items)
        q = self._embed([self.query_prefix + it["question"] for it in items], self.max_query_length)
        p = self._embed([self.passage_prefix + _passage_text(it) for it in items], self.max_length)
        return (q * p).sum(1)  # rows are unit vectors: the cosine

    @torch.inference_mode()
    def _embed(self, texts: list[str], max_length: int) -> np.ndarray:
        """(N, H) unit-length mean-pooled last-layer vectors; batches sorted by length (less padding)."""
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out: list[Optional[np.ndarray]] = [None] * len(texts)
        for b in range(0, len(order), self.batch_size):
            idx = order[b:b + self.batch_size]
            enc = self.tokenizer([texts[i] for i in idx], None, max_length=max_length, truncation=True,
                                 padding="longest")
            h = self.model.backbone(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).last_hidden_state
            mask = enc["attention_mask"][:, :, None].to(h.dtype)  # (B, T, 1)
            v = (h * mask).sum(1) / mask.sum(1).clamp(min=1)  # (B, H)
            v = torch.nn.functional.normalize(v.float(), dim=-1)
            for j, i in enumerate(idx):
                out[i] = v[j].numpy()
        return np.stack(out)


    @torch.inference_mode()
    def _pair_probs(self, items: Sequence[dict]) -> np.ndarray:
        out = np.zeros(len(items), dtype=np.float32)
        for b in range(0, len(items), self.batch_size):
            chunk = items[b:b + self.batch_size]
            enc = self.tokenizer([it["question"] for it in chunk], [_passage_text(it) for it in chunk],
                                 max_length=self.max_length, truncation=True, padding="longest")
            logits = self.model(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"]).logits  # (B, 2)
            out[b:b + len(chunk)] = torch.softmax(logits.float(), -1)[:, self.positive].numpy()
        return out


def _passage_text(item: dict) -> str:
    title = item.get("title")
    return f"{title} {item['passage']}" if title else item["passage"]
