"""k-fold cross-validation on real MRC questions: folds that share no passage, question or title
(`assign_folds`), decoding settings and thresholds chosen out of fold (`tune_out_of_fold`: each fold is
decided by what was tuned on the other folds' predictions), and a bootstrap interval for the pooled score
(`bootstrap_interval`).

Why out of fold twice: a fold model never saw its fold's questions, and the thresholds applied to a fold
were never tuned on it either, so the pooled score is what a system trained and tuned on all folds should
score on new questions of the same distribution.
"""
from __future__ import annotations

import dataclasses
import random
from collections import Counter
from typing import Mapping, Optional, Sequence

import numpy as np

from ...errors import ConfigError
from .answerability import apply as apply_answerability, fit as fit_answerability
from .decoding import NO_ANSWER, answered
from .results import RawScores
from .thresholds import RULES, tune_on_raw


def assign_folds(examples: Sequence, k: int = 5, seed: int = 0) -> list[int]:
    """A fold number (0..k-1) per example. Examples that share a passage, a question or a (non-empty) title
    are joined into one group (transitively) and every group goes to one fold, so no passage, question or
    title is in two folds. Groups are dealt largest first to the fold with the fewest questions, with
    answerability balanced as a tie-break, after a seeded shuffle."""
    if k < 2:
        raise ConfigError(f"k={k}: cross-validation needs at least 2 folds")
    parent = list(range(len(examples)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[tuple[str, str], int] = {}
    for i, ex in enumerate(examples):
        for key in (("p", ex.context), ("q", ex.question), ("t", ex.title or "")):
            if key == ("t", ""):
                continue
            j = first.setdefault(key, i)
            parent[find(i)] = find(j)
    groups: dict[int, list[int]] = {}
    for i in range(len(examples)):
        groups.setdefault(find(i), []).append(i)
    order = list(groups.values())
    random.Random(seed).shuffle(order)
    order.sort(key=len, reverse=True)  # stable: equal sizes keep the shuffled order
    if len(order) < k:
        raise ConfigError(f"{len(order)} independent passage groups cannot fill {k} folds")
    size, unans = [0] * k, [0] * k
    fold = [0] * len(examples)
    for g in order:
        n_un = sum(bool(examples[i].is_impossible) for i in g)
        f = min(range(k), key=lambda j: (size[j], unans[j] if n_un else -unans[j], j))
        size[f] += len(g)
        unans[f] += n_un
        for i in g:
            fold[i] = f
    return fold


def leaks(examples: Sequence, folds: Sequence[int]) -> list[str]:
    """Passages, questions or titles found in more than one fold (empty: the split is clean)."""
    seen: dict[tuple[str, str], set] = {}
    for ex, f in zip(examples, folds):
        for key in (("passage", ex.context), ("question", ex.question), ("title", ex.title or "")):
            if key != ("title", ""):
                seen.setdefault(key, set()).add(f)
    return [f"{kind} {text[:30]!r} in folds {sorted(fs)}" for (kind, text), fs in seen.items() if len(fs) > 1]


def tune_out_of_fold(candidates: Mapping[str, Sequence[RawScores]], examples: Sequence, folds: Sequence[int],
                     rules: Sequence[str] = ("both", "null", "cls"),
                     features: Optional[Sequence[str]] = None, fit_extra: Optional["FitExtra"] = None,
                     applied: Optional[Mapping[str, Sequence[RawScores]]] = None) -> dict:
    """Choose a decoding setting (a key of `candidates`: name -> one `decode` result per example, each
    example's from the model that did not train on it) and a no-answer rule with its thresholds for every
    fold on the OTHER folds' examples (tune_on_raw, official F1; ties: the earlier candidate and rule), and
    apply it to the fold. Returns {"answers": per-example text or NO_ANSWER, "f1", "em": per-example scores
    (0-1), "choices": per fold {setting, rule, thresholds, tuned F1 on the other folds, fusion: the fitted
    answerability model of rule "fused" as a dict}, "pooled": the setting chosen on all folds together (what
    a model trained on all of them ships with), "p_answerable": per example the P(answerable) its fold's
    rule thresholded (rule "fused": the fused model's, fitted without the fold)}. features: the fused
    model's inputs (default: all of answerability.FEATURES). fit_extra: questions added to every fused
    model's fit (never to the threshold tuning or the scores), see FitExtra. applied: another read of the same
    questions (same settings, one result per example) that each fold's choice, tuned and fitted on
    `candidates`, is applied to instead: how a change made at prediction time only (e.g. keyword queries read
    without their title) scores when it ships into a model whose decisions were tuned without it."""
    from ...evaluation.dureader import Reference, score_one

    for r in rules:
        if r not in RULES + ("fused",):
            raise ConfigError(f"rule {r!r} not in {'/'.join(RULES)}")
    n = len(examples)
    if len(folds) != n or any(len(v) != n for v in candidates.values()):
        raise ConfigError("candidates, examples and folds must have one entry per example")
    if not candidates:
        raise ConfigError("no decoding setting to choose from")
    if applied is not None and (set(applied) != set(candidates) or any(len(v) != n for v in applied.values())):
        raise ConfigError("applied must hold the candidates' settings, one result per example")
    folds = np.asarray(folds)

    def best_on(mask: np.ndarray, key: int) -> dict:
        """The best setting and rule tuned on the examples in mask; "fused" raws are fitted on them too (and
        on fit_extra's questions as the model of fold `key`, -1: all folds', predicted them)."""
        sub = [examples[i] for i in np.nonzero(mask)[0]]
        best = None
        for name, raws in candidates.items():
            for rule in rules:
                if rule == "fused":
                    use, model = fused_raws(raws, examples, mask, features,
                                            fit_extra.of(key, name) if fit_extra is not None else None)
                    tune_rule = "cls"
                else:
                    model, use, tune_rule = None, raws, rule
                t = tune_on_raw([use[i] for i in np.nonzero(mask)[0]], sub, rule=tune_rule, verifier_threshold=-1.0)
                if best is None or (t["dev_f1"], t["dev_em"]) > (best["dev_f1"], best["dev_em"]):
                    best = dict(t, setting=name, rule=rule, raws=use, model=model,
                                fusion=dataclasses.asdict(model) if model is not None else None)
        return best

    answers, f1, em, choices = [None] * n, np.zeros(n), np.zeros(n), {}
    p_used = [None] * n
    for f in sorted(set(folds.tolist())):
        c = best_on(folds != f, int(f))
        use, model = c.pop("raws"), c.pop("model")
        if applied is not None:  # the same choice, applied to the other read
            use = applied[c["setting"]]
            if model is not None:
                use = fused_view(model, use, examples)
        choices[int(f)] = c
        for i in np.nonzero(folds == f)[0]:
            raw = use[i]
            p_used[i] = raw.p_answerable
            ok = answered(raw, c["null_threshold"], c["answerable_threshold"], c["verifier_threshold"])
            answers[i] = raw.best.text if ok else NO_ANSWER
            ex = examples[i]
            f1[i], em[i] = score_one(Reference(ex.answer_texts, ex.is_impossible, ex.qtype), answers[i])
    pooled = best_on(np.ones(n, dtype=bool), -1)
    pooled.pop("raws"), pooled.pop("model")
    return {"answers": answers, "f1": f1, "em": em, "choices": choices, "pooled": pooled, "p_answerable": p_used}


@dataclasses.dataclass
class FitExtra:
    """Questions from outside the judged set, added to the fused answerability model's fit only: examples,
    and raws[f][setting] their decode results as predicted by fold f's model, one per example. The fit for
    fold f uses fold f's predictions; the pooled fit (key -1) all folds' together, as it uses every fold's
    predictions of the judged questions.

    Why: the judged questions (DuReader-checklist) all have long same-topic passages and nearly all a title;
    a model fitted on them alone extrapolates its lexical features to a one-sentence passage without a title
    (the README's example) and outvotes a confident reader there. Short title-less questions that no model
    trained on put that regime into the fit, while the thresholds are still tuned on the judged questions."""

    examples: Sequence
    raws: Mapping[int, Mapping[str, Sequence[RawScores]]]

    def of(self, key: int, setting: str) -> tuple[list[RawScores], list]:
        keys = sorted(self.raws) if key == -1 else [key]
        out: list = []
        for k in keys:
            got = self.raws.get(k, {}).get(setting)
            if got is None or len(got) != len(self.examples):
                raise ConfigError(f"fit_extra: no {len(self.examples)} decode results of setting {setting!r} "
                                  f"from fold {k}'s model")
            out += list(got)
        return out, list(self.examples) * len(keys)


def fused_raws(raws: Sequence[RawScores], examples: Sequence, mask: np.ndarray,
               features: Optional[Sequence[str]] = None,
               extra: Optional[tuple[Sequence[RawScores], Sequence]] = None) -> tuple[list[RawScores], object]:
    """The answerability model (tasks/mrc/answerability.py) fitted on the examples in mask (plus extra: (raws,
    examples) fitted on as well), and every raw with its P(answerable) replaced by the fused probability and
    its null test opened (a span found passes), so that rule "cls" thresholds the fused score alone, as the
    predictor applies a saved model."""
    items = items_of(examples)
    y = np.array([not ex.is_impossible for ex in examples])
    idx = np.nonzero(mask)[0]
    fit_raws, fit_items, fit_y = [raws[i] for i in idx], [items[i] for i in idx], list(y[idx])
    if extra is not None:
        fit_raws += list(extra[0])
        fit_items += items_of(extra[1])
        fit_y += [not ex.is_impossible for ex in extra[1]]
    model = fit_answerability(fit_raws, fit_items, fit_y, *([features] if features is not None else []))
    return fused_view(model, raws, examples), model


def fused_view(model, raws: Sequence[RawScores], examples: Sequence) -> list[RawScores]:
    """Every raw with its P(answerable) replaced by the fitted answerability model's probability and its null
    test opened (a span found passes): rule "cls" then thresholds the fused score alone."""
    fused = apply_answerability(model, raws, items_of(examples))
    return [dataclasses.replace(r, null_diff=1e9 if r.nbest else -np.inf) for r in fused]


def items_of(examples: Sequence) -> list[dict]:
    """The predictor's items (question, passage, title) of MRC examples."""
    return [{"question": ex.question, "passage": ex.context, "title": ex.title} for ex in examples]


def bootstrap_interval(values: Sequence[float], n_resamples: int = 10000, seed: int = 0,
                       level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values` (x100, as the official scores are)."""
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        raise ConfigError("bootstrap of no values")
    rng = np.random.default_rng(seed)
    means = v[rng.integers(0, v.size, size=(n_resamples, v.size))].mean(axis=1)
    lo, hi = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return 100 * float(lo), 100 * float(hi)


def breakdown(examples: Sequence, f1: Sequence[float], em: Sequence[float], answers: Sequence[str]) -> dict:
    """Official F1/EM (x100) overall, per answerability and per checklist type, with the always-"no answer"
    baseline and how many were answered."""
    from ...evaluation.dureader import Reference, score_one

    groups: dict[str, list[int]] = {"all": list(range(len(examples))), "answerable": [], "unanswerable": []}
    types: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        groups["unanswerable" if ex.is_impossible else "answerable"].append(i)
        types.setdefault(f"type {ex.qtype or '?'}", []).append(i)
    groups.update(sorted(types.items(), key=lambda kv: (-len(kv[1]), kv[0])))  # the biggest types first
    groups = {k: v for k, v in groups.items() if v}
    out = {}
    for name, idx in groups.items():
        base = [score_one(Reference(examples[i].answer_texts, examples[i].is_impossible, examples[i].qtype),
                          NO_ANSWER)[0] for i in idx]
        out[name] = {"n": len(idx), "F1": round(100 * float(np.mean([f1[i] for i in idx])), 1),
                     "EM": round(100 * float(np.mean([em[i] for i in idx])), 1),
                     "baseline_F1": round(100 * float(np.mean(base)), 1),
                     "answered": sum(answers[i] != NO_ANSWER for i in idx)}
    return out


def fold_sizes(examples: Sequence, folds: Sequence[int]) -> dict:
    """{fold: (questions, unanswerable)}, for logs and tests."""
    n = Counter(folds)
    u = Counter(f for ex, f in zip(examples, folds) if ex.is_impossible)
    return {f: (n[f], u[f]) for f in sorted(n)}
