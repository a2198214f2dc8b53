"""Evaluation of the multimodal members, during training and of a saved model (`evaluate_multimodal`).

Every evaluation also runs an ablation: the non-text input is shuffled across the evaluation examples
(a fixed derangement, so each text meets another example's features). A model that uses the features
scores clearly lower on the shuffled copy (`*_shuffled` metrics).
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..errors import ConfigError
from .data import ClassifyCollator, FeatureTextCollator, QACollator, check_qa_record, qa_windows, text_examples, \
    token_masker, video_instance
from .features import Record
from .loading import load_multimodal
from .runs import read_records

EVAL_SEED = 1234


def derangement(n: int, seed: int = EVAL_SEED) -> np.ndarray:
    """A permutation with no fixed point (each example gets another one's features)."""
    if n < 2:
        return np.arange(n)
    return (np.arange(n) + np.random.default_rng(seed).integers(1, n)) % n


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _batches(items: list, collate, batch_size: int, device):
    for i in range(0, len(items), batch_size):
        b = collate(items[i:i + batch_size])
        yield {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}


def _with_features_of(examples: list[dict], perm: np.ndarray) -> list[dict]:
    return [dict(ex, features=examples[j]["features"], boxes=examples[j].get("boxes")) for ex, j in
            zip(examples, perm)]


# ---------------------------------------------------------------- pre-training objectives
@torch.no_grad()
def evaluate_pretrain(model, examples: list[dict], tok, mask_rate: float = 0.15, batch_size: int = 32,
                      ablation: bool = True) -> dict:
    """Masked-token accuracy (matched pairs, fixed masks) and match accuracy (fixed half-mismatched pairs),
    on the true features and, with ablation, on features shuffled across examples."""
    out = _eval_pretrain_once(model, examples, tok, mask_rate, batch_size)
    if ablation and len(examples) > 1:
        shuffled = _eval_pretrain_once(model, _with_features_of(examples, derangement(len(examples))), tok,
                                       mask_rate, batch_size)
        out.update({f"{k}_shuffled": v for k, v in shuffled.items()})
    return out


def _eval_pretrain_once(model, examples, tok, mask_rate, batch_size, repeats: int = 4) -> dict:
    """Each example is masked `repeats` times (different positions) to steady the accuracy on small sets."""
    dev = _device(model)
    masker = token_masker(tok, model.config.vocab_size, mask_rate)
    hit = n = 0
    for b in _batches(examples * repeats, FeatureTextCollator(masker, tok.pad_token_id, 0.0,
                                                              np.random.default_rng(EVAL_SEED)), batch_size, dev):
        o = model(**b)
        t = b["labels"][b["masked_positions"]]
        hit, n = hit + int((o.logits.argmax(-1) == t).sum()), n + t.numel()
    res = {"mlm_acc": hit / max(n, 1)}
    if model.pair is not None:
        hit = n = 0
        for b in _batches(examples * repeats, FeatureTextCollator(None, tok.pad_token_id, 0.5,
                                                                  np.random.default_rng(EVAL_SEED)), batch_size, dev):
            o = model(**b)
            hit, n = hit + int((o.pair_logits.argmax(-1) == b["pair_labels"]).sum()), n + len(b["pair_labels"])
        res["match_acc"] = hit / max(n, 1)
    return res


@torch.no_grad()
def evaluate_video(model, instances: list[dict], masker, pad_id: int, batch_size: int = 32,
                   shuffled: Optional[list[dict]] = None, repeats: int = 4) -> dict:
    """Masked-token accuracy on the text part and on the visual words (fixed masks; each instance masked
    `repeats` times at different positions)."""
    from ..objectives.collator import PretrainCollator, mask_static

    V = model.mm.text_vocab_size
    res = {}
    for tag, insts in (("", instances), ("_shuffled", shuffled)):
        if not insts:
            continue
        hits, counts = np.zeros(2), np.zeros(2)
        for b in _batches(mask_static(insts * repeats, masker, EVAL_SEED),
                          PretrainCollator(masker, pad_id, pair=False), batch_size, _device(model)):
            o = model(**b)
            t = b["labels"][b["masked_positions"]]
            ok = o.logits.argmax(-1) == t
            vis = t >= V
            for k, sel in enumerate((~vis, vis)):
                hits[k] += int(ok[sel].sum())
                counts[k] += int(sel.sum())
        res[f"text_mlm_acc{tag}"] = hits[0] / max(counts[0], 1)
        res[f"video_mlm_acc{tag}"] = hits[1] / max(counts[1], 1)
    return res


# ---------------------------------------------------------------- fine-tuned tasks
@torch.no_grad()
def predict_qa(model, records, tok, max_length: int = 128, doc_stride: int = 32, batch_size: int = 32) -> dict:
    """{id: best answer text}, decoded as MRCPredictor decodes (bertfam.tasks.mrc: `window_logits`, then
    `decode_with` the model's head.mrc). The windows carry the model's features (QACollator), which
    MRCPredictor's text windows do not, so the forward is this one."""
    from ..tasks.mrc import decode_with, window_logits

    settings = model.config.head.mrc_settings
    examples, mrc = qa_windows(records, tok, max_length, doc_stride, with_labels=False)
    per: dict[int, list] = {}
    collate = QACollator(tok.pad_token_id, with_labels=False)
    for k, b in enumerate(_batches(examples, collate, batch_size, _device(model))):
        o = model(**b)
        windows = [ex["window"] for ex in examples[k * batch_size:(k + 1) * batch_size]]
        for scored in window_logits(windows, o.start_logits.float().cpu(), o.end_logits.float().cpu()):
            per.setdefault(scored[0].example_index, []).append(scored)
    out = {}
    for k, ex in enumerate(mrc):
        best = decode_with(settings, per.get(k, []), ex["context"]).best  # the question is audio: no text
        out[ex["id"]] = best.text if best is not None else ""
    return out


def evaluate_qa(model, records, tok, max_length: int = 128, doc_stride: int = 32, batch_size: int = 32,
                ablation: bool = True) -> dict:
    """Exact match and F1 (DuReader's scorer: characters for Chinese, words otherwise), true vs shuffled audio."""
    from ..evaluation.dureader import em_score, f1_score

    def score(recs) -> dict:
        pred = predict_qa(model, recs, tok, max_length, doc_stride, batch_size)
        gold = [[r.fields["answer"]["text"]] if r.fields.get("answer") else [""] for r in recs]
        em = np.mean([em_score(g, pred[r.id]) for g, r in zip(gold, recs)])
        f1 = np.mean([f1_score(g, pred[r.id]) for g, r in zip(gold, recs)])
        return {"em": float(em), "f1": float(f1)}

    res = score(records)
    if ablation and len(records) > 1:
        perm = derangement(len(records))
        shuffled = [Record(r.id, r.line, records[j].features, None, r.fields) for r, j in zip(records, perm)]
        res.update({f"{k}_shuffled": v for k, v in score(shuffled).items()})
    return res


@torch.no_grad()
def evaluate_classify(model, examples: list[dict], tok, batch_size: int = 32, ablation: bool = True) -> dict:
    labels = {l: i for i, l in enumerate(model.config.head.labels)}

    def acc(exs) -> float:
        hit = 0
        for b in _batches(exs, ClassifyCollator(tok.pad_token_id, labels), batch_size, _device(model)):
            hit += int((model(**b).logits.argmax(-1) == b["labels"]).sum())
        return hit / max(len(exs), 1)

    res = {"acc": acc(examples)}
    if ablation and len(examples) > 1:
        res["acc_shuffled"] = acc(_with_features_of(examples, derangement(len(examples))))
    return res


# ---------------------------------------------------------------- a saved model
def evaluate_multimodal(model_dir: str, features_dir: str, manifest: Optional[str] = None, *, max_length: int = 128,
                        doc_stride: int = 32, batch_size: int = 32, mask_rate: float = 0.15) -> dict:
    """Evaluate a saved multimodal model on a feature directory (all records), with the shuffle ablation."""
    model = load_multimodal(model_dir)
    tok = model.tokenizer
    if tok is None:
        raise ConfigError(f"{model_dir}: no tokenizer saved with the model")
    mm = model.mm
    if mm.modality == "video":
        if model.codebook is None:
            raise ConfigError(f"{model_dir}: no codebook.npz saved with the video model")
        cb = model.codebook
        records, _, _ = read_records("video", features_dir, manifest, ("text",), None, feature_dim=cb.dim)
        V = mm.text_vocab_size
        items = [(tok.encode(r.text), cb.quantize(r.features)) for r in records]
        inst = [video_instance(t, w, V, tok.sep_token_id, max_length) for t, w in items]
        shuf = [video_instance(t, items[j][1], V, tok.sep_token_id, max_length)
                for (t, _), j in zip(items, derangement(len(items)))]
        return evaluate_video(model, inst, token_masker(tok, model.config.vocab_size, mask_rate), tok.pad_token_id,
                              batch_size, shuf)
    task = model.config.head.task
    if task == "span":
        records, _, _ = read_records(mm.modality, features_dir, manifest, (), mm.audio, mm.feature_dim,
                                     check=check_qa_record)
        return evaluate_qa(model, records, tok, max_length, doc_stride, batch_size)
    req = ("text", "label") if task == "classification" else ("text",)
    records, _, _ = read_records(mm.modality, features_dir, manifest, req, mm.audio, mm.feature_dim)
    exs = text_examples(records, tok, max_length)
    if task == "classification":
        return evaluate_classify(model, exs, tok, batch_size)
    return evaluate_pretrain(model, exs, tok, mask_rate, batch_size)
