"""Tag sequences <-> entity spans for BIO, BIOES and BMES (M- is BMES's I-).

Spans are (type, start, end) with end EXCLUSIVE over token positions. Decoding is lenient like
conlleval: an I-/M-/E- that does not continue an open entity of its type starts a new one, so a
model's ill-formed output still yields spans instead of being dropped.
"""
from __future__ import annotations

from typing import Sequence

Span = tuple  # (type, start, end_exclusive)


def _tag_parts(tag: str) -> tuple[str, str]:
    if tag == "O" or len(tag) < 3 or tag[1] != "-":
        return "O", ""
    return tag[0], tag[2:]


def tags_to_spans(tags: Sequence[str]) -> list[Span]:
    spans: list[Span] = []
    cur_type, start = None, 0
    for i, tag in enumerate(list(tags) + ["O"]):
        p, t = _tag_parts(tag)
        continues = p in ("I", "M", "E") and t == cur_type
        if cur_type is not None and not continues:
            spans.append((cur_type, start, i))
            cur_type = None
        if p in ("B", "S") or (p in ("I", "M", "E") and not continues):
            cur_type, start = t, i
        if p in ("E", "S") and cur_type is not None:
            spans.append((cur_type, start, i + 1))
            cur_type = None
    return spans


def spans_to_tags(spans: Sequence[Span], length: int, scheme: str = "BIO") -> list[str]:
    """scheme: BIO, BIOES or BMES."""
    tags = ["O"] * length
    inner = "M" if scheme == "BMES" else "I"
    single = scheme in ("BIOES", "BMES")
    for t, s, e in spans:
        if e - s == 1 and single:
            tags[s] = f"S-{t}"
            continue
        tags[s] = f"B-{t}"
        for i in range(s + 1, e):
            tags[i] = f"{inner}-{t}"
        if single and e - s > 1:
            tags[e - 1] = f"E-{t}"
    return tags


def detect_scheme(tag_lists: Sequence[Sequence[str]]) -> str:
    prefixes = {t[0] for tags in tag_lists for t in tags if t != "O"}
    if "M" in prefixes:
        return "BMES"
    if prefixes & {"E", "S"}:
        return "BIOES"
    return "BIO"


def entities(tokens: Sequence[str], tags: Sequence[str], joiner: str = "") -> list[dict]:
    """[{type, start, end (exclusive), text}] for output files."""
    return [{"type": t, "start": s, "end": e, "text": joiner.join(tokens[s:e])} for t, s, e in tags_to_spans(tags)]
