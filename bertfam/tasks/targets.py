"""What a fine-tuning task of one kind predicts, and how: its label list, the gold value of an example, the
tensors a batch's labels become, the decoding of one example's logits, readable names of predictions and the
layout of a predictions file.

One `Targets` per task kind that fine-tunes (`tasks/kinds.py` holds it in the kind's entry): `Targets` itself
is single-label classification, `RegressionTargets` a score, `TokenTargets` a tag per unit (character).
`tasks/inputs.py` (InputBuilder) and `runners/finetune.py` call these methods and never ask which kind
they run, so a new kind brings its own subclass in its entry and nothing else changes.
"""
from __future__ import annotations

import json
from typing import Callable, Optional, Sequence

import torch

from ..data.labelled import Example, read_jsonl, read_tsv
from ..data.ner import read_ner
from ..errors import ConfigError, DataError
from .decoding import tags_to_spans

IGNORE = -100  # a token without a target (cross_entropy's ignore_index)
PREFIX_ORDER = {"B": 0, "I": 1, "M": 2, "E": 3, "S": 4}  # tag order within an entity type in a label list


class Targets:
    """Single-label classification: one label per example, from a list of label names."""

    # False: one target per example (the text or text pair is tokenized as a whole). True: one target per
    # unit of a pre-tokenized example (a character), built in windows (InputBuilder._token_inputs)
    per_unit = False
    named = True  # predictions are label names (a model's labels); False: numbers, every gold value is known
    metric, headline = "accuracy", "accuracy"  # a custom task's (the task table names its own rows')

    def collect(self, fixed: Optional[list], examples: Sequence[Example]) -> list[str]:
        """The task's fixed labels, else those seen in the training examples."""
        if fixed:
            return list(fixed)
        return sorted({str(ex.label) for ex in examples if ex.label is not None})

    def gold(self, ex: Example):
        """What the model should predict for `ex` (None: unlabelled)."""
        return ex.label

    def encode(self, ex: Example, labels: list, label_id: dict):
        """The target of a whole-example input (per_unit False)."""
        if ex.label not in label_id:
            raise DataError(f"{ex.source}: label {ex.label!r} not among the model's labels {labels}")
        return label_id[ex.label]

    def collate(self, inputs: Sequence[dict], T: int) -> torch.Tensor:
        """The batch's `labels` tensor from its inputs' targets (T: the batch's padded length)."""
        return torch.tensor([inp["labels"] for inp in inputs], dtype=torch.long)  # (B,)

    def decode(self, logits: torch.Tensor, inp: dict, label_id: dict):
        """One input's prediction from its logits (a label id here)."""
        return int(logits.argmax(-1))

    def names(self, preds: list, labels: list) -> list:
        """Predictions as readable values (label names)."""
        return [labels[i] for i in preds]

    def prediction_lines(self, examples: Sequence[Example], names: list, ids: Sequence) -> tuple[str, list[str]]:
        """(file suffix, lines) of a predictions file: `index\\tprediction` (the GLUE submission layout)."""
        return ".tsv", ["index\tprediction"] + [f"{i}\t{self.format(p)}" for i, p in zip(ids, names)]

    def format(self, value) -> str:
        return str(value)

    def custom_reader(self, fmt: str, text_cols: list, label_col: Optional[str], labels: Optional[list],
                      header: bool, n_texts: Optional[int]) -> tuple[Callable[[str], list], dict]:
        """(reader, the settings head.finetune.custom records) of a user's own TSV/JSONL with named (or
        numbered) text columns and a label column; n_texts: how many text columns the table kind needs."""
        if not text_cols or len(text_cols) > 2:
            raise ConfigError("custom task: give one or two text columns (--text-cols a[,b])")
        if n_texts is not None and len(text_cols) != n_texts:
            raise ConfigError("custom pair task: give two text columns")
        if label_col is None:
            raise ConfigError("custom task: give the label column (--label-col)")
        reg = not self.named
        if fmt == "tsv":
            def reader(p):
                return read_tsv(p, text_cols, label_col, header=header, labels=labels, regression=reg)
        elif fmt == "jsonl":
            def reader(p):
                return read_jsonl(p, text_cols, label_col, labels=labels, regression=reg)
        else:
            raise ConfigError(f"custom task format {fmt!r} not in tsv, jsonl")
        return reader, {"format": fmt, "text_cols": list(text_cols), "label_col": label_col, "header": header}


class RegressionTargets(Targets):
    """A score per example (STS-B): float targets, the first logit is the prediction."""

    named = False
    metric, headline = "corr", "corr"

    def collect(self, fixed, examples) -> list[str]:
        return []  # a score has no label list, even where the table names one

    def encode(self, ex, labels, label_id):
        return float(ex.label)

    def collate(self, inputs, T):
        return torch.tensor([inp["labels"] for inp in inputs], dtype=torch.float32)  # (B,)

    def decode(self, logits, inp, label_id):
        return float(logits.reshape(-1)[0])

    def names(self, preds, labels):
        return preds

    def format(self, value) -> str:
        return f"{value:.3f}"


class TokenTargets(Targets):
    """A tag per unit (character) of a pre-tokenized example (NER): the tag sits on the unit's first token,
    -100 elsewhere; a unit without a token is predicted O."""

    per_unit = True
    metric, headline = "entity_f1", "f1"

    def collect(self, fixed, examples):
        if fixed:
            return list(fixed)
        tags = {t for ex in examples for t in (ex.tags or [])} | {"O"}  # O first, then by type and prefix
        return ["O"] + sorted(tags - {"O"}, key=lambda t: (t[2:], PREFIX_ORDER.get(t[0], 9)))

    def gold(self, ex):
        return ex.tags

    def collate(self, inputs, T):
        lab = torch.full((len(inputs), T), IGNORE, dtype=torch.long)  # (B, T)
        for i, inp in enumerate(inputs):
            lab[i, :len(inp["labels"])] = torch.tensor(inp["labels"])
        return lab

    def decode(self, logits, inp, label_id):
        tok_pred = logits.argmax(-1).tolist()  # (T,)
        o = label_id.get("O", 0)  # characters without a token are predicted O
        return [tok_pred[ti] if ti >= 0 else o for ti in inp["first"]]

    def names(self, preds, labels):
        return [[labels[i] for i in p] for p in preds]

    def prediction_lines(self, examples, names, ids):
        """CLUENER layout: {id, text, label: {type: {entity: [[start, end_inclusive]]}}} per line."""
        lines = []
        for ex, tags in zip(examples, names):
            lab: dict = {}
            for t, s, e in tags_to_spans(tags):
                lab.setdefault(t, {}).setdefault("".join(ex.tokens[s:e]), []).append([s, e - 1])
            lines.append(json.dumps({"id": ex.guid, "text": "".join(ex.tokens), "label": lab}, ensure_ascii=False))
        return ".jsonl", lines

    def custom_reader(self, fmt, text_cols, label_col, labels, header, n_texts):
        return read_ner, {}  # a NER file in any format read_ner detects: no columns to name
