"""K-BERT input construction: sentence tree -> flattened tokens, soft positions, visible matrix.

For every segmented word that is a subject of the graph, up to `max_entities` branches (the
injected `predicate+object` strings) are hung after the word. The tree is flattened in reading
order: each word's tokens, then its branches. Then

* hard position = index in the flattened sequence (what padding / the attention matrix use);
* soft position = depth in the tree: sentence tokens count 0, 1, 2, ... as if nothing had been
  injected ([CLS] = 0); a branch continues from the last position of its word, so its k-th token
  sits at word_end + k; the sentence resumes at word_end + 1;
* visible matrix V (T x T, 1 = row token may attend to column token): sentence tokens (and the
  specials) see every sentence token plus the branches of their own word; a branch token sees only
  its own branch and the word it hangs on. So sentence tokens never see a foreign branch.

Budget: the sentence comes first. Sentence tokens are truncated to max_length (longest first for
a pair), then branches are added in reading order while they fit; a branch that does not fit is
left out whole (never cut) and counted in `stats["dropped_entities"]`.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Optional, Sequence, Union

import torch

from ..errors import ConfigError, DataError
from .graph import KnowledgeGraph

log = logging.getLogger("bertfam")

Text = Union[str, Sequence[str]]  # a string, or pre-split units (e.g. the characters of an NER sentence)


@dataclass
class _Word:
    ids: list  # token ids of the word in the sentence
    src: list  # per token: index of its source character (or unit)
    surface: Optional[str] = None  # the segmented word looked up in the graph (None: no lookup)
    branches: list = field(default_factory=list)  # per injected entity: its token ids


class KBertInputBuilder:
    """`encode(text, text_pair=None)` -> dict(input_ids, token_type_ids, position_ids, visible_matrix,
    source_index, injected, attention_mask); `collate(encodings)` pads a batch into tensors."""

    def __init__(self, tokenizer, kg: Optional[KnowledgeGraph], max_length: int = 128):
        if not isinstance(max_length, int) or max_length < 3:
            raise ConfigError(f"K-BERT max_length must be an integer >= 3, got {max_length!r}")
        self.tok = tokenizer
        self.kg = kg
        self.max_length = max_length
        self._entity_ids: dict[str, list] = {}
        self.stats = {"sentences": 0, "sentences_with_entities": 0, "injected_entities": 0, "dropped_entities": 0,
                      "truncated": 0}
        self._warned_long = False

    # ------------------------------------------------------------ public
    def encode(self, text: Text, text_pair: Optional[Text] = None) -> dict:
        """One example. A list of strings is taken as units: each unit gives at least one token
        ([UNK] if it tokenizes to nothing) and source_index refers to the unit's index."""
        segs = [self._words(text)]
        if text_pair is not None:
            segs.append(self._words(text_pair))
        self._truncate(segs)
        before = self.stats["injected_entities"]
        self._inject(segs)
        self.stats["sentences"] += 1
        self.stats["sentences_with_entities"] += self.stats["injected_entities"] > before
        return self._flatten(segs)

    def collate(self, encodings: Sequence[dict]) -> dict:
        """Pad to the longest example: input_ids / token_type_ids / position_ids (B, T) and
        attention_mask (B, T, T) = the visible matrices (zero rows and columns for padding)."""
        T = max(len(e["input_ids"]) for e in encodings)
        B = len(encodings)
        pad = self.tok.pad_token_id
        out = {"input_ids": torch.full((B, T), pad, dtype=torch.long),
               "token_type_ids": torch.zeros((B, T), dtype=torch.long),
               "position_ids": torch.zeros((B, T), dtype=torch.long),
               "attention_mask": torch.zeros((B, T, T), dtype=torch.bool)}
        for i, e in enumerate(encodings):
            n = len(e["input_ids"])
            out["input_ids"][i, :n] = torch.tensor(e["input_ids"])
            out["token_type_ids"][i, :n] = torch.tensor(e["token_type_ids"])
            out["position_ids"][i, :n] = torch.tensor(e["position_ids"])
            out["attention_mask"][i, :n, :n] = e["visible_matrix"]
        return out

    # ------------------------------------------------------------ steps
    def _words(self, text: Text) -> list[_Word]:
        """Segment with jieba (graph subjects kept whole), tokenize, group tokens by word."""
        if isinstance(text, str):
            joined = text
            enc = self.tok(text, truncation=False, padding=False, add_special_tokens=False,
                           return_offsets_mapping=True, return_tensors=None)
            units = [(i, s, s) for i, (s, _) in zip(enc["input_ids"], enc["offset_mapping"])]  # (id, char, src)
        else:
            joined, units = self._unit_tokens(list(text))
        if not units:
            return []
        spans = self.kg.segment(joined) if self.kg is not None else [(joined, 0, len(joined))]
        words, k = [], 0
        for w, start, end in spans:
            ids, src = [], []
            while k < len(units) and units[k][1] < end:
                ids.append(units[k][0])
                src.append(units[k][2])
                k += 1
            if ids:
                words.append(_Word(ids, src, w if self.kg is not None else None))
        return words

    def _unit_tokens(self, units: list) -> tuple[str, list]:
        for j, u in enumerate(units):
            if not isinstance(u, str):
                raise DataError(f"K-BERT input unit {j} is {type(u).__name__}, expected a string")
        enc = self.tok(units, truncation=False, padding=False, add_special_tokens=False, return_tensors=None) \
            if units else {"input_ids": []}
        out, pos = [], 0
        for j, (u, ids) in enumerate(zip(units, enc["input_ids"])):
            for i in ids or [self.tok.unk_token_id]:
                out.append((i, pos, j))
            pos += len(u)
        return "".join(units), out

    def _truncate(self, segs: list[list[_Word]]) -> None:
        """Cut sentence tokens from the end (longest segment first) to fit max_length with specials."""
        budget = self.max_length - (len(segs) + 1)
        lens = [sum(len(w.ids) for w in s) for s in segs]
        if sum(lens) <= budget:
            return
        self.stats["truncated"] += 1
        while sum(lens) > budget:
            i = max(range(len(segs)), key=lambda j: lens[j])
            lens[i] -= 1
        for s, n in zip(segs, lens):
            kept = 0
            for wi, w in enumerate(s):
                if kept + len(w.ids) > n:
                    if n - kept > 0:  # the word is cut: keep its first tokens, drop its branches
                        s[wi] = _Word(w.ids[: n - kept], w.src[: n - kept])
                        wi += 1
                    del s[wi:]
                    break
                kept += len(w.ids)

    def _inject(self, segs: list[list[_Word]]) -> None:
        """Hang on each word the token ids of its entities that still fit."""
        room = self.max_length - (len(segs) + 1) - sum(len(w.ids) for s in segs for w in s)
        for s in segs:
            for w in s:
                if w.surface is None:
                    continue
                for ent in self.kg.lookup(w.surface):
                    ids = self._entity(ent)
                    if len(ids) > room or not ids:
                        self.stats["dropped_entities"] += 1
                        self._warn_long(ent, ids)
                        continue
                    w.branches.append(ids)
                    room -= len(ids)
                    self.stats["injected_entities"] += 1

    def _entity(self, ent: str) -> list:
        if ent not in self._entity_ids:
            self._entity_ids[ent] = self.tok(ent, truncation=False, padding=False, add_special_tokens=False,
                                             return_tensors=None)["input_ids"]
        return self._entity_ids[ent]

    def _warn_long(self, ent: str, ids: list) -> None:
        if len(ids) > self.max_length - 3 and not self._warned_long:
            self._warned_long = True
            log.warning("K-BERT: entity %r (%d tokens) is longer than max_length %d allows; such entities "
                        "are never injected", ent, len(ids), self.max_length)

    def _flatten(self, segs: list[list[_Word]]) -> dict:
        ids, types, pos, src, injected = [], [], [], [], []
        sentence, sees = [], []  # flat indices of sentence tokens; (rows, cols) of extra visibility

        def put(i, t, p, s, inj):
            ids.append(i), types.append(t), pos.append(p), src.append(s), injected.append(inj)
            return len(ids) - 1

        sentence.append(put(self.tok.cls_token_id, 0, 0, -1, 0))
        p = 0
        for seg_id, s in enumerate(segs):
            for w in s:
                word_idx = []
                for i, c in zip(w.ids, w.src):
                    p += 1
                    word_idx.append(put(i, seg_id, p, c, 0))
                sentence.extend(word_idx)
                for branch in w.branches:
                    b_idx = [put(i, seg_id, p + k, -1, 1) for k, i in enumerate(branch, 1)]
                    sees.append((word_idx, b_idx))  # the word sees its branch
                    sees.append((b_idx, b_idx + word_idx))  # the branch sees itself and its word
            p += 1
            sentence.append(put(self.tok.sep_token_id, seg_id, p, -1, 0))
        T = len(ids)
        vm = torch.zeros((T, T), dtype=torch.bool)
        sent = torch.tensor(sentence)
        vm[sent.unsqueeze(1), sent.unsqueeze(0)] = True  # sentence tokens see each other
        for rows, cols in sees:
            vm[torch.tensor(rows).unsqueeze(1), torch.tensor(cols).unsqueeze(0)] = True
        return {"input_ids": ids, "token_type_ids": types, "position_ids": pos, "visible_matrix": vm,
                "source_index": src, "injected": injected, "attention_mask": [1] * T}
