"""Several models together: logit averaging (`MRCPredictor` on a list, when they share a tokenizer) or
answer voting (`VotingEnsemble`); `load_predictor` / `predictor_from_models` pick one."""
from __future__ import annotations

import dataclasses
from typing import Mapping, Optional, Sequence

from ...errors import ConfigError
from .predictor import MRCPredictor, same_tokenizer, settings_of
from .results import MRCPrediction


class VotingEnsemble:
    """Models with different tokenizers: each answers, answers are grouped by their DuReader-normalised
    text and the group with the largest total score wins ("no answer" is one more candidate)."""

    def __init__(self, predictors: Sequence[MRCPredictor]):
        if not predictors:
            raise ConfigError("VotingEnsemble needs at least one predictor")
        self.predictors = list(predictors)

    def predict(self, question: str, passage: str, title: Optional[str] = None) -> MRCPrediction:
        return self.predict_batch([{"question": question, "passage": passage, "title": title}])[0]

    def predict_batch(self, items: Sequence[dict], details: bool = False) -> list[MRCPrediction]:
        """The winning answer per item, its score the group's total / members; details: the votes too."""
        runs = [p.predict_batch(items) for p in self.predictors]
        return [_vote(answers, details) for answers in zip(*runs)]


def _vote(answers: Sequence[MRCPrediction], details: bool) -> MRCPrediction:
    from ...evaluation.dureader import normalize

    votes: dict[str, float] = {}
    best: dict[str, MRCPrediction] = {}
    for a in answers:
        key = normalize(a.answer) if a.answerable else "\0none"
        votes[key] = votes.get(key, 0.0) + a.score
        if key not in best or a.score > best[key].score:
            best[key] = a
    win = max(votes, key=lambda k: votes[k])
    return dataclasses.replace(best[win], score=votes[win] / len(answers), votes=dict(votes) if details else None)


def load_predictor(model_dirs: Sequence[str], mode: str = "auto", overrides: Optional[Mapping] = None, **kw):
    """One model -> MRCPredictor; several -> logit-averaging ensemble when they share a tokenizer
    (mode auto/average), else (or mode vote) a VotingEnsemble. See predictor_from_models."""
    from ...checkpoint import from_pretrained

    return predictor_from_models([from_pretrained(d) for d in model_dirs], list(model_dirs), mode, overrides, **kw)


def predictor_from_models(models: list, names: Sequence[str], mode: str = "auto",
                          overrides: Optional[Mapping] = None, **kw):
    """As load_predictor, for models already loaded (names are used in error messages). Each predictor runs
    with its models' settings (`settings_of`) and `overrides` (MRCSettings fields) replacing some; kw:
    MRCPredictor's verifier, batch_size, int8, optimize."""
    over = dict(overrides or {})
    for d, m in zip(names, models):
        if m.config.head.task != "span":
            raise ConfigError(f"{d}: head task is {m.config.head.task!r}, not 'span' (train with `bertfam mrc train`)")
        if m.tokenizer is None:
            raise ConfigError(f"{d}: no tokenizer files in the model directory")
    shared = all(same_tokenizer(models[0].tokenizer, m.tokenizer) for m in models[1:])
    if len(models) == 1:
        return MRCPredictor(models[0], settings_of(models, **over), **kw)
    if mode == "average" and not shared:
        raise ConfigError("--mode average needs models that share a tokenizer")
    if mode in ("auto", "average") and shared:
        return MRCPredictor(models, settings_of(models, **over), **kw)
    return VotingEnsemble([MRCPredictor(m, settings_of(m, **over), **kw) for m in models])
