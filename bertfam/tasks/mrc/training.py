"""Training a span + answerability model on MRC windows (`train_mrc`), from a checkpoint or a preset
(`load_span_model`)."""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Optional, Sequence

from ...config import MRCSettings
from ...data.mrc_windows import build_windows, collate_windows
from ...errors import ConfigError
from ...training import TrainConfig, Trainer
from .predictor import MRCPredictor
from .scoring import score_examples
from .thresholds import save_thresholds, tune_thresholds

log = logging.getLogger("bertfam")


def load_span_model(spec: str, vocab: Optional[str] = None, seed: int = 0):
    """A span model from a checkpoint directory (new span head if it has another head), or a preset
    name (random weights) with a vocabulary file."""
    from ...config import HeadConfig, preset
    from ...checkpoint import from_pretrained
    from ...modeling import build_model
    from ...tokenization import tokenizer_from

    if os.path.isdir(spec):
        model = from_pretrained(spec, task="span", seed=seed, answerability=True, dequantize=True)
        if vocab:
            model.tokenizer = tokenizer_from(vocab)
        if model.tokenizer is None:
            raise ConfigError(f"{spec}: no tokenizer in the model directory; give --vocab")
        return model
    if not vocab:
        raise ConfigError(f"{spec}: not a model directory; a preset name needs --vocab VOCAB.txt")
    tok = tokenizer_from(vocab)
    model = build_model(preset(spec, vocab_size=tok.vocab_size, head=HeadConfig(task="span")), seed=seed)
    model.tokenizer = tok
    return model


def train_mrc(model, train_examples: Sequence, out_dir: str, dev_examples: Sequence = (), *,
              max_length: int = MRCSettings.max_length, doc_stride: int = MRCSettings.doc_stride,
              max_query_length: int = MRCSettings.max_query_length, use_title: bool = MRCSettings.use_title,
              tune: bool = True, eval_limit: Optional[int] = 500, train: Optional[TrainConfig] = None,
              dev_name: str = "dev", resume_from: Optional[str] = None, info: Optional[dict] = None) -> dict:
    """Fine-tune a span model (span loss + answerability loss on every window), evaluate on dev at the
    end of each epoch (official DuReader F1/EM), then tune and save the thresholds on dev. `train`: the
    trainer's settings (default TrainConfig()); its out_dir is `out_dir`. The windows go to head.mrc (the
    model's other MRC settings, e.g. thresholds of an earlier stage, are kept until tuned again); the run is
    appended to the model's training info (`runs`, with `info`'s keys) in out_dir/training_info.json."""
    from ...training.distributed import is_main_process

    tok = model.tokenizer
    max_length = min(max_length, model.config.max_sequence_length)
    head = model.config.head
    mrc = dataclasses.replace(head.mrc_settings, use_title=use_title, max_length=max_length, doc_stride=doc_stride,
                              max_query_length=max_query_length)
    model.config.head = dataclasses.replace(head, mrc=mrc, answerability=True)
    windows = build_windows(tok, train_examples, max_length, doc_stride, max_query_length, use_title,
                            with_labels=True)
    n_pos = sum(w.answerable for w in windows)
    n_multi = sum(1 for c in _counts(w.example_index for w in windows).values() if c > 1)
    log.info("train: %d questions -> %d windows (%d hold the answer; %d passages longer than one window)",
             len(train_examples), len(windows), n_pos, n_multi)
    pad = tok.pad_token_id or 0
    tc = dataclasses.replace(train if train is not None else TrainConfig(), out_dir=out_dir)
    eval_set = list(dev_examples)[:eval_limit] if eval_limit else list(dev_examples)

    verifier = _training_verifier(model)  # resolved before training: a missing one must not end a long run

    def eval_fn(m) -> dict:
        # the windows just set in head.mrc; no inference swap on the model in training
        pred = MRCPredictor(m, verifier=verifier, optimize=False)
        return score_examples(pred, eval_set)

    trainer = Trainer(model, tc, windows, lambda b: collate_windows(b, pad), eval_fn=eval_fn if eval_set else None,
                      lengths=[len(w.input_ids) for w in windows], tokenizer=tok)
    summary = trainer.train(resume_from=resume_from)
    evals = [r for r in summary.pop("history", None) or [] if "eval_f1" in r]
    if evals:  # the last evaluation during training: default thresholds, on eval_limit questions
        summary["last_eval"] = {"step": evals[-1]["step"], "f1": evals[-1]["eval_f1"], "em": evals[-1]["eval_em"],
                                "questions": len(eval_set)}
    summary.update(train_questions=len(train_examples), train_windows=len(windows), answer_windows=n_pos,
                   multi_window_questions=n_multi)
    run = {"command": "mrc train", **(info or {}), "train_questions": len(train_examples),
           "train_windows": len(windows), "dev": dev_name if dev_examples else None, "steps": summary.get("steps"),
           "max_length": max_length, "doc_stride": doc_stride}
    model.config.head.info = dict(model.config.head.info, runs=list(model.config.head.info.get("runs", [])) + [run])
    if tune and dev_examples:
        pred = MRCPredictor(model, verifier=verifier, optimize=False)  # the trained model stays plain
        tuned = tune_thresholds(pred, dev_examples)
        run["dev_f1"] = round(tuned["dev_f1"], 3)
        if is_main_process():
            save_thresholds(model, out_dir, tuned, dev_name)  # config.json + training_info.json
        summary["thresholds"] = tuned
    elif is_main_process() and os.path.isfile(os.path.join(out_dir, "config.json")):
        model.config.save(os.path.join(out_dir, "config.json"))  # the run into training_info.json
    return summary


def _training_verifier(model):
    """The verifier the model's head.mrc names, loaded once for the dev evaluations, or False (no verifier)
    when it names none or it is not there: a reader trains without one, and its dev scores then use the
    reader's own no-answer tests (said once, here, not as an error after the first epoch). The trained model
    still names it, so that `bertfam mrc build-verifier` can build it there."""
    from .verifier import load_verifier

    name = model.config.head.mrc_settings.verifier
    if name is None:
        return False
    home = getattr(model, "name_or_path", None)
    if home is None or not os.path.isdir(os.path.join(home, name)):
        log.warning("%s: the model's verifier (head.mrc.verifier %r) is not there; dev evaluations during "
                    "training score the reader alone (`bertfam mrc build-verifier OUT` builds it for the trained "
                    "model)", home or "the model", name)
        return False
    return load_verifier(os.path.join(home, name))


def _counts(xs) -> dict:
    from collections import Counter

    return Counter(xs)
