"""The SQuAD 2.0 metric (official evaluate-v2.0.py rules): English normalisation (lower-case, drop
punctuation and the articles a/an/the, collapse whitespace), bag-of-token F1, EM, max over references,
unanswerable questions scored against the empty string, HasAns / NoAns breakdown. Works for SQuAD 1.1
files too (no NoAns part then)."""
from __future__ import annotations

import collections
import re
import string
from typing import Optional

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCT = set(string.punctuation)


def normalize_answer(s: str) -> str:
    s = "".join(ch for ch in s.lower() if ch not in _PUNCT)
    return " ".join(_ARTICLES.sub(" ", s).split())


def get_tokens(s: str) -> list[str]:
    return normalize_answer(s).split() if s else []


def compute_exact(gold: str, pred: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(pred))


def compute_f1(gold: str, pred: str) -> float:
    g, p = get_tokens(gold), get_tokens(pred)
    if not g or not p:  # no-answer: F1 is 1 if both are empty, else 0
        return float(g == p)
    common = collections.Counter(g) & collections.Counter(p)
    same = sum(common.values())
    if same == 0:
        return 0.0
    prec, rec = same / len(p), same / len(g)
    return 2 * prec * rec / (prec + rec)


def evaluate(refs, preds: dict, no_answer: Optional[str] = "no answer") -> dict:
    """refs: qid -> bertfam.evaluation.dureader.Reference. A prediction equal to `no_answer` (any case)
    counts as the empty answer, so one prediction file serves both metrics. Missing predictions score 0
    (the official script only warns)."""
    em, f1, has, noans = {}, {}, [], []
    for qid, ref in refs.items():
        golds = [a for a in ref.answers if normalize_answer(a)] if not ref.impossible else []
        golds = golds or [""]
        (noans if ref.impossible or golds == [""] else has).append(qid)
        pred = preds.get(qid)
        if not isinstance(pred, str):
            em[qid] = f1[qid] = 0.0
            continue
        if no_answer is not None and pred.strip().lower() == no_answer:
            pred = ""
        em[qid] = max(compute_exact(g, pred) for g in golds)
        f1[qid] = max(compute_f1(g, pred) for g in golds)
    out = _block(em, f1, list(refs))
    if has:
        out.update({f"HasAns_{k}": v for k, v in _block(em, f1, has).items()})
    if noans:
        out.update({f"NoAns_{k}": v for k, v in _block(em, f1, noans).items()})
    return out


def _block(em: dict, f1: dict, qids: list) -> dict:
    n = len(qids)
    return {"exact": 100.0 * sum(em[q] for q in qids) / n if n else 0.0,
            "f1": 100.0 * sum(f1[q] for q in qids) / n if n else 0.0, "total": n}


def evaluate_files(data_path: str, pred_path: str) -> dict:
    from .dureader import read_predictions, read_references

    refs = read_references(data_path)
    preds, problems = read_predictions(pred_path)
    out = evaluate(refs, preds)
    out["problems"] = list(refs.problems) + problems  # type: ignore[attr-defined]
    return out
