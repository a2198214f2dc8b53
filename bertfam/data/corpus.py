"""Streaming pre-training corpus reader.

Formats (chosen per file):
- text, Google BERT layout: one sentence (or paragraph) per line, a blank line between documents.
  WikiExtractor `<doc ...>` / `</doc>` lines also separate documents. Lines holding several sentences
  are split into sentences.
- JSON lines (`.jsonl`/`.json`, or a first line starting with `{`): one document per line in a
  `text` field (the field name is configurable), split into sentences.

Files are read line by line (never whole), so corpora larger than memory stream through. A line that
is not UTF-8, a JSON line that does not parse or lacks the text field is reported as `file:line` and
skipped (counted in CorpusStats); an over-long line is truncated with a warning.
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional, Sequence

from ..errors import DataError

log = logging.getLogger("bertfam")

# a sentence ends after 。！？；… (and half-width ｡ / full-width ．) plus closing quotes, or after
# English . ! ? ; followed by whitespace (so 3.5 and e.g. do not split inside a token)
_END = re.compile(r"([。！？；…｡．]+[”’」』\"'）)\]]*|[!?]+[”’\"')\]]*|[.;]+[”’\"')\]]*(?=\s))")
MAX_REPORTED = 20  # per kind of problem; the rest are only counted


def split_sentences(text: str) -> list[str]:
    """Chinese on 。！？；… (and full-width variants), English on sentence punctuation."""
    text = text.strip()
    if not text:
        return []
    return [p.strip() for p in _END.sub("\\1\n", text).split("\n") if p.strip()]


@dataclass
class CorpusStats:
    files: int = 0
    lines: int = 0
    documents: int = 0
    sentences: int = 0
    bad_lines: int = 0  # not UTF-8 / bad JSON / no text field: reported and skipped
    truncated_lines: int = 0
    problems: list = field(default_factory=list)  # first reports, "file:line: why"

    def report(self, where: str, why: str, kind: str = "bad") -> None:
        if kind == "bad":
            self.bad_lines += 1
            n = self.bad_lines
        else:
            self.truncated_lines += 1
            n = self.truncated_lines
        msg = f"{where}: {why}"
        if n <= MAX_REPORTED:
            log.warning(msg)
            self.problems.append(msg)
        elif n == MAX_REPORTED + 1:
            log.warning("further %s lines are counted, not reported", "skipped" if kind == "bad" else "truncated")

    def summary(self) -> str:
        return (f"{self.files} files, {self.lines} lines, {self.documents} documents, {self.sentences} sentences; "
                f"{self.bad_lines} lines skipped, {self.truncated_lines} truncated")


def expand_files(specs: Sequence[str]) -> list[str]:
    """Files and directories (all regular files below, sorted). A missing path is a DataError."""
    files = []
    for s in specs:
        if os.path.isdir(s):
            for root, dirs, names in os.walk(s):
                dirs.sort()
                files += [os.path.join(root, n) for n in sorted(names) if not n.startswith(".")]
        elif os.path.isfile(s):
            files.append(s)
        else:
            raise DataError(f"{s}: corpus file not found")
    if not files:
        raise DataError(f"no corpus files in {', '.join(specs)}")
    return files


def _is_jsonl(path: str) -> bool:
    if path.endswith((".jsonl", ".json")):
        return True
    with open(path, "rb") as f:
        head = f.read(64).lstrip()
    return head.startswith(b"{")


def _lines(path: str, stats: CorpusStats, max_line_chars: int) -> Iterator[tuple[int, Optional[str]]]:
    """(line number, decoded line or None when the line was undecodable and skipped)."""
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            stats.lines += 1
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                stats.report(f"{path}:{no}", f"not UTF-8 (byte {e.start}), line skipped")
                yield no, None
                continue
            line = line.rstrip("\r\n").lstrip("\ufeff")
            if len(line) > max_line_chars:
                stats.report(f"{path}:{no}", f"line of {len(line)} characters truncated to {max_line_chars}",
                             kind="truncated")
                line = line[:max_line_chars]
            yield no, line


def iter_documents(files: Sequence[str], stats: Optional[CorpusStats] = None, max_line_chars: int = 100_000,
                   text_field: str = "text") -> Iterator[list[str]]:
    """Documents as lists of sentences, streamed file by file."""
    stats = stats if stats is not None else CorpusStats()
    for path in expand_files(files):
        stats.files += 1
        reader = _jsonl_docs if _is_jsonl(path) else _text_docs
        for doc in reader(path, stats, max_line_chars, text_field):
            if doc:
                stats.documents += 1
                stats.sentences += len(doc)
                yield doc


def _text_docs(path: str, stats: CorpusStats, max_line_chars: int, _field: str) -> Iterable[list[str]]:
    doc: list[str] = []
    for _, line in _lines(path, stats, max_line_chars):
        if line is None:
            continue
        s = line.strip()
        if not s or s.startswith("<doc ") or s == "</doc>":
            if doc:
                yield doc
            doc = []
            continue
        doc += split_sentences(s)
    if doc:
        yield doc


def _jsonl_docs(path: str, stats: CorpusStats, max_line_chars: int, text_field: str) -> Iterable[list[str]]:
    for no, line in _lines(path, stats, max_line_chars):
        if line is None or not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            stats.report(f"{path}:{no}", f"not valid JSON ({e.msg}), line skipped")
            continue
        text = rec.get(text_field) if isinstance(rec, dict) else None
        if not isinstance(text, str):
            stats.report(f"{path}:{no}", f"no string field {text_field!r}, line skipped")
            continue
        yield split_sentences(text)
