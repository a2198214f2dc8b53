"""Decoding one question's windows into n-best answer spans, and the no-answer rule.

Decision rule for one question (all windows of its passage together):
- best span: n-best start x end candidates per window (end >= start, at most max_answer_length tokens,
  both inside the passage), score = start logit + end logit, best over all windows;
- SQuAD-2 null rule: diff = best span score - min over windows of the [CLS] null score (start[0] + end[0]);
- answerability: p = max over windows of P(answerable) from the [CLS] classifier (a window without the
  answer was trained as unanswerable, so the answer's window decides);
- answerable iff diff > null_threshold AND p >= answerable_threshold. Both thresholds live in the model's
  config (`head.mrc`, a `config.MRCSettings`, with the windows the model was trained with), tuned on a dev
  file by `thresholds.tune_thresholds`; a model without them uses MRCSettings' defaults (the only ones).
"""
from __future__ import annotations

import math

import numpy as np

from ...config import MRCSettings

NO_ANSWER = "no answer"
# the defaults live in config.MRCSettings; these names are kept for callers that import them
DEFAULT_NULL_THRESHOLD = MRCSettings.null_threshold
DEFAULT_ANSWERABLE_THRESHOLD = MRCSettings.answerable_threshold
DEFAULT_MAX_ANSWER_LENGTH = MRCSettings.max_answer_length  # tokens


def decode(windows: list, passage: str, n_best: int = MRCSettings.n_best,
           max_answer_length: int = MRCSettings.max_answer_length) -> dict:
    """Combine the windows of one passage: n-best spans over all windows (character offsets into the
    passage; the same text from overlapping windows or repeated in the passage is listed once, at its
    best score), null diff (best span - min null score) and max P(answerable)."""
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
                span = (w.offsets[s][0], w.offsets[e][1])
                score = float(start[s] + end[e])
                if score > cands.get(span, -math.inf):
                    cands[span] = score
    ranked, seen = [], set()
    for (a, b), sc in sorted(cands.items(), key=lambda kv: -kv[1]):  # one entry per answer text
        if passage[a:b] not in seen and len(ranked) < n_best:
            seen.add(passage[a:b])
            ranked.append(((a, b), sc))
    nbest = []
    if ranked:
        logits = np.array([sc for _, sc in ranked])
        probs = np.exp(logits - logits.max())
        probs /= probs.sum()
        nbest = [{"text": passage[a:b], "start": a, "end": b, "score": sc, "prob": float(pr)}
                 for ((a, b), sc), pr in zip(ranked, probs)]
    diff = nbest[0]["score"] - null if nbest and null < math.inf else -math.inf
    return {"nbest": nbest, "null_diff": diff, "p_answerable": p_ans}


def answered(raw: dict, null_threshold: float, answerable_threshold: float) -> bool:
    """The no-answer rule on one question's `decode` result: a span, its null diff above the threshold and
    (when the model has the classifier) P(answerable) at or above its threshold."""
    p = raw["p_answerable"]
    return bool(raw["nbest"]) and raw["null_diff"] > null_threshold and (p is None or p >= answerable_threshold)


def _top(logits: np.ndarray, valid: np.ndarray, k: int) -> list[int]:
    idx = np.nonzero(valid)[0]
    return idx[np.argsort(-logits[idx], kind="stable")[:k]].tolist()
