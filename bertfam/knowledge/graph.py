"""A K-BERT knowledge graph: `subject\\tpredicate\\tobject` triples from `.spo` files.

Lookup is by the exact surface form of a segmented word. What gets injected for a subject is
`predicate + object` (K-BERT's `predicate=True`, used for HowNet and Medical) or only the object.
Segmentation uses jieba with every subject added as a user word, so that an entity of the graph
is cut as one word (K-BERT does the same with pkuseg).
"""
from __future__ import annotations

import logging
import os
from typing import Iterable, Optional, Sequence, Union

from ..errors import ConfigError, DataError

log = logging.getLogger("bertfam")

MAX_REPORTED = 5  # malformed lines named one by one; the rest only counted


class KnowledgeGraph:
    """subject -> injected strings (file order, duplicates removed), at most `max_entities` used per word."""

    def __init__(self, table: dict[str, list[str]], max_entities: int = 2, sources: Sequence[str] = (),
                 skipped: Optional[list[tuple[str, int, str]]] = None):
        if not isinstance(max_entities, int) or max_entities < 0:
            raise ConfigError(f"max_entities must be an integer >= 0, got {max_entities!r}")
        if not table:
            raise DataError(f"knowledge graph {', '.join(sources) or '(in memory)'} holds no triple")
        self.table = table
        self.max_entities = max_entities
        self.sources = list(sources)
        self.skipped = skipped or []  # (path, line number, reason) of every malformed line
        self._jieba = None

    # ------------------------------------------------------------ loading
    @classmethod
    def load(cls, paths: Union[str, Iterable[str]], max_entities: int = 2,
             with_predicate: bool = True) -> "KnowledgeGraph":
        """Read one or more `.spo` files (a list, or one string with comma-separated paths).

        A line that is not exactly three non-empty tab-separated fields is reported (file and line
        number) and skipped; a graph with no valid triple at all raises DataError.
        """
        if isinstance(paths, str):
            paths = [p for p in paths.split(",") if p]
        paths = list(paths)
        if not paths:
            raise DataError("knowledge graph: no .spo file given")
        table: dict[str, list[str]] = {}
        skipped: list[tuple[str, int, str]] = []
        for path in paths:
            _read_spo(path, table, skipped, with_predicate)
        for path, lineno, why in skipped[:MAX_REPORTED]:
            log.warning("%s:%d: skipped malformed triple (%s)", path, lineno, why)
        if len(skipped) > MAX_REPORTED:
            log.warning("knowledge graph: %d malformed lines skipped in all", len(skipped))
        if not table:
            raise DataError(f"knowledge graph {', '.join(paths)}: no valid triple "
                            f"({len(skipped)} malformed line(s) skipped)")
        return cls(table, max_entities, paths, skipped)

    # ------------------------------------------------------------ queries
    def __len__(self) -> int:
        return len(self.table)

    def __contains__(self, word: str) -> bool:
        return word in self.table

    @property
    def num_triples(self) -> int:
        return sum(len(v) for v in self.table.values())

    def lookup(self, word: str) -> list[str]:
        """The strings injected after `word` (at most max_entities)."""
        return self.table.get(word, [])[: self.max_entities]

    def segment(self, text: str) -> list[tuple[str, int, int]]:
        """(word, start, end) character spans covering `text`, graph subjects kept whole."""
        return [(w, s, e) for w, s, e in self._segmenter().tokenize(text, HMM=False)]

    def _segmenter(self):
        if self._jieba is None:
            import jieba

            tk = _fresh_jieba()  # a private instance: the global jieba dictionary stays untouched
            for subject in self.table:
                if not any(c.isspace() for c in subject):  # jieba cannot hold words with blanks
                    tk.add_word(subject, freq=None)
            self._jieba = tk
        return self._jieba


_JIEBA_BASE: Optional[tuple] = None  # (FREQ, total) of jieba's default dictionary, read once per process


def _fresh_jieba():
    """A jieba Tokenizer with its own copy of the default dictionary (loading it costs ~1-2 s; copying it
    ~0.1 s), so that every graph can add its subjects without touching other graphs or global jieba."""
    global _JIEBA_BASE
    import jieba

    jieba.setLogLevel(logging.WARNING)
    if _JIEBA_BASE is None:
        base = jieba.Tokenizer()
        base.initialize()
        _JIEBA_BASE = (base.FREQ, base.total)
    tk = jieba.Tokenizer()
    tk.FREQ, tk.total = dict(_JIEBA_BASE[0]), _JIEBA_BASE[1]
    tk.initialized = True
    return tk


def _read_spo(path: str, table: dict[str, list[str]], skipped: list, with_predicate: bool) -> None:
    if not os.path.isfile(path):
        raise DataError(f"{path}: knowledge graph file not found")
    try:
        with open(path, encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                parts = line.split("\t")
                if len(parts) != 3:
                    skipped.append((path, lineno, f"{len(parts)} tab-separated field(s), expected 3"))
                    continue
                subj, pred, obj = (p.strip() for p in parts)
                if not subj or not obj or (with_predicate and not pred):
                    skipped.append((path, lineno, "empty field"))
                    continue
                value = pred + obj if with_predicate else obj
                values = table.setdefault(subj, [])
                if value not in values:
                    values.append(value)
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 ({e})") from None
