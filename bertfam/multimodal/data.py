"""Examples and batches for the three modalities.

image / speech pre-training: `[CLS] text [SEP]` + feature vectors; masked LM on the text and, for half
of the pairs, the features of another example of the batch (match label 1, no MLM targets: text cannot
be predicted from the wrong image).
video: `[CLS] text [SEP] v_1 ... v_n [SEP]` where v_i are visual-word ids (text vocabulary + codebook
index); cross-modal masked LM over both parts (bertfam.objectives' collator, unchanged).
spoken QA: `[CLS] [SEP] passage [SEP]` windows (bertfam.data.mrc_windows) + the question's audio frames.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ..objectives.masking import IGNORE, Masker, MaskingConfig
from ..objectives.pipeline import make_masker


def pad_features(feats: Sequence[np.ndarray], boxes: Optional[Sequence] = None) -> dict:
    """features (B, N_max, D) float32, feature_mask (B, N_max) and boxes (B, N_max, b) when every example has them."""
    B, N, D = len(feats), max(len(f) for f in feats), feats[0].shape[1]
    x = np.zeros((B, N, D), np.float32)
    m = np.zeros((B, N), np.int64)
    for i, f in enumerate(feats):
        x[i, :len(f)], m[i, :len(f)] = f, 1
    out = {"features": torch.from_numpy(x), "feature_mask": torch.from_numpy(m)}
    if boxes is not None and all(b is not None for b in boxes):
        bx = np.zeros((B, N, boxes[0].shape[1]), np.float32)
        for i, b in enumerate(boxes):
            bx[i, :len(b)] = b
        out["boxes"] = torch.from_numpy(bx)
    return out


def pad_ids(seqs: Sequence[Sequence[int]], pad_id: int, fill_labels: bool = False):
    T = max(len(s) for s in seqs)
    ids = np.full((len(seqs), T), IGNORE if fill_labels else pad_id, np.int64)
    am = np.zeros((len(seqs), T), np.int64)
    for i, s in enumerate(seqs):
        ids[i, :len(s)], am[i, :len(s)] = s, 1
    return torch.from_numpy(ids), torch.from_numpy(am)


def text_examples(records, tokenizer, max_length: int) -> list[dict]:
    """[CLS] text [SEP] ids (truncated to max_length) + the record's features/boxes."""
    out = []
    for r in records:
        ids = tokenizer.encode(r.text)
        if len(ids) > max_length:
            ids = ids[: max_length - 1] + [ids[-1]]
        out.append({"id": r.id, "input_ids": ids, "features": r.features, "boxes": r.boxes,
                    "label": r.fields.get("label")})
    return out


def token_masker(tokenizer, vocab_size: int, rate: float = 0.15) -> Masker:
    """Token-level masking at `rate` over `vocab_size` ids (the text vocabulary plus any visual words)."""
    return make_masker(MaskingConfig(strategy="token", rate=rate), tokenizer, vocab_size)


def _torch_seeded_rng() -> np.random.Generator:
    # drawn from torch's RNG, which the trainer checkpoints: a resumed run masks as an uninterrupted one
    return np.random.default_rng(int(torch.randint(0, 2**62, (1,)).item()))


class FeatureTextCollator:
    """Masked LM on the text + text/feature match (VisualBERT's two objectives)."""

    def __init__(self, masker: Optional[Masker], pad_id: int, mismatch_prob: float = 0.5,
                 rng: Optional[np.random.Generator] = None):
        self.masker, self.pad_id, self.mismatch_prob = masker, pad_id, mismatch_prob
        self.rng = rng  # fixed generator (evaluation); None: a fresh one per batch from torch's RNG

    def __call__(self, examples: Sequence[dict]) -> dict:
        rng = self.rng or _torch_seeded_rng()
        B = len(examples)
        partner = list(range(B))
        if self.mismatch_prob > 0 and B > 1:
            for i in range(B):
                if rng.random() < self.mismatch_prob:
                    partner[i] = int((i + rng.integers(1, B)) % B)  # another example of the batch
        ids, labels = [], []
        for i, ex in enumerate(examples):
            x = np.asarray(ex["input_ids"], np.int64)
            lab = np.full(len(x), IGNORE, np.int64)
            if self.masker is not None:
                # mismatched texts are masked too (else [MASK] would give the match label away), but have
                # no MLM targets: words cannot be recovered from another example's features
                x, lab = self.masker(x, np.zeros(len(x), np.uint8), rng)
                if partner[i] != i:
                    lab[:] = IGNORE
            ids.append(x)
            labels.append(lab)
        input_ids, am = pad_ids(ids, self.pad_id)
        lab, _ = pad_ids(labels, self.pad_id, fill_labels=True)
        batch = {"input_ids": input_ids, "attention_mask": am, "token_type_ids": torch.zeros_like(input_ids)}
        batch.update(pad_features([examples[j]["features"] for j in partner], [examples[j]["boxes"] for j in partner]))
        if self.masker is not None:
            batch["labels"], batch["masked_positions"] = lab, lab.ne(IGNORE)
        if self.mismatch_prob > 0:
            batch["pair_labels"] = torch.tensor([int(p != i) for i, p in enumerate(partner)], dtype=torch.long)
        return batch


class ClassifyCollator:
    """Text + features -> class label (fine-tuning)."""

    def __init__(self, pad_id: int, label_ids: dict):
        self.pad_id, self.label_ids = pad_id, label_ids

    def __call__(self, examples: Sequence[dict]) -> dict:
        input_ids, am = pad_ids([ex["input_ids"] for ex in examples], self.pad_id)
        batch = {"input_ids": input_ids, "attention_mask": am, "token_type_ids": torch.zeros_like(input_ids)}
        batch.update(pad_features([ex["features"] for ex in examples], [ex["boxes"] for ex in examples]))
        if all(ex.get("label") is not None for ex in examples):
            batch["labels"] = torch.tensor([self.label_ids[str(ex["label"])] for ex in examples], dtype=torch.long)
        return batch


# ---------------------------------------------------------------- video
def video_instance(text_ids: Sequence[int], words: np.ndarray, text_vocab_size: int, sep_id: int,
                   max_length: int) -> dict:
    """[CLS] text [SEP] visual words [SEP] as one token sequence (segment 0 text, segment 1 video).
    Visual words beyond max_length are cut from the end; the text keeps at most half the room."""
    text = list(text_ids)
    if len(text) > max_length // 2:
        text = text[: max_length // 2 - 1] + [text[-1]]
    room = max_length - len(text) - 1
    vis = (np.asarray(words[:room], np.int64) + text_vocab_size).tolist()
    ids = text + vis + [sep_id]
    return {"input_ids": np.asarray(ids, np.int64), "flags": np.zeros(len(ids), np.uint8), "a_len": len(text)}


# ---------------------------------------------------------------- spoken QA
def check_qa_record(rec: dict) -> None:
    """A manifest record for spoken QA: a passage and an answer found in it (or none: unanswerable).
    Raises ValueError naming the problem (load_records reports the line and skips it)."""
    from ..data.mrc import find_answer

    p, a = rec.get("passage", rec.get("context")), rec.get("answer")
    if not isinstance(p, str) or not p.strip():
        raise ValueError("missing field 'passage'")
    rec["passage"] = p
    if a is None:  # unanswerable
        return
    if not isinstance(a, dict) or not isinstance(a.get("text"), str) or not a["text"]:
        raise ValueError("'answer' must be an object with a non-empty text (and start)")
    start, how = find_answer(p, a["text"], a.get("start", -1))
    if start is None:
        raise ValueError(f"answer {a['text']!r} not found in the passage")
    a["start"] = start


def qa_windows(records, tokenizer, max_length: int, doc_stride: int, with_labels: bool = True) -> tuple[list, list]:
    """(examples for the collator, the MRC examples they came from). The question is the audio, so the
    text part of every window is `[CLS] [SEP] passage [SEP]`."""
    from ..data.mrc import MRCAnswer
    from ..data.mrc_windows import build_windows

    mrc = []
    for r in records:
        a = r.fields.get("answer") or {}
        answers = [MRCAnswer(str(a["text"]), int(a["start"]))] if a.get("text") else []
        mrc.append({"question": "", "context": r.fields["passage"], "answers": answers, "id": r.id})
    wins = build_windows(tokenizer, mrc, max_length=max_length, doc_stride=doc_stride, max_query_length=1,
                         use_title=False, with_labels=with_labels)
    return [{"window": w, "features": records[w.example_index].features} for w in wins], mrc


class QACollator:
    def __init__(self, pad_id: int, with_labels: bool = True):
        self.pad_id, self.with_labels = pad_id, with_labels

    def __call__(self, examples: Sequence[dict]) -> dict:
        from ..data.mrc_windows import collate_windows

        batch = collate_windows([ex["window"] for ex in examples], self.pad_id, self.with_labels)
        batch.update(pad_features([ex["features"] for ex in examples]))
        return batch
