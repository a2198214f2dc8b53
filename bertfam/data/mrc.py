"""Readers for extractive reading-comprehension data (SQuAD-like JSON: data -> paragraphs -> qas).

One reader covers DuReader-checklist, DuReader-robust, CMRC2018, DRCD and SQuAD 1.1/2.0: they differ
only in where `title` sits (paragraph or document), whether `is_impossible` / `type` exist and how
unanswerable questions are written (`answers: []` or one answer with empty text and start -1).

Every problem with a record is reported (file, JSON path, id, reason) and counted in a `MRCReadReport`;
the rest of the file is still read. Only a file that cannot be read at all raises `DataError`.
"""
from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Sequence

from ..errors import DataError

MAX_PROBLEMS = 50  # problem messages kept verbatim per file; all are counted


@dataclass
class MRCAnswer:
    text: str
    start: int  # character offset into the example's context (-1: unknown, references only)

    @property
    def end(self) -> int:  # exclusive
        return self.start + len(self.text)


@dataclass
class MRCExample:
    qid: str
    question: str
    context: str
    title: str = ""
    answers: list[MRCAnswer] = field(default_factory=list)
    is_impossible: bool = False
    qtype: str = ""
    source: str = ""

    @property
    def answer_texts(self) -> list[str]:
        return [a.text for a in self.answers]


@dataclass
class MRCReadReport:
    """What happened to every record of one file."""

    source: str
    questions: int = 0  # qas records seen
    kept: int = 0
    unanswerable: int = 0  # kept questions without an answer
    unlabelled: int = 0  # of those: neither "answers" nor "is_impossible" given (a file to predict, not a label)
    skipped: Counter = field(default_factory=Counter)  # reason -> count
    answers: int = 0  # answer records seen on answerable questions
    answers_exact: int = 0  # answer_start matched the text
    answers_repaired: int = 0  # answer_start was off; found by search
    answers_ambiguous: int = 0  # of the repaired: the text occurs more than once (nearest taken)
    answers_dropped: int = 0  # answer text missing / not a string / not in the context
    problems: list[str] = field(default_factory=list)

    def problem(self, where: str, msg: str, reason: Optional[str] = None) -> None:
        if reason is not None:
            self.skipped[reason] += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(f"{self.source}: {where}: {msg}")

    def to_dict(self) -> dict:
        return {"source": self.source, "questions": self.questions, "kept": self.kept,
                "unanswerable": self.unanswerable, "unlabelled": self.unlabelled, "skipped": dict(self.skipped),
                "answers": self.answers,
                "answers_exact": self.answers_exact, "answers_repaired": self.answers_repaired,
                "answers_ambiguous": self.answers_ambiguous, "answers_dropped": self.answers_dropped}

    def summary(self) -> str:
        sk = ", ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())) or "none"
        unl = f", {self.unlabelled} of them unlabelled: no answers given" if self.unlabelled else ""
        head = f"{self.source}: {self.kept}/{self.questions} questions kept ({self.unanswerable} unanswerable{unl}); " \
               f"skipped: {sk}"
        if not self.answers:  # predict / reference modes do not check answer spans
            return head
        return (f"{head}; answers: {self.answers_exact} exact, {self.answers_repaired} repaired by search "
                f"({self.answers_ambiguous} ambiguous), {self.answers_dropped} dropped")


def load_json(path: str) -> Any:
    """json.load with every failure turned into DataError naming the file (and line/column)."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8-sig") as f:
            return json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: line {e.lineno} column {e.colno}: not valid JSON ({e.msg})") from None
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start})") from None
    except RecursionError:
        raise DataError(f"{path}: JSON nested too deeply") from None


def _documents(obj: Any, path: str) -> list:
    if isinstance(obj, dict) and isinstance(obj.get("data"), list):
        return obj["data"]
    if isinstance(obj, list):  # a bare list of documents
        return obj
    raise DataError(f"{path}: expected a JSON object with a \"data\" list (SQuAD layout)")


def _str_field(d: dict, key: str) -> Optional[str]:
    v = d.get(key)
    return v if isinstance(v, str) else None


def find_answer(context: str, text: str, start: Any) -> tuple[Optional[int], str]:
    """(start, how) of `text` in `context`: how = exact | repaired | ambiguous | missing.

    A start that does not point at the text is repaired by search; with several occurrences the one
    nearest the given start is taken (the given start is often off by a few characters)."""
    if isinstance(start, bool) or not isinstance(start, int):
        start = -1
    if 0 <= start and context[start:start + len(text)] == text:
        return start, "exact"
    hits, i = [], context.find(text)
    while i >= 0:
        hits.append(i)
        i = context.find(text, i + 1)
    if not hits:
        return None, "missing"
    best = min(hits, key=lambda h: abs(h - start)) if start >= 0 else hits[0]
    return best, "repaired" if len(hits) == 1 else "ambiguous"


MODES = ("train", "predict", "reference")


def read_mrc(path: str, source: Optional[str] = None, mode: str = "train") -> tuple[list[MRCExample], MRCReadReport]:
    """Read one SQuAD-layout file.

    mode "train": questions need text, the paragraph needs a context, answerable questions need at
    least one answer found in the context (answer_start validated, repaired by search, counted).
    mode "predict": question and context needed; answers kept as given (not validated).
    mode "reference" (evaluation): only id and answer texts are needed, as in the official scorers.
    """
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} not in {MODES}")
    report = MRCReadReport(source or os.path.basename(path))
    docs = _documents(load_json(path), path)
    examples: list[MRCExample] = []
    seen: dict[str, str] = {}
    for di, doc in enumerate(docs):
        if not isinstance(doc, dict) or not isinstance(doc.get("paragraphs"), list):
            report.problem(f"data[{di}]", "document without a \"paragraphs\" list: skipped", "bad document")
            continue
        doc_title = _str_field(doc, "title") or ""
        for pi, para in enumerate(doc["paragraphs"]):
            where_p = f"data[{di}].paragraphs[{pi}]"
            if not isinstance(para, dict) or not isinstance(para.get("qas"), list):
                report.problem(where_p, "paragraph without a \"qas\" list: skipped", "bad paragraph")
                continue
            title = _str_field(para, "title") or doc_title
            context = _str_field(para, "context")
            for qi, qa in enumerate(para["qas"]):
                report.questions += 1
                ex = _read_qa(qa, f"{where_p}.qas[{qi}]", context, title, report, mode, seen)
                if ex is not None:
                    examples.append(ex)
                    report.kept += 1
                    report.unanswerable += ex.is_impossible
    return examples, report


def _read_qa(qa: Any, where: str, context: Optional[str], title: str, report: MRCReadReport, mode: str,
             seen: dict) -> Optional[MRCExample]:
    if not isinstance(qa, dict):
        report.problem(where, "question record is not an object: skipped", "bad record")
        return None
    qid = qa.get("id")
    if isinstance(qid, int) and not isinstance(qid, bool):
        qid = str(qid)
    if not isinstance(qid, str) or not qid:
        report.problem(where, "missing or non-string \"id\": skipped", "missing id")
        return None
    where = f"{where} (id {qid})"
    if qid in seen:
        report.problem(where, f"duplicate id (first at {seen[qid]}): skipped", "duplicate id")
        return None
    seen[qid] = where
    question = qa.get("question")
    if mode != "reference":
        if not isinstance(question, str):
            report.problem(where, "missing or non-string \"question\": skipped", "missing question")
            return None
        if not question.strip():
            report.problem(where, "empty question: skipped", "empty question")
            return None
        if context is None:
            report.problem(where, "paragraph has no string \"context\": skipped", "missing context")
            return None
        if not context.strip():
            report.problem(where, "empty passage: skipped", "empty passage")
            return None
    imp = qa.get("is_impossible", False)
    if not isinstance(imp, bool):
        report.problem(where, f"\"is_impossible\" is not a boolean ({imp!r}): skipped", "bad is_impossible")
        return None
    answers = qa.get("answers", [])
    if answers is None:
        answers = []
    if not isinstance(answers, list):
        report.problem(where, "\"answers\" is not a list: skipped", "bad answers")
        return None
    qtype = qa.get("type") if isinstance(qa.get("type"), str) else ""
    ex = MRCExample(qid, question if isinstance(question, str) else "", context or "", title, [], imp, qtype,
                    report.source)
    if imp:
        return ex
    texts = _answer_texts(answers, where, report)
    if not texts and not answers:  # SQuAD-1-style file without is_impossible and no answers
        ex.is_impossible = True
        report.unlabelled += "answers" not in qa and "is_impossible" not in qa
        return ex
    if all(t == "" for t, _ in texts) and texts:  # unanswerable written as one empty answer
        ex.is_impossible = True
        return ex
    for text, start in texts:
        if not text:
            continue
        if mode != "train":
            ex.answers.append(MRCAnswer(text, start if isinstance(start, int) and not isinstance(start, bool) else -1))
            continue
        report.answers += 1
        pos, how = find_answer(context, text, start)
        if pos is None:
            report.answers_dropped += 1
            report.problem(where, f"answer {text[:30]!r} not found in the passage: answer dropped")
            continue
        report.answers_exact += how == "exact"
        report.answers_repaired += how != "exact"
        report.answers_ambiguous += how == "ambiguous"
        ex.answers.append(MRCAnswer(text, pos))
    if not ex.answers and mode != "predict":
        report.problem(where, "answerable question without a usable answer: skipped", "no usable answer")
        return None
    return ex


def _answer_texts(answers: list, where: str, report: MRCReadReport) -> list[tuple[str, Any]]:
    out = []
    for ai, a in enumerate(answers):
        if isinstance(a, str):  # some tools write answers as bare strings
            out.append((a, -1))
        elif isinstance(a, dict) and isinstance(a.get("text"), str):
            out.append((a["text"], a.get("answer_start", -1)))
        else:
            report.answers += 1
            report.answers_dropped += 1
            what = "not an object" if not isinstance(a, dict) else f"text is {type(a.get('text')).__name__}"
            report.problem(f"{where}.answers[{ai}]", f"answer {what}, not a string: answer dropped")
    return out


def read_many(paths: Sequence[str], mode: str = "train") -> tuple[list[MRCExample], list[MRCReadReport]]:
    """Several files at once (e.g. CMRC2018 + DuReader-robust + DuReader-checklist), one report each.

    Ids are made unique across files by prefixing the source name when two files share an id."""
    examples: list[MRCExample] = []
    reports: list[MRCReadReport] = []
    ids: set[str] = set()
    names = _unique_names(paths)
    for path, name in zip(paths, names):
        exs, rep = read_mrc(path, source=name, mode=mode)
        for ex in exs:
            if ex.qid in ids:
                ex.qid = f"{name}:{ex.qid}"
            ids.add(ex.qid)
        examples.extend(exs)
        reports.append(rep)
    if not examples:
        raise DataError(f"no usable question in {', '.join(paths)}")
    return examples, reports


def _unique_names(paths: Sequence[str]) -> list[str]:
    """Short source names: the file name, or parent/file when two files share a name."""
    base = [os.path.basename(p) for p in paths]
    dup = {b for b, n in Counter(base).items() if n > 1}
    names = [os.path.join(os.path.basename(os.path.dirname(os.path.abspath(p))), b) if b in dup else b
             for p, b in zip(paths, base)]
    out, count = [], Counter()
    for n in names:  # the same path given twice
        count[n] += 1
        out.append(n if count[n] == 1 else f"{n}#{count[n]}")
    return out


def split_examples(examples: list[MRCExample], dev_fraction: float, seed: int = 0
                   ) -> tuple[list[MRCExample], list[MRCExample]]:
    """Hold out a dev split by passage (questions on one passage stay together), stratified by source
    (`splits.dev_split`; both parts in the shuffled order of the passages)."""
    from .splits import dev_split

    return dev_split(examples, dev_fraction, seed, group=lambda ex: ex.context, stratify=lambda ex: ex.source,
                     shuffled=True)


def write_squad(examples: Iterable[MRCExample], path: str) -> None:
    """Write examples back as SQuAD-layout JSON (one paragraph per example; title on the paragraph)."""
    from ..utils import atomic_write_text

    paras = []
    for ex in examples:
        answers = ([{"text": "", "answer_start": -1}] if ex.is_impossible else
                   [{"text": a.text, "answer_start": a.start} for a in ex.answers])
        paras.append({"context": ex.context, "title": ex.title,
                      "qas": [{"id": ex.qid, "question": ex.question, "type": ex.qtype, "answers": answers,
                               "is_impossible": ex.is_impossible}]})
    atomic_write_text(path, json.dumps({"data": [{"title": "", "paragraphs": paras}]}, ensure_ascii=False) + "\n")
