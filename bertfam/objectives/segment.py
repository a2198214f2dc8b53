"""Tokenize sentences into ids plus per-token unit flags for whole-word / ERNIE masking.

flags bits (masking.py): WORD_BEGIN (a new word unit starts: not a WordPiece `##` continuation and,
for Chinese, at a jieba word start), IN_ENTITY / ENTITY_BEGIN (ERNIE entity units from jieba.posseg
tags nr*/ns/nt/nz, with adjacent person-name parts merged: 张 + 三 -> one unit).
"""
from __future__ import annotations

import contextlib
import logging
import re
from typing import Optional, Sequence

import numpy as np

from .masking import ENTITY_BEGIN, IN_ENTITY, WORD_BEGIN

log = logging.getLogger("bertfam")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
SEGMENTATIONS = ("wordpiece", "jieba", "ernie")


def _is_entity(flag: str) -> bool:
    return flag.startswith("nr") or flag in ("ns", "nt", "nz")


def _jieba_words(text: str, with_pos: bool) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(word char spans, entity char spans) of `text`."""
    import jieba

    jieba.setLogLevel(logging.WARNING)
    words, ents, pos = [], [], 0
    if with_pos:
        import jieba.posseg as pseg

        prev_person = False
        for pair in _posseg(pseg, text):
            w, flag = pair.word, pair.flag
            b, e = pos, pos + len(w)
            pos = e
            words.append((b, e))
            if _is_entity(flag):
                person = flag.startswith("nr")
                if person and prev_person and ents and ents[-1][1] == b:
                    ents[-1] = (ents[-1][0], e)  # adjacent name parts (surname + given name) -> one entity
                else:
                    ents.append((b, e))
                prev_person = person
            else:
                prev_person = False
    else:
        for w in jieba.cut(text):
            words.append((pos, pos + len(w)))
            pos += len(w)
    return words, ents


def _posseg(pseg, text: str):
    """jieba.posseg with its HMM (finds names missing from the dictionary) unless the text is mostly outside
    the dictionary (e.g. traditional characters): there the HMM costs ~100x more time and finds little."""
    fast = list(pseg.cut(text, HMM=False))
    if fast and sum(len(p.word) == 1 for p in fast) / len(fast) > SINGLE_CHAR_LIMIT:
        return fast
    return pseg.cut(text)


SINGLE_CHAR_LIMIT = 0.7


class SentenceSegmenter:
    """Turns sentences into (ids int32, flags uint8) with the project tokenizer (no special tokens).

    segmentation: wordpiece (## rule only) | jieba (+ jieba words for CJK text) | ernie (+ entities).
    """

    def __init__(self, tokenizer, segmentation: str = "wordpiece", max_tokens: Optional[int] = None):
        if segmentation not in SEGMENTATIONS:
            raise ValueError(f"segmentation {segmentation!r} not in {SEGMENTATIONS}")
        self.tok = tokenizer
        self.segmentation = segmentation
        self.max_tokens = max_tokens

    def encode_batch(self, sentences: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
        backend = self.tok.backend
        lock = getattr(self.tok, "_lock", None) or contextlib.nullcontext()
        with lock:  # truncation / padding are state a previous tokenizer call may have left on the backend
            backend.no_truncation()
            backend.no_padding()
            encs = backend.encode_batch(list(sentences), add_special_tokens=False)
        return [self._flags(s, e.ids, e.tokens, e.offsets) for s, e in zip(sentences, encs)]

    def _flags(self, text: str, ids, tokens, offsets) -> tuple[np.ndarray, np.ndarray]:
        n = len(ids)
        if self.max_tokens and n > self.max_tokens:
            n = self.max_tokens
        flags = np.zeros(n, dtype=np.uint8)
        for i in range(n):
            if not tokens[i].startswith("##"):
                flags[i] = WORD_BEGIN
        if self.segmentation != "wordpiece" and _CJK.search(text):
            words, ents = _jieba_words(text, self.segmentation == "ernie")
            word_start = np.zeros(len(text) + 1, dtype=bool)
            for b, _ in words:
                word_start[b] = True
            ent_id = np.full(len(text) + 1, -1, dtype=np.int64)
            for j, (b, e) in enumerate(ents):
                ent_id[b:e] = j
            prev_ent = -1
            for i in range(n):
                start = offsets[i][0]
                if flags[i] and not word_start[start]:
                    flags[i] = 0  # inside a jieba word: continues the current unit
                j = ent_id[start]
                if j >= 0:
                    flags[i] |= IN_ENTITY | (ENTITY_BEGIN if j != prev_ent else 0)
                prev_ent = j
        return np.asarray(ids[:n], dtype=np.int32), flags
