"""The distillation job of `bertfam distill` (TinyBERT): general (a corpus) or task-specific (a task).

    from bertfam.runners.distill import DistillRunConfig, run_distill
    s = run_distill(DistillRunConfig(teacher="runs/teacher", out="runs/student", task="chnsenticorp",
                                  train_file="train.tsv", dev="dev.tsv"))

`run_distill` calls `distill.pipeline.distill_general` (with `corpus`) or `distill_task` (with `task`; an
`augment_mlm` model builds the data augmenter) and returns their summary, with "written" (the student's
directory) on the main process.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

from ..errors import ConfigError
from ..training import TrainConfig
from .options import RunOptions


@dataclass
class DistillRunConfig(RunOptions):
    """A distillation run: `corpus` (general) or `task` + `train_file` (task-specific), the student
    (`student_config`: preset, config JSON or model directory) written to `out`; `train`: the trainer's
    fields (its epochs are general distillation's; the task stages have epochs_intermediate / _prediction)."""

    teacher: str
    out: str
    student_config: str = "tinybert-4l-312"
    corpus: Optional[Sequence[str]] = None
    task: Optional[str] = None
    train_file: Optional[str] = None
    dev: Optional[str] = None
    max_length: int = 128
    layer_map: Optional[list] = None
    projection: str = "auto"
    temperature: float = 1.0
    epochs_intermediate: float = 1
    epochs_prediction: float = 1
    mask_rate: float = 0.15
    augment_mlm: Optional[str] = None
    augment_n: int = 20
    augment_p: float = 0.4
    augment_top_k: int = 15
    max_train: Optional[int] = None
    max_dev: Optional[int] = None
    train: TrainConfig = field(default_factory=TrainConfig)


def run_distill(cfg: DistillRunConfig) -> dict:
    """Distill as `cfg` says; returns the pipeline's summary, + "written" (cfg.out) on the main process."""
    from ..distill.pipeline import distill_general, distill_task
    from ..training.distributed import is_main_process

    if cfg.corpus:
        s = distill_general(cfg.teacher, cfg.student_config, cfg.corpus, cfg.out, max_length=cfg.max_length,
                            mask_rate=cfg.mask_rate, layer_map=cfg.layer_map, projection=cfg.projection,
                            train=cfg.train)
    else:
        s = distill_task(cfg.teacher, cfg.student_config, cfg.task, cfg.train_file, cfg.dev, cfg.out,
                         max_length=cfg.max_length, epochs_intermediate=cfg.epochs_intermediate,
                         epochs_prediction=cfg.epochs_prediction, temperature=cfg.temperature,
                         layer_map=cfg.layer_map, projection=cfg.projection, augmenter=_augmenter(cfg),
                         max_train=cfg.max_train, max_dev=cfg.max_dev, train=cfg.train)
    if is_main_process():  # under torchrun every rank ends here
        s["written"] = cfg.out
    return s


def _augmenter(cfg: DistillRunConfig):
    """The MLM data augmenter of `augment_mlm` (None without one)."""
    if not cfg.augment_mlm:
        return None
    from ..checkpoint import from_pretrained
    from ..distill.augment import MLMAugmenter

    mlm = from_pretrained(cfg.augment_mlm)
    tok = mlm.tokenizer
    if tok is None:
        raise ConfigError(f"{cfg.augment_mlm}: no tokenizer in the augmentation model directory")
    return MLMAugmenter(mlm, tok, cfg.augment_top_k, cfg.augment_p, cfg.augment_n, cfg.max_length,
                        cfg.train.seed).augment
