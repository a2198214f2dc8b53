"""The one task table: every fine-tuning task is a row (reader, kind, labels, metric).

kind: the row's task kind (tasks/kinds.py) as the table spells it: "single" (one text -> class), "pair"
(two texts -> class), "regression" (pair -> score), "token" (characters -> tags); its head and its targets
come from that kind's entry. Adding a task = adding a row, not a script.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable, Optional

from ..data.clue import CLUE, read_clue, read_kbert_tsv
from ..data.glue import GLUE, read_glue
from ..data.labelled import Example
from ..data.ner import read_char_tags, read_cluener, read_kbert_ner, read_ner
from ..errors import ConfigError
from ..evaluation.glue import GLUE_METRIC
from .kinds import TaskKind, table_kind, table_kinds

TEXT_COLUMNS = {"pair": 2}  # text columns a custom task of this table kind must name (others: one or two)


@dataclass
class TaskSpec:
    name: str
    kind: str  # single | pair | regression | token: a task kind as the table spells it (tasks/kinds.py)
    reader: Callable[[str], list]  # path -> list[Example]
    labels: Optional[list] = None  # None: collected from the training file
    metric: str = "accuracy"  # key of bertfam.evaluation.metrics.METRICS
    headline: str = "accuracy"  # the number used for best-checkpoint selection and tables
    positive: str = "1"  # positive class for binary F1
    suite: str = ""  # glue | clue | ner | kbert | custom: the benchmark or reader group the task comes from
    extra: dict = field(default_factory=dict)

    @property
    def task_kind(self) -> TaskKind:
        return table_kind(self.kind)

    @property
    def head(self) -> str:
        return self.task_kind.head

    def read(self, path: str) -> list[Example]:
        return self.reader(path)


def _glue_rows() -> dict:
    rows = {}
    for name, lay in GLUE.items():
        metric, headline = GLUE_METRIC[name]
        kind = "regression" if lay.labels is None else ("single" if len(lay.text) == 1 else "pair")
        rows[name] = TaskSpec(name, kind, partial(read_glue, name), list(lay.labels) if lay.labels else None,
                              metric, headline, suite="glue")
    return rows


def _clue_rows() -> dict:
    rows = {}
    for name, lay in CLUE.items():
        kind = "pair" if len(lay.text) == 2 else "single"
        rows[name] = TaskSpec(name, kind, partial(read_clue, name), list(lay.labels) if lay.labels else None,
                              "accuracy", "accuracy", suite="clue")
    return rows


NER_READERS = {"cluener": read_cluener, "msra": read_char_tags, "peoples_daily": read_char_tags,
               "resume": read_char_tags, "medical_ner": read_kbert_ner, "ner": read_ner}


def _ner_rows() -> dict:
    return {n: TaskSpec(n, "token", r, None, "entity_f1", "f1", suite="ner") for n, r in NER_READERS.items()}


def _kbert_rows() -> dict:
    return {n: TaskSpec(n, "single", read_kbert_tsv, ["0", "1"], "accuracy", "accuracy", suite="kbert")
            for n in ("chnsenticorp", "book_review", "shopping")}


TASK_TABLE: dict[str, TaskSpec] = {**_glue_rows(), **_clue_rows(), **_ner_rows(), **_kbert_rows()}


def get_task(name: str) -> TaskSpec:
    key = name.lower().replace("_", "-") if name.lower().replace("_", "-") in TASK_TABLE else name.lower()
    aliases = {"sst-2": "sst2", "sts-b": "stsb", "mnli-m": "mnli", "mnli_mm": "mnli-mm", "msra_ner": "msra"}
    key = aliases.get(key, key)
    if key not in TASK_TABLE:
        raise ConfigError(f"unknown task {name!r}; known: {', '.join(sorted(TASK_TABLE))}, or custom")
    return TASK_TABLE[key]


def custom_task(fmt: str, kind: str, text_cols: list, label_col: Optional[str], labels: Optional[list] = None,
                header: bool = True) -> TaskSpec:
    """A user's own TSV/JSONL: named (or numbered) text columns/fields, a label column, optional label list.
    kind "token": the file is a NER file (any format read_ner detects)."""
    if kind not in table_kinds():
        raise ConfigError(f"custom task kind {kind!r} not in {', '.join(table_kinds())}")
    targets = table_kind(kind).targets
    reader, extra = targets.custom_reader(fmt, text_cols, label_col, labels, header, TEXT_COLUMNS.get(kind))
    return TaskSpec("custom", kind, reader, labels, targets.metric, targets.headline, suite="custom", extra=extra)
