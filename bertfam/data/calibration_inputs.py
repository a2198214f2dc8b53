"""Inputs to calibrate static int8 on (`bertfam quantize SRC DST --calibrate FILE`): real text the model will
see, as (text_a, text_b or None) pairs, in file order.

- FILE.json: SQuAD-layout MRC data (data.mrc.read_mrc): (question, context) per question;
- FILE.jsonl: one object per line with "text" or "text_a" (and optionally "text_b"), or "question" and
  "context" / "passage";
- any other file: plain text, one input per line, "text" or "text_a<TAB>text_b"; empty lines are skipped.
Strict, unlike the training readers, which skip bad rows: an input the user did not mean would quietly set
the activation ranges, so a bad line is a DataError naming the file and line.
"""
from __future__ import annotations

import json
import os
from typing import Iterator, Optional

from ..errors import DataError
from .mrc import read_mrc

Pair = tuple[str, Optional[str]]
FORMAT = "a line is TEXT or TEXT_A<TAB>TEXT_B"


def read_calibration_inputs(path: str, limit: Optional[int] = None) -> list[Pair]:
    """The first `limit` inputs of `path` (all: None); DataError when it has none or a bad record."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: {'is a directory, expected a file' if os.path.isdir(path) else 'file not found'}")
    ext = os.path.splitext(path)[1].lower()
    reader = _mrc_inputs if ext == ".json" else _jsonl_inputs if ext == ".jsonl" else _text_inputs
    out: list[Pair] = []
    for pair in reader(path):
        if limit is not None and len(out) >= limit:
            break
        out.append(pair)
    if not out:
        raise DataError(f"{path}: no input to calibrate on")
    return out


def _lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, text) of the non-empty lines; a line that is not UTF-8 is a DataError."""
    with open(path, "rb") as f:
        for i, raw in enumerate(f, 1):
            try:
                text = raw.decode("utf-8-sig" if i == 1 else "utf-8").rstrip("\r\n")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{i}: not UTF-8 text (byte {e.start})") from None
            if text.strip():
                yield i, text


def _text_inputs(path: str) -> Iterator[Pair]:
    for i, text in _lines(path):
        fields = text.split("\t")
        if len(fields) > 2 or not all(f.strip() for f in fields):
            what = f"{len(fields)} tab-separated fields" if len(fields) > 2 else "an empty field"
            raise DataError(f"{path}:{i}: {what}; {FORMAT}")
        yield fields[0], fields[1] if len(fields) == 2 else None


def _jsonl_inputs(path: str) -> Iterator[Pair]:
    for i, text in _lines(path):
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            raise DataError(f"{path}:{i}: not JSON ({str(e)[:60]})") from None
        pair = _object_pair(obj) if isinstance(obj, dict) else None
        if pair is None:
            raise DataError(f"{path}:{i}: expected an object with a string \"text\" or \"text_a\" (+ \"text_b\"), "
                            "or \"question\" and \"context\"")
        yield pair


def _object_pair(obj: dict) -> Optional[Pair]:
    """(text_a, text_b) of a JSON line, None when it has no usable text."""
    def s(k):
        v = obj.get(k)
        return v if isinstance(v, str) and v.strip() else None

    if s("question") and (s("context") or s("passage")):
        return s("question"), s("context") or s("passage")
    a = s("text") or s("text_a")
    return (a, s("text_b")) if a else None


def _mrc_inputs(path: str) -> Iterator[Pair]:
    exs, _ = read_mrc(path, mode="predict")  # malformed JSON: a DataError naming the line and column
    for e in exs:
        yield e.question, e.context
