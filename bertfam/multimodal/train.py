"""Pre-training, fine-tuning and evaluation of the multimodal members (what the CLI calls).

Every evaluation also runs an ablation: the non-text input is shuffled across the evaluation examples
(a fixed derangement, so each text meets another example's features). A model that uses the features
scores clearly lower on the shuffled copy (`*_shuffled` metrics).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Optional

import numpy as np
import torch

from ..checkpoint import load_config, resolve_config
from ..config import HeadConfig
from ..errors import ConfigError, DataError
from ..training import TrainConfig, Trainer
from ..utils import atomic_write_text
from .config import AudioConfig, MultimodalConfig
from .data import (ClassifyCollator, FeatureTextCollator, QACollator, make_masker, qa_windows, text_examples,
                   video_instance)
from .features import LoadReport, load_records
from .hf import is_hf_visualbert
from .loading import init_from_text, load_multimodal
from .model import MultimodalModel, build_multimodal

log = logging.getLogger("bertfam")
EVAL_SEED = 1234


# ---------------------------------------------------------------- inputs
def load_tokenizer(vocab: Optional[str], init: Optional[str]):
    from ..tokenization import Tokenizer

    if vocab:
        if os.path.isdir(vocab):
            return Tokenizer.from_pretrained(vocab)
        if not os.path.isfile(vocab):
            raise ConfigError(f"{vocab}: vocabulary file or tokenizer directory not found")
        return Tokenizer.from_vocab(vocab)
    has_tok = init and os.path.isdir(init) and any(os.path.isfile(os.path.join(init, f))
                                                   for f in ("tokenizer.json", "vocab.txt"))
    if has_tok:
        return Tokenizer.from_pretrained(init)
    raise ConfigError("give --vocab (vocab.txt or tokenizer directory) or an --init checkpoint with a tokenizer")


def derangement(n: int, seed: int = EVAL_SEED) -> np.ndarray:
    """A permutation with no fixed point (each example gets another one's features)."""
    if n < 2:
        return np.arange(n)
    return (np.arange(n) + np.random.default_rng(seed).integers(1, n)) % n


def split(items: list, eval_fraction: float, seed: int) -> tuple[list, list]:
    if not 0 <= eval_fraction < 1:
        raise ConfigError(f"eval fraction must be in [0, 1), got {eval_fraction}")
    order = np.random.default_rng(seed).permutation(len(items))
    n_eval = int(round(len(items) * eval_fraction))
    if eval_fraction > 0 and len(items) >= 4:
        n_eval = max(2, n_eval)
    ev = [items[i] for i in order[:n_eval]]
    tr = [items[i] for i in order[n_eval:]]
    if not tr:
        raise DataError(f"{len(items)} usable records leave nothing to train on after the evaluation split")
    return tr, ev


def _device(model) -> torch.device:
    return next(model.parameters()).device


def _batches(items: list, collate, batch_size: int, device):
    for i in range(0, len(items), batch_size):
        b = collate(items[i:i + batch_size])
        yield {k: v.to(device) if torch.is_tensor(v) else v for k, v in b.items()}


def _with_features_of(examples: list[dict], perm: np.ndarray) -> list[dict]:
    return [dict(ex, features=examples[j]["features"], boxes=examples[j].get("boxes")) for ex, j in
            zip(examples, perm)]


def _write_report(out_dir: str, report: LoadReport, extra: Optional[dict] = None) -> None:
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(os.path.join(out_dir, "data_report.json"),
                      json.dumps(dict(report.to_dict(), **(extra or {})), indent=2, ensure_ascii=False) + "\n")


TRAIN_DEFAULTS = {"epochs": 10, "batch_size": 16, "lr": 1e-3, "warmup_ratio": 0.1, "log_every": 10, "keep_last": 1}


def default_train(**kw) -> TrainConfig:
    """The multimodal runs' trainer defaults (small models on small feature sets), `kw` over them."""
    return TrainConfig(**{**TRAIN_DEFAULTS, **kw})


def _train_config(out_dir: str, train: Optional[TrainConfig]) -> TrainConfig:
    return dataclasses.replace(train if train is not None else default_train(), out_dir=out_dir)


def _new_or_init(cfg_spec: str, vocab_size: int, mm: MultimodalConfig, head: HeadConfig, init: Optional[str],
                 seed: int) -> MultimodalModel:
    """A fresh model; with `init`, a multimodal/VisualBERT dir is loaded as it is, a text dir gives the backbone."""
    if init and os.path.isdir(init) and (MultimodalConfig.in_dir(init) is not None or is_hf_visualbert(init)):
        kw = {"answerability": head.answerability} if head.task == "span" else {}
        if head.task == "classification":
            kw.update(num_labels=head.num_labels, labels=head.labels)
        model = load_multimodal(init, task=head.task, seed=seed, **kw)
        _check_compatible(model.mm, mm, init)
        return model.train()
    overrides = {"vocab_size": vocab_size, "head": head}
    if init:
        base, _ = load_config(init)
        overrides["vocab_size"] = max(vocab_size, base.vocab_size + (mm.codebook_size if mm.modality == "video" else 0))
        cfg = base.replace(**overrides)
    else:
        cfg = resolve_config(cfg_spec, **overrides)
    if mm.modality == "video":
        mm.text_vocab_size = cfg.vocab_size - mm.codebook_size
    model = build_multimodal(cfg, mm, seed)
    if init:
        init_from_text(model, init)
    return model


def _check_compatible(have: MultimodalConfig, want: MultimodalConfig, path: str) -> None:
    for k in ("modality", "feature_dim", "box_dim", "codebook_size"):
        if getattr(have, k) != getattr(want, k):
            raise ConfigError(f"{path}: {k} is {getattr(have, k)!r} but the data needs {getattr(want, k)!r}")


def _adapter_config(modality: str, records, audio: Optional[AudioConfig], max_positions: int = 512) -> MultimodalConfig:
    boxes = all(r.boxes is not None for r in records)
    longest = max(len(r.features) for r in records)
    return MultimodalConfig(modality=modality, feature_dim=int(records[0].features.shape[1]),
                            box_dim=int(records[0].boxes.shape[1]) if boxes else 0,
                            feature_positions="sequential" if modality == "speech" else "zero",
                            max_features=max(max_positions, longest), audio=audio if modality == "speech" else None)


def _read(modality: str, features_dir: str, manifest: Optional[str], require: tuple, audio: Optional[AudioConfig],
          feature_dim: Optional[int] = None, check=None):
    if modality not in ("image", "video", "speech"):
        raise ConfigError(f"modality {modality!r} not in image/video/speech")
    audio = (audio or AudioConfig()) if modality == "speech" else None
    records, report = load_records(features_dir, manifest, feature_dim, require=require, audio=audio, check=check)
    print(report.summary())
    return records, report, audio


# ---------------------------------------------------------------- pre-training
def pretrain(modality: str, features_dir: str, out_dir: str, *, vocab: Optional[str] = None, config: str = "bert-tiny",
             init: Optional[str] = None, codebook: Optional[str] = None, manifest: Optional[str] = None,
             max_length: int = 64, eval_fraction: float = 0.1, seed: int = 0, mask_rate: float = 0.15,
             mismatch_prob: float = 0.5, audio: Optional[AudioConfig] = None, train: Optional[TrainConfig] = None,
             resume: Optional[str] = None) -> dict:
    """image / speech: masked LM on the text + text-feature match. video: cross-modal masked LM over text and
    visual words (needs `codebook`). Returns the trainer summary with the final evaluation. `train`: the
    trainer's settings (default `default_train()`; out_dir is `out_dir`); `seed` draws the split and a new
    model's weights."""
    tok = load_tokenizer(vocab, init)
    if modality == "video":
        return _pretrain_video(features_dir, out_dir, tok, config, init, codebook, manifest, max_length, eval_fraction,
                               seed, mask_rate, train, resume)
    records, report, audio = _read(modality, features_dir, manifest, ("text",), audio)
    _write_report(out_dir, report)
    mm = _adapter_config(modality, records, audio)
    head = HeadConfig(task="pretraining", pair_objective="nsp" if mismatch_prob > 0 else None)
    model = _new_or_init(config, tok.vocab_size, mm, head, init, seed)
    tr, ev = split(text_examples(records, tok, max_length), eval_fraction, seed)
    masker = make_masker(tok, model.config.vocab_size, mask_rate)
    tc = _train_config(out_dir, train)

    def eval_fn(m):
        return evaluate_pretrain(m, ev, tok, mask_rate, tc.batch_size) if ev else {}

    trainer = Trainer(model, tc, tr, FeatureTextCollator(masker, tok.pad_token_id, mismatch_prob), eval_fn=eval_fn,
                      step_metrics_fn=_mlm_step_metrics, tokenizer=tok)
    return _finish(trainer, resume)


def _finish(trainer, resume) -> dict:
    summary = trainer.train(resume_from=resume)
    evals = [h for h in summary["history"] if any(k.startswith("eval_") for k in h)]
    summary["final_eval"] = evals[-1] if evals else {}
    summary.pop("history")
    return summary


def _mlm_step_metrics(out, batch) -> dict:
    m = {}
    if out.logits is not None and "labels" in batch and "masked_positions" in batch:
        t = batch["labels"][batch["masked_positions"]]
        if t.numel():
            m["mlm_acc"] = float((out.logits.argmax(-1) == t).float().mean())
    if out.pair_logits is not None and "pair_labels" in batch:
        m["match_acc"] = float((out.pair_logits.argmax(-1) == batch["pair_labels"]).float().mean())
    return m


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
    masker = make_masker(tok, model.config.vocab_size, mask_rate)
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


# ---------------------------------------------------------------- video
def video_records(features_dir: str, manifest: Optional[str], codebook: str):
    from .codebook import Codebook

    cb = Codebook.load(codebook)
    records, report, _ = _read("video", features_dir, manifest, ("text",), None, feature_dim=cb.dim)
    return records, report, cb


def _pretrain_video(features_dir, out_dir, tok, config, init, codebook, manifest, max_length, eval_fraction, seed,
                    mask_rate, train, resume) -> dict:
    from ..objectives.collator import PretrainCollator

    if not codebook:
        raise ConfigError("video pre-training needs --codebook (fit one with `bertfam multimodal vocab`)")
    records, report, cb = video_records(features_dir, manifest, codebook)
    _write_report(out_dir, report)
    mm = MultimodalConfig(modality="video", text_vocab_size=tok.vocab_size, codebook_size=cb.size)
    model = _new_or_init(config, tok.vocab_size + cb.size, mm, HeadConfig(task="mlm"), init, seed)
    V = model.mm.text_vocab_size
    items = [{"text": tok.encode(r.text), "words": cb.quantize(r.features)} for r in records]
    tr, ev = split(items, eval_fraction, seed)

    def inst(it, words=None):
        return video_instance(it["text"], it["words"] if words is None else words, V, tok.sep_token_id, max_length)

    masker = make_masker(tok, model.config.vocab_size, mask_rate)
    tc = _train_config(out_dir, train)
    model.codebook = cb  # saved with every checkpoint and the final model

    def eval_fn(m):
        return evaluate_video(m, [inst(it) for it in ev], masker, tok.pad_token_id, tc.batch_size,
                              [inst(it, ev[j]["words"]) for it, j in zip(ev, derangement(len(ev)))]) if ev else {}

    trainer = Trainer(model, tc, [inst(it) for it in tr], PretrainCollator(masker, tok.pad_token_id, pair=False),
                      eval_fn=eval_fn, step_metrics_fn=_mlm_step_metrics, tokenizer=tok)
    return _finish(trainer, resume)


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


def fit_vocab(features_dir: str, out: str, size: int, manifest: Optional[str] = None, seed: int = 0,
              max_samples: int = 100_000) -> dict:
    """Fit and save a k-means codebook of `size` visual words over every clip vector of the manifest."""
    from .codebook import fit_codebook

    records, report = load_records(features_dir, manifest)
    print(report.summary())
    cb = fit_codebook([r.features for r in records], size, seed, max_samples)
    cb.save(out)
    used = np.bincount(np.concatenate([cb.quantize(r.features) for r in records]), minlength=size)
    return {"size": cb.size, "dim": cb.dim, "clips": int(used.sum()), "unused_words": int((used == 0).sum())}


# ---------------------------------------------------------------- fine-tuning
def _qa_check(rec: dict) -> None:
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


def finetune(modality: str, task: str, features_dir: str, out_dir: str, *, vocab: Optional[str] = None,
             config: str = "bert-tiny", init: Optional[str] = None, manifest: Optional[str] = None,
             max_length: int = 128, doc_stride: int = 32, eval_fraction: float = 0.1, seed: int = 0,
             audio: Optional[AudioConfig] = None, train: Optional[TrainConfig] = None,
             resume: Optional[str] = None) -> dict:
    """task qa: extractive QA over the text passage with the question given as features (spoken question);
    task classify: a label per (text, features) pair (manifest field `label`). `train`, `seed`: as pretrain."""
    if modality == "video":
        raise ConfigError("fine-tuning paths exist for image and speech (video models are token models: use "
                          "`bertfam finetune` on their text, or pre-train with visual words)")
    tok = load_tokenizer(vocab, init)
    if task == "qa":
        records, report, audio = _read(modality, features_dir, manifest, (), audio, check=_qa_check)
        _write_report(out_dir, report)
        mm = _adapter_config(modality, records, audio)
        model = _new_or_init(config, tok.vocab_size, mm, HeadConfig(task="span", answerability=False), init, seed)
        tr_rec, ev_rec = split(records, eval_fraction, seed)
        tr, _ = qa_windows(tr_rec, tok, max_length, doc_stride)
        tc = _train_config(out_dir, train)
        trainer = Trainer(model, tc, tr, QACollator(tok.pad_token_id), tokenizer=tok,
                          eval_fn=(lambda m: evaluate_qa(m, ev_rec, tok, max_length, doc_stride, tc.batch_size))
                          if ev_rec else None)
        return _finish(trainer, resume)
    if task == "classify":
        records, report, audio = _read(modality, features_dir, manifest, ("text", "label"), audio)
        _write_report(out_dir, report)
        labels = sorted({str(r.fields["label"]) for r in records})
        mm = _adapter_config(modality, records, audio)
        model = _new_or_init(config, tok.vocab_size, mm, HeadConfig(task="classification", num_labels=len(labels),
                                                                    labels=labels), init, seed)
        tr, ev = split(text_examples(records, tok, max_length), eval_fraction, seed)
        tc = _train_config(out_dir, train)
        collate = ClassifyCollator(tok.pad_token_id, {name: i for i, name in enumerate(labels)})
        trainer = Trainer(model, tc, tr, collate, tokenizer=tok,
                          eval_fn=(lambda m: evaluate_classify(m, ev, tok, tc.batch_size)) if ev else None)
        return _finish(trainer, resume)
    raise ConfigError(f"task {task!r} not in qa/classify")


@torch.no_grad()
def predict_qa(model, records, tok, max_length: int = 128, doc_stride: int = 32, batch_size: int = 32) -> dict:
    """{id: best answer text} (decoding shared with bertfam's MRC: bertfam.tasks.mrc.decode)."""
    from ..tasks.mrc import decode

    examples, mrc = qa_windows(records, tok, max_length, doc_stride, with_labels=False)
    per: dict[int, list] = {}
    i = 0
    for b in _batches(examples, QACollator(tok.pad_token_id, with_labels=False), batch_size, _device(model)):
        o = model(**b)
        for j in range(o.start_logits.shape[0]):
            w = examples[i]["window"]
            T = len(w.input_ids)
            per.setdefault(w.example_index, []).append((w, o.start_logits[j, :T].float().cpu().numpy(),
                                                        o.end_logits[j, :T].float().cpu().numpy(), None))
            i += 1
    out = {}
    for k, ex in enumerate(mrc):
        res = decode(per.get(k, []), ex["context"], n_best=5, max_answer_length=30)
        out[ex["id"]] = res["nbest"][0]["text"] if res["nbest"] else ""
    return out


def evaluate_qa(model, records, tok, max_length: int = 128, doc_stride: int = 32, batch_size: int = 32,
                ablation: bool = True) -> dict:
    """Exact match and F1 (DuReader's scorer: characters for Chinese, words otherwise), true vs shuffled audio."""
    from ..evaluation.dureader import em_score, f1_score

    from .features import Record

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


# ---------------------------------------------------------------- evaluation of a saved model
def evaluate_dir(model_dir: str, features_dir: str, manifest: Optional[str] = None, *, max_length: int = 128,
                 doc_stride: int = 32, batch_size: int = 32, mask_rate: float = 0.15, seed: int = 0) -> dict:
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
        records, _, _ = _read("video", features_dir, manifest, ("text",), None, feature_dim=cb.dim)
        V = mm.text_vocab_size
        items = [(tok.encode(r.text), cb.quantize(r.features)) for r in records]
        inst = [video_instance(t, w, V, tok.sep_token_id, max_length) for t, w in items]
        shuf = [video_instance(t, items[j][1], V, tok.sep_token_id, max_length)
                for (t, _), j in zip(items, derangement(len(items)))]
        return evaluate_video(model, inst, make_masker(tok, model.config.vocab_size, mask_rate), tok.pad_token_id,
                              batch_size, shuf)
    task = model.config.head.task
    if task == "span":
        records, _, _ = _read(mm.modality, features_dir, manifest, (), mm.audio, mm.feature_dim, check=_qa_check)
        return evaluate_qa(model, records, tok, max_length, doc_stride, batch_size)
    req = ("text", "label") if task == "classification" else ("text",)
    records, _, _ = _read(mm.modality, features_dir, manifest, req, mm.audio, mm.feature_dim)
    exs = text_examples(records, tok, max_length)
    if task == "classification":
        return evaluate_classify(model, exs, tok, batch_size)
    return evaluate_pretrain(model, exs, tok, mask_rate, batch_size)
