"""Sliding windows for extractive MRC: `[CLS] question [SEP] title + passage [SEP]`.

The second segment is `title + " " + passage` (title optional); the tokenizer's character offsets are
shifted back so every passage token carries exact (start, end) character offsets into the ORIGINAL
passage (end exclusive). Title tokens, question tokens and special tokens carry None and can never be
part of an answer. Long passages become several windows that overlap by `doc_stride` tokens (the Hugging
Face meaning of stride: overlap, not step).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch

Offset = Optional[tuple[int, int]]


@dataclass
class Window:
    example_index: int  # index into the list of examples given to build_windows
    input_ids: list[int]
    token_type_ids: list[int]
    offsets: list[Offset]  # per token: character span in the passage, None outside the passage
    start_position: int = 0  # answer tokens (inclusive); 0/0 = [CLS] = no answer in this window
    end_position: int = 0

    @property
    def answerable(self) -> bool:
        return self.start_position > 0


def _field(ex: Any, name: str, default: Any = None) -> Any:
    return ex.get(name, default) if isinstance(ex, dict) else getattr(ex, name, default)


def truncate_question(tokenizer, question: str, max_query_length: int) -> str:
    """Cut the question text after its max_query_length-th token (character-exact)."""
    enc = _plain_encoding(tokenizer, question)
    if len(enc.ids) <= max_query_length:
        return question
    return question[: enc.offsets[max_query_length - 1][1]]


def _plain_encoding(tokenizer, text: str):
    """One text without special tokens or truncation (through the Tokenizer, which owns the backend's
    truncation/padding state)."""
    return tokenizer(text, truncation=False, padding=False, add_special_tokens=False, return_tensors=None).encodings[0]


def second_segment(title: Optional[str], passage: str, use_title: bool) -> tuple[str, int]:
    """(text of the second segment, character length of the title prefix before the passage)."""
    if use_title and title and title.strip():
        prefix = title.strip() + " "  # a space keeps title and passage words from merging
        return prefix + passage, len(prefix)
    return passage, 0


def build_windows(tokenizer, examples: Sequence[Any], max_length: int = 384, doc_stride: int = 128,
                  max_query_length: int = 64, use_title: bool = True, with_labels: bool = False) -> list[Window]:
    """Windows for each example (an MRCExample or a dict with question / context or passage / title).

    with_labels: the first answer of each example gives start/end token positions in the window that
    fully contains it; other windows (and unanswerable examples) are labelled 0/0."""
    windows: list[Window] = []
    for i, ex in enumerate(examples):
        passage = _field(ex, "context") or _field(ex, "passage") or ""
        question = truncate_question(tokenizer, _field(ex, "question") or "", max_query_length)
        text, plen = second_segment(_field(ex, "title"), passage, use_title)
        for ids, types, offs in _encode_windows(tokenizer, question, text, plen, max_length, doc_stride):
            w = Window(i, ids, types, offs)
            if with_labels:
                answers = _field(ex, "answers") or []
                if answers and not _field(ex, "is_impossible", False):
                    a = answers[0]
                    w.start_position, w.end_position = label_span(offs, a.start, a.start + len(a.text))
            windows.append(w)
    return windows


def _encode_windows(tokenizer, question: str, text: str, plen: int, max_length: int, doc_stride: int):
    """Windows over the passage tokens; each is encoded as (question, title + passage[a:b]) so that
    EVERY window carries the title. Cuts fall on word starts, so re-encoding a cut passage piece gives
    the same tokens as in the whole passage (exact offsets either way: they come from the encoding)."""
    prefix, passage = text[:plen], text[plen:]
    p_enc = _plain_encoding(tokenizer, passage)
    q_len = len(_plain_encoding(tokenizer, question).ids)
    t_len = len(_plain_encoding(tokenizer, prefix).ids) if prefix else 0
    special = tokenizer.backend.num_special_tokens_to_add(True)
    room = max_length - q_len - t_len - special
    if prefix and room < 8:  # a title that leaves almost no room for the passage is dropped
        prefix, t_len, room = "", 0, max_length - q_len - special
    if room < 1:
        from ..errors import ConfigError

        raise ConfigError(f"max_length {max_length} leaves no room for the passage after a {q_len}-token "
                          "question (raise --max-length or lower --max-query-length)")
    for s, e in _spans(p_enc.word_ids, len(p_enc.ids), room, max(0, min(doc_stride, room // 2))):
        a, b = (p_enc.offsets[s][0], p_enc.offsets[e - 1][1]) if e > s else (0, 0)
        enc = tokenizer(question, prefix + passage[a:b], max_length=max_length, truncation="only_second",
                        padding=False, return_tensors=None).encodings[0]
        shift = a - len(prefix)
        offs: list[Offset] = []
        for s_id, (x, y) in zip(enc.sequence_ids, enc.offsets):
            if s_id != 1 or y <= len(prefix) or y <= x:  # question, special, title or empty token
                offs.append(None)
            else:
                offs.append(_trim(passage, max(x, len(prefix)) + shift, y + shift))
        yield list(enc.ids), list(enc.type_ids), offs


def _trim(passage: str, x: int, y: int) -> Offset:
    """Offsets without surrounding whitespace (SentencePiece pieces like "▁World" cover the space
    before the word); None for a piece that covers only whitespace."""
    while x < y and passage[x].isspace():
        x += 1
    while y > x and passage[y - 1].isspace():
        y -= 1
    return (x, y) if y > x else None


def _spans(word_ids: Sequence[Optional[int]], n: int, room: int, stride: int):
    """[start, end) token ranges of at most `room` tokens, consecutive ones overlapping by about
    `stride` tokens. Cuts move back to a word start when that costs little (at most half a window for
    an end, at most one stride for a start); long words (a SentencePiece "word" is a whole run of
    Chinese text without spaces) are cut inside."""
    def snap(i: int, floor: int) -> int:
        j = i
        while j > floor and word_ids[j] is not None and word_ids[j] == word_ids[j - 1]:
            j -= 1
        return j if j > floor else i

    if n == 0:
        yield 0, 0
        return
    start = 0
    while True:
        end = min(start + room, n)
        if end < n:
            end = snap(end, start + room // 2)
        yield start, end
        if end >= n:
            return
        nxt = max(end - stride, start + 1)
        start = snap(nxt, max(start, nxt - stride))



def label_span(offsets: Sequence[Offset], start: int, end: int) -> tuple[int, int]:
    """Token positions (inclusive) of the character span [start, end) if the window holds all of it."""
    idx = [k for k, o in enumerate(offsets) if o is not None]
    if not idx or offsets[idx[0]][0] > start or offsets[idx[-1]][1] < end:
        return 0, 0
    s_tok = next((k for k in idx if offsets[k][1] > start), None)
    e_tok = next((k for k in reversed(idx) if offsets[k][0] < end), None)
    if s_tok is None or e_tok is None or e_tok < s_tok:
        return 0, 0
    return s_tok, e_tok


def collate_windows(windows: Sequence[Window], pad_id: int = 0, with_labels: bool = True) -> dict:
    """Pad a batch of windows into tensors the span model takes as model(**batch)."""
    T = max(len(w.input_ids) for w in windows)
    B = len(windows)
    ids = torch.full((B, T), pad_id, dtype=torch.long)  # (B, T)
    types = torch.zeros((B, T), dtype=torch.long)
    mask = torch.zeros((B, T), dtype=torch.long)
    for b, w in enumerate(windows):
        n = len(w.input_ids)
        ids[b, :n] = torch.tensor(w.input_ids)
        types[b, :n] = torch.tensor(w.token_type_ids)
        mask[b, :n] = 1
    batch = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
    if with_labels:
        batch["start_positions"] = torch.tensor([w.start_position for w in windows])  # (B,)
        batch["end_positions"] = torch.tensor([w.end_position for w in windows])
        batch["answerable_labels"] = torch.tensor([int(w.answerable) for w in windows])
    return batch
