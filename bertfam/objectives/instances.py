"""Training instances from documents of tokenized sentences.

A sentence is `(ids int32 (n,), flags uint8 (n,))` (see segment.py); a document a list of sentences.
An instance is a dict: input_ids (T,) int32 with [CLS]/[SEP], flags (T,) uint8, a_len (where segment
B starts; 0 for one segment) and pair_label (-1 without a pair objective).

- nsp (BERT, Devlin et al. 2019 / google-research/bert create_pretraining_data.py): segment A = some
  leading sentences of a chunk, B = the rest (label 0, "is next") or, 50 %, a random span from
  another document (label 1); with `short_seq_prob` the target length is shorter.
- sop (ALBERT): B is always the true continuation; 50 % the two segments are swapped (label 1).
- none (RoBERTa FULL-SENTENCES): contiguous sentences packed up to max_seq_len, crossing document
  boundaries with an extra [SEP] between documents.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Optional

import numpy as np

PAIRS = ("nsp", "sop", "none")
Sentence = tuple  # (ids np.int32 (n,), flags np.uint8 (n,))


class InstanceBuilder:
    def __init__(self, pair: str, max_seq_len: int, cls_id: int, sep_id: int, short_seq_prob: float = 0.1):
        if pair not in PAIRS:
            raise ValueError(f"pair objective {pair!r} not in {PAIRS}")
        if max_seq_len < 8:
            raise ValueError(f"max_seq_len {max_seq_len} is too small (>= 8)")
        self.pair, self.max_seq_len = pair, max_seq_len
        self.cls_id, self.sep_id = cls_id, sep_id
        self.short_seq_prob = short_seq_prob

    # ------------------------------------------------------------ entry
    def build(self, docs: list, rng: np.random.Generator) -> list[dict]:
        """All instances of one chunk of documents (random NSP segments come from the same chunk)."""
        docs = [d for d in docs if d]
        if self.pair == "none":
            return list(self.pack(iter(docs)))
        out = []
        for i in range(len(docs)):
            out += self._pairs_from_document(docs, i, rng)
        return out

    def build_stream(self, doc_chunks: Iterable[list], rng: np.random.Generator) -> Iterator[dict]:
        for chunk in doc_chunks:
            yield from self.build(chunk, rng)

    # ------------------------------------------------------------ assembling
    def _assemble(self, a: list[Sentence], b: Optional[list[Sentence]], label: int) -> dict:
        cls = (np.array([self.cls_id], np.int32), np.zeros(1, np.uint8))
        sep = (np.array([self.sep_id], np.int32), np.zeros(1, np.uint8))
        parts = [cls, *a, sep]
        a_len = sum(len(p[0]) for p in parts) if b is not None else 0
        if b is not None:
            parts += [*b, sep]
        return {"input_ids": np.concatenate([p[0] for p in parts]), "flags": np.concatenate([p[1] for p in parts]),
                "a_len": a_len, "pair_label": label}

    # ------------------------------------------------------------ nsp / sop
    def _pairs_from_document(self, docs: list, index: int, rng: np.random.Generator) -> list[dict]:
        doc = docs[index]
        max_tokens = self.max_seq_len - 3
        target = max_tokens
        if rng.random() < self.short_seq_prob:
            target = int(rng.integers(2, max_tokens + 1))
        out, chunk, length, i = [], [], 0, 0
        while i < len(doc):
            chunk.append(doc[i])
            length += len(doc[i][0])
            if i == len(doc) - 1 or length >= target:
                inst = self._pair_instance(docs, index, chunk, target, rng)
                if inst is not None:
                    inst, unused = inst
                    out.append(inst)
                    i -= unused  # sentences not used by a random-next B go back to the stream
                chunk, length = [], 0
            i += 1
        return out

    def _pair_instance(self, docs, index, chunk, target, rng):
        a_end = int(rng.integers(1, len(chunk))) if len(chunk) >= 2 else 1
        a, rest = _concat(chunk[:a_end]), _concat(chunk[a_end:])
        if len(chunk) == 1:  # one (long) sentence: its halves are the two consecutive segments
            a, rest = _halves(a)
        unused = 0
        if self.pair == "nsp":
            if rng.random() < 0.5:
                b, label = self._random_segment(docs, index, max(1, target - len(a[0])), rng), 1
                unused = len(chunk) - a_end  # Google's BERT puts these sentences back
            else:
                b, label = rest, 0
        else:  # sop
            b, label = rest, 0
            if rng.random() < 0.5:
                a, b, label = b, a, 1
        a, b = _truncate_pair(a, b, self.max_seq_len - 3, rng)
        if len(a[0]) == 0 or len(b[0]) == 0:
            return None
        return self._assemble([a], [b], label), unused

    def _random_segment(self, docs, index, target_b, rng) -> Sentence:
        """A span of sentences from another document (the same one if the chunk holds only one)."""
        other = index
        for _ in range(10):
            other = int(rng.integers(len(docs)))
            if other != index or len(docs) == 1:
                break
        doc = docs[other]
        start = int(rng.integers(len(doc)))
        sents, n = [], 0
        for s in doc[start:]:
            sents.append(s)
            n += len(s[0])
            if n >= target_b:
                break
        return _concat(sents)

    # ------------------------------------------------------------ full sentences
    def pack(self, docs: Iterator[list]) -> Iterator[dict]:
        cap = self.max_seq_len - 2  # room between [CLS] and [SEP]
        sep = (np.array([self.sep_id], np.int32), np.zeros(1, np.uint8))
        buf: list[Sentence] = []
        n, pending_sep = 0, False
        for doc in docs:
            pending_sep = n > 0  # a document boundary inside a packed sequence gets a [SEP]
            for s in doc:
                while len(s[0]) > 0:
                    extra = 1 if pending_sep else 0
                    if n + extra + len(s[0]) <= cap:
                        buf += [sep, s] if pending_sep else [s]
                        n += extra + len(s[0])
                        pending_sep = False
                        break
                    if n == 0 or len(s[0]) > cap:  # too long for any sequence: split it to fill this one
                        k = cap - n - extra
                        if k > 0:
                            buf += [sep, (s[0][:k], s[1][:k])] if pending_sep else [(s[0][:k], s[1][:k])]
                            s = (s[0][k:], s[1][k:])
                    yield self._assemble(buf, None, -1)
                    buf, n, pending_sep = [], 0, False
        if n > 0:
            yield self._assemble(buf, None, -1)


def _concat(sents: list[Sentence]) -> Sentence:
    if not sents:
        return np.zeros(0, np.int32), np.zeros(0, np.uint8)
    return np.concatenate([s[0] for s in sents]), np.concatenate([s[1] for s in sents])


def _halves(s: Sentence) -> tuple[Sentence, Sentence]:
    h = len(s[0]) // 2
    return (s[0][:h], s[1][:h]), (s[0][h:], s[1][h:])


def _truncate_pair(a: Sentence, b: Sentence, max_tokens: int, rng) -> tuple[Sentence, Sentence]:
    """Trim the longer segment, randomly from the front or the back, until both fit (BERT's rule)."""
    a0, a1 = 0, len(a[0])
    b0, b1 = 0, len(b[0])
    while (a1 - a0) + (b1 - b0) > max_tokens:
        if a1 - a0 > b1 - b0:
            if rng.random() < 0.5:
                a0 += 1
            else:
                a1 -= 1
        else:
            if rng.random() < 0.5:
                b0 += 1
            else:
                b1 -= 1
    a, b = (a[0][a0:a1], a[1][a0:a1]), (b[0][b0:b1], b[1][b0:b1])
    return _fix_first_flag(a), _fix_first_flag(b)


def _fix_first_flag(s: Sentence) -> Sentence:
    """A segment cut in the middle of a word starts a new (partial) word unit."""
    from .masking import WORD_BEGIN

    if len(s[1]) and not s[1][0] & WORD_BEGIN:
        f = s[1].copy()
        f[0] |= WORD_BEGIN
        return s[0], f
    return s
