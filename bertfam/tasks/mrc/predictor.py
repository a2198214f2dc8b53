"""`MRCPredictor`: windows -> model forward (one model, or several sharing a tokenizer: their logits averaged)
-> `decoding.decode` per question (+ the verifier's relevance, when there is one) -> the no-answer rule
(`decoding.answered`) with the model's thresholds."""
from __future__ import annotations

import math
import os
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ...data.batching import length_batches
from ...data.mrc_windows import Window, build_windows, collate_windows
from ...errors import ConfigError, DataError
from ...modeling.optimize import optimize_for_inference
from ..blank import is_blank
from ..interrupt import check_interrupt
from .answerability import apply as apply_answerability, check_model
from .decoding import EXTENSIONS, answered, decode


def _as_list(model) -> list:
    return list(model) if isinstance(model, (list, tuple)) else [model]


def same_tokenizer(a, b) -> bool:
    """Two tokenizers give the same ids for every text (same vocabulary and casing)."""
    return a is b or (a.do_lower_case == b.do_lower_case and a.get_vocab() == b.get_vocab())


class MRCPredictor:
    """Answer questions about passages with one span model, or several that share a tokenizer
    (their start/end logits and answerability probabilities are averaged: a logit-level ensemble).

    Settings left as None are the model's (`head.mrc`: the first model's windows and decoding, the members'
    mean thresholds), else MRCSettings' defaults.

    optimize (default True): this predictor is a prediction entry point, so it applies the inference swap
    to its models (`optimize_for_inference`, modeling/optimize.py: buffer reuse, same outputs bit for bit);
    False leaves them as they are, for a model still in training (train_mrc's dev evaluation). int8:
    quantize the models for CPU inference (`optimize_for_inference(m, int8=True)`, modeling/int8.py; an
    int8 checkpoint is int8 anyway); needs optimize.

    verifier: None = the one the first model's `head.mrc.verifier` names (a directory next to its
    config.json; none if it names none), False = no verifier, a directory path or a `Verifier`."""

    def __init__(self, model, tokenizer=None, max_length: Optional[int] = None, doc_stride: Optional[int] = None,
                 max_answer_length: Optional[int] = None, n_best: Optional[int] = None, batch_size: int = 32,
                 max_query_length: Optional[int] = None,
                 use_title: Optional[bool] = None, null_threshold: Optional[float] = None,
                 answerable_threshold: Optional[float] = None, int8: bool = False, verifier=None,
                 verifier_threshold: Optional[float] = None, answer_extension: Optional[str] = None,
                 optimize: bool = True):
        self.models = _as_list(model)
        if not self.models:
            raise ConfigError("MRCPredictor needs at least one model")
        if int8 and not optimize:
            raise ConfigError("MRCPredictor: int8 is an inference swap; it needs optimize=True")
        for m in self.models:
            if getattr(m, "span", None) is None:
                raise ConfigError(f"model has head task {m.config.head.task!r}; MRC needs a 'span' head "
                                  "(train one with `bertfam mrc train`)")
            if optimize:
                optimize_for_inference(m, int8=int8)  # buffer reuse in no-grad eval forwards
        self.tokenizer = tokenizer if tokenizer is not None else self.models[0].tokenizer
        if self.tokenizer is None:
            raise ConfigError("the model directory has no tokenizer (vocab.txt / tokenizer.json); pass tokenizer=")
        for m in self.models[1:]:
            if m.tokenizer is not None and not same_tokenizer(m.tokenizer, self.tokenizer):
                raise ConfigError("ensemble members do not share a tokenizer; use VotingEnsemble")
        settings = [m.config.head.mrc_settings for m in self.models]
        first = settings[0]

        def pick(given, saved):
            return given if given is not None else saved

        limit = min(m.config.max_sequence_length for m in self.models)
        self.max_length = min(pick(max_length, first.max_length), limit)
        self.doc_stride = pick(doc_stride, first.doc_stride)
        self.max_answer_length = pick(max_answer_length, first.max_answer_length)
        self.n_best = pick(n_best, first.n_best)
        self.max_query_length = pick(max_query_length, first.max_query_length)
        self.use_title = pick(use_title, first.use_title)
        self.batch_size = batch_size
        self.on_progress = None  # callable(windows read, windows in the call), set by predict_examples
        self.null_threshold = pick(null_threshold, float(np.mean([s.null_threshold for s in settings])))
        self.answerable_threshold = pick(answerable_threshold,
                                         float(np.mean([s.answerable_threshold for s in settings])))
        self.has_answerability = all(m.span.answerable is not None for m in self.models)
        self.answer_extension = pick(answer_extension, first.answer_extension)
        self.question_overlap_penalty = first.question_overlap_penalty
        if self.answer_extension not in EXTENSIONS:
            raise ConfigError(f"answer_extension {self.answer_extension!r} not in {', '.join(EXTENSIONS)}")
        self.verifier = _verifier_of(self.models[0], verifier)
        self.verifier_threshold = pick(verifier_threshold, first.verifier_threshold)
        # the fused answerability model the thresholds were tuned with (None: the reader's classifier)
        self.answerability = first.answerability
        if self.answerability is not None:
            check_model(self.answerability, needs_relevance=self.verifier is None)

    # ------------------------------------------------------------------ public API
    def predict(self, question: str, passage: str, title: Optional[str] = None) -> dict:
        return self.predict_batch([{"question": question, "passage": passage, "title": title}])[0]

    def predict_batch(self, items: Sequence[dict], details: bool = False) -> list[dict]:
        """items: dicts with question, passage (or context) and optional title. Returns per item
        {answer, start, end, score, answerable} (+ nbest, null_diff, p_answerable with details=True)."""
        clean = [_check_item(it, i) for i, it in enumerate(items)]
        todo = [i for i, it in enumerate(clean) if not is_blank(it["question"]) and not is_blank(it["passage"])]
        raw = self.raw_scores([clean[i] for i in todo])
        out = [_empty_result(details) for _ in clean]
        for i, r in zip(todo, raw):
            out[i] = self.decide(r, details)
        return out

    def raw_scores(self, items: Sequence[dict]) -> list[dict]:
        """Per item: n-best spans (character offsets), the best null diff, P(answerable) (the fused model's
        when the model has one, the reader's then kept as p_reader) and the verifier's relevance (None
        without a verifier)."""
        raws = [decode(ws, it["passage"], self.n_best, self.max_answer_length, self.answer_extension,
                       it["question"], self.question_overlap_penalty)
                for ws, it in zip(self.window_scores(items), items)]
        rel = self.relevance(items)
        for r, v in zip(raws, rel if rel is not None else []):
            r["relevance"] = float(v)
        if self.answerability is not None:
            raws = apply_answerability(self.answerability, raws, items)
        return raws

    def relevance(self, items: Sequence[dict]) -> Optional[np.ndarray]:
        """(N,) the verifier's question-passage relevance, or None when the predictor has no verifier."""
        if self.verifier is None:
            return None
        check_interrupt()
        return self.verifier.scores([{"question": it["question"], "passage": it["passage"],
                                      "title": it.get("title") if self.use_title else None} for it in items])

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
        ok = answered(raw, self.null_threshold, self.answerable_threshold, self.verifier_threshold)
        if ok:
            res = {"answer": best["text"], "start": best["start"], "end": best["end"],
                   "score": float(best["prob"] * (p if p is not None else 1.0)), "answerable": True}
        else:
            conf = 1.0 - p if p is not None else _sigmoid(-raw["null_diff"])
            res = {"answer": None, "start": None, "end": None, "score": float(conf), "answerable": False}
        if details:
            res.update(nbest=raw["nbest"], null_diff=raw["null_diff"], p_answerable=p,
                       relevance=raw.get("relevance"))
        return res

    # ------------------------------------------------------------------ model
    @property
    def device(self) -> torch.device:
        return next(self.models[0].parameters()).device

    def _forward(self, windows: list[Window]):
        """Yield (window, start logits (T,), end logits (T,), P(answerable)) averaged over the models."""
        pad = self.tokenizer.pad_token_id or 0
        done = 0
        for idx in length_batches([len(w.input_ids) for w in windows], self.batch_size, longest_first=False):
            check_interrupt()  # a served request that has gone stops here, between model calls
            chunk = [windows[k] for k in idx]  # shortest first: less padding
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
            yield from window_logits(chunk, start / n, end / n, prob / n if prob is not None else None)
            done += len(chunk)
            if getattr(self, "on_progress", None) is not None:
                self.on_progress(done, len(windows))


def window_logits(windows: Sequence[Window], start: torch.Tensor, end: torch.Tensor,
                  p_answerable: Optional[torch.Tensor] = None) -> list[tuple]:
    """The input of `decode` for one batch of windows: per window (window, start logits (T,), end logits (T,),
    P(answerable) or None), the batch's (B, T') float CPU logits cut to the window's T tokens."""
    return [(w, start[j, :len(w.input_ids)].numpy(), end[j, :len(w.input_ids)].numpy(),
             float(p_answerable[j]) if p_answerable is not None else None) for j, w in enumerate(windows)]


def _verifier_of(model, verifier):
    """The Verifier `verifier` asks for (see MRCPredictor), loaded once."""
    from .verifier import load_verifier

    if verifier is False:
        return None
    if verifier is None:
        name = model.config.head.mrc_settings.verifier
        home = getattr(model, "name_or_path", None)
        if name is None:
            return None
        if home is None:  # a model built in memory: its verifier cannot be found
            raise ConfigError(f"the model's head.mrc.verifier is {name!r} but the model was not loaded from a "
                              "directory; pass verifier= (a directory or False)")
        verifier = os.path.join(home, name)
        if not os.path.isdir(verifier):
            raise ConfigError(f"{verifier}: the model's verifier (head.mrc.verifier) is not there; `bertfam mrc "
                              f"build-verifier {home}` builds an e5 one (make does, for the shipped model), or run "
                              "without it (--no-verifier, verifier=False)")
    if isinstance(verifier, str):
        return load_verifier(verifier)
    return verifier


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
        r.update(nbest=[], null_diff=-math.inf, p_answerable=None, relevance=None)
    return r
