"""DuReader 2.0 (search / zhidao JSON lines) as checklist-style MRC examples: question + ONE paragraph +
its document's title -> answer span or no answer.

DuReader 2.0 gives each question ~5 web documents from one search, the documents the annotators used
(`is_selected`), and for the answer document (`answer_docs[0]`) its `most_related_para` with the answer as
a span over that paragraph's word segmentation (`answer_spans`, inclusive word indices; `fake_answers` holds
its text). DuReader-checklist was built from this very domain, so the file gives:
- answerable examples: the answer paragraph, span mapped from word indices to character offsets in the
  raw paragraph (the segmentation drops whitespace, so the words are aligned to the text one by one) and
  checked against `fake_answers`;
- same-topic unanswerable examples: the most related paragraph of a document of the same search that the
  annotators did NOT select and that shares little with every reference answer (character-bigram recall
  below `max_answer_overlap`), which is what the checklist's hard negatives look like.

Every problem with a record is reported and counted in the MRCReadReport (file, line, reason); a bad line
never stops the file.
"""
from __future__ import annotations

import json
import os
from typing import Optional, Sequence

from ..errors import DataError
from .mrc import MRCAnswer, MRCExample, MRCReadReport


def align_words(text: str, words: Sequence[str]) -> Optional[list[tuple[int, int]]]:
    """Character (start, end) of each segmented word in `text`, skipping whitespace between words.
    None when the words do not spell the text (other characters than whitespace in between)."""
    out, pos = [], 0
    for w in words:
        while pos < len(text) and text[pos].isspace() and not w[:1].isspace():
            pos += 1
        if text.startswith(w, pos):
            out.append((pos, pos + len(w)))
            pos += len(w)
            continue
        return None
    return out


def word_span_to_chars(text: str, words: Sequence[str], start: int, end: int) -> Optional[tuple[int, int]]:
    """Inclusive word indices [start, end] -> character [a, b) in text; None if it cannot be aligned."""
    if not (0 <= start <= end < len(words)):
        return None
    offsets = align_words(text, words)
    if offsets is None:
        return None
    return offsets[start][0], offsets[end][1]


def find_squeezed(text: str, answer: str) -> Optional[tuple[int, int]]:
    """[a, b) of the first place where `answer`'s non-space characters occur in `text` in order with only
    whitespace between them; None if nowhere (or the answer is blank)."""
    import re

    chars = _squeeze(answer)
    if not chars:
        return None
    m = re.search(r"\s*".join(re.escape(c) for c in chars), text)
    return (m.start(), m.end()) if m else None


def best_f1_span(words: Sequence[str], answers: Sequence[Sequence[str]], max_words: int = 120
                 ) -> tuple[float, int, int]:
    """(F1, start, end) of the span of `words` (inclusive indices, at most max_words long) with the best
    word-level F1 against any of the segmented `answers`: how DuReader 2.0 made its `fake_answers`."""
    from collections import Counter

    best = (0.0, -1, -1)
    for ans in answers:
        want = Counter(ans)
        if not want:
            continue
        n_ans = sum(want.values())
        for i, w in enumerate(words):
            if w not in want:  # a best span starts (and ends) with a word of the answer
                continue
            have: Counter = Counter()
            overlap = 0
            for j in range(i, min(len(words), i + max_words)):
                have[words[j]] += 1
                if have[words[j]] <= want[words[j]]:
                    overlap += 1
                if overlap:
                    f1 = 2 * overlap / (j - i + 1 + n_ans)
                    if f1 > best[0]:
                        best = (f1, i, j)
    return best


def _squeeze(s: str) -> str:
    return "".join(s.split())


def _bigrams(s: str) -> set:
    s = _squeeze(s)
    return {s[i:i + 2] for i in range(len(s) - 1)} or ({s} if s else set())


def answer_overlap(paragraph: str, answers: Sequence[str]) -> float:
    """The largest share of a reference answer's character bigrams found in the paragraph."""
    pb = _bigrams(paragraph)
    best = 0.0
    for a in answers:
        ab = _bigrams(a)
        if ab:
            best = max(best, len(ab & pb) / len(ab))
    return best


def read_dureader2(path: str, source: Optional[str] = None, negatives: bool = True,
                   max_answer_overlap: float = 0.3, max_chars: int = 1000, other_selected_min_f1: float = 0.0
                   ) -> tuple[list[MRCExample], MRCReadReport]:
    """Checklist-style examples from one DuReader 2.0 JSON-lines file (see the module docstring).

    Questions without answer documents (the test split) give no examples and are counted as skipped.
    Paragraphs longer than `max_chars` characters are skipped (counted): the checklist's passages are
    short (median 166 characters).

    other_selected_min_f1 > 0 adds, for each other selected document, its most related paragraph as an
    answerable example when a span of it reaches that word-level F1 against a reference answer
    (`best_f1_span`, the construction of DuReader 2.0's own `fake_answers`)."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    rep = MRCReadReport(source or os.path.basename(path))
    out: list[MRCExample] = []
    try:
        f = open(path, encoding="utf-8-sig")
        lines = f.read().splitlines()
        f.close()
    except UnicodeDecodeError as e:
        raise DataError(f"{path}: not UTF-8 text (byte {e.start})") from None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        rep.questions += 1
        where = f"line {n}"
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            rep.problem(where, f"not valid JSON ({e.msg})", "bad JSON")
            continue
        try:
            exs = _record(rec, where, rep, negatives, max_answer_overlap, max_chars)
            if other_selected_min_f1 > 0 and exs:
                exs += _other_selected(rec, rep, other_selected_min_f1, max_chars)
        except (KeyError, TypeError, IndexError, ValueError) as e:  # a malformed record, reported
            rep.problem(where, f"malformed record ({type(e).__name__}: {e})", "malformed")
            continue
        if exs:
            rep.kept += 1
            out.extend(exs)
    return out, rep


def _record(rec: dict, where: str, rep: MRCReadReport, negatives: bool, max_overlap: float,
            max_chars: int) -> list[MRCExample]:
    qid, question, docs = str(rec["question_id"]), rec["question"], rec["documents"]
    if not isinstance(question, str) or not question.strip() or not isinstance(docs, list):
        rep.problem(where, "no question text or no documents list", "no question")
        return []
    if not rec.get("answer_docs") or not rec.get("answer_spans") or not rec.get("fake_answers"):
        rep.problem(where, f"question {qid}: no answer document (test split?)", "no answer document")
        return []
    qtype = rec.get("question_type", "")
    refs = [a for a in rec.get("answers", []) if isinstance(a, str) and a.strip()] + list(rec["fake_answers"])
    out = []
    d = docs[rec["answer_docs"][0]]
    p = d["most_related_para"]
    text, words = d["paragraphs"][p], d["segmented_paragraphs"][p]
    s, e = rec["answer_spans"][0]
    rep.answers += 1
    span = word_span_to_chars(text, words, int(s), int(e))
    fake = rec["fake_answers"][0]
    how = "exact"
    if span is None or _squeeze(text[span[0]:span[1]]) != _squeeze(fake):
        # the segmentation was made from a slightly different cleaning of the text (e.g. a dropped list
        # number "一、"): find the answer's characters in the raw text, whitespace between them allowed
        span, how = find_squeezed(text, fake), "repaired"
    if span is None:
        rep.answers_dropped += 1
        rep.problem(where, f"question {qid}: answer span does not align with the paragraph text", "span not aligned")
    elif len(text) > max_chars:
        rep.problem(where, f"question {qid}: answer paragraph of {len(text)} characters", "paragraph too long")
    else:
        if how == "exact":
            rep.answers_exact += 1
        else:
            rep.answers_repaired += 1
        a, b = span
        out.append(MRCExample(qid=f"{qid}:pos", question=question, context=text, title=d.get("title", ""),
                              answers=[MRCAnswer(text[a:b], a)], qtype=qtype, source=rep.source))
    if not negatives:
        return out
    for k, doc in enumerate(docs):
        if doc.get("is_selected") or k in rec["answer_docs"] or not doc.get("paragraphs"):
            continue
        j = doc.get("most_related_para", 0)
        if not 0 <= j < len(doc["paragraphs"]):
            j = 0
        para = doc["paragraphs"][j]
        if not para.strip() or len(para) > max_chars or answer_overlap(para, refs) >= max_overlap:
            continue
        rep.unanswerable += 1
        out.append(MRCExample(qid=f"{qid}:neg{k}", question=question, context=para, title=doc.get("title", ""),
                              is_impossible=True, qtype=qtype, source=rep.source))
    return out


def _other_selected(rec: dict, rep: MRCReadReport, min_f1: float, max_chars: int) -> list[MRCExample]:
    """Answerable examples from the selected documents other than the answer document (see read_dureader2)."""
    answers = [a for a in rec.get("segmented_answers", []) if isinstance(a, list) and a]
    out = []
    for k, doc in enumerate(rec["documents"]):
        if not doc.get("is_selected") or k in rec["answer_docs"] or not doc.get("paragraphs"):
            continue
        j = doc.get("most_related_para", 0)
        if not 0 <= j < len(doc["paragraphs"]):
            continue
        text, words = doc["paragraphs"][j], doc["segmented_paragraphs"][j]
        if len(text) > max_chars:
            continue
        f1, s, e = best_f1_span(words, answers)
        if f1 < min_f1:
            continue
        span = word_span_to_chars(text, words, s, e) or find_squeezed(text, "".join(words[s:e + 1]))
        if span is None:
            continue
        a, b = span
        rep.answers += 1
        rep.answers_repaired += 1
        out.append(MRCExample(qid=f"{rec['question_id']}:pos{k}", question=rec["question"], context=text,
                              title=doc.get("title", ""), answers=[MRCAnswer(text[a:b], a)],
                              qtype=rec.get("question_type", ""), source=rep.source))
    return out
