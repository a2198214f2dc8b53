"""Hard unanswerable examples for extractive MRC, made from answerable ones.

DuReader-checklist's unanswerable questions come with a passage on the question's topic that does not
answer it. Two constructions imitate that:
- `similar_passage_negatives`: the question paired with the passage of ANOTHER question that is most
  similar to it (TF-IDF over character 1-2-grams, scikit-learn), skipping passages that contain one of the
  question's answers;
- `answer_removed_negative`: the question's own passage with every sentence that overlaps the answer
  removed (same topic, same page, no answer left).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence

import numpy as np

from .mrc import MRCExample

# a sentence ends at Chinese or Western end punctuation (kept with its sentence) or a line break
_SENTENCE = re.compile(r"[^。！？!?；;\n]*[。！？!?；;\n]+|[^。！？!?；;\n]+$")


def sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) character spans of the sentences of `text`, covering it without gaps."""
    return [(m.start(), m.end()) for m in _SENTENCE.finditer(text) if m.end() > m.start()]


def answer_removed_negative(ex: MRCExample, min_chars: int = 40) -> Optional[MRCExample]:
    """`ex` with every sentence that overlaps one of its answers cut out, as an unanswerable example; None
    when fewer than `min_chars` characters would be left or the answer text still occurs in what is left."""
    if ex.is_impossible or not ex.answers:
        return None
    keep = []
    for a, b in sentences(ex.context):
        if not any(a < ans.end and ans.start < b for ans in ex.answers):
            keep.append(ex.context[a:b])
    rest = "".join(keep).strip()
    if len(rest) < min_chars or any(t and t in rest for t in ex.answer_texts):
        return None
    return dataclasses.replace(ex, qid=f"{ex.qid}:cut", context=rest, answers=[], is_impossible=True)


def similar_passage_negatives(examples: Sequence[MRCExample], pool: Optional[Sequence[MRCExample]] = None,
                              per_question: int = 1, rank: int = 0, seed: int = 0,
                              other_questions_only: bool = False) -> list[MRCExample]:
    """For each answerable example, `per_question` unanswerable copies whose passage is one of the passages
    of `pool` (default: the examples themselves) most similar to the question (char 1-2-gram TF-IDF,
    cosine), not its own passage and containing none of its answer texts. `rank` skips that many of the
    most similar passages first (the very nearest are the likeliest to answer the question after all).
    other_questions_only: never a passage that the pool pairs with the same question (DuReader gives one
    question several paragraphs, and its other paragraphs often answer it in other words)."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    pool = list(pool) if pool is not None else list(examples)
    contexts = sorted({p.context for p in pool})
    titles = {p.context: p.title for p in pool}
    owners: dict[str, set] = {}
    for p in pool:
        owners.setdefault(p.context, set()).add(p.question)
    if not contexts:
        return []
    vec = TfidfVectorizer(analyzer="char", ngram_range=(1, 2), sublinear_tf=True, min_df=1)
    P = vec.fit_transform(contexts)  # (n_passages, vocab), rows L2-normalised
    queries = [ex for ex in examples if not ex.is_impossible and ex.answers]
    if not queries:
        return []
    Q = vec.transform([ex.question for ex in queries])  # (n_questions, vocab)
    out = []
    rng = np.random.default_rng(seed)
    for i in range(0, len(queries), 256):  # blocks keep the dense similarity matrix small
        sims = (Q[i:i + 256] @ P.T).toarray()  # (block, n_passages)
        for ex, row in zip(queries[i:i + 256], sims):
            taken, skipped = 0, 0
            for j in np.argsort(-row + rng.uniform(0, 1e-9, row.shape)):  # tiny jitter: deterministic ties
                c = contexts[j]
                if c == ex.context or any(t and t in c for t in ex.answer_texts):
                    continue
                if other_questions_only and ex.question in owners[c]:
                    continue
                if skipped < rank:
                    skipped += 1
                    continue
                out.append(dataclasses.replace(ex, qid=f"{ex.qid}:sim{taken}", context=c, title=titles[c],
                                               answers=[], is_impossible=True))
                taken += 1
                if taken >= per_question:
                    break
    return out
