"""Examples -> model inputs -> batches, and model outputs -> predictions, for every task kind that the
task table fine-tunes. What differs by kind (labels, targets, decoding, names) is the kind's `Targets`
(tasks/targets.py, in its tasks/kinds.py entry); this module asks it and never which kind it runs.

Sequence tasks: [CLS] a [SEP] (b [SEP]) truncated longest-first to max_length; batches padded to their
longest member (dynamic padding). Token tasks: each character (unit) is one pre-tokenized word; its
first piece carries the tag, other pieces and specials -100. A sentence longer than max_length is cut into
overlapping windows (never inside a unit; consecutive windows share `window_overlap` of their tokens):
each window is one training input, and at prediction time each character takes its tag from the window
where it has the most context on both sides. Characters that tokenize to nothing are predicted "O".
With K-BERT (`kbert`: a knowledge.KBertInputBuilder), inputs carry soft position_ids and the (T, T) visible
matrix, passed to the model as a (B, T, T) attention_mask; injected tokens get -100.
"""
from __future__ import annotations

import logging
from typing import Optional, Sequence

import numpy as np
import torch

from ..config import FinetuneSettings
from ..data.batching import length_batches
from ..data.labelled import Example
from ..errors import DataError
from .table import TaskSpec
from .targets import IGNORE

log = logging.getLogger("bertfam")


def collect_labels(spec: TaskSpec, examples: Sequence[Example]) -> list[str]:
    """The task's fixed labels, else those seen in the training file (token tags: O first, then by type)."""
    return spec.task_kind.targets.collect(spec.labels, examples)


class InputBuilder:
    """A task's examples -> model inputs (one dict per example, or per window of a long token-task example)
    -> padded batches (`collate`), and the model's outputs on them -> predictions (`predict`)."""

    def __init__(self, tokenizer, spec: TaskSpec, labels: list[str], max_length: int = FinetuneSettings.max_length, kbert=None,
                 window_overlap: float = 0.5):
        if tokenizer is None:
            raise DataError("the model directory has no tokenizer (tokenizer.json or vocab.txt)")
        if max_length < 4:
            raise DataError(f"max_length {max_length} is too small (at least 4 tokens)")
        self.tok, self.spec, self.labels, self.max_length, self.kbert = tokenizer, spec, labels, max_length, kbert
        self.targets = spec.task_kind.targets
        self.window_overlap = window_overlap
        self.label_id = {l: i for i, l in enumerate(labels)}
        self.truncated = 0
        self.windowed = 0
        self._pretok = None

    # ------------------------------------------------------------------ building
    def build(self, examples: Sequence[Example], with_labels: bool = True) -> list[dict]:
        self.truncated = self.windowed = 0  # counts of this call (train and dev are built by one builder)
        if self.targets.per_unit:
            inputs = self._token_inputs(examples, with_labels)
        else:
            inputs = self._sequence_inputs(examples, with_labels)
        if self.truncated:
            log.info("%d of %d examples truncated to %d tokens", self.truncated, len(examples), self.max_length)
        if self.windowed:
            log.info("%d of %d examples longer than %d tokens: %d windows in all", self.windowed, len(examples),
                     self.max_length, len(inputs))
        return inputs

    def _label(self, ex: Example, with_labels: bool):
        if not with_labels or ex.label is None:
            return None
        return self.targets.encode(ex, self.labels, self.label_id)

    def _sequence_inputs(self, examples, with_labels) -> list[dict]:
        inputs = []
        if self.kbert is not None:
            for ex in examples:
                e = self.kbert.encode(ex.text_a, ex.text_b)
                inputs.append({"enc": e, "labels": self._label(ex, with_labels), "length": len(e["input_ids"])})
            return inputs
        for s in range(0, len(examples), 2048):  # the Rust tokenizer batches in parallel
            chunk = examples[s:s + 2048]
            pairs = [ex.text_b for ex in chunk] if chunk[0].text_b is not None else None
            if pairs is not None and any(p is None for p in pairs):
                raise DataError(f"{chunk[0].source}: a pair task needs two texts in every example")
            enc = self.tok([ex.text_a for ex in chunk], pairs, max_length=self.max_length, truncation=True,
                           padding=False, return_tensors=None)
            for ex, ids, tt, e in zip(chunk, enc["input_ids"], enc["token_type_ids"], enc.encodings):
                self.truncated += bool(e.overflowing)
                inputs.append({"input_ids": ids, "token_type_ids": tt, "labels": self._label(ex, with_labels),
                               "length": len(ids)})
        return inputs

    def _pretokenizer(self):
        """A private copy of the Rust tokenizer without truncation state (we cut token lists ourselves)."""
        if self._pretok is None:
            from tokenizers import Tokenizer as HFTokenizer

            self._pretok = HFTokenizer.from_str(self.tok.backend.to_str())
            self._pretok.no_truncation()
            self._pretok.no_padding()
        return self._pretok

    def _tag_ids(self, ex: Example, with_labels: bool) -> Optional[list]:
        if not with_labels or ex.tags is None:
            return None
        bad = [t for t in ex.tags if t not in self.label_id]
        if bad:
            raise DataError(f"{ex.source}: tag {bad[0]!r} not among the model's tags")
        return [self.label_id[t] for t in ex.tags]

    def _token_inputs(self, examples, with_labels) -> list[dict]:
        inputs = []
        if self.kbert is not None:
            for ex in examples:
                e = self.kbert.encode(list(ex.tokens))
                src = e["source_index"]
                inputs.append(self._align(ex, src, with_labels, {"enc": e}))
            return inputs
        tok = self._pretokenizer()
        for s in range(0, len(examples), 2048):
            chunk = examples[s:s + 2048]
            encs = tok.encode_batch([list(ex.tokens) for ex in chunk], is_pretokenized=True)
            for k, (ex, e) in enumerate(zip(chunk, encs)):
                ids, tt, src = _drop_bare_markers(e)
                spans = unit_windows(src[1:-1], self.max_length - 2, self.window_overlap)
                self.windowed += len(spans) > 1
                for a, b in spans:  # body tokens [a, b) between [CLS] and [SEP]
                    w_src = [-1] + src[1 + a:1 + b] + [-1]
                    inp = {"input_ids": [ids[0]] + ids[1 + a:1 + b] + [ids[-1]],
                           "token_type_ids": [tt[0]] + tt[1 + a:1 + b] + [tt[-1]], "example": s + k}
                    inputs.append(self._align(ex, w_src, with_labels, inp))
        return inputs

    def _align(self, ex: Example, src: list, with_labels: bool, inp: dict) -> dict:
        """Tag of a character on its first token; -100 elsewhere. first[j] = token of character j (-1: none)."""
        n = len(ex.tokens)
        first = [-1] * n
        for ti, j in enumerate(src):
            if 0 <= j < n and first[j] < 0:
                first[j] = ti
        tag_ids = self._tag_ids(ex, with_labels)
        labels = None
        if tag_ids is not None:
            labels = [IGNORE] * len(src)
            for j, ti in enumerate(first):
                if ti >= 0:
                    labels[ti] = tag_ids[j]
        inp.update(labels=labels, first=first, length=len(src))
        return inp

    # ------------------------------------------------------------------ batching
    def collate(self, inputs: Sequence[dict]) -> dict:
        """Model kwargs: input_ids/token_type_ids (B, T), attention_mask (B, T) or (B, T, T), labels."""
        if self.kbert is not None:
            batch = self.kbert.collate([inp["enc"] for inp in inputs])
        else:
            T = max(inp["length"] for inp in inputs)
            B = len(inputs)
            batch = {"input_ids": torch.full((B, T), self.tok.pad_token_id, dtype=torch.long),
                     "token_type_ids": torch.zeros((B, T), dtype=torch.long),
                     "attention_mask": torch.zeros((B, T), dtype=torch.long)}
            for i, inp in enumerate(inputs):
                n = inp["length"]
                batch["input_ids"][i, :n] = torch.tensor(inp["input_ids"])
                batch["token_type_ids"][i, :n] = torch.tensor(inp["token_type_ids"])
                batch["attention_mask"][i, :n] = 1
        if inputs[0]["labels"] is not None:
            batch["labels"] = self.targets.collate(inputs, batch["input_ids"].shape[1])
        return batch

    # ------------------------------------------------------------------ inference
    @torch.no_grad()
    def predict(self, model, inputs: Sequence[dict], batch_size: int = 64, progress: bool = False) -> list:
        """Per example: class id / score / list of tag ids over the characters (no labels needed);
        the windows of a long token-task example are merged back into one tag list. The model runs as
        given (`run_evaluate` / `run_predict` in runners/finetune.py optimize_for_inference it first; a model
        in training is not swapped). progress: a bar on a
        terminal, else a line with rate and time left (bertfam.progress)."""
        from ..progress import Progress

        device = next(model.parameters()).device
        was = model.training
        model.eval()  # no inference swap here: training evaluates through this (entry points swap first)
        out: list = [None] * len(inputs)
        with Progress(len(inputs), "predict", unit="inputs", enabled=progress) as bar:
            for idx in length_batches(lengths(inputs), batch_size):  # longest first: little padding
                batch = self.collate([dict(inputs[i], labels=None) for i in idx])
                batch = {k: v.to(device) for k, v in batch.items()}
                logits = model(**batch).logits.float().cpu()
                for k, i in enumerate(idx):
                    out[i] = self.targets.decode(logits[k], inputs[i], self.label_id)
                bar.update(len(idx))
        model.train(was)
        if inputs and "example" in inputs[0]:  # per-unit inputs in windows (_token_inputs)
            return self._merge_windows(inputs, out)
        return out

    def _merge_windows(self, inputs: Sequence[dict], per_window: list) -> list:
        """One tag list per example: each character from the window where its token has the most context
        (the smaller of its distances to the window's two ends), as in BERT's SQuAD max-context rule."""
        merged: dict = {}
        best: dict = {}
        o = self.label_id.get("O", 0)
        for inp, tags in zip(inputs, per_window):
            ex = inp["example"]
            if ex not in merged:
                merged[ex], best[ex] = [o] * len(inp["first"]), [-1] * len(inp["first"])
            n = inp["length"]
            for j, ti in enumerate(inp["first"]):
                if ti >= 0:
                    ctx = min(ti - 1, n - 2 - ti)
                    if ctx > best[ex][j]:
                        best[ex][j], merged[ex][j] = ctx, tags[j]
        return [merged[k] for k in sorted(merged)]

    def label_names(self, preds: list) -> list:
        return self.targets.names(preds, self.labels)


def unit_windows(src: Sequence[int], width: int, overlap: float = 0.5) -> list[tuple[int, int]]:
    """Token ranges [a, b) of at most `width` tokens covering src (the unit index of each token), never
    starting or ending inside a unit (unless one unit alone is wider than a window); consecutive windows
    overlap by about `overlap` x width tokens."""
    n = len(src)
    if n <= width:
        return [(0, n)]
    step = max(1, int(width * (1 - overlap)))
    out, a = [], 0
    while True:
        b = min(n, a + width)
        while b < n and b > a + 1 and src[b] == src[b - 1]:  # do not cut the last unit
            b -= 1
        if b <= a + 1 and b < n:
            b = min(n, a + width)  # a single unit wider than the window: cut it
        out.append((a, b))
        if b >= n:
            return out
        nxt = max(a + 1, min(a + step, b))
        while nxt < b and nxt > 0 and src[nxt] == src[nxt - 1]:  # start on a unit's first token
            nxt += 1
        a = nxt if nxt < b else b


def lengths(inputs: Sequence[dict]) -> list[int]:
    return [inp["length"] for inp in inputs]


def gold(examples: Sequence[Example], spec: TaskSpec) -> list:
    return [spec.task_kind.targets.gold(ex) for ex in examples]


def score(spec: TaskSpec, pred_names: list, golds: list) -> dict:
    """The task's metrics on label names (or scores)."""
    from ..evaluation.metrics import METRICS

    fn = METRICS[spec.metric]
    if spec.metric == "f1":
        return fn(pred_names, golds, positive=spec.positive)
    if spec.metric == "corr":
        return fn(np.asarray(pred_names, dtype=float), np.asarray(golds, dtype=float))
    return fn(pred_names, golds)


def _drop_bare_markers(e) -> tuple[list, list, list]:
    """(ids, type ids, source character per token) of a pre-tokenized encoding. SentencePiece
    tokenizers (XLM-R, e5) turn every pre-split character into a bare word-start marker `▁` plus the
    character; the marker is dropped when its word has another piece, so the character's own piece
    carries the tag and sequences are half as long (and read like running Chinese text)."""
    toks, words = e.tokens, e.word_ids
    keep = [i for i in range(len(toks))
            if not (toks[i] == "\u2581" and words[i] is not None and i + 1 < len(toks) and words[i + 1] == words[i])]
    return ([e.ids[i] for i in keep], [e.type_ids[i] for i in keep],
            [words[i] if words[i] is not None else -1 for i in keep])
