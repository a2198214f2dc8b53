"""Decoding one question's windows into n-best answer spans, and the no-answer rule.

Decision rule for one question (all windows of its passage together):
- best span: n-best start x end candidates per window (end >= start, at most max_answer_length tokens,
  both inside the passage), score = start logit + end logit, best over all windows;
- SQuAD-2 null rule: diff = best span score - min over windows of the [CLS] null score (start[0] + end[0]);
- answerability: p = max over windows of P(answerable) from the [CLS] classifier (a window without the
  answer was trained as unanswerable, so the answer's window decides);
- relevance: a separate question-passage verifier's score (`verifier.Verifier`, cosine of the
  question's and the passage's embeddings), when the predictor has one;
- answerable iff diff > null_threshold AND p >= answerable_threshold AND (with a verifier) relevance >=
  verifier_threshold. The thresholds live in the model's config (`head.mrc`, a `config.MRCSettings`, with
  the windows the model was trained with), tuned on a dev file by `thresholds.tune_thresholds`; a model
  without them uses MRCSettings' defaults (the only ones).

Answer extension (`extend`): DuReader 2.0's references are often a whole clause or sentence while a reader's
best span is a phrase inside it; "clause" / "sentence" widen each span to the clause (up to ，；。！？) or the
sentence (up to 。！？) that holds it. "trim" does the opposite for readers that run on past the answer (a
reader trained on long answers ends spans on a later sentence's 。): each span is cut at the first sentence
end after its first character (the stop itself dropped). Which one (or "none") is a decoding setting tuned on dev.

Span choice (`choice`): "score" answers with the highest-scoring span; "expected_f1" with the span whose
expected F1 against the n-best is highest, each candidate weighted by its probability (minimum Bayes risk
decoding: the F1 of two spans is that of their character overlap in the passage). Where the reader is unsure
of the boundaries, the span most candidates agree on beats the single best one: out of fold on the 567 real
DuReader-checklist questions, the shipped recipe's forced-answer F1 on the answerable ones rose in each of 21
settings, by 0.3 to 3.7 points (2.3 at 64 tokens); the checklist F1 after the no-answer rule did not
(docs/mrc.md). Either way `RawScores.expected_f1` holds the answer's expected F1.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ...config import MRCSettings
from .query_form import is_keyword_query
from .results import RawScores, SpanCandidate

NO_ANSWER = "no answer"


EXTENSIONS = ("none", "clause", "sentence", "trim")
SPAN_CHOICES = ("score", "expected_f1")
# characters that end a sentence / a clause (full- and half-width); a newline ends both
_SENTENCE_END = frozenset("。！？!?\n")
_CLAUSE_END = _SENTENCE_END | frozenset("，,；;")


def extend_span(passage: str, start: int, end: int, mode: str = "none") -> tuple[int, int]:
    """(start, end) widened to the whole clause / sentence of `passage` that holds it ("none": unchanged;
    "trim": cut at the first sentence end after start, the stop excluded). A widened span keeps its own
    closing punctuation; leading spaces of the widened span are dropped."""
    return _Extender(passage, mode)(start, end)


class _Extender:
    """extend_span for many spans of one passage: the stops are indexed once (decode widens up to
    n_best x n_best candidates per window)."""

    def __init__(self, passage: str, mode: str):
        if mode not in EXTENSIONS:
            raise ValueError(f"answer extension {mode!r} not in {', '.join(EXTENSIONS)}")
        self.passage, self.mode = passage, mode
        if mode == "none":
            return
        stops = _CLAUSE_END if mode == "clause" else _SENTENCE_END  # trim: sentence ends
        n = len(passage)
        is_stop = [c in stops for c in passage]
        self.is_stop = is_stop
        self.begin = [0] * (n + 1)  # begin[i]: where the segment holding position i starts (after a stop)
        for i in range(1, n + 1):
            self.begin[i] = i if is_stop[i - 1] else self.begin[i - 1]
        self.next_stop = [n] * (n + 1)  # next_stop[j]: the first stop at or after j (n: none)
        for j in range(n - 1, -1, -1):
            self.next_stop[j] = j if is_stop[j] else self.next_stop[j + 1]

    def __call__(self, start: int, end: int) -> tuple[int, int]:
        if self.mode == "none":
            return start, end
        if self.mode == "trim":  # the first stop after the span's first character ends it (never empty)
            return start, min(end, self.next_stop[min(start + 1, len(self.passage))])
        a = self.begin[start]
        # a span that already ends on a stop keeps it; else run to the next stop (excluded)
        b = end if end > 0 and self.is_stop[end - 1] else self.next_stop[end]
        while a < start and self.passage[a].isspace():
            a += 1
        return a, b


def coverage(text: str, other: str, n: int = 1) -> float:
    """Share of `text`'s character n-grams found in `other` (1.0 for a text shorter than n)."""
    grams = [text[i:i + n] for i in range(len(text) - n + 1)]
    return sum(g in other for g in grams) / len(grams) if grams else 1.0


def decode(windows: list, passage: str, n_best: int = MRCSettings.n_best,
           max_answer_length: int = MRCSettings.max_answer_length, extend: str = "none", question: str = "",
           overlap_penalty: float = 0.0, choice: str = "score", length_bonus: float = 0.0) -> RawScores:
    """Combine the windows of one passage: n-best spans over all windows (character offsets into the
    passage; the same text from overlapping windows or repeated in the passage is listed once, at its
    best score), null diff (best span - min null score) and max P(answerable). extend: widen every span to
    its clause / sentence (`extend_span`) before equal texts are merged. overlap_penalty: every span's
    score is lowered by this times the share of its characters found in `question` (a small reader often
    answers 中国的首都是哪里？ with 中华人民共和国的首都, the question's own words, rather than 北京).
    length_bonus: every span's score is raised by this times log(1 + its length in characters): the
    checklist's references are often a clause where a reader trained on CMRC2018 answers the phrase inside it
    (扣12分 / 12分, 约140分钟 / 140分钟); a weight chosen out of fold (0: none) leans towards the longer span.
    choice: "score" lists the n-best by score, "expected_f1" by expected F1 (module docstring); null_diff is
    the best score's either way."""
    if choice not in SPAN_CHOICES:
        raise ValueError(f"span choice {choice!r} not in {', '.join(SPAN_CHOICES)}")
    widen = _Extender(passage, extend)
    penalty = _OverlapPenalty(question, overlap_penalty)
    cands: dict[tuple[int, int], float] = {}
    null = math.inf
    p_ans = None
    for w, start, end, p in windows:
        null = min(null, float(start[0] + end[0]))
        if p is not None:
            p_ans = p if p_ans is None else max(p_ans, p)
        valid = np.array([o is not None for o in w.offsets])
        if not valid.any():
            continue
        s_idx = _top(start, valid, n_best)
        e_idx = _top(end, valid, n_best)
        for s in s_idx:
            for e in e_idx:
                if e < s or e - s + 1 > max_answer_length:
                    continue
                span = widen(w.offsets[s][0], w.offsets[e][1])
                score = float(start[s] + end[e]) - penalty(passage, span) + length_bonus * math.log1p(
                    span[1] - span[0])
                if score > cands.get(span, -math.inf):
                    cands[span] = score
    ranked, seen = [], set()
    for (a, b), sc in sorted(cands.items(), key=lambda kv: -kv[1]):  # one entry per answer text
        if passage[a:b] not in seen and len(ranked) < n_best:
            seen.add(passage[a:b])
            ranked.append(((a, b), sc))
    if not ranked:
        return RawScores((), -math.inf, p_ans)
    logits = np.array([sc for _, sc in ranked])  # (K,)
    probs = np.exp(logits - logits.max())
    probs /= probs.sum()
    nbest = [SpanCandidate(passage[a:b], a, b, sc, float(pr)) for ((a, b), sc), pr in zip(ranked, probs)]
    ef1 = expected_f1(nbest)  # (K,)
    order = np.argsort(-ef1, kind="stable") if choice == "expected_f1" else np.arange(len(nbest))
    diff = ranked[0][1] - null if null < math.inf else -math.inf
    return RawScores(tuple(nbest[i] for i in order), diff, p_ans, expected_f1=float(ef1[order[0]]))


def expected_f1(nbest) -> np.ndarray:
    """(K,) each candidate's F1 against the others, weighted by their probabilities: sum_j prob_j F1(i, j), the
    F1 of two spans of one passage being that of their character overlap (2 |i ∩ j| / (|i| + |j|))."""
    a = np.array([c.start for c in nbest], dtype=float)  # (K,)
    b = np.array([c.end for c in nbest], dtype=float)
    p = np.array([c.prob for c in nbest])
    overlap = np.clip(np.minimum(b[:, None], b[None, :]) - np.maximum(a[:, None], a[None, :]), 0, None)  # (K, K)
    size = (b - a)[:, None] + (b - a)[None, :]
    return (2 * overlap / np.maximum(size, 1)) @ p


def decode_with(settings: MRCSettings, windows: list, passage: str, question: str = "") -> RawScores:
    """`decode` with a model's decoding settings (n-best, answer length, extension (a keyword query's own,
    when set), question-overlap penalty, span choice, length bonus): what MRCPredictor and the multimodal QA
    evaluation decode with."""
    ext = extension_for(question, settings.answer_extension, settings.keyword_extension)
    return decode(windows, passage, settings.n_best, settings.max_answer_length, ext,
                  question, settings.question_overlap_penalty, settings.span_choice, settings.length_bonus)


def extension_for(question: str, extension: str, keyword_extension: Optional[str] = None) -> str:
    """The answer extension for one question: `keyword_extension` when it is set and the question is a
    keyword query (query_form.is_keyword_query: their references are clauses, not phrases), else `extension`."""
    if keyword_extension is not None and is_keyword_query(question):
        return keyword_extension
    return extension


class _OverlapPenalty:
    """decode's span penalty, memoised per span (n_best x n_best candidates, many widened to one clause)."""

    def __init__(self, question: str, weight: float):
        self.chars, self.weight, self.memo = set(question), weight, {}

    def __call__(self, passage: str, span: tuple[int, int]) -> float:
        if not self.weight or not self.chars:
            return 0.0
        if span not in self.memo:
            text = passage[span[0]:span[1]]
            self.memo[span] = self.weight * (sum(c in self.chars for c in text) / len(text) if text else 0.0)
        return self.memo[span]


def answered(raw: RawScores, null_threshold: float, answerable_threshold: float,
             verifier_threshold: Optional[float] = None) -> bool:
    """The no-answer rule on one question's `decode` result: a span, its null diff above the threshold,
    (when the model has the classifier) P(answerable) at or above its threshold and (when a verifier scored
    it, raw.relevance, and a verifier_threshold is given) the relevance at or above that."""
    p, rel = raw.p_answerable, raw.relevance
    return (bool(raw.nbest) and raw.null_diff > null_threshold and (p is None or p >= answerable_threshold)
            and (rel is None or verifier_threshold is None or rel >= verifier_threshold))


def _top(logits: np.ndarray, valid: np.ndarray, k: int) -> list[int]:
    idx = np.nonzero(valid)[0]
    return idx[np.argsort(-logits[idx], kind="stable")[:k]].tolist()
