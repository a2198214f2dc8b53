"""Corpus -> tokenized documents -> instances (train + held-out eval), streamed chunk by chunk.

Documents are read in chunks of `chunk_docs` (bounded memory); every `eval_every_doc`-th document
goes to the held-out evaluation split (so no evaluation text is ever trained on). With `dupe_factor`
(static masking) every training chunk yields that many differently cut and masked copies.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence

import numpy as np

from ..data.corpus import CorpusStats, iter_documents
from ..errors import DataError
from .collator import mask_static
from .instances import InstanceBuilder
from .masking import Masker, MaskingConfig
from .segment import SentenceSegmenter

log = logging.getLogger("bertfam")

# objective -> (default masking, default pair objective)
OBJECTIVES = {"bert": ("token", "nsp"), "roberta": ("token", "none"), "albert": ("token", "sop"),
              "ernie": ("ernie", "nsp")}
SEGMENTATION_FOR = {"token": "wordpiece", "wwm": "jieba", "span": "jieba", "ernie": "ernie"}


@dataclass
class DataConfig:
    corpus: Sequence[str] = ()
    pair: str = "nsp"
    masking: MaskingConfig = field(default_factory=MaskingConfig)
    max_seq_len: int = 128
    short_seq_prob: float = 0.1
    seed: int = 42
    chunk_docs: int = 10_000
    eval_every_doc: int = 50  # every N-th document is held out for evaluation
    eval_size: int = 512  # at most this many evaluation instances
    max_line_chars: int = 100_000
    text_field: str = "text"


def make_masker(mcfg: MaskingConfig, tokenizer, vocab_size: Optional[int] = None) -> Masker:
    mask_id = tokenizer.mask_token_id
    if mask_id is None:
        raise DataError(f"the vocabulary has no mask token {tokenizer.mask_token!r}")
    return Masker(mcfg, vocab_size or tokenizer.vocab_size, mask_id, tokenizer.all_special_ids)


def _chunks(docs: Iterator[list], n: int) -> Iterator[list]:
    chunk = []
    for d in docs:
        chunk.append(d)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def iter_chunks(dc: DataConfig, tokenizer, stats: CorpusStats) -> Iterator[tuple[list, list]]:
    """(train documents, eval documents) per chunk, tokenized with unit flags."""
    enc = SentenceSegmenter(tokenizer, SEGMENTATION_FOR[dc.masking.strategy],
                          max_tokens=dc.max_seq_len if dc.pair != "none" else None)
    doc_no = 0
    for chunk in _chunks(iter_documents(dc.corpus, stats, dc.max_line_chars, dc.text_field), dc.chunk_docs):
        sents = [s for d in chunk for s in d]
        encoded = iter(enc.encode_batch(sents))
        train, held = [], []
        for d in chunk:
            doc = [e for e in (next(encoded) for _ in d) if len(e[0])]
            doc_no += 1
            if doc:
                (held if dc.eval_every_doc and doc_no % dc.eval_every_doc == 0 else train).append(doc)
        yield train, held


def iter_instances(dc: DataConfig, tokenizer, stats: CorpusStats, dupe_factor: int = 0,
                   masker: Optional[Masker] = None) -> Iterator[tuple[str, dict]]:
    """("train" | "eval", instance). dupe_factor 0: train instances unmasked (dynamic masking);
    dupe_factor >= 1: that many statically masked copies. Eval instances are always masked once."""
    builder = InstanceBuilder(dc.pair, dc.max_seq_len, tokenizer.cls_token_id, tokenizer.sep_token_id,
                              dc.short_seq_prob)
    masker = masker or make_masker(dc.masking, tokenizer)
    rng = np.random.default_rng(dc.seed)
    n_eval = 0
    for c, (train, held) in enumerate(iter_chunks(dc, tokenizer, stats)):
        for d in range(max(1, dupe_factor)):
            inst = builder.build(train, rng)
            if dupe_factor:
                inst = mask_static(inst, masker, seed=dc.seed * 7919 + c * 131 + d)
            for ex in inst:
                yield "train", ex
        if held and n_eval < dc.eval_size:
            ev = builder.build(held, rng)[: dc.eval_size - n_eval]
            n_eval += len(ev)
            for ex in mask_static(ev, masker, seed=dc.seed + 1 + c):
                yield "eval", ex


def build_instances(dc: DataConfig, tokenizer, masker: Optional[Masker] = None) -> tuple[list, list, CorpusStats]:
    """All instances in memory (the `bertfam pretrain --corpus` path): (train, eval, stats)."""
    stats = CorpusStats()
    train, held = [], []
    for split, ex in iter_instances(dc, tokenizer, stats, 0, masker):
        (train if split == "train" else held).append(ex)
    check_nonempty(train, dc.corpus, stats)
    log.info("corpus: %s; %d training and %d evaluation instances", stats.summary(), len(train), len(held))
    return train, held, stats


def check_nonempty(train: list, corpus: Sequence[str], stats: CorpusStats) -> None:
    if not train:
        where = ", ".join(corpus)
        if stats.sentences == 0:
            raise DataError(f"{where}: the corpus has no usable text ({stats.summary()})")
        raise DataError(f"{where}: no training instances could be built ({stats.summary()}); "
                        f"give more documents or lower eval_every_doc")
