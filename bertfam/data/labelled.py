"""Labelled examples for fine-tuning, and the bad-row bookkeeping every reader shares.

A reader walks a file line by line; a row it cannot use is reported as `file:line: reason` (logged,
counted per reason) and skipped. When nothing usable remains the reader raises DataError naming the
file and the counts. Readers never import the model.
"""
from __future__ import annotations

import json
import logging
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator, Optional, Sequence, Union

from ..errors import DataError

log = logging.getLogger("bertfam")
MAX_LOGGED = 20  # per file: the first bad rows are logged one by one, the rest only counted


@dataclass
class Example:
    """One fine-tuning example. Sequence tasks fill text_a/text_b/label; token tasks fill tokens/tags."""

    guid: str
    text_a: str = ""
    text_b: Optional[str] = None
    label: Optional[Union[str, float]] = None  # class name, or float target (regression); None: unlabelled
    tokens: Optional[list[str]] = None  # token labelling: characters / words
    tags: Optional[list[str]] = None  # one tag per token (None: unlabelled)
    source: str = ""  # "file:line" for messages
    label_desc: Optional[str] = None  # the label's readable name where the file gives one (CLUE `label_desc`)

    @property
    def text(self) -> str:
        return "".join(self.tokens) if self.tokens is not None else self.text_a


@dataclass
class ReadReport:
    """Counts of skipped rows per reason for one file."""

    path: str
    skipped: Counter = field(default_factory=Counter)
    read: int = 0

    def skip(self, line: int, reason: str, detail: str = "") -> None:
        self.skipped[reason] += 1
        if sum(self.skipped.values()) <= MAX_LOGGED:
            log.warning("%s:%d: %s%s (row skipped)", self.path, line, reason, f": {detail}" if detail else "")

    def summary(self) -> str:
        if not self.skipped:
            return "no bad rows"
        return ", ".join(f"{n} {r}" for r, n in sorted(self.skipped.items()))

    def finish(self, examples: list) -> list:
        """Log the totals; raise DataError if no example survived."""
        self.read = len(examples)
        if self.skipped:
            log.warning("%s: %d rows skipped (%s); %d examples kept", self.path, sum(self.skipped.values()),
                        self.summary(), len(examples))
        if not examples:
            raise DataError(f"{self.path}: no usable example ({self.summary()})")
        return examples


def open_lines(path: str, report: ReadReport) -> Iterator[tuple[int, str]]:
    """(line number, text) with BOM and CR/LF removed. Undecodable lines are reported and skipped."""
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found")
    if os.path.isdir(path):
        raise DataError(f"{path}: is a directory, expected a file")
    try:
        f = open(path, "rb")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror})") from None
    with f:
        for i, raw in enumerate(f, 1):
            if i == 1 and raw.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte-order mark (Windows editors)
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                report.skip(i, "not UTF-8", str(e.reason))
                continue
            text = text.rstrip("\n").rstrip("\r")  # CRLF files read like LF files
            if "\x00" in text:
                report.skip(i, "NUL byte")
                continue
            yield i, text.lstrip("\ufeff") if i == 1 else text


Column = Union[int, str]


def read_tsv(path: str, text_cols: Sequence[Column], label_col: Optional[Column], *, header: bool = True,
             labels: Optional[Sequence[str]] = None, regression: bool = False, guid_col: Optional[Column] = None,
             require_label: bool = False, report: Optional[ReadReport] = None) -> list[Example]:
    """A tab-separated file; columns named (header) or numbered (0-based). A missing label column
    means an unlabelled file (GLUE test sets) unless require_label."""
    report = report or ReadReport(path)
    lines = open_lines(path, report)
    names: Optional[list[str]] = None
    if header:
        first = next(lines, None)
        if first is None:
            raise DataError(f"{path}: empty file")
        names = first[1].split("\t")
    idx_text = [_col(c, names, path) for c in text_cols]
    idx_label = _col(label_col, names, path, optional=not require_label) if label_col is not None else None
    idx_guid = _col(guid_col, names, path, optional=True) if guid_col is not None else None
    width = len(names) if names is not None else None
    label_set = set(labels) if labels is not None else None
    out: list[Example] = []
    for line, text in lines:
        if not text.strip():
            continue  # blank lines are not rows
        row = text.split("\t")
        need = max([*idx_text, idx_label if idx_label is not None else -1, idx_guid or -1]) + 1
        if (width is not None and len(row) != width) or len(row) < need:
            report.skip(line, "wrong column count", f"{len(row)} columns, expected {width or need}")
            continue
        ex = _row_example(row, idx_text, idx_label, idx_guid, label_set, regression, f"{path}:{line}", report, line)
        if ex is not None:
            out.append(ex)
    return report.finish(out)


def _col(c: Optional[Column], names: Optional[list[str]], path: str, optional: bool = False) -> Optional[int]:
    if c is None:
        return None
    if isinstance(c, int) or (isinstance(c, str) and c.isdigit() and (names is None or c not in names)):
        return int(c)
    if names is None:
        raise DataError(f"{path}: column {c!r} named but the file has no header; give a column number")
    if c not in names:
        if optional:
            return None
        other = _other_delimiter(names)
        if other:  # a CSV (or ;-separated) file where a TSV is expected: its header reads as one column
            raise DataError(f"{path}: expected a tab-separated file (TSV), but the header is separated by "
                            f"{other!r} ({names[0][:80]}); save it with tabs, or give --format jsonl")
        raise DataError(f"{path}: no column {c!r} in the header (columns: {', '.join(names)})")
    return names.index(c)


def _other_delimiter(names: list[str]) -> Optional[str]:
    """The delimiter of a one-column header that is really several columns (',', ';' or '|'), else None."""
    if len(names) != 1:
        return None
    counts = {d: names[0].count(d) for d in (",", ";", "|")}
    best = max(counts, key=counts.get)
    return best if counts[best] else None


def _row_example(row, idx_text, idx_label, idx_guid, label_set, regression, source, report, line):
    texts = [row[i].strip() for i in idx_text]
    if not all(texts):
        report.skip(line, "empty text")
        return None
    label = None
    if idx_label is not None:
        label = check_label(row[idx_label].strip(), label_set, regression, report, line)
        if label is None:
            return None
    guid = row[idx_guid].strip() if idx_guid is not None else str(line)
    return Example(guid=guid, text_a=texts[0], text_b=texts[1] if len(texts) > 1 else None, label=label,
                   source=source)


def check_label(value, label_set, regression: bool, report: ReadReport, line: int):
    """The label as str (classification) or float (regression); None after reporting a bad one."""
    if regression:
        try:
            v = float(value)
        except (TypeError, ValueError):
            report.skip(line, "bad score", repr(value)[:40])
            return None
        if v != v or v in (float("inf"), float("-inf")):
            report.skip(line, "bad score", repr(value)[:40])
            return None
        return v
    if isinstance(value, bool) or value is None or isinstance(value, (dict, list, float)):
        report.skip(line, "unknown label", repr(value)[:40])
        return None
    value = str(value).strip()
    if not value or (label_set is not None and value not in label_set):
        report.skip(line, "unknown label", repr(value)[:40])
        return None
    return value


def iter_json_lines(path: str, report: ReadReport) -> Iterator[tuple[int, dict]]:
    """JSON objects with their line numbers: JSON lines, or (as CLUENER's dev.json ships) pretty-printed
    objects one after another, or one JSON array of objects. Malformed records reported and skipped."""
    lines = list(open_lines(path, report))
    first = next((t for _, t in lines if t.strip()), "")
    if first.strip() in ("{", "[") or (first.lstrip().startswith("[") and not _is_object(first)):
        yield from _iter_concatenated(lines, report)
        return
    for line, text in lines:
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as e:
            report.skip(line, "bad JSON", str(e)[:60])
            continue
        if not isinstance(obj, dict):
            report.skip(line, "bad JSON", "not an object")
            continue
        yield line, obj


def _is_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except (json.JSONDecodeError, RecursionError):
        return False


def _iter_concatenated(lines: list, report: ReadReport) -> Iterator[tuple[int, dict]]:
    """Multi-line objects back to back (or inside one array). After a broken object, reading resumes at
    the next line that starts with `{` in column 0."""
    text = "\n".join(t for _, t in lines)
    line_of = []  # character offset -> line number, via the start offset of every line
    pos = 0
    for ln, t in lines:
        line_of.append((pos, ln))
        pos += len(t) + 1
    starts = [p for p, _ in line_of]

    def lineno(off: int) -> int:
        import bisect

        return line_of[max(0, bisect.bisect_right(starts, off) - 1)][1]

    dec = json.JSONDecoder()
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t\n,[]":
            i += 1
        if i >= n:
            break
        try:
            obj, end = dec.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError) as e:
            report.skip(lineno(i), "bad JSON", str(e)[:60])
            nxt = text.find("\n{", i + 1)
            if nxt < 0:
                break
            i = nxt + 1
            continue
        if isinstance(obj, dict):
            yield lineno(i), obj
        else:
            report.skip(lineno(i), "bad JSON", "not an object")
        i = end


def text_field(obj: dict, key: str) -> Optional[str]:
    """A non-empty string field (numbers are accepted as text); None if missing or empty."""
    v = obj.get(key)
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        v = str(v)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        v = "；".join(v)  # keyword lists (CSL)
    if not isinstance(v, str) or not v.strip():
        return None
    return v.strip()


def read_jsonl(path: str, text_fields: Sequence[str], label_field: Optional[str], *,
               labels: Optional[Sequence[str]] = None, regression: bool = False, id_field: Optional[str] = None,
               require_label: bool = False, report: Optional[ReadReport] = None,
               desc_field: Optional[str] = None) -> list[Example]:
    """JSON lines with named text fields and a label field (absent everywhere: unlabelled file);
    desc_field names the field holding each label's readable name, if the file has one."""
    report = report or ReadReport(path)
    label_set = set(labels) if labels is not None else None
    rows = list(iter_json_lines(path, report))
    labelled = require_label or (label_field is not None and any(label_field in o for _, o in rows))
    out = []
    for line, obj in rows:
        texts = [text_field(obj, k) for k in text_fields]
        if not all(texts):
            report.skip(line, "empty text", f"field {text_fields[texts.index(None)]!r}")
            continue
        label = None
        if labelled:
            label = check_label(obj.get(label_field), label_set, regression, report, line)
            if label is None:
                continue
        guid = obj.get(id_field, line) if id_field else line
        desc = obj.get(desc_field) if desc_field and label is not None else None
        out.append(Example(guid=str(guid), text_a=texts[0], text_b=texts[1] if len(texts) > 1 else None,
                           label=label, source=f"{path}:{line}",
                           label_desc=desc.strip() if isinstance(desc, str) and desc.strip() else None))
    return report.finish(out)
