"""The pipelines: one object per task kind's answer that turns raw inputs into readable answers.

    from bertfam import pipeline
    clf = pipeline("text-classification", "runs/tnews")
    clf(["他家的菜很好吃", "股市今天大跌"])  # -> [{"label": "news_food", "score": ..., ...}, ...]

Pipelines: classification (classification and regression heads), ner (token head), fill-mask (mlm and
pretraining heads), embed (any model's backbone), mrc (span head, through `tasks.mrc.MRCPredictor`); which
kind each answers, and `pipeline(task, model)` itself, are in `tasks/kinds.py`. `task=None` takes the task
from the model's head. A pipeline takes one input or a list, batches a list
`batch_size` items per model call, and returns one result per input, in order. Labels come back by
name, and by readable name where the training data had one (TNEWS "104" -> "news_finance").

Results from `__call__` have the shapes and keys of the transformers pipeline of the same task (a
transformers user's code reads them unchanged); bertfam's extras (`truncated`, `probabilities`, `code`,
`answerable`) are extra keys. `bertfam serve` answers every request through these same objects (`check`
per item before queueing, `predict_batch` per batch, whose results the HTTP API returns as documented in
docs/serving.md; `present` turns one of them into the transformers shape), so the model work of the
Python API and the HTTP API cannot drift apart. An item the model cannot answer raises `InputError`,
which names the field.
"""
from __future__ import annotations

from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

from ..errors import ConfigError
from ..modeling.optimize import optimize_for_inference
from ..modeling.pooling import mean_pool
from .blank import BLANK_MESSAGE, is_blank
from .interrupt import check_interrupt

NER_AGGREGATIONS = ("simple", "none")  # transformers' aggregation_strategy values this pipeline has


class InputError(ValueError):
    """A request item the model cannot answer; `field` names the offending field."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field, self.message = field, message


def window_of(model) -> int:
    """Longest input (tokens) the model takes: its position table, and the tokenizer's own limit."""
    cfg = model.config
    limit = cfg.max_position_embeddings - cfg.position_offset
    tok = model.tokenizer
    return min(limit, tok.model_max_length) if tok is not None and tok.model_max_length else limit


def _label_names(model) -> list[str]:
    head = model.config.head
    return list(head.labels) if head.labels else [f"LABEL_{i}" for i in range(head.num_labels)]


def _model_inputs(enc) -> dict:
    return {k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")}


class Pipeline:
    """Base: holds the model in eval mode, its tokenizer and its window; maps inputs to items."""

    task = ""  # the pipeline's name
    text_field = "text"  # a bare string input fills this field
    pipeline_options: tuple = ()  # options `pipeline()` takes for this pipeline beyond batch_size and int8

    @classmethod
    def create(cls, model, batch_size: int = 32, int8: bool = False, **options) -> "Pipeline":
        """The pipeline `bertfam.pipeline()` gives: ConfigError for an option it does not take."""
        unknown = set(options) - set(cls.pipeline_options)
        if unknown:
            raise ConfigError(f"unknown {cls.task} pipeline option(s): {', '.join(sorted(unknown))}")
        return cls(model, batch_size=batch_size, int8=int8, **options)

    def __init__(self, model, batch_size: int = 32, int8: bool = False):
        if model.tokenizer is None:
            raise ConfigError("the model directory has no tokenizer (vocab.txt or tokenizer.json); "
                              "a pipeline needs one")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        # buffer reuse: same outputs, faster; int8 (modeling/int8.py): int8 weights and activations, close outputs
        self.model = optimize_for_inference(model.eval(), int8=int8)
        self.tok = model.tokenizer
        self.window = window_of(model)
        self.batch_size = batch_size
        self.default_options: dict = {}  # options given to pipeline() that apply to every call

    def __call__(self, inputs: Any = None, **options) -> Any:
        """One input -> one result; a list -> a list of results, each in the transformers pipeline's shape
        (`present`). Options (e.g. top_k) apply to every item."""
        options = {**self.default_options, **options}
        if inputs is None:
            inputs = self.keyword_inputs(options)
        single = not isinstance(inputs, list)
        items = [self.as_item(x, options) for x in ([inputs] if single else inputs)]
        for i, it in enumerate(items):
            try:
                self.check(it)
            except InputError as e:
                raise InputError(e.field if single else f"[{i}].{e.field}", e.message) from None
        out: list = []
        for a in range(0, len(items), self.batch_size):
            batch = items[a:a + self.batch_size]
            out += [self.present(r, it) for r, it in zip(self.predict_batch(batch), batch)]
        if single:
            return self.present_single(out[0], inputs)
        return out

    def keyword_inputs(self, options: dict) -> Any:
        """The input of a call without a positional one (`mrc(question=..., context=...)`), taken out of
        options."""
        if self.text_field in options:
            return options.pop(self.text_field)
        raise InputError("input", "give one input (a string, a dict or a list of them)")

    def present(self, result: dict, item: dict) -> Any:
        """A `predict_batch` result (the HTTP API's shape) in the transformers pipeline's shape."""
        return result

    def present_single(self, result: Any, inputs: Any) -> Any:
        """The result of a call on one input (not a list): transformers wraps some in a list."""
        return result

    def as_item(self, x: Any, options: dict) -> dict:
        if isinstance(x, str):
            item = {self.text_field: x}
        elif isinstance(x, dict):
            item = dict(x)
        else:
            raise InputError("input", f"expected a string or a dict, got {type(x).__name__}")
        return {**options, **item}

    def check(self, item: dict) -> None:
        """Raise InputError for an item that cannot be answered (cheap: runs before queueing)."""
        v = item.get(self.text_field)
        if not isinstance(v, str):
            raise InputError(self.text_field, "required (a string)")
        if is_blank(v):
            raise InputError(self.text_field, BLANK_MESSAGE)

    def predict_batch(self, items: list[dict]) -> list[dict]:
        raise NotImplementedError

    def _run(self, **inputs):
        with torch.inference_mode():
            return self.model(**inputs)


class ClassificationPipeline(Pipeline):
    """{text, text_pair?} or (text, text_pair) -> {label, score, probabilities, truncated}, plus `code`
    when the label has a readable name; regression: {score, truncated}. Long inputs are truncated.

    As transformers' text-classification: a bare string gives a list of one result (`clf("...")[0]`), a
    pair (dict or tuple) the result itself; top_k=k gives the k best labels per input as a list of
    {label, score} (best first, `code` where the label has a readable name), top_k=None every label."""

    task = "classification"

    def check(self, item: dict) -> None:
        self._check_text(item)
        k = item.get("top_k", 1)
        if k is not None and (not isinstance(k, int) or isinstance(k, bool) or k < 1):
            raise InputError("top_k", f"must be an integer >= 1 or None (every label), got {k!r}")

    def present(self, result: dict, item: dict) -> Any:
        if "top_k" not in item or "probabilities" not in result:  # no top_k asked, or a regression head
            return result
        readable = self.model.config.head.label_descriptions
        code_of = {readable.get(c, c): c for c in _label_names(self.model)}
        ranked = sorted(result["probabilities"].items(), key=lambda kv: -kv[1])
        k = item["top_k"] if item["top_k"] is not None else len(ranked)
        return [{"label": n, "score": p, **({"code": code_of[n]} if readable else {})} for n, p in ranked[:k]]

    def present_single(self, result: Any, inputs: Any) -> Any:
        # transformers: a bare string -> [result]; a pair -> result; top_k -> the list of labels as it is
        return [result] if isinstance(inputs, str) and isinstance(result, dict) else result

    def as_item(self, x: Any, options: dict) -> dict:
        if isinstance(x, (tuple, list)) and len(x) == 2:
            x = {"text": x[0], "text_pair": x[1]}
        return super().as_item(x, options)

    def _check_text(self, item: dict) -> None:
        super().check(item)
        if item.get("text_pair") is not None:
            if not isinstance(item["text_pair"], str):
                raise InputError("text_pair", "must be a string")
            if is_blank(item["text_pair"]):  # a pair of one text and nothing: leave text_pair out instead
                raise InputError("text_pair", BLANK_MESSAGE)

    def predict_batch(self, items: list[dict]) -> list[dict]:
        out: list[Optional[dict]] = [None] * len(items)
        # the tokenizer encodes a batch either all as pairs or all as single texts
        for has_pair in (False, True):
            idx = [i for i, it in enumerate(items) if (it.get("text_pair") is not None) == has_pair]
            if not idx:
                continue
            pairs = [items[i]["text_pair"] for i in idx] if has_pair else None
            enc = self.tok([items[i]["text"] for i in idx], pairs, max_length=self.window)
            logits = self._run(**_model_inputs(enc)).logits.float()  # (b, C)
            for j, i in enumerate(idx):
                out[i] = self._result(logits[j], bool(enc.encodings[j].overflowing))
        return out

    def _result(self, logits: torch.Tensor, truncated: bool) -> dict:
        if self.model.task == "regression":
            return {"score": float(logits[0]), "truncated": truncated}
        probs = torch.softmax(logits, -1)
        codes = _label_names(self.model)
        readable = self.model.config.head.label_descriptions
        names = [readable.get(c, c) for c in codes]
        best = int(probs.argmax())
        res = {"label": names[best], "score": float(probs[best]),
               "probabilities": {n: float(p) for n, p in zip(names, probs)}, "truncated": truncated}
        if readable:
            res["code"] = codes[best]
        return res


class NERPipeline(Pipeline):
    """{text} -> {entities: [{type, text, start, end (character offsets, end exclusive), score}]} (the HTTP
    API's shape); called, a list of transformers' token-classification entities per text:
    aggregation_strategy="simple" (the default here: bertfam decodes BIO/BIOES spans) gives
    [{entity_group, score, word, start, end}], "none" one {entity, score, index, word, start, end} per
    token not tagged O (index: the token's position counting [CLS] as 0, as in one window).

    Texts longer than the window are split into overlapping windows; each token keeps the tag from the
    window where it has the most context on both sides (as BERT's SQuAD code does)."""

    task = "ner"

    @classmethod
    def create(cls, model, batch_size: int = 32, int8: bool = False, **options) -> "Pipeline":
        if "aggregation_strategy" not in options:
            return super().create(model, batch_size, int8, **options)
        agg = options.pop("aggregation_strategy")  # transformers' construction-time option
        if agg not in NER_AGGREGATIONS:
            raise ConfigError(f"aggregation_strategy must be one of {', '.join(NER_AGGREGATIONS)}, got {agg!r}")
        pipe = super().create(model, batch_size, int8, **options)
        pipe.default_options = {"aggregation_strategy": agg}
        return pipe

    def check(self, item: dict) -> None:
        super().check(item)
        agg = item.get("aggregation_strategy", "simple")
        if agg not in NER_AGGREGATIONS:
            raise InputError("aggregation_strategy", f"must be one of {', '.join(NER_AGGREGATIONS)}, got {agg!r}")

    def present(self, result: dict, item: dict) -> list[dict]:
        if item.get("aggregation_strategy", "simple") == "none":
            return result["tokens"]
        return [{"entity_group": e["type"], "score": e["score"], "word": e["text"], "start": e["start"],
                 "end": e["end"]} for e in result["entities"]]

    def predict_batch(self, items: list[dict]) -> list[dict]:
        texts = [it["text"] for it in items]
        stride = self.window // 4
        enc = self.tok(texts, max_length=self.window, stride=stride, return_overflowing_tokens=True,
                       return_offsets_mapping=True)
        conf, tag_ids = self._tags(_model_inputs(enc))  # (W, T) each
        best: list[dict] = [{} for _ in texts]  # per text: char span -> (context, tag id, prob)
        for w, sample in enumerate(enc["overflow_to_sample_mapping"].tolist()):
            e = enc.encodings[w]
            real = [t for t, s in enumerate(e.sequence_ids) if s == 0]
            for t in real:
                span = e.offsets[t]
                if span[1] <= span[0]:
                    continue
                context = min(t - real[0], real[-1] - t)
                prev = best[sample].get(span)
                if prev is None or context > prev[0]:
                    best[sample][span] = (context, int(tag_ids[w, t]), float(conf[w, t]))
        names = _label_names(self.model)
        out = []
        for it, text, b in zip(items, texts, best):
            res = {"entities": self._entities(text, b, names)}
            if it.get("aggregation_strategy") == "none":  # only asked for in Python: the HTTP shape stays
                res["tokens"] = [{"entity": names[tag], "score": p, "index": i + 1, "word": text[s[0]:s[1]],
                                  "start": s[0], "end": s[1]}
                                 for i, (s, (_, tag, p)) in enumerate(sorted(b.items())) if names[tag] != "O"]
            out.append(res)
        return out

    def _tags(self, inputs: dict, chunk: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        """Best tag id and its probability per window token, a few windows at a time (a long text can
        make hundreds of windows; one call for all of them would hold all their activations at once)."""
        conf, ids = [], []
        for a in range(0, inputs["input_ids"].shape[0], chunk):
            check_interrupt()  # a served request that has gone stops here, between model calls
            probs = torch.softmax(self._run(**{k: v[a:a + chunk] for k, v in inputs.items()}).logits.float(), -1)
            c, i = probs.max(-1)  # (w, T)
            conf.append(c)
            ids.append(i)
        return torch.cat(conf), torch.cat(ids)

    @staticmethod
    def _entities(text: str, tokens: dict, names: list[str]) -> list[dict]:
        from .decoding import tags_to_spans

        spans = sorted(tokens)  # token character spans in text order
        tags = [_as_tag(names[tokens[s][1]]) for s in spans]
        out = []
        for typ, a, b in tags_to_spans(tags):
            start, end = spans[a][0], spans[b - 1][1]
            score = sum(tokens[s][2] for s in spans[a:b]) / (b - a)
            out.append({"type": typ, "text": text[start:end], "start": start, "end": end, "score": score})
        return out


def _as_tag(label: str) -> str:
    """Labels outside a BIO/BIOES/BMES scheme (e.g. "PER") are read as IO tags ("I-PER")."""
    if label == "O" or (len(label) > 2 and label[1] == "-" and label[0] in "BIMES"):
        return label
    return f"I-{label}"


class EmbedPipeline(Pipeline):
    """{text, pooling: mean|cls, normalize} -> {vector, truncated}; uses the backbone whatever the head."""

    task = "embed"

    def check(self, item: dict) -> None:
        super().check(item)
        if item.get("pooling", "mean") not in ("mean", "cls"):
            raise InputError("pooling", f"must be 'mean' or 'cls', got {item['pooling']!r}")

    def predict_batch(self, items: list[dict]) -> list[dict]:
        enc = self.tok([it["text"] for it in items], max_length=self.window)
        with torch.inference_mode():
            h = self.model.backbone(**_model_inputs(enc)).last_hidden_state.float()  # (B, T, H)
        mean = mean_pool(h, enc["attention_mask"])  # (B, H)
        cls = h[:, 0]  # (B, H)
        out = []
        for i, it in enumerate(items):
            v = cls[i] if it.get("pooling") == "cls" else mean[i]
            if it.get("normalize", True):
                v = F.normalize(v, dim=0)
            out.append({"vector": v.tolist(), "truncated": bool(enc.encodings[i].overflowing)})
        return out


class FillMaskPipeline(Pipeline):
    """{text with [MASK], top_k} -> {predictions: [[{token, score, id}] per [MASK], in text order]} (the
    HTTP API's shape); called, transformers' fill-mask shape: per text a list of top_k
    {score, token (the id), token_str, sequence (the text with this candidate in place of its [MASK])},
    a list of such lists for a text with several [MASK]s."""

    task = "fill-mask"

    def present(self, result: dict, item: dict) -> list:
        mask, text = self.tok.mask_token, item["text"]
        parts = text.split(mask)  # n masks -> n + 1 parts
        per_mask = []
        for m, cands in enumerate(result["predictions"]):
            row = []
            for c in cands:
                word = c["token"][2:] if c["token"].startswith("##") else c["token"]
                seq = mask.join(parts[:m + 1]) + word + mask.join(parts[m + 1:])
                row.append({"score": c["score"], "token": c["id"], "token_str": c["token"], "sequence": seq})
            per_mask.append(row)
        return per_mask[0] if len(per_mask) == 1 else per_mask

    def check(self, item: dict) -> None:
        super().check(item)
        mask = self.tok.mask_token
        if self.tok.mask_token_id is None:
            raise InputError("text", "this model's vocabulary has no mask token")
        if mask not in item["text"]:
            raise InputError("text", f"must contain at least one {mask}")
        k = item.get("top_k", 5)
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise InputError("top_k", f"must be an integer >= 1, got {k!r}")

    def predict_batch(self, items: list[dict]) -> list[dict]:
        enc = self.tok([it["text"] for it in items], max_length=self.window)
        masked = enc["input_ids"].eq(self.tok.mask_token_id)  # (B, T)
        for i, it in enumerate(items):
            if not bool(masked[i].any()):
                raise InputError("text", f"every {self.tok.mask_token} lies beyond the model's "
                                         f"{self.window}-token window")
        logits = self._run(**_model_inputs(enc), masked_positions=masked).logits.float()  # (N_masked, V)
        probs = torch.softmax(logits, -1)
        counts = masked.sum(1).tolist()
        out, row = [], 0
        for it, n in zip(items, counts):
            k = min(int(it.get("top_k", 5)), probs.shape[-1])
            preds = []
            for r in range(row, row + n):
                p, ids = probs[r].topk(k)
                preds.append([{"token": self.tok.id_to_token(int(j)), "id": int(j), "score": float(s)}
                              for s, j in zip(p, ids)])
            row += n
            out.append({"predictions": preds})
        return out


class MRCPipeline(Pipeline):
    """{question, passage (or context), title?} -> {answer, start, end, score, answerable}; long passages
    are read in overlapping windows by `tasks.mrc.MRCPredictor` (which owns all span decoding).

    Called as transformers' question-answering is: `qa(question=..., context=...)` (strings, or lists
    of the same length), `qa({"question": ..., "context": ...})` or a list of such dicts; the result is
    {score, start, end, answer, answerable}, and for no answer (answerable False) answer "" and
    start = end = 0 (transformers' handle_impossible_answer shape; the HTTP API gives null)."""

    task = "mrc"
    text_field = "question"
    pipeline_options = ("max_length", "doc_stride")

    def __init__(self, model, batch_size: int = 32, max_length: Optional[int] = None,
                 doc_stride: Optional[int] = None, int8: bool = False):
        super().__init__(model, batch_size, int8)
        from .mrc import MRCPredictor, settings_of

        saved = model.config.head.mrc_settings  # the model's training windows, else MRCSettings' defaults
        max_length = min(max_length or saved.max_length, self.window)
        doc_stride = min(doc_stride or saved.doc_stride, max_length // 2)
        self.inner = MRCPredictor(model, settings_of(model, max_length=max_length, doc_stride=doc_stride),
                                  batch_size=batch_size)

    def keyword_inputs(self, options: dict) -> Any:
        if "question" not in options:
            raise InputError("question", "required: qa(question=..., context=...) or qa({...})")
        fields = [f for f in ("question", "context", "passage", "title") if f in options]
        values = {f: options.pop(f) for f in fields}
        lists = [f for f in fields if isinstance(values[f], list)]
        if not lists:
            return values
        if len(lists) != len(fields) or len({len(values[f]) for f in fields}) != 1:
            raise InputError(lists[0], "lists of questions and contexts must have the same length, and "
                                       "all of them be lists")
        return [{f: values[f][i] for f in fields} for i in range(len(values[lists[0]]))]

    def as_item(self, x: Any, options: dict) -> dict:
        item = super().as_item(x, options)
        if "passage" not in item and "context" in item:  # the transformers / SQuAD name
            item["passage"] = item.pop("context")
        return item

    def present(self, result: dict, item: dict) -> Any:
        if result["answer"] is None:
            first = {"score": result["score"], "start": 0, "end": 0, "answer": "", "answerable": False}
        else:
            first = {"score": result["score"], "start": result["start"], "end": result["end"],
                     "answer": result["answer"], "answerable": result["answerable"]}
        if item.get("top_k") is None:
            return first
        # transformers' top_k: a list, best first. A declined question leads with its no-answer entry (as
        # handle_impossible_answer does), then the best spans, which the system would not give (answerable False)
        spans = [{"score": s["score"], "start": s["start"], "end": s["end"], "answer": s["text"],
                  "answerable": result["answerable"]} for s in result["candidates"]]
        ranked = [first] + spans[1:] if result["answerable"] else [first] + spans
        return ranked[:item["top_k"]]

    def check(self, item: dict) -> None:
        # long questions are cut to MRCPredictor's max_query_length tokens; blank ones cannot be answered
        for field in ("question", "passage"):
            v = item.get(field)
            if not isinstance(v, str):
                raise InputError(field, "required (a string)")
            if is_blank(v):
                raise InputError(field, BLANK_MESSAGE)
        if item.get("title") is not None and not isinstance(item["title"], str):
            raise InputError("title", "must be a string")
        k = item.get("top_k")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise InputError("top_k", f"must be an integer >= 1, got {k!r}")
        if k is not None and k > self.inner.settings.n_best:
            raise InputError("top_k", f"at most {self.inner.settings.n_best} (the model's n_best), got {k}")

    def predict_batch(self, items: list[dict]) -> list[dict]:
        """The HTTP API's shape; an item that asks for top_k also gets its k best spans (`candidates`). Only
        those items: the server batches requests of several clients together."""
        details = any(it.get("top_k") is not None for it in items)
        res = self.inner.predict_batch([{"question": it["question"], "passage": it["passage"],
                                         "title": it.get("title")} for it in items], details=details)
        out = []
        for it, r in zip(items, res):
            o = {"answer": r.answer, "start": r.start, "end": r.end, "score": float(r.score),
                 "answerable": bool(r.answerable)}
            if it.get("top_k") is not None:  # span score as the answered result's: span probability x P(answerable)
                p = r.p_answerable if r.p_answerable is not None else 1.0
                o["candidates"] = [{"text": s.text, "start": s.start, "end": s.end, "score": float(s.prob * p)}
                                   for s in r.nbest[:it["top_k"]]]
            out.append(o)
        return out
