"""Masked-LM masking: token, whole-word, ERNIE knowledge (phrase + entity) and span masking.

Every token carries a byte of `flags` (see `segment.py`) saying where word units and entity units
begin. A masking strategy turns those flags into candidate *units* (contiguous token spans), picks
units until ~`rate` of the maskable tokens are covered, then applies BERT's 80/10/10 rule per unit:
all tokens of a chosen unit become [MASK] (80 %), random tokens (10 %) or stay (10 %), so a word is
always replaced consistently. Special tokens ([CLS], [SEP], [PAD] ...) are never masked.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

IGNORE = -100
WORD_BEGIN, IN_ENTITY, ENTITY_BEGIN = 1, 2, 4  # bits of the per-token flags byte
MASKINGS = ("token", "wwm", "ernie", "span")


@dataclass
class MaskingConfig:
    """How to mask.

    strategy: token | wwm (whole word: WordPiece ## + jieba words for Chinese) | ernie (ERNIE 1.0
    knowledge masking) | span (SpanBERT-style geometric spans of whole words).
    ernie_mix: probabilities of the (basic, phrase, entity) level used for one sequence.
    """

    strategy: str = "token"
    rate: float = 0.15
    mask_prob: float = 0.8  # of the chosen units -> [MASK]
    random_prob: float = 0.1  # -> random token (the rest stays unchanged)
    max_predictions: Optional[int] = None  # cap per sequence (BERT's max_predictions_per_seq)
    ernie_mix: Sequence[float] = field(default_factory=lambda: (0.2, 0.4, 0.4))
    span_p: float = 0.2  # geometric distribution parameter of span lengths (in words)
    span_max: int = 10

    def validate(self) -> None:
        from ..errors import ConfigError

        if self.strategy not in MASKINGS:
            raise ConfigError(f"masking {self.strategy!r} not in {MASKINGS}")
        if not 0.0 < self.rate < 1.0:
            raise ConfigError(f"masking rate must be in (0, 1), got {self.rate}")
        if self.mask_prob < 0 or self.random_prob < 0 or self.mask_prob + self.random_prob > 1.0 + 1e-9:
            raise ConfigError("mask_prob + random_prob must be within [0, 1]")
        if len(self.ernie_mix) != 3 or min(self.ernie_mix) < 0 or sum(self.ernie_mix) <= 0:
            raise ConfigError(f"ernie_mix must be three non-negative weights (basic, phrase, entity), "
                              f"got {list(self.ernie_mix)}")
        if not 0.0 < self.span_p <= 1.0 or self.span_max < 1:
            raise ConfigError("span_p must be in (0, 1] and span_max >= 1")


class Masker:
    """Applies a MaskingConfig to one sequence. Vocabulary facts are fixed at construction."""

    def __init__(self, cfg: MaskingConfig, vocab_size: int, mask_id: int, special_ids: Sequence[int]):
        cfg.validate()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.mask_id = mask_id
        self.special = np.array(sorted(set(int(i) for i in special_ids)), dtype=np.int64)
        # random replacements are drawn from the non-special ids
        allowed = np.ones(vocab_size, dtype=bool)
        allowed[self.special[self.special < vocab_size]] = False
        self.replacement_ids = np.flatnonzero(allowed)

    # ------------------------------------------------------------ units
    def units(self, ids: np.ndarray, flags: np.ndarray, level: str) -> list[tuple[int, int]]:
        """Candidate units [start, end) over maskable tokens. level: basic | word | entity."""
        maskable = ~np.isin(ids, self.special)  # (T,)
        if level == "basic":
            return [(int(i), int(i) + 1) for i in np.flatnonzero(maskable)]
        if level == "entity":
            bit_in, bit_begin = IN_ENTITY, ENTITY_BEGIN
            spans, cur = [], None
            for i in range(len(ids)):
                inside = maskable[i] and flags[i] & bit_in
                if inside and (cur is None or flags[i] & bit_begin):
                    if cur is not None:
                        spans.append((cur, i))
                    cur = i
                elif not inside and cur is not None:
                    spans.append((cur, i))
                    cur = None
            if cur is not None:
                spans.append((cur, len(ids)))
            return spans
        spans, cur = [], None  # word level: a unit starts at WORD_BEGIN or after a special token
        for i in range(len(ids)):
            if not maskable[i]:
                if cur is not None:
                    spans.append((cur, i))
                cur = None
            elif cur is None or flags[i] & WORD_BEGIN:
                if cur is not None:
                    spans.append((cur, i))
                cur = i
        if cur is not None:
            spans.append((cur, len(ids)))
        return spans

    def budget(self, ids: np.ndarray) -> int:
        n = int((~np.isin(ids, self.special)).sum())
        k = max(1, int(round(n * self.cfg.rate))) if n else 0
        return min(k, self.cfg.max_predictions) if self.cfg.max_predictions else k

    # ------------------------------------------------------------ choice
    def choose(self, ids: np.ndarray, flags: np.ndarray, rng: np.random.Generator) -> tuple[list, str]:
        """(chosen units, level used)."""
        k = self.budget(ids)
        if k == 0:
            return [], "none"
        s = self.cfg.strategy
        if s == "token":
            return _fill(self.units(ids, flags, "basic"), k, rng), "basic"
        if s == "wwm":
            return _fill(self.units(ids, flags, "word"), k, rng), "word"
        if s == "span":
            return self._spans(self.units(ids, flags, "word"), k, rng), "span"
        mix = np.asarray(self.cfg.ernie_mix, dtype=float)
        level = ("basic", "phrase", "entity")[rng.choice(3, p=mix / mix.sum())]
        if level == "basic":
            return _fill(self.units(ids, flags, "basic"), k, rng), level
        words = self.units(ids, flags, "word")
        if level == "phrase":
            return _fill(words, k, rng), level
        # entity level: entities first, then whole words to fill the budget (a sentence has few entities)
        ents = _fill(self.units(ids, flags, "entity"), k, rng)
        used = sum(e - b for b, e in ents)
        taken = np.zeros(len(ids), dtype=bool)
        for b, e in ents:
            taken[b:e] = True
        rest = [(b, e) for b, e in words if not taken[b:e].any()]
        return ents + _fill(rest, k - used, rng), level

    def _spans(self, words: list, k: int, rng: np.random.Generator) -> list:
        """SpanBERT: span lengths (in words) ~ Geometric(span_p) clipped at span_max, random starts."""
        chosen, taken, used = [], np.zeros(len(words), dtype=bool), 0
        for _ in range(4 * len(words) + 10):  # bounded: stop when no span fits any more
            if used >= k or taken.all():
                break
            n = min(int(rng.geometric(self.cfg.span_p)), self.cfg.span_max)
            start = int(rng.integers(len(words)))
            end = min(start + n, len(words))
            while end > start and (taken[start:end].any() or words[end - 1][1] - words[start][0] > k - used):
                end -= 1  # shrink the span until it is free and fits the budget
            if end == start:
                continue
            taken[start:end] = True
            b, e = words[start][0], words[end - 1][1]
            chosen.append((b, e))
            used += e - b
        return chosen

    # ------------------------------------------------------------ apply
    def __call__(self, ids: np.ndarray, flags: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(masked input ids, labels with -100 where nothing is predicted); ids (T,) int, flags (T,) uint8."""
        ids = np.asarray(ids, dtype=np.int64)
        units, _ = self.choose(ids, np.asarray(flags), rng)
        return self.apply(ids, units, rng)

    def apply(self, ids: np.ndarray, units: list, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        out = ids.copy()
        labels = np.full(len(ids), IGNORE, dtype=np.int64)
        r = rng.random(len(units))
        for (b, e), u in zip(units, r):
            labels[b:e] = ids[b:e]
            if u < self.cfg.mask_prob:
                out[b:e] = self.mask_id
            elif u < self.cfg.mask_prob + self.cfg.random_prob:
                out[b:e] = self.replacement_ids[rng.integers(len(self.replacement_ids), size=e - b)]
        return out, labels


def _fill(units: list, k: int, rng: np.random.Generator) -> list:
    """Units in random order, keeping each that still fits the budget of k tokens (BERT's WWM rule)."""
    chosen, used = [], 0
    if k <= 0 or not units:
        return chosen
    for j in rng.permutation(len(units)):
        b, e = units[j]
        if used + (e - b) > k:
            continue
        chosen.append((b, e))
        used += e - b
        if used >= k:
            break
    return sorted(chosen)


def describe_masking(tokens: Sequence[str], units: list) -> str:
    """'[张三] 在 [北京大学] 读书': the chosen units in brackets (for docs and examples)."""
    starts = {b: e for b, e in units}
    out, i = [], 0
    while i < len(tokens):
        if i in starts:
            e = starts[i]
            out.append("[" + "".join(t[2:] if t.startswith("##") else t for t in tokens[i:e]) + "]")
            i = e
        else:
            out.append(tokens[i])
            i += 1
    return " ".join(out)
