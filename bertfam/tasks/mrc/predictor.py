"""`MRCPredictor`: windows -> model forward (one model, or several sharing a tokenizer: their logits averaged)
-> `decoding.decode` per question (+ the verifier's relevance, when there is one) -> the no-answer rule
(`decoding.answered`) with the thresholds of its settings (`config.MRCSettings`, the model's head.mrc)."""
from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional, Sequence

import numpy as np
import torch

from ...config import MRCSettings
from ...data.batching import length_batches
from ...data.mrc_windows import Window, build_windows, collate_windows
from ...errors import ConfigError, DataError
from ...modeling.optimize import optimize_for_inference
from ..blank import is_blank
from ..interrupt import check_interrupt
from .answerability import apply as apply_answerability, check_model
from .decoding import answered, decode_with
from .query_form import is_keyword_query
from .results import MRCPrediction, RawScores


def _as_list(model) -> list:
    return list(model) if isinstance(model, (list, tuple)) else [model]


def same_tokenizer(a, b) -> bool:
    """Two tokenizers give the same ids for every text (same vocabulary and casing)."""
    return a is b or (a.do_lower_case == b.do_lower_case and a.get_vocab() == b.get_vocab())


def settings_of(models, **overrides) -> MRCSettings:
    """The settings a predictor of `models` (one, or a list) runs with when given none: the first model's
    head.mrc (windows, decoding, verifier, fused answerability model) with the members' mean thresholds;
    `overrides` (MRCSettings fields) replace fields of that, each checked (one ConfigError line)."""
    models = _as_list(models)
    if not models:
        raise ConfigError("MRCPredictor needs at least one model")
    unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(MRCSettings)})
    if unknown:
        raise ConfigError(f"{MRCSettings.WHERE}: unknown field(s) {', '.join(unknown)}")
    saved = [m.config.head.mrc_settings for m in models]
    mean = {k: float(np.mean([getattr(s, k) for s in saved])) for k in ("null_threshold", "answerable_threshold")}
    return dataclasses.replace(saved[0], **{**mean, **overrides})


class MRCPredictor:
    """Answer questions about passages with one span model, or several that share a tokenizer
    (their start/end logits and answerability probabilities are averaged: a logit-level ensemble).

    settings: the windows, decoding and no-answer rule (`config.MRCSettings`); None = the models' own
    (`settings_of(models)`: the first model's head.mrc, the members' mean thresholds). To change a few,
    pass `settings_of(models, max_answer_length=30)` (or `dataclasses.replace` of a model's
    `config.head.mrc_settings`). The windows are cut to the shortest member's positions.

    verifier: None = the one `settings.verifier` names (a directory next to the first model's config.json;
    none if it names none), False = no verifier, a directory path or a `Verifier`.

    optimize (default True): this predictor is a prediction entry point, so it applies the inference swap
    to its models (`optimize_for_inference`, modeling/optimize.py: buffer reuse, same outputs bit for bit);
    False leaves them as they are, for a model still in training (train_mrc's dev evaluation). int8:
    quantize the models for CPU inference (`optimize_for_inference(m, int8=True)`, modeling/int8.py; an
    int8 checkpoint is int8 anyway); needs optimize."""

    def __init__(self, models, settings: Optional[MRCSettings] = None, verifier=None, *, batch_size: int = 32,
                 int8: bool = False, optimize: bool = True):
        self.models = _as_list(models)
        _prepare(self.models, int8, optimize)
        self.tokenizer = _shared_tokenizer(self.models)
        self.settings = _checked(settings if settings is not None else settings_of(self.models), self.models)
        self.batch_size = batch_size
        self.on_progress = None  # callable(windows read, windows in the call), set by predict_examples
        self.has_answerability = all(m.span.answerable is not None for m in self.models)
        self.verifier = _verifier_of(self.models[0], self.settings.verifier, verifier)
        if self.settings.answerability is not None:  # the fused model the thresholds were tuned with
            check_model(self.settings.answerability, needs_relevance=self.verifier is None)

    # ------------------------------------------------------------------ public API
    def predict(self, question: str, passage: str, title: Optional[str] = None) -> MRCPrediction:
        return self.predict_batch([{"question": question, "passage": passage, "title": title}])[0]

    def predict_batch(self, items: Sequence[dict], details: bool = False) -> list[MRCPrediction]:
        """items: dicts with question, passage (or context) and optional title. Returns one MRCPrediction per
        item (its details too with details=True); `.to_dict()` is the JSON shape."""
        clean = [_check_item(it, i) for i, it in enumerate(items)]
        todo = [i for i, it in enumerate(clean) if not is_blank(it["question"]) and not is_blank(it["passage"])]
        raw = self.raw_scores([clean[i] for i in todo])
        out = [_empty_result(details) for _ in clean]
        for i, r in zip(todo, raw):
            out[i] = self.decide(r, details)
        return out

    def raw_scores(self, items: Sequence[dict]) -> list[RawScores]:
        """Per item: n-best spans (character offsets), the best null diff, P(answerable) (the fused model's
        when the settings have one, the reader's then kept as p_reader) and the verifier's relevance (None
        without a verifier)."""
        raws = [decode_with(self.settings, ws, it["passage"], it["question"])
                for ws, it in zip(self.window_scores(items), items)]
        rel = self.relevance(items)
        if rel is not None:
            raws = [dataclasses.replace(r, relevance=float(v)) for r, v in zip(raws, rel)]
        if self.settings.answerability is not None:
            raws = apply_answerability(self.settings.answerability, raws, items)
        return raws

    def relevance(self, items: Sequence[dict]) -> Optional[np.ndarray]:
        """(N,) the verifier's question-passage relevance, or None when the predictor has no verifier."""
        if self.verifier is None:
            return None
        check_interrupt()
        return self.verifier.scores([{"question": it["question"], "passage": it["passage"],
                                      "title": it.get("title") if self.settings.use_title else None}
                                     for it in items])

    def window_scores(self, items: Sequence[dict]) -> list[list[tuple]]:
        """Per item: its windows' (window, start logits, end logits, P(answerable)), the input of `decode`
        (one forward pass can then be decoded with several settings)."""
        if not items:
            return []
        s = self.settings
        items = reader_items(s, items)
        windows = build_windows(self.tokenizer, items, s.max_length, s.doc_stride, s.max_query_length, s.use_title)
        twice = titled_twice(s, items)  # their second read, without the title, goes after all the items
        windows += [dataclasses.replace(w, example_index=len(items) + w.example_index)
                    for w in build_windows(self.tokenizer, [items[i] for i in twice], s.max_length, s.doc_stride,
                                           s.max_query_length, False)]
        per_item: list[list[tuple[Window, np.ndarray, np.ndarray, float]]] = [
            [] for _ in range(len(items) + len(twice))]
        for w, start, end, p in self._forward(windows):  # one pass over both reads: shortest first, less padding
            per_item[w.example_index].append((w, start, end, p))
        for k, i in enumerate(twice):
            per_item[i] = average_reads(per_item[i], per_item[len(items) + k])
        return per_item[:len(items)]

    def decide(self, raw: RawScores, details: bool = False) -> MRCPrediction:
        """The no-answer rule on one question's raw scores, with the settings' thresholds."""
        s, best, p = self.settings, raw.best, raw.p_answerable
        if answered(raw, s.null_threshold, s.answerable_threshold, s.verifier_threshold):
            core = dict(answer=best.text, start=best.start, end=best.end,
                        score=float(best.prob * (p if p is not None else 1.0)), answerable=True)
        else:
            conf = 1.0 - p if p is not None else _sigmoid(-raw.null_diff)
            core = dict(answer=None, start=None, end=None, score=float(conf), answerable=False)
        if not details:
            return MRCPrediction(**core)
        return MRCPrediction(**core, nbest=raw.nbest, null_diff=raw.null_diff, p_answerable=p,
                             relevance=raw.relevance, p_reader=raw.p_reader)

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


def reader_items(settings: MRCSettings, items: Sequence[dict]) -> list[dict]:
    """The items as the reader reads them: keyword queries without their title when the settings say so
    (keyword_use_title False; query_form.is_keyword_query). Only the reader's input changes: the fused
    answerability model and the verifier are given the items themselves."""
    if not settings.use_title or settings.keyword_use_title:
        return list(items)
    return [dict(it, title=None) if is_keyword_query(it.get("question") or "") else it for it in items]


def titled_twice(settings: MRCSettings, items: Sequence[dict]) -> list[int]:
    """Indices of the items read a second time without their title (settings.title_ensemble: those with one)."""
    if not (settings.use_title and settings.title_ensemble):
        return []
    return [i for i, it in enumerate(items) if (it.get("title") or "").strip()]


def average_reads(titled: list[tuple], untitled: list[tuple]) -> list[tuple]:
    """One question's two reads as one (settings.title_ensemble): the windows of the read without the title,
    each passage token's start/end logits averaged with the same token's in the titled read (matched by its
    character offsets; the mean over the titled windows holding it: windows overlap), the [CLS] (no-answer)
    logits with the titled windows' mean, and P(answerable) with the titled read's highest. Averaging logits
    rather than choosing a read: the title helps to judge answerability, while a reader given a title that
    repeats the question tends to answer from the passage's first lines (a checklist habit: most references
    start there), which the read without it does not."""
    start_of: dict = {}
    end_of: dict = {}
    for w, st, en, _ in titled:
        for j, o in enumerate(w.offsets):
            if o is not None:
                start_of.setdefault(o, []).append(float(st[j]))
                end_of.setdefault(o, []).append(float(en[j]))
    cls_start = float(np.mean([st[0] for _, st, _, _ in titled]))
    cls_end = float(np.mean([en[0] for _, _, en, _ in titled]))
    probs = [p for *_, p in titled if p is not None]
    p_titled = max(probs) if probs else None
    out = []
    for w, st, en, p in untitled:
        st, en = st.copy(), en.copy()  # (T,) each
        st[0], en[0] = (st[0] + cls_start) / 2, (en[0] + cls_end) / 2
        for j, o in enumerate(w.offsets):
            if o in start_of:  # a token the titled read never held (none in practice) keeps its own logits
                st[j] = (st[j] + np.mean(start_of[o])) / 2
                en[j] = (en[j] + np.mean(end_of[o])) / 2
        out.append((w, st, en, (p + p_titled) / 2 if p is not None and p_titled is not None else p))
    return out


def window_logits(windows: Sequence[Window], start: torch.Tensor, end: torch.Tensor,
                  p_answerable: Optional[torch.Tensor] = None) -> list[tuple]:
    """The input of `decode` for one batch of windows: per window (window, start logits (T,), end logits (T,),
    P(answerable) or None), the batch's (B, T') float CPU logits cut to the window's T tokens."""
    return [(w, start[j, :len(w.input_ids)].numpy(), end[j, :len(w.input_ids)].numpy(),
             float(p_answerable[j]) if p_answerable is not None else None) for j, w in enumerate(windows)]


def _prepare(models: list, int8: bool, optimize: bool) -> None:
    """ConfigError unless every model has a span head; the inference swap applied where asked."""
    if not models:
        raise ConfigError("MRCPredictor needs at least one model")
    if int8 and not optimize:
        raise ConfigError("MRCPredictor: int8 is an inference swap; it needs optimize=True")
    for m in models:
        if getattr(m, "span", None) is None:
            raise ConfigError(f"model has head task {m.config.head.task!r}; MRC needs a 'span' head "
                              "(train one with `bertfam mrc train`)")
        if optimize:
            optimize_for_inference(m, int8=int8)  # buffer reuse in no-grad eval forwards


def _shared_tokenizer(models: list):
    """The first model's tokenizer, which every other member must share (else: VotingEnsemble)."""
    tok = models[0].tokenizer
    if tok is None:
        raise ConfigError("the model has no tokenizer (vocab.txt / tokenizer.json in its directory); set "
                          "model.tokenizer")
    for m in models[1:]:
        if m.tokenizer is not None and not same_tokenizer(m.tokenizer, tok):
            raise ConfigError("ensemble members do not share a tokenizer; use VotingEnsemble")
    return tok


def _checked(settings: Any, models: list) -> MRCSettings:
    """settings checked again (a field set after construction is not checked there), the windows cut to the
    shortest member's positions."""
    if not isinstance(settings, MRCSettings):
        raise ConfigError(f"MRCPredictor: settings must be an MRCSettings (a model's head.mrc) or None, "
                          f"got {type(settings).__name__}")
    checked = dataclasses.replace(settings)  # runs MRCSettings' checks again
    limit = min(m.config.max_sequence_length for m in models)
    return checked if checked.max_length <= limit else dataclasses.replace(checked, max_length=limit)


def _verifier_of(model, name: Optional[str], verifier):
    """The Verifier `verifier` asks for (see MRCPredictor; name: settings.verifier), loaded once."""
    from .verifier import load_verifier

    if verifier is False:
        return None
    if verifier is None:
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


def _empty_result(details: bool) -> MRCPrediction:
    """A blank question or passage: no answer, and sure of it."""
    if not details:
        return MRCPrediction(None, None, None, 1.0, False)
    return MRCPrediction(None, None, None, 1.0, False, nbest=(), null_diff=-math.inf)
