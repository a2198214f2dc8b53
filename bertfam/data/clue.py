"""CLUE / FewCLUE JSON-lines classification readers and K-BERT's TSV sentiment sets.

Each task is a row of `CLUE`: text field(s), label field, label names. TNEWS/IFLYTEK store labels as
codes ("108", or ints in FewCLUE); they are read as strings. CLUEWSC marks its two spans in the text
(`[span1]`, `<span2>`), as the CLUE baseline does; its `target` may be an object or (in FewCLUE train
files) the Python repr of one.
"""
from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from typing import Optional

from ..errors import DataError
from .labelled import (Example, ReadReport, check_label, iter_json_lines, open_lines, read_jsonl, read_tsv,
                       text_field)

TNEWS_LABELS = tuple(str(i) for i in range(100, 117) if i not in (105, 111))
NLI_LABELS = ("contradiction", "entailment", "neutral")


@dataclass(frozen=True)
class ClueLayout:
    text: tuple
    label: str
    labels: Optional[tuple]  # None: taken from the training file (e.g. csldcp, or a labels file beside it)
    id_field: Optional[str] = "id"
    desc_field: Optional[str] = None  # the label's readable name beside its code


CLUE = {
    "tnews": ClueLayout(("sentence",), "label", TNEWS_LABELS, desc_field="label_desc"),
    "iflytek": ClueLayout(("sentence",), "label", tuple(str(i) for i in range(119)), desc_field="label_des"),
    "afqmc": ClueLayout(("sentence1", "sentence2"), "label", ("0", "1")),
    "ocnli": ClueLayout(("sentence1", "sentence2"), "label", NLI_LABELS),
    "cmnli": ClueLayout(("sentence1", "sentence2"), "label", NLI_LABELS),
    "csl": ClueLayout(("keyword", "abst"), "label", ("0", "1")),
    "cluewsc": ClueLayout(("text",), "label", ("false", "true"), id_field="idx"),
    # FewCLUE-only tasks
    "eprstmt": ClueLayout(("sentence",), "label", ("Negative", "Positive")),
    "bustm": ClueLayout(("sentence1", "sentence2"), "label", ("0", "1")),
    "csldcp": ClueLayout(("content",), "label", None),
}
KBERT_TSV = {"chnsenticorp", "book_review", "shopping"}  # `label\ttext_a` with header, labels 0/1


def read_clue(task: str, path: str, labels: Optional[list] = None) -> list[Example]:
    layout = CLUE.get(task)
    if layout is None:
        raise DataError(f"unknown CLUE task {task!r}; known: {', '.join(CLUE)}")
    names = labels or (list(layout.labels) if layout.labels else _labels_beside(path))
    if task == "cluewsc":
        return _read_wsc(path, names)
    return read_jsonl(path, list(layout.text), layout.label, labels=names, id_field=layout.id_field,
                      desc_field=layout.desc_field)


def _labels_beside(path: str) -> Optional[list]:
    """FewCLUE csldcp ships `labels_all.txt`; CLUE ships `labels.json` (one object per line)."""
    d = os.path.dirname(path)
    txt, js = os.path.join(d, "labels_all.txt"), os.path.join(d, "labels.json")
    if os.path.isfile(txt):
        with open(txt, encoding="utf-8", errors="replace") as f:
            return [s.strip() for s in f if s.strip()] or None
    if os.path.isfile(js):
        rep = ReadReport(js)
        return [str(o["label"]) for _, o in iter_json_lines(js, rep) if "label" in o] or None
    return None


def _read_wsc(path: str, labels: list) -> list[Example]:
    report = ReadReport(path)
    out = []
    rows = list(iter_json_lines(path, report))
    labelled = any("label" in o for _, o in rows)
    for line, obj in rows:
        text = text_field(obj, "text")
        if text is None:
            report.skip(line, "empty text")
            continue
        marked = _mark_wsc(text, obj.get("target"))
        if marked is None:
            report.skip(line, "bad target", "span index/text does not match the text")
            continue
        label = check_label(obj.get("label"), set(labels), False, report, line) if labelled else None
        if labelled and label is None:
            continue
        out.append(Example(guid=str(obj.get("idx", line)), text_a=marked, label=label, source=f"{path}:{line}"))
    return report.finish(out)


def _mark_wsc(text: str, target) -> Optional[str]:
    """Insert [ ] around span1 (the candidate) and < > around span2 (the pronoun)."""
    if isinstance(target, str):
        try:
            target = ast.literal_eval(target)
        except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
            return None
    if not isinstance(target, dict):
        return None
    spans = []
    for k, (lo, hi) in (("1", ("[", "]")), ("2", ("<", ">"))):
        i, s = target.get(f"span{k}_index"), target.get(f"span{k}_text")
        if not isinstance(i, int) or isinstance(i, bool) or not isinstance(s, str) or not s:
            return None
        if i < 0 or text[i:i + len(s)] != s:
            return None
        spans.append((i, i + len(s), lo, hi))
    a, b = sorted(spans)
    if a[1] > b[0]:
        return None  # overlapping spans cannot both be marked
    out = text
    for s, e, lo, hi in sorted(spans, reverse=True):  # right to left keeps earlier indices valid
        out = out[:s] + lo + out[s:e] + hi + out[e:]
    return out


def read_kbert_tsv(path: str, labels: Optional[list] = None) -> list[Example]:
    """K-BERT's sentiment sets: `label\ttext_a` (header), or `text_a\ttext_b\tlabel` pairs."""
    return read_tsv(path, _kbert_text_cols(path), "label", header=True, labels=labels or ["0", "1"])


def _kbert_text_cols(path: str) -> list[str]:
    first = next(open_lines(path, ReadReport(path)), (0, ""))
    names = first[1].split("\t")
    return [c for c in ("text_a", "text_b") if c in names] or ["text_a"]

