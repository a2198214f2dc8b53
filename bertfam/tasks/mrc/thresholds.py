"""The no-answer thresholds: grid search on a dev set (`tune_thresholds`, or `tune_on_raw` on scores already
computed) and saving them into a model directory (`save_thresholds`: head.mrc + training_info.json)."""
from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import numpy as np

from ...config import MRCSettings
from ...errors import ConfigError
from .decoding import NO_ANSWER
from .results import RawScores


RULES = ("both", "null", "cls", "verifier", "all")


def tune_thresholds(predictor, examples: Sequence) -> dict:
    """Grid-search (null_threshold, answerable_threshold) for the best official DuReader F1 on `examples`
    (EM breaks ties). Returns the chosen values and the dev scores before/after."""
    items = [{"question": ex.question, "passage": ex.context, "title": ex.title} for ex in examples]
    s = predictor.settings
    return tune_on_raw(predictor.raw_scores(items), examples, s.null_threshold, s.answerable_threshold,
                       predictor.has_answerability,
                       rule="all" if getattr(predictor, "verifier", None) is not None else "both",
                       verifier_threshold=s.verifier_threshold)


def tune_on_raw(raws: Sequence[RawScores], examples: Sequence, null_threshold: float = MRCSettings.null_threshold,
                answerable_threshold: float = MRCSettings.answerable_threshold, has_answerability: bool = True,
                rule: str = "both", verifier_threshold: float = -1.0) -> dict:
    """tune_thresholds on scores already computed (MRCPredictor.raw_scores / decode), so that several
    decoding settings can be tuned on one forward pass. rule: "both" (span null score AND P(answerable)),
    "null" (span null score alone), "cls" (the answerability classifier alone), "verifier" (the verifier's
    relevance alone) or "all" (the three together; "verifier" and "all" need raw.relevance). Thresholds a
    rule does not use come back at the values that let every question through."""
    from ...evaluation.dureader import Reference, score_one

    if rule not in RULES:
        raise ConfigError(f"rule {rule!r} not in {'/'.join(RULES)}")
    uses_verifier = rule in ("verifier", "all")
    if uses_verifier and any(r.relevance is None for r in raws):
        raise ConfigError(f"rule {rule!r} needs the verifier's relevance for every question")
    f1a, ema, f1n, emn, diffs, probs, rels = [], [], [], [], [], [], []
    for ex, raw in zip(examples, raws):
        ref = Reference(ex.answer_texts, ex.is_impossible, ex.qtype)
        text = raw.best.text if raw.nbest else None
        fa, ea = score_one(ref, text) if text is not None else score_one(ref, NO_ANSWER)
        fn, en = score_one(ref, NO_ANSWER)
        f1a.append(fa); ema.append(ea); f1n.append(fn); emn.append(en)  # noqa: E702
        diffs.append(raw.null_diff if text is not None else -math.inf)
        probs.append(raw.p_answerable if raw.p_answerable is not None else 1.0)
        rels.append(raw.relevance if uses_verifier else 1.0)
    f1a, ema, f1n, emn = map(np.array, (f1a, ema, f1n, emn))
    diffs, probs, rels = np.array(diffs), np.array(probs), np.array(rels, dtype=float)
    finite = diffs[np.isfinite(diffs)]
    null_grid = np.unique(np.concatenate([[-1e9, 0.0], np.quantile(finite, np.linspace(0, 1, 41)) - 1e-6]
                                         if finite.size else [[-1e9, 0.0]]))
    ans_grid = np.round(np.linspace(0.0, 0.95, 20), 2) if has_answerability else np.array([0.0])
    # the verifier's grid: quantiles of its scores (a cosine; -1 lets every question through)
    ver_grid = (np.unique(np.concatenate([[-1.0], np.clip(np.quantile(rels, np.linspace(0, 1, 21)) - 1e-6, -1, 1)]))
                if uses_verifier else np.array([-1.0]))
    if rule in ("null", "verifier"):
        ans_grid = np.array([0.0])
    if rule in ("cls", "verifier"):
        null_grid = np.array([-1e9])

    def score(tn: float, ta: float, tv: float) -> tuple[float, float]:
        answered = (diffs > tn) & (probs >= ta) & (rels >= tv)
        return (float(np.where(answered, f1a, f1n).mean()), float(np.where(answered, ema, emn).mean()))

    start_v = verifier_threshold if uses_verifier else -1.0
    before = score(null_threshold, answerable_threshold, start_v)
    best = ((before, null_threshold, answerable_threshold, start_v) if rule in ("both", "all")
            else ((-1.0, -1.0), 0.0, 0.0, -1.0))
    for tv in ver_grid:
        # every (null, answerable) pair of the grid at once, rows in the order tn then ta; the first pair of the
        # best (F1, EM) is taken, and it replaces `best` only when strictly better: a pair-by-pair loop's choice
        answered = (diffs > null_grid[:, None, None]) & (probs >= ans_grid[None, :, None]) & (rels >= tv)  # (n, a, N)
        f1 = np.where(answered, f1a, f1n).mean(-1).ravel()  # (n * a,)
        em = np.where(answered, ema, emn).mean(-1).ravel()
        top = np.flatnonzero(f1 == f1.max())
        j = int(top[np.argmax(em[top])])
        s = (float(f1[j]), float(em[j]))
        if s > best[0]:
            best = (s, float(null_grid[j // ans_grid.size]), float(ans_grid[j % ans_grid.size]), float(tv))
    (f1, em), tn, ta, tv = best
    return {"null_threshold": tn, "answerable_threshold": ta, "verifier_threshold": tv,
            "dev_f1": 100 * f1, "dev_em": 100 * em,
            "dev_f1_before": 100 * before[0], "dev_em_before": 100 * before[1], "dev_questions": len(examples)}


def save_thresholds(model, model_dir: str, tuned: dict, tuned_on: str) -> None:
    """Write the tuned thresholds into model_dir/config.json (head.mrc) and what they were tuned on into
    training_info.json (thresholds_tuned_on, tuned_dev_f1)."""
    import os

    head = model.config.head
    new = {"null_threshold": float(tuned["null_threshold"]), "answerable_threshold": float(tuned["answerable_threshold"])}
    if tuned.get("max_answer_length"):  # tuned together with the thresholds
        new["max_answer_length"] = int(tuned["max_answer_length"])
    for name in ("verifier_threshold", "answer_extension", "question_overlap_penalty", "length_bonus",
                 "span_choice", "use_title", "title_ensemble", "keyword_use_title"):  # tuned with them
        if tuned.get(name) is not None:
            new[name] = tuned[name]
    if "keyword_extension" in tuned:  # None: keyword queries decoded as the others
        new["keyword_extension"] = tuned["keyword_extension"]
    if "verifier" in tuned:  # chosen with them (None: the rule does without one)
        new["verifier"] = tuned["verifier"]
    if "answerability" in tuned:  # the fused model the thresholds were tuned on (None: the reader's P)
        new["answerability"] = tuned["answerability"]
    info = dict(head.info, thresholds_tuned_on=tuned_on, tuned_dev_f1=round(tuned["dev_f1"], 3))
    model.config.head = dataclasses.replace(head, mrc=dataclasses.replace(head.mrc_settings, **new), info=info)
    path = os.path.join(model_dir, "config.json")
    cfg = model.config
    if cfg.quantization is None and os.path.isfile(path):
        from ...checkpoint import load_config

        # a weight-int8 checkpoint loads as a float model: its quantization record is on disk only, and stays
        q = load_config(model_dir)[0].quantization
        cfg = dataclasses.replace(cfg, quantization=q) if q is not None else cfg
    cfg.save(path)
