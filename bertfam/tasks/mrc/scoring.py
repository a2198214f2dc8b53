"""Predicting a list of examples ({qid: answer} + n-best details) and scoring it with the official DuReader
metric."""
from __future__ import annotations

import logging
import math
import time
from typing import Sequence

from .decoding import NO_ANSWER

log = logging.getLogger("bertfam")


def predict_examples(predictor, examples: Sequence, no_answer_text: str = NO_ANSWER, progress: bool = False
                     ) -> tuple[dict, dict, float]:
    """({qid: answer text or no_answer_text}, {qid: n-best details}, questions per second)."""
    items = [{"question": ex.question, "passage": ex.context, "title": ex.title} for ex in examples]
    from ...progress import Progress

    t0 = time.perf_counter()
    results = []
    step = 256
    with Progress(len(items), "mrc predict", unit="questions", enabled=progress) as bar:
        for b in range(0, len(items), step):
            n = len(items[b:b + step])
            # the predictor reports its windows read within the chunk: the count moves within a chunk too
            predictor.on_progress = lambda done, total, b=b, n=n: bar.set(b + n * done // max(total, 1))
            try:
                results.extend(predictor.predict_batch(items[b:b + step], details=True))
            finally:
                predictor.on_progress = None
            bar.set(b + n)
    dt = time.perf_counter() - t0
    preds, nbest = {}, {}
    for ex, r in zip(examples, results):
        preds[ex.qid] = r.answer if r.answerable else no_answer_text
        nbest[ex.qid] = _nbest_entry(r)
    return preds, nbest, len(items) / max(dt, 1e-9)


def _nbest_entry(r) -> dict:
    """One question's entry of the n-best file (a VotingEnsemble's answers carry no n-best: [] and None)."""
    return {"answerable": r.answerable, "answer": r.answer, "start": r.start, "end": r.end, "score": r.score,
            "p_answerable": r.p_answerable, "null_diff": _finite(r.null_diff),
            "nbest": [dict(c.to_dict(), score=float(c.score)) for c in r.nbest or ()]}


def _finite(x):
    return None if x is None or not math.isfinite(x) else float(x)


def score_examples(predictor, examples: Sequence) -> dict:
    """Official DuReader F1/EM (x100) of a predictor on examples that carry their references."""
    from collections import OrderedDict

    from ...evaluation.dureader import Reference, evaluate

    preds, _, qps = predict_examples(predictor, examples)
    refs = OrderedDict((ex.qid, Reference(ex.answer_texts, ex.is_impossible, ex.qtype)) for ex in examples)
    r = evaluate(refs, preds)
    return {"f1": float(r["F1"]), "em": float(r["EM"]), "questions_per_s": qps}
