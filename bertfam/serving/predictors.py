"""One predictor per served task, each turning a batch of request items into a batch of JSON-ready results.

A predictor wraps a model loaded with `bertfam.from_pretrained` and its `model.tokenizer`:
classify (classification / regression heads), ner (token head), fill-mask (mlm / pretraining heads),
mrc (span head, through `bertfam.tasks.mrc.MRCPredictor`) and embed (any model's backbone).
`check(item)` runs cheap per-item validation before an item is queued; `predict_batch(items)` runs the
model once for the whole batch. Problems caused by an item raise `InputError`, naming the field.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..errors import ConfigError

# head task -> endpoint that serves it
ENDPOINT_OF_TASK = {"classification": "classify", "regression": "classify", "token": "ner", "mlm": "fill-mask",
                    "pretraining": "fill-mask", "span": "mrc"}
ENDPOINTS = ("mrc", "classify", "ner", "embed", "fill-mask")


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


class Predictor:
    endpoint = ""

    def __init__(self, model):
        if model.tokenizer is None:
            raise ConfigError("the model directory has no tokenizer (vocab.txt or tokenizer.json); serving needs one")
        self.model = model.eval()
        self.tok = model.tokenizer
        self.window = window_of(model)

    def check(self, item: dict) -> None:
        """Raise InputError for an item that cannot be answered (cheap: runs before queueing)."""

    def predict_batch(self, items: list[dict]) -> list[dict]:
        raise NotImplementedError

    def _run(self, **inputs):
        with torch.inference_mode():
            return self.model(**inputs)


class ClassifyPredictor(Predictor):
    """{text, text_pair?} -> {label, score, probabilities} (regression: {score}); long inputs are truncated."""

    endpoint = "classify"

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
        names = _label_names(self.model)
        best = int(probs.argmax())
        return {"label": names[best], "score": float(probs[best]),
                "probabilities": {n: float(p) for n, p in zip(names, probs)}, "truncated": truncated}


class NERPredictor(Predictor):
    """{text} -> {entities: [{type, text, start, end (character offsets, end exclusive), score}]}.

    Texts longer than the window are split into overlapping windows; each token keeps the tag from the
    window where it has the most context on both sides (as BERT's SQuAD code does)."""

    endpoint = "ner"

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
        return [{"entities": self._entities(text, b, names)} for text, b in zip(texts, best)]

    def _tags(self, inputs: dict, chunk: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
        """Best tag id and its probability per window token, a few windows at a time (a long text can
        make hundreds of windows; one call for all of them would hold all their activations at once)."""
        conf, ids = [], []
        for a in range(0, inputs["input_ids"].shape[0], chunk):
            probs = torch.softmax(self._run(**{k: v[a:a + chunk] for k, v in inputs.items()}).logits.float(), -1)
            c, i = probs.max(-1)  # (w, T)
            conf.append(c)
            ids.append(i)
        return torch.cat(conf), torch.cat(ids)

    @staticmethod
    def _entities(text: str, tokens: dict, names: list[str]) -> list[dict]:
        from ..tasks.decoding import tags_to_spans

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


class EmbedPredictor(Predictor):
    """{text, pooling: mean|cls, normalize} -> {vector}; uses the backbone whatever the head."""

    endpoint = "embed"

    def predict_batch(self, items: list[dict]) -> list[dict]:
        enc = self.tok([it["text"] for it in items], max_length=self.window)
        with torch.inference_mode():
            h = self.model.backbone(**_model_inputs(enc)).last_hidden_state.float()  # (B, T, H)
        mask = enc["attention_mask"].unsqueeze(-1).to(h.dtype)  # (B, T, 1)
        mean = (h * mask).sum(1) / mask.sum(1).clamp(min=1.0)  # (B, H)
        cls = h[:, 0]  # (B, H)
        out = []
        for i, it in enumerate(items):
            v = cls[i] if it.get("pooling") == "cls" else mean[i]
            if it.get("normalize", True):
                v = F.normalize(v, dim=0)
            out.append({"vector": v.tolist(), "truncated": bool(enc.encodings[i].overflowing)})
        return out


class FillMaskPredictor(Predictor):
    """{text with [MASK], top_k} -> {predictions: [[{token, score, id}] per [MASK], in text order]}."""

    endpoint = "fill-mask"

    def check(self, item: dict) -> None:
        mask = self.tok.mask_token
        if self.tok.mask_token_id is None:
            raise InputError("text", "this model's vocabulary has no mask token")
        if mask not in item["text"]:
            raise InputError("text", f"must contain at least one {mask}")

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


class MRCServingPredictor(Predictor):
    """{question, passage, title?} -> {answer, start, end, score, answerable}; long passages are read in
    overlapping windows by bertfam.tasks.mrc.MRCPredictor (which owns all span decoding)."""

    endpoint = "mrc"

    def __init__(self, model, max_length: Optional[int] = None, doc_stride: Optional[int] = None):
        super().__init__(model)
        from ..tasks.mrc import MRCPredictor

        extra = model.config.head.extra
        max_length = min(max_length or int(extra.get("max_length", 384)), self.window)
        doc_stride = doc_stride or int(extra.get("doc_stride", 128))
        self.inner = MRCPredictor(model, model.tokenizer, max_length=max_length,
                                  doc_stride=min(doc_stride, max_length // 2))

    def check(self, item: dict) -> None:
        # long questions are cut to MRCPredictor's max_query_length tokens; blank ones cannot be answered
        for field in ("question", "passage"):
            if not item[field].strip():
                raise InputError(field, "must not be empty or blank")

    def predict_batch(self, items: list[dict]) -> list[dict]:
        res = self.inner.predict_batch([{"question": it["question"], "passage": it["passage"],
                                         "title": it.get("title")} for it in items])
        return [{"answer": r["answer"], "start": r["start"], "end": r["end"], "score": float(r["score"]),
                 "answerable": bool(r["answerable"])} for r in res]


PREDICTOR_OF_ENDPOINT = {"classify": ClassifyPredictor, "ner": NERPredictor, "fill-mask": FillMaskPredictor,
                         "mrc": MRCServingPredictor, "embed": EmbedPredictor}
