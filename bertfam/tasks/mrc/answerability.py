"""The fused answerability model: P(answerable) from the reader's signals AND from how the question matches
its title and passage, one logistic regression fitted on real questions (out of fold, by
`crossval.tune_out_of_fold`) and saved in the model's config (`head.mrc.answerability`).

Why lexical features: DuReader-checklist's unanswerable questions are near-copies of the question a passage
was written for (its title), changed in one detail ("下巴反复长痘痘是什么原因" -> "下巴长痘痘是什么原因14岁",
"力补金秋胶囊有什么作用" -> "力补金秋胶囊副作用"). A small reader ranks them weakly (AUC ~0.72 for its null
score); how much of the question the title and the passage cover is a signal of its own, and the two combine.

Features (`FEATURES`, each a number per question; the reader's come from one `decoding.decode` result):
- reader: null diff (clipped to [-20, 20]; no span: -20), logit of the classifier's P(answerable), the top
  span's probability among the n-best, the verifier's relevance (0 without one);
- span: log(1 + top span length), the share of its characters found in the question (an answer that repeats
  the question is a bad one);
- title: has a title; character and bigram coverage of the question by the title and of the title by the
  question (0 without a title). The title is cut at its site suffix ("..._百度知道", "... - 知乎");
- passage: character, bigram and trigram coverage of the question by the passage; log lengths.
Optional (`CUE_FEATURES`, not in the default set): whether the question asks how / why, yes or no, or for a
name, place, time or number (1.0 or 0.0 each, by its question words; a question may ask none of them).
Optional (`WORD_FEATURES`, not in the default set: a model names them in its `features` to use them): the
question's content words (jieba, question and function words dropped) found in the passage and in the title,
and log(1 + length) of the longest content word the passage lacks. Character n-grams count 北京大学 as
mostly present in a passage about 清华大学 in 北京; a word-level test sees the name itself missing.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Optional, Sequence

import numpy as np

from ...config import AnswerabilityModel
from ...errors import ConfigError
from .decoding import coverage
from .results import RawScores

FEATURES = ("null_diff", "reader_logit", "top_prob", "relevance", "span_log_len", "span_in_question",
            "has_title", "q_in_title", "title_in_q", "q_bigrams_in_title", "title_bigrams_in_q",
            "q_in_passage", "q_bigrams_in_passage", "q_trigrams_in_passage", "q_log_len", "passage_log_len")

WORD_FEATURES = ("q_words_in_passage", "q_words_in_title", "q_missing_word_log_len")
CUE_FEATURES = ("q_asks_how", "q_asks_yes_no", "q_asks_entity")
KNOWN_FEATURES = FEATURES + WORD_FEATURES + CUE_FEATURES

# what kind of answer a question asks for, by its question words (DuReader's own three kinds: description,
# yes/no, entity): a passage on the question's topic states a name or a number more often than a procedure
_CUES = {"q_asks_how": ("怎么", "如何", "怎样", "为什么", "为何", "方法", "步骤"),
         "q_asks_yes_no": ("吗", "是否", "能不能", "可不可以", "有没有", "会不会", "好不好", "是不是"),
         "q_asks_entity": ("谁", "哪", "什么时候", "多少", "多久", "几", "是什么")}

# what a question asks with, not what it is about: never a content word
_QUESTION_WORDS = frozenset("什么 哪里 哪儿 哪个 哪些 哪 多少 多久 多大 多长 多高 几 怎么 怎么样 怎样 如何 为什么 为何 吗 呢 吧 啊 么 "
                            "是 的 了 在 有 和 与 及 或 啥 谁 能 可以 会 要 一个".split())
_QUESTION_PREFIXES = ("哪", "什么", "多少", "几")  # jieba keeps 哪一年, 什么样, 多少钱, 几岁 as one word

# a site suffix after the page's own title: "_有问必答_快速问医生", " - 知乎", "-太平洋汽车网", "|..."
_SITE_SUFFIX = re.compile(r"[_|｜]|\s+-\s*|-{1,2}(?=[^\d])")


def clean_title(title: Optional[str]) -> str:
    """The page's own title: a leading 【...】 taken, cut at the first site-suffix separator, stripped."""
    if not title:
        return ""
    t = title.strip()
    if t.startswith("【") and "】" in t:  # "【一吨沙子等于多少立方】作业帮": the bracketed part is the title
        t = t[1:t.index("】")]
    return _SITE_SUFFIX.split(t, maxsplit=1)[0].strip()


def lexical_features(question: str, passage: str, title: Optional[str]) -> dict:
    t = clean_title(title)
    has = 1.0 if t else 0.0
    return {"has_title": has,
            "q_in_title": has * coverage(question, t), "title_in_q": has * coverage(t, question),
            "q_bigrams_in_title": has * coverage(question, t, 2), "title_bigrams_in_q": has * coverage(t, question, 2),
            "q_in_passage": coverage(question, passage), "q_bigrams_in_passage": coverage(question, passage, 2),
            "q_trigrams_in_passage": coverage(question, passage, 3),
            "q_log_len": math.log(1 + len(question)), "passage_log_len": math.log(1 + len(passage))}


def content_words(text: str) -> list[str]:
    """The words of `text` (jieba, its default dictionary) that carry content: punctuation, question words and
    function words dropped."""
    import logging

    import jieba

    jieba.setLogLevel(logging.WARNING)
    return [w for w in jieba.lcut(text) if w not in _QUESTION_WORDS and not w.startswith(_QUESTION_PREFIXES)
            and any(c.isalnum() for c in w)]


def word_features(question: str, passage: str, title: Optional[str]) -> dict:
    words, t = content_words(question), clean_title(title)
    if not words:  # nothing to look for: as if all were found
        return {"q_words_in_passage": 1.0, "q_words_in_title": 1.0 if t else 0.0, "q_missing_word_log_len": 0.0}
    missing = [w for w in words if w not in passage]
    return {"q_words_in_passage": 1.0 - len(missing) / len(words),
            "q_words_in_title": sum(w in t for w in words) / len(words) if t else 0.0,
            "q_missing_word_log_len": math.log(1 + max((len(w) for w in missing), default=0))}


def cue_features(question: str) -> dict:
    return {name: float(any(c in question for c in cues)) for name, cues in _CUES.items()}


def reader_features(raw: RawScores, question: str) -> dict:
    """The features of one `decode` result (its own P(answerable): call before it is replaced by the fused one)."""
    d = raw.null_diff
    d = -20.0 if not np.isfinite(d) else float(np.clip(d, -20, 20))
    p = float(np.clip(raw.p_answerable if raw.p_answerable is not None else 0.5, 1e-6, 1 - 1e-6))
    top, rel = raw.best, raw.relevance
    return {"null_diff": d, "reader_logit": float(np.log(p / (1 - p))), "top_prob": float(top.prob) if top else 0.0,
            "relevance": float(rel) if rel is not None else 0.0,
            "span_log_len": math.log(1 + len(top.text)) if top else 0.0,
            "span_in_question": coverage(top.text, question) if top and top.text else 0.0}


def feature_vector(raw: RawScores, item: dict, names: Sequence[str] = FEATURES) -> np.ndarray:
    """(F,) the named features of one question: item has question, passage (or context) and title."""
    passage = item.get("passage", item.get("context")) or ""
    f = {**reader_features(raw, item["question"]), **lexical_features(item["question"], passage, item.get("title"))}
    if any(n in WORD_FEATURES for n in names):  # jieba only where a model asks for these
        f.update(word_features(item["question"], passage, item.get("title")))
    if any(n in CUE_FEATURES for n in names):
        f.update(cue_features(item["question"]))
    return np.array([f[n] for n in names], dtype=float)


def check_model(model: AnswerabilityModel, needs_relevance: bool = False,
                where: str = "head.mrc.answerability") -> None:
    """ConfigError unless every feature the model names is one this module computes, and (needs_relevance:
    the predictor has no verifier) unless the model gives the verifier's relevance no weight: without the
    verifier that feature would read 0, a value the model never saw."""
    unknown = [n for n in model.features if n not in KNOWN_FEATURES]
    if unknown:
        raise ConfigError(f"{where}.features: unknown feature(s) {', '.join(unknown)} "
                          f"(known: {', '.join(KNOWN_FEATURES)})")
    if needs_relevance and any(n == "relevance" and c != 0.0 for n, c in zip(model.features, model.coef)):
        raise ConfigError(f"{where} weighs the verifier's relevance, but the predictor has no verifier "
                          "(head.mrc.verifier names none, or verifier=False / --no-verifier was given)")


# the reader's signals: each higher = more likely answerable by construction, so their weights are kept >= 0.
# Fitted freely, two of these collinear signals take opposite signs that cancel on the checklist's long
# passages and stop cancelling off it (a one-sentence passage: top span probability far above any seen there).
NONNEGATIVE = ("null_diff", "reader_logit", "top_prob", "relevance")


def fit(raws: Sequence[RawScores], items: Sequence[dict], y: Sequence[bool], names: Sequence[str] = FEATURES,
        c: float = 1.0, nonnegative: Sequence[str] = NONNEGATIVE) -> AnswerabilityModel:
    """Logistic regression of answerable on the standardised features: C * log loss + |w|^2 / 2 (sklearn's
    LogisticRegression objective, intercept unpenalised), minimised by L-BFGS-B with the weights of the
    features in `nonnegative` bounded below by 0."""
    if len(raws) != len(items) or len(items) != len(y):
        raise ConfigError("fit: one decode result, one item and one label per question")
    if len(set(map(bool, y))) < 2:
        raise ConfigError("fit: the questions must include answerable and unanswerable ones")
    X = np.stack([feature_vector(r, it, names) for r, it in zip(raws, items)])  # (N, F)
    mu, sd = X.mean(0), X.std(0)
    sd = np.where(sd > 1e-9, sd, 1.0)  # a constant feature (no verifier: relevance 0) gets weight 0
    coef, intercept = _logistic((X - mu) / sd, np.asarray(y, dtype=bool),
                                c, [(0.0, None) if n in nonnegative else (None, None) for n in names])
    return AnswerabilityModel(features=list(names), mean=mu.tolist(), scale=sd.tolist(),
                              coef=coef.tolist(), intercept=intercept)


def _logistic(Z: np.ndarray, y: np.ndarray, c: float, bounds: list) -> tuple[np.ndarray, float]:
    """(weights (F,), intercept) minimising c * sum log(1 + exp(-s z)) + |w|^2 / 2, s = +-1 the label,
    z = Z w + b, under per-weight bounds (the intercept free)."""
    from scipy.optimize import minimize
    from scipy.special import expit

    s = np.where(y, 1.0, -1.0)  # (N,)

    def loss(theta):
        w, b = theta[:-1], theta[-1]
        m = s * (Z @ w + b)  # (N,) margins
        g = -c * s * expit(-m)  # d loss / d z
        return c * np.logaddexp(0.0, -m).sum() + 0.5 * w @ w, np.append(Z.T @ g + w, g.sum())

    res = minimize(loss, np.zeros(Z.shape[1] + 1), jac=True, method="L-BFGS-B", bounds=bounds + [(None, None)],
                   options={"maxiter": 5000, "gtol": 1e-8})
    return res.x[:-1], float(res.x[-1])


def probability(model: AnswerabilityModel, raw: RawScores, item: dict) -> float:
    """P(answerable) of one question under the fused model."""
    x = (feature_vector(raw, item, model.features) - np.array(model.mean)) / np.array(model.scale)
    z = float(x @ np.array(model.coef) + model.intercept)
    return float(1.0 / (1.0 + math.exp(-max(min(z, 50.0), -50.0))))


def apply(model: AnswerabilityModel, raws: Sequence[RawScores], items: Sequence[dict]) -> list[RawScores]:
    """raws with P(answerable) replaced by the fused probability (the reader's own kept as p_reader). The
    null test is then left to the thresholds: a fused model is tuned with the null test open (rule "cls")."""
    return [dataclasses.replace(r, p_reader=r.p_answerable, p_answerable=probability(model, r, it))
            for r, it in zip(raws, items)]
