"""Extractive reading comprehension (DuReader / CMRC / SQuAD 2.0): predict, decode, tune, ensemble, train.

Decision rule for one question (all windows of its passage together):
- best span: n-best start x end candidates per window (end >= start, at most max_answer_length tokens,
  both inside the passage), score = start logit + end logit, best over all windows;
- SQuAD-2 null rule: diff = best span score - min over windows of the [CLS] null score (start[0] + end[0]);
- answerability: p = max over windows of P(answerable) from the [CLS] classifier (a window without the
  answer was trained as unanswerable, so the answer's window decides);
- answerable iff diff > null_threshold AND p >= answerable_threshold. Both thresholds live in the model's
  config (head.extra), tuned on a dev file by `tune_thresholds` (defaults 0.0 and 0.5).
"""
from __future__ import annotations

import dataclasses
import logging
import math
import time
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ..data.mrc_features import Window, build_windows, collate_windows
from ..errors import ConfigError, DataError
from ..modeling.optimize import optimize_for_inference
from ..training import TrainConfig, Trainer

log = logging.getLogger("bertfam")
NO_ANSWER = "no answer"
DEFAULT_NULL_THRESHOLD = 0.0
DEFAULT_ANSWERABLE_THRESHOLD = 0.5
DEFAULT_MAX_ANSWER_LENGTH = 64  # tokens


def _as_list(model) -> list:
    return list(model) if isinstance(model, (list, tuple)) else [model]


def same_tokenizer(a, b) -> bool:
    """Two tokenizers give the same ids for every text (same vocabulary and casing)."""
    return a is b or (a.do_lower_case == b.do_lower_case and a.get_vocab() == b.get_vocab())


class MRCPredictor:
    """Answer questions about passages with one span model, or several that share a tokenizer
    (their start/end logits and answerability probabilities are averaged: a logit-level ensemble)."""

    def __init__(self, model, tokenizer=None, max_length: Optional[int] = None, doc_stride: Optional[int] = None,
                 max_answer_length: Optional[int] = None, n_best: int = 20, batch_size: int = 32,
                 max_query_length: int = 64,
                 use_title: Optional[bool] = None, null_threshold: Optional[float] = None,
                 answerable_threshold: Optional[float] = None):
        self.models = _as_list(model)
        if not self.models:
            raise ConfigError("MRCPredictor needs at least one model")
        for m in self.models:
            if getattr(m, "span", None) is None:
                raise ConfigError(f"model has head task {m.config.head.task!r}; MRC needs a 'span' head "
                                  "(train one with `bertfam mrc train`)")
            optimize_for_inference(m)  # buffer reuse in no-grad eval forwards; training still runs plain
        self.tokenizer = tokenizer if tokenizer is not None else self.models[0].tokenizer
        if self.tokenizer is None:
            raise ConfigError("the model directory has no tokenizer (vocab.txt / tokenizer.json); pass tokenizer=")
        for m in self.models[1:]:
            if m.tokenizer is not None and not same_tokenizer(m.tokenizer, self.tokenizer):
                raise ConfigError("ensemble members do not share a tokenizer; use VotingEnsemble")
        cfg = self.models[0].config
        # None: the window settings the model was trained with (head.extra), else 384 / 128
        max_length = max_length if max_length is not None else int(cfg.head.extra.get("max_length", 384))
        doc_stride = doc_stride if doc_stride is not None else int(cfg.head.extra.get("doc_stride", 128))
        limit = min(m.config.max_position_embeddings - m.config.position_offset for m in self.models)
        self.max_length = min(max_length, limit)
        # None: the longest answer the model's decoding was tuned for (head.extra), else 64 tokens
        max_answer_length = (max_answer_length if max_answer_length is not None else
                             int(cfg.head.extra.get("max_answer_length", DEFAULT_MAX_ANSWER_LENGTH)))
        self.doc_stride, self.max_answer_length, self.n_best = doc_stride, max_answer_length, n_best
        self.batch_size, self.max_query_length = batch_size, max_query_length
        extra = [m.config.head.extra for m in self.models]
        self.use_title = use_title if use_title is not None else bool(cfg.head.extra.get("use_title", True))
        self.null_threshold = (null_threshold if null_threshold is not None else
                               float(np.mean([e.get("null_threshold", DEFAULT_NULL_THRESHOLD) for e in extra])))
        self.answerable_threshold = (answerable_threshold if answerable_threshold is not None else float(
            np.mean([e.get("answerable_threshold", DEFAULT_ANSWERABLE_THRESHOLD) for e in extra])))
        self.has_answerability = all(m.span.answerable is not None for m in self.models)

    # ------------------------------------------------------------------ public API
    def predict(self, question: str, passage: str, title: Optional[str] = None) -> dict:
        return self.predict_batch([{"question": question, "passage": passage, "title": title}])[0]

    def predict_batch(self, items: Sequence[dict], details: bool = False) -> list[dict]:
        """items: dicts with question, passage (or context) and optional title. Returns per item
        {answer, start, end, score, answerable} (+ nbest, null_diff, p_answerable with details=True)."""
        clean = [_check_item(it, i) for i, it in enumerate(items)]
        todo = [i for i, it in enumerate(clean) if it["question"].strip() and it["passage"].strip()]
        raw = self.raw_scores([clean[i] for i in todo])
        out = [_empty_result(details) for _ in clean]
        for i, r in zip(todo, raw):
            out[i] = self.decide(r, details)
        return out

    def raw_scores(self, items: Sequence[dict]) -> list[dict]:
        """Per item: n-best spans (character offsets), the best null diff and max P(answerable)."""
        return [decode(ws, it["passage"], self.n_best, self.max_answer_length)
                for ws, it in zip(self.window_scores(items), items)]

    def window_scores(self, items: Sequence[dict]) -> list[list[tuple]]:
        """Per item: its windows' (window, start logits, end logits, P(answerable)), the input of `decode`
        (one forward pass can then be decoded with several settings)."""
        if not items:
            return []
        windows = build_windows(self.tokenizer, items, self.max_length, self.doc_stride, self.max_query_length,
                                self.use_title)
        per_item: list[list[tuple[Window, np.ndarray, np.ndarray, float]]] = [[] for _ in items]
        for w, s, e, p in self._forward(windows):
            per_item[w.example_index].append((w, s, e, p))
        return per_item

    def decide(self, raw: dict, details: bool = False) -> dict:
        best = raw["nbest"][0] if raw["nbest"] else None
        p = raw["p_answerable"]
        ok = answered(raw, self.null_threshold, self.answerable_threshold)
        if ok:
            res = {"answer": best["text"], "start": best["start"], "end": best["end"],
                   "score": float(best["prob"] * (p if p is not None else 1.0)), "answerable": True}
        else:
            conf = 1.0 - p if p is not None else _sigmoid(-raw["null_diff"])
            res = {"answer": None, "start": None, "end": None, "score": float(conf), "answerable": False}
        if details:
            res.update(nbest=raw["nbest"], null_diff=raw["null_diff"], p_answerable=p)
        return res

    # ------------------------------------------------------------------ model
    @property
    def device(self) -> torch.device:
        return next(self.models[0].parameters()).device

    def _forward(self, windows: list[Window]):
        """Yield (window, start logits (T,), end logits (T,), P(answerable)) averaged over the models."""
        order = sorted(range(len(windows)), key=lambda k: len(windows[k].input_ids))  # less padding
        pad = self.tokenizer.pad_token_id or 0
        for b in range(0, len(order), self.batch_size):
            chunk = [windows[k] for k in order[b:b + self.batch_size]]
            batch = collate_windows(chunk, pad, with_labels=False)
            start = end = None
            probs = []
            for m in self.models:
                m.eval()
                dev = next(m.parameters()).device
                with torch.inference_mode():
                    o = m(**{k: v.to(dev) for k, v in batch.items()})
                s, e = o.start_logits.float().cpu(), o.end_logits.float().cpu()  # (B, T)
                if o.answerable_logits is not None:
                    probs.append(torch.softmax(o.answerable_logits.float(), -1)[:, 1].cpu())  # (B,)
                start = s if start is None else start + s
                end = e if end is None else end + e
            n = len(self.models)
            # P(answerable) only when every member has the classifier (else the null rule alone decides)
            prob = torch.stack(probs).sum(0) if len(probs) == n else None
            for j, w in enumerate(chunk):
                T = len(w.input_ids)
                yield (w, (start[j, :T] / n).numpy(), (end[j, :T] / n).numpy(),
                       float(prob[j] / n) if prob is not None else None)


def decode(windows: list, passage: str, n_best: int = 20, max_answer_length: int = 64) -> dict:
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


def _sigmoid(x: float) -> float:
    if x == -math.inf:
        return 0.0
    return 1.0 / (1.0 + math.exp(-max(min(x, 50.0), -50.0)))


def _check_item(it: Any, i: int) -> dict:
    if not isinstance(it, dict):
        raise DataError(f"item {i}: expected an object with question and passage")
    q = it.get("question")
    p = it.get("passage", it.get("context"))
    t = it.get("title")
    for name, v in (("question", q), ("passage", p)):
        if not isinstance(v, str):
            raise DataError(f"item {i}: {name} must be a string, got {type(v).__name__}")
    if t is not None and not isinstance(t, str):
        raise DataError(f"item {i}: title must be a string or null, got {type(t).__name__}")
    return {"question": q, "passage": p, "title": t}


def _empty_result(details: bool) -> dict:
    r = {"answer": None, "start": None, "end": None, "score": 1.0, "answerable": False}
    if details:
        r.update(nbest=[], null_diff=-math.inf, p_answerable=None)
    return r


# ---------------------------------------------------------------------- voting ensemble
class VotingEnsemble:
    """Models with different tokenizers: each answers, answers are grouped by their DuReader-normalised
    text and the group with the largest total score wins ("no answer" is one more candidate)."""

    def __init__(self, predictors: Sequence[MRCPredictor]):
        if not predictors:
            raise ConfigError("VotingEnsemble needs at least one predictor")
        self.predictors = list(predictors)

    def predict(self, question: str, passage: str, title: Optional[str] = None) -> dict:
        return self.predict_batch([{"question": question, "passage": passage, "title": title}])[0]

    def predict_batch(self, items: Sequence[dict], details: bool = False) -> list[dict]:
        from ..evaluation.dureader import normalize

        runs = [p.predict_batch(items) for p in self.predictors]
        out = []
        for answers in zip(*runs):
            votes: dict[str, float] = {}
            best: dict[str, dict] = {}
            for a in answers:
                key = normalize(a["answer"]) if a["answerable"] else "\0none"
                votes[key] = votes.get(key, 0.0) + a["score"]
                if key not in best or a["score"] > best[key]["score"]:
                    best[key] = a
            win = max(votes, key=lambda k: votes[k])
            r = dict(best[win], score=votes[win] / len(answers))
            if details:
                r["votes"] = {k: v for k, v in votes.items()}
            out.append(r)
        return out


def load_predictor(model_dirs: Sequence[str], mode: str = "auto", **kw):
    """One model -> MRCPredictor; several -> logit-averaging ensemble when they share a tokenizer
    (mode auto/average), else (or mode vote) a VotingEnsemble."""
    from ..loading import from_pretrained

    return predictor_from_models([from_pretrained(d) for d in model_dirs], list(model_dirs), mode, **kw)


def predictor_from_models(models: list, names: Sequence[str], mode: str = "auto", **kw):
    """As load_predictor, for models already loaded (names are used in error messages). Window settings
    left as None come from the first model's training settings (head.extra), else the defaults."""
    for k in ("max_length", "doc_stride"):
        kw.setdefault(k, None)  # None: the first model's training setting
    for d, m in zip(names, models):
        if m.config.head.task != "span":
            raise ConfigError(f"{d}: head task is {m.config.head.task!r}, not 'span' (train with `bertfam mrc train`)")
        if m.tokenizer is None:
            raise ConfigError(f"{d}: no tokenizer files in the model directory")
    shared = all(same_tokenizer(models[0].tokenizer, m.tokenizer) for m in models[1:])
    if len(models) == 1:
        return MRCPredictor(models[0], **kw)
    if mode == "average" and not shared:
        raise ConfigError("--mode average needs models that share a tokenizer")
    if mode in ("auto", "average") and shared:
        return MRCPredictor(models, **kw)
    return VotingEnsemble([MRCPredictor(m, **kw) for m in models])


# ---------------------------------------------------------------------- files and thresholds
def predict_examples(predictor, examples: Sequence, no_answer_text: str = NO_ANSWER, progress: bool = False
                     ) -> tuple[dict, dict, float]:
    """({qid: answer text or no_answer_text}, {qid: n-best details}, questions per second)."""
    items = [{"question": ex.question, "passage": ex.context, "title": ex.title} for ex in examples]
    t0 = time.perf_counter()
    results = []
    step = 256
    for b in range(0, len(items), step):
        results.extend(predictor.predict_batch(items[b:b + step], details=True))
        if progress:
            log.info("predicted %d/%d", min(b + step, len(items)), len(items))
    dt = time.perf_counter() - t0
    preds, nbest = {}, {}
    for ex, r in zip(examples, results):
        preds[ex.qid] = r["answer"] if r["answerable"] else no_answer_text
        nbest[ex.qid] = {"answerable": r["answerable"], "answer": r["answer"], "start": r["start"], "end": r["end"],
                         "score": r["score"], "p_answerable": r.get("p_answerable"),
                         "null_diff": _finite(r.get("null_diff")),
                         "nbest": [dict(c, score=float(c["score"])) for c in r.get("nbest", [])]}
    return preds, nbest, len(items) / max(dt, 1e-9)


def _finite(x):
    return None if x is None or not math.isfinite(x) else float(x)


def tune_thresholds(predictor: MRCPredictor, examples: Sequence) -> dict:
    """Grid-search (null_threshold, answerable_threshold) for the best official DuReader F1 on `examples`
    (EM breaks ties). Returns the chosen values and the dev scores before/after."""
    items = [{"question": ex.question, "passage": ex.context, "title": ex.title} for ex in examples]
    return tune_on_raw(predictor.raw_scores(items), examples, predictor.null_threshold,
                       predictor.answerable_threshold, predictor.has_answerability)


def tune_on_raw(raws: Sequence[dict], examples: Sequence, null_threshold: float = DEFAULT_NULL_THRESHOLD,
                answerable_threshold: float = DEFAULT_ANSWERABLE_THRESHOLD, has_answerability: bool = True,
                rule: str = "both") -> dict:
    """tune_thresholds on scores already computed (MRCPredictor.raw_scores / decode), so that several
    decoding settings can be tuned on one forward pass. rule: "both" (span null score AND P(answerable)),
    "null" (span null score alone) or "cls" (the answerability classifier alone)."""
    from ..evaluation.dureader import Reference, score_one

    if rule not in ("both", "null", "cls"):
        raise ConfigError(f"rule {rule!r} not in both/null/cls")
    f1a, ema, f1n, emn, diffs, probs = [], [], [], [], [], []
    for ex, raw in zip(examples, raws):
        ref = Reference(ex.answer_texts, ex.is_impossible, ex.qtype)
        text = raw["nbest"][0]["text"] if raw["nbest"] else None
        fa, ea = score_one(ref, text) if text is not None else score_one(ref, NO_ANSWER)
        fn, en = score_one(ref, NO_ANSWER)
        f1a.append(fa); ema.append(ea); f1n.append(fn); emn.append(en)  # noqa: E702
        diffs.append(raw["null_diff"] if text is not None else -math.inf)
        probs.append(raw["p_answerable"] if raw["p_answerable"] is not None else 1.0)
    f1a, ema, f1n, emn = map(np.array, (f1a, ema, f1n, emn))
    diffs, probs = np.array(diffs), np.array(probs)
    finite = diffs[np.isfinite(diffs)]
    null_grid = np.unique(np.concatenate([[-1e9, 0.0], np.quantile(finite, np.linspace(0, 1, 41)) - 1e-6]
                                         if finite.size else [[-1e9, 0.0]]))
    ans_grid = np.round(np.linspace(0.0, 0.95, 20), 2) if has_answerability else np.array([0.0])
    if rule == "null":
        ans_grid = np.array([0.0])
    elif rule == "cls":
        null_grid = np.array([-1e9])

    def score(tn: float, ta: float) -> tuple[float, float]:
        answered = (diffs > tn) & (probs >= ta)
        return (float(np.where(answered, f1a, f1n).mean()), float(np.where(answered, ema, emn).mean()))

    before = score(null_threshold, answerable_threshold)
    best = (before, null_threshold, answerable_threshold) if rule == "both" else ((-1.0, -1.0), 0.0, 0.0)
    for tn in null_grid:
        for ta in ans_grid:
            s = score(float(tn), float(ta))
            if s > best[0]:
                best = (s, float(tn), float(ta))
    (f1, em), tn, ta = best
    return {"null_threshold": tn, "answerable_threshold": ta, "dev_f1": 100 * f1, "dev_em": 100 * em,
            "dev_f1_before": 100 * before[0], "dev_em_before": 100 * before[1], "dev_questions": len(examples)}


def save_thresholds(model, model_dir: str, tuned: dict, tuned_on: str) -> None:
    """Write the tuned thresholds into model_dir/config.json (head.extra)."""
    import os

    extra = dict(model.config.head.extra, null_threshold=tuned["null_threshold"],
                 answerable_threshold=tuned["answerable_threshold"], thresholds_tuned_on=tuned_on,
                 tuned_dev_f1=round(tuned["dev_f1"], 3))
    if tuned.get("max_answer_length"):  # tuned together with the thresholds
        extra["max_answer_length"] = int(tuned["max_answer_length"])
    model.config.head = dataclasses.replace(model.config.head, extra=extra)
    model.config.save(os.path.join(model_dir, "config.json"))


# ---------------------------------------------------------------------- training
def load_span_model(spec: str, vocab: Optional[str] = None, seed: int = 0):
    """A span model from a checkpoint directory (new span head if it has another head), or a preset
    name (random weights) with a vocabulary file."""
    import os

    from ..config import HeadConfig, preset
    from ..loading import from_pretrained
    from ..modeling import build_model
    from ..tokenization import Tokenizer

    if os.path.isdir(spec):
        model = from_pretrained(spec, task="span", seed=seed, answerability=True)
        if vocab:
            model.tokenizer = Tokenizer.from_vocab(vocab)
        if model.tokenizer is None:
            raise ConfigError(f"{spec}: no tokenizer in the model directory; give --vocab")
        return model
    if not vocab:
        raise ConfigError(f"{spec}: not a model directory; a preset name needs --vocab VOCAB.txt")
    tok = Tokenizer.from_vocab(vocab)
    model = build_model(preset(spec, vocab_size=tok.vocab_size, head=HeadConfig(task="span")), seed=seed)
    model.tokenizer = tok
    return model


def train_mrc(model, train_examples: Sequence, out_dir: str, dev_examples: Sequence = (), *, max_length: int = 384,
              doc_stride: int = 128, max_query_length: int = 64, use_title: bool = True, tune: bool = True,
              eval_limit: Optional[int] = 500, train: Optional[TrainConfig] = None, dev_name: str = "dev",
              resume_from: Optional[str] = None) -> dict:
    """Fine-tune a span model (span loss + answerability loss on every window), evaluate on dev at the
    end of each epoch (official DuReader F1/EM), then tune and save the thresholds on dev. `train`: the
    trainer's settings (default TrainConfig()); its out_dir is `out_dir`."""

    tok = model.tokenizer
    max_length = min(max_length, model.config.max_position_embeddings - model.config.position_offset)
    extra = dict(model.config.head.extra, use_title=use_title, max_length=max_length, doc_stride=doc_stride)
    model.config.head = dataclasses.replace(model.config.head, extra=extra, answerability=True)
    windows = build_windows(tok, train_examples, max_length, doc_stride, max_query_length, use_title,
                            with_labels=True)
    n_pos = sum(w.answerable for w in windows)
    n_multi = sum(1 for c in _counts(w.example_index for w in windows).values() if c > 1)
    log.info("train: %d questions -> %d windows (%d hold the answer; %d passages longer than one window)",
             len(train_examples), len(windows), n_pos, n_multi)
    pad = tok.pad_token_id or 0
    tc = dataclasses.replace(train if train is not None else TrainConfig(), out_dir=out_dir)
    eval_set = list(dev_examples)[:eval_limit] if eval_limit else list(dev_examples)

    def eval_fn(m) -> dict:
        pred = MRCPredictor(m, tokenizer=tok, max_length=max_length, doc_stride=doc_stride, use_title=use_title)
        return score_examples(pred, eval_set)

    trainer = Trainer(model, tc, windows, lambda b: collate_windows(b, pad), eval_fn=eval_fn if eval_set else None,
                      lengths=[len(w.input_ids) for w in windows], tokenizer=tok)
    summary = trainer.train(resume_from=resume_from)
    summary.pop("history", None)
    summary.update(train_questions=len(train_examples), train_windows=len(windows), answer_windows=n_pos,
                   multi_window_questions=n_multi)
    if tune and dev_examples:
        pred = MRCPredictor(model, tokenizer=tok, max_length=max_length, doc_stride=doc_stride, use_title=use_title)
        tuned = tune_thresholds(pred, dev_examples)
        save_thresholds(model, out_dir, tuned, dev_name)
        summary["thresholds"] = tuned
    return summary


def _counts(xs) -> dict:
    from collections import Counter

    return Counter(xs)


def score_examples(predictor, examples: Sequence) -> dict:
    """Official DuReader F1/EM (x100) of a predictor on examples that carry their references."""
    from collections import OrderedDict

    from ..evaluation.dureader import Reference, evaluate

    preds, _, qps = predict_examples(predictor, examples)
    refs = OrderedDict((ex.qid, Reference(ex.answer_texts, ex.is_impossible, ex.qtype)) for ex in examples)
    r = evaluate(refs, preds)
    return {"f1": float(r["F1"]), "em": float(r["EM"]), "questions_per_s": qps}
