"""Pre-training of the multimodal members (`bertfam multimodal pretrain`) and VideoBERT's visual-word
vocabulary (`bertfam multimodal vocab`).

image / speech: masked LM on the text + text-feature match (VisualBERT's two objectives); video:
cross-modal masked LM over text and visual words.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..config import HeadConfig
from ..errors import ConfigError
from ..tokenization import tokenizer_from
from ..training import TrainConfig, Trainer
from .config import AudioConfig, MultimodalConfig
from .data import FeatureTextCollator, text_examples, token_masker, video_instance
from .evaluate import derangement, evaluate_pretrain, evaluate_video
from .features import load_records
from .runs import (adapter_config, finish, new_or_init, read_records, run_train_config,
                   split_eval, write_report)


def pretrain_multimodal(modality: str, features_dir: str, out_dir: str, *, vocab: Optional[str] = None,
                        config: str = "bert-tiny", init: Optional[str] = None, codebook: Optional[str] = None,
                        manifest: Optional[str] = None, max_length: int = 64, eval_fraction: float = 0.1,
                        mask_rate: float = 0.15, mismatch_prob: float = 0.5,
                        audio: Optional[AudioConfig] = None, train: Optional[TrainConfig] = None,
                        resume: Optional[str] = None) -> dict:
    """image / speech: masked LM on the text + text-feature match. video: cross-modal masked LM over text and
    visual words (needs `codebook`). Returns the trainer summary with the final evaluation. `train`: the
    trainer's settings (default `runs.default_train()`; out_dir is `out_dir`); its seed, the run's one seed,
    also draws the split and a new model's weights."""
    tok = tokenizer_from(vocab, init)  # --vocab, else the --init checkpoint's
    tc = run_train_config(out_dir, train)
    if modality == "video":
        return _pretrain_video(features_dir, out_dir, tok, config, init, codebook, manifest, max_length, eval_fraction,
                               mask_rate, tc, resume)
    records, report, audio = read_records(modality, features_dir, manifest, ("text",), audio)
    write_report(out_dir, report)
    mm = adapter_config(modality, records, audio)
    head = HeadConfig(task="pretraining", pair_objective="nsp" if mismatch_prob > 0 else None)
    model = new_or_init(config, tok.vocab_size, mm, head, init, tc.seed)
    tr, ev = split_eval(text_examples(records, tok, max_length), eval_fraction, tc.seed)
    masker = token_masker(tok, model.config.vocab_size, mask_rate)

    def eval_fn(m):
        return evaluate_pretrain(m, ev, tok, mask_rate, tc.batch_size) if ev else {}

    trainer = Trainer(model, tc, tr, FeatureTextCollator(masker, tok.pad_token_id, mismatch_prob), eval_fn=eval_fn,
                      step_metrics_fn=mlm_step_metrics, tokenizer=tok)
    return finish(trainer, resume)


def mlm_step_metrics(out, batch) -> dict:
    """Per-step training metrics: masked-token accuracy and text-feature match accuracy."""
    m = {}
    if out.logits is not None and "labels" in batch and "masked_positions" in batch:
        t = batch["labels"][batch["masked_positions"]]
        if t.numel():
            m["mlm_acc"] = float((out.logits.argmax(-1) == t).float().mean())
    if out.pair_logits is not None and "pair_labels" in batch:
        m["match_acc"] = float((out.pair_logits.argmax(-1) == batch["pair_labels"]).float().mean())
    return m


# ---------------------------------------------------------------- video
def video_records(features_dir: str, manifest: Optional[str], codebook: str):
    """(records, load report, codebook): the clips of a feature directory and the codebook that quantizes them."""
    from .codebook import Codebook

    cb = Codebook.load(codebook)
    records, report, _ = read_records("video", features_dir, manifest, ("text",), None, feature_dim=cb.dim)
    return records, report, cb


def _pretrain_video(features_dir, out_dir, tok, config, init, codebook, manifest, max_length, eval_fraction,
                    mask_rate, tc, resume) -> dict:
    from ..objectives.collator import PretrainCollator

    if not codebook:
        raise ConfigError("video pre-training needs --codebook (fit one with `bertfam multimodal vocab`)")
    records, report, cb = video_records(features_dir, manifest, codebook)
    write_report(out_dir, report)
    mm = MultimodalConfig(modality="video", text_vocab_size=tok.vocab_size, codebook_size=cb.size)
    model = new_or_init(config, tok.vocab_size + cb.size, mm, HeadConfig(task="mlm"), init, tc.seed)
    V = model.mm.text_vocab_size
    items = [{"text": tok.encode(r.text), "words": cb.quantize(r.features)} for r in records]
    tr, ev = split_eval(items, eval_fraction, tc.seed)

    def inst(it, words=None):
        return video_instance(it["text"], it["words"] if words is None else words, V, tok.sep_token_id, max_length)

    masker = token_masker(tok, model.config.vocab_size, mask_rate)
    model.codebook = cb  # saved with every checkpoint and the final model

    def eval_fn(m):
        return evaluate_video(m, [inst(it) for it in ev], masker, tok.pad_token_id, tc.batch_size,
                              [inst(it, ev[j]["words"]) for it, j in zip(ev, derangement(len(ev)))]) if ev else {}

    trainer = Trainer(model, tc, [inst(it) for it in tr], PretrainCollator(masker, tok.pad_token_id, pair=False),
                      eval_fn=eval_fn, step_metrics_fn=mlm_step_metrics, tokenizer=tok)
    return finish(trainer, resume)


def fit_visual_vocab(features_dir: str, out: str, size: int, manifest: Optional[str] = None, seed: int = 0,
                     max_samples: int = 100_000) -> dict:
    """Fit and save a k-means codebook of `size` visual words over every clip vector of the manifest."""
    from .codebook import fit_codebook

    records, report = load_records(features_dir, manifest)
    print(report.summary())
    cb = fit_codebook([r.features for r in records], size, seed, max_samples)
    cb.save(out)
    used = np.bincount(np.concatenate([cb.quantize(r.features) for r in records]), minlength=size)
    return {"size": cb.size, "dim": cb.dim, "clips": int(used.sum()), "unused_words": int((used == 0).sum())}
