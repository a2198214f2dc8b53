"""What every multimodal run sets up: its tokenizer, records, evaluation split, model and trainer settings.

`pretrain.py` and `finetune.py` build their runs from these; `evaluate.py` reads records with
`read_records` too.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Optional

from ..checkpoint import load_config, resolve_config
from ..config import HeadConfig
from ..data.splits import dev_split
from ..errors import ConfigError, DataError
from ..training import TrainConfig
from ..utils import atomic_write_text
from .config import AudioConfig, MultimodalConfig
from .features import LoadReport, load_records
from .hf import is_hf_visualbert
from .loading import init_from_text, load_multimodal
from .model import MultimodalModel, build_multimodal

# seed 0: the runs' own seed (weights, split) before the trainer's seed became the one seed of a run
TRAIN_DEFAULTS = {"epochs": 10, "batch_size": 16, "lr": 1e-3, "warmup_ratio": 0.1, "log_every": 10, "keep_last": 1,
                  "seed": 0}


def default_train(**kw) -> TrainConfig:
    """The multimodal runs' trainer defaults (small models on small feature sets), `kw` over them. Its seed is
    the run's one seed: the trainer's, a new model's weights' and the evaluation split's."""
    return TrainConfig(**{**TRAIN_DEFAULTS, **kw})


def run_train_config(out_dir: str, train: Optional[TrainConfig]) -> TrainConfig:
    """The run's trainer settings (default `default_train()`) writing to `out_dir`."""
    return dataclasses.replace(train if train is not None else default_train(), out_dir=out_dir)


def read_records(modality: str, features_dir: str, manifest: Optional[str], require: tuple,
                 audio: Optional[AudioConfig], feature_dim: Optional[int] = None, check=None):
    """(records, load report, audio settings) of a feature directory; the report's summary is printed."""
    if modality not in ("image", "video", "speech"):
        raise ConfigError(f"modality {modality!r} not in image/video/speech")
    audio = (audio or AudioConfig()) if modality == "speech" else None
    records, report = load_records(features_dir, manifest, feature_dim, require=require, audio=audio, check=check)
    print(report.summary())
    return records, report, audio


def write_report(out_dir: str, report: LoadReport, extra: Optional[dict] = None) -> None:
    """OUT/data_report.json: what loading the records kept and skipped."""
    os.makedirs(out_dir, exist_ok=True)
    atomic_write_text(os.path.join(out_dir, "data_report.json"),
                      json.dumps(dict(report.to_dict(), **(extra or {})), indent=2, ensure_ascii=False) + "\n")


def split_eval(items: list, eval_fraction: float, seed: int) -> tuple[list, list]:
    """(train, eval) drawn with `seed`, both in the drawn order; at least two evaluation items where there
    are four or more. numpy's permutation (`dev_split`'s draw="permutation"): the measured multimodal runs
    were split with it."""
    if not 0 <= eval_fraction < 1:
        raise ConfigError(f"eval fraction must be in [0, 1), got {eval_fraction}")
    n_eval = int(round(len(items) * eval_fraction))
    if eval_fraction > 0 and len(items) >= 4:
        n_eval = max(2, n_eval)
    tr, ev = dev_split(items, seed=seed, n_dev=n_eval, shuffled=True, draw="permutation")
    if not tr:
        raise DataError(f"{len(items)} usable records leave nothing to train on after the evaluation split")
    return tr, ev


def adapter_config(modality: str, records, audio: Optional[AudioConfig], max_positions: int = 512) -> MultimodalConfig:
    """The feature adapter the records need (feature and box dimensions, positions, the longest input)."""
    boxes = all(r.boxes is not None for r in records)
    longest = max(len(r.features) for r in records)
    return MultimodalConfig(modality=modality, feature_dim=int(records[0].features.shape[1]),
                            box_dim=int(records[0].boxes.shape[1]) if boxes else 0,
                            feature_positions="sequential" if modality == "speech" else "zero",
                            max_features=max(max_positions, longest), audio=audio if modality == "speech" else None)


def new_or_init(cfg_spec: str, vocab_size: int, mm: MultimodalConfig, head: HeadConfig, init: Optional[str],
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


def finish(trainer, resume) -> dict:
    """Run the trainer; its summary with the last evaluation as `final_eval` (the history left out)."""
    summary = trainer.train(resume_from=resume)
    evals = [h for h in summary["history"] if any(k.startswith("eval_") for k in h)]
    summary["final_eval"] = evals[-1] if evals else {}
    summary.pop("history")
    return summary
