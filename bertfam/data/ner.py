"""Chinese sequence-labelling readers: CLUENER2020 span JSON, `char tag` column files (MSRA/People's
Daily BIO, Resume BMES), and K-BERT's space-separated TSV (medical_ner).

All produce Examples with `tokens` (characters) and `tags` (one per character, in the file's own
scheme: BIO, BIOES or BMES). CLUENER spans are [start, end] with end INCLUSIVE.
"""
from __future__ import annotations

import re
from typing import Optional

from ..errors import DataError
from .labelled import Example, ReadReport, iter_json_lines, open_lines

TAG_RE = re.compile(r"^(O|[BIMES]-\S+)$")


def valid_tag(t: str) -> bool:
    return bool(TAG_RE.match(t))


def read_cluener(path: str) -> list[Example]:
    """`{"text": ..., "label": {type: {entity: [[start, end], ...]}}}` -> BIO tags over characters.
    A file with no `label` anywhere (the test set) gives unlabelled examples."""
    report = ReadReport(path)
    rows = list(iter_json_lines(path, report))
    labelled = any("label" in o for _, o in rows)
    out = []
    for line, obj in rows:
        text = obj.get("text")
        if not isinstance(text, str) or not text.strip():
            report.skip(line, "empty text")
            continue
        tags = None
        if labelled:
            tags, why = _spans_to_bio(text, obj.get("label"))
            if tags is None:
                report.skip(line, "bad span", why)
                continue
        out.append(Example(guid=str(obj.get("id", line)), tokens=list(text), tags=tags, source=f"{path}:{line}"))
    return report.finish(out)


def _spans_to_bio(text: str, label) -> tuple[Optional[list], str]:
    if label is None:
        label = {}
    if not isinstance(label, dict):
        return None, "label is not an object"
    tags = ["O"] * len(text)
    for etype, ents in label.items():
        if not isinstance(etype, str) or not etype or any(c.isspace() for c in etype) or not isinstance(ents, dict):
            return None, f"bad entity type {str(etype)[:20]!r}"
        for ent, spans in ents.items():
            if not isinstance(spans, list):
                return None, f"spans of {ent!r} not a list"
            for sp in spans:
                ok = (isinstance(sp, list) and len(sp) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                                                      for x in sp))
                if not ok or not 0 <= sp[0] <= sp[1] < len(text):
                    return None, f"span {str(sp)[:30]} outside the text"
                s, e = sp
                if text[s:e + 1] != ent:  # end inclusive
                    return None, f"span {sp} is {text[s:e + 1]!r}, not {ent!r}"
                if any(t != "O" for t in tags[s:e + 1]):
                    return None, f"span {sp} overlaps another entity"
                tags[s:e + 1] = [f"B-{etype}"] + [f"I-{etype}"] * (e - s)
    return tags, ""


def read_char_tags(path: str) -> list[Example]:
    """One `char tag` per line, a blank line between sentences (MSRA/People's Daily BIO, BMES files).
    A sentence with a malformed line (not two fields, bad tag) is skipped whole."""
    report = ReadReport(path)
    out: list[Example] = []
    chars: list[str] = []
    tags: list[str] = []
    start, bad = 0, False

    def flush() -> None:
        nonlocal chars, tags, bad
        if chars and not bad:
            out.append(Example(guid=str(len(out)), tokens=chars, tags=tags, source=f"{path}:{start}"))
        chars, tags, bad = [], [], False

    for line, text in open_lines(path, report):
        if not text.strip():
            flush()
            continue
        if not chars and not bad:
            start = line
        parts = text.split()
        if bad:
            continue
        if len(parts) != 2:
            report.skip(line, "wrong column count", f"{len(parts)} fields, expected `char tag` (sentence skipped)")
            bad = True
            continue
        if not valid_tag(parts[1]):
            report.skip(line, "unknown label", f"tag {parts[1][:20]!r} (sentence skipped)")
            bad = True
            continue
        chars.append(parts[0])
        tags.append(parts[1])
    flush()
    return report.finish(out)


def read_kbert_ner(path: str) -> list[Example]:
    """K-BERT medical_ner: header `text_a\tlabel`; both columns space-separated, one tag per character."""
    report = ReadReport(path)
    lines = open_lines(path, report)
    first = next(lines, None)
    if first is None:
        raise DataError(f"{path}: empty file")
    names = first[1].split("\t")
    if "text_a" not in names or "label" not in names:
        raise DataError(f"{path}:1: expected a header with text_a and label, got {first[1][:60]!r}")
    it, il = names.index("text_a"), names.index("label")
    out = []
    for line, text in lines:
        if not text.strip():
            continue
        row = text.split("\t")
        if len(row) != len(names):
            report.skip(line, "wrong column count", f"{len(row)} columns, expected {len(names)}")
            continue
        chars, tags = row[it].split(), row[il].split()
        if not chars:
            report.skip(line, "empty text")
            continue
        if len(chars) != len(tags):
            report.skip(line, "token/tag count mismatch", f"{len(chars)} tokens, {len(tags)} tags")
            continue
        if not all(valid_tag(t) for t in tags):
            report.skip(line, "unknown label", next(t for t in tags if not valid_tag(t))[:20])
            continue
        out.append(Example(guid=str(line), tokens=chars, tags=tags, source=f"{path}:{line}"))
    return report.finish(out)


def detect_format(path: str) -> str:
    """cluener | kbert | chars, from the first non-blank line."""
    report = ReadReport(path)
    for _, text in open_lines(path, report):
        if not text.strip():
            continue
        if text.lstrip().startswith("{"):
            return "cluener"
        if "\t" in text and "text_a" in text.split("\t"):
            return "kbert"
        return "chars"
    raise DataError(f"{path}: empty file")


def read_ner(path: str, fmt: str = "auto") -> list[Example]:
    fmt = detect_format(path) if fmt == "auto" else fmt
    readers = {"cluener": read_cluener, "chars": read_char_tags, "kbert": read_kbert_ner}
    if fmt not in readers:
        raise DataError(f"unknown NER format {fmt!r}; known: {', '.join(readers)}")
    return readers[fmt](path)
