"""General and task-specific TinyBERT distillation on the shared Trainer.

general: frozen teacher, corpus text packed into sequences with MLM-style masked inputs (the
pre-training data pipeline), Transformer-layer losses only.
task: fine-tuned teacher; stage 1 = intermediate layers (optionally on MLM-augmented data), stage 2 =
prediction layer (soft cross-entropy with temperature); the student is evaluated on the dev set
after stage 2 together with the teacher (metric and CPU inference time on the same batches).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import os
import random
import time
from typing import Callable, Optional, Sequence

import torch

from ..checkpoint import from_pretrained, resolve_config
from ..config import HeadConfig
from ..errors import ConfigError, DataError
from ..modeling.model import TaskModel, build_model
from ..training import TrainConfig, Trainer
from ..utils import atomic_write_text
from .model import DistillConfig, DistillModel

log = logging.getLogger("bertfam")
COMPAT = ("vocab_size", "type_vocab_size", "pad_token_id", "position_offset", "max_position_embeddings")


def build_student(spec: str, teacher: TaskModel, head: HeadConfig, seed: int = 42) -> TaskModel:
    """A preset name / config JSON (randomly initialised, vocabulary and embedding layout taken from the
    teacher) or a model directory (e.g. a general-distilled student) with the given head."""
    if os.path.isdir(spec) and os.path.isfile(os.path.join(spec, "config.json")):
        kw = {"num_labels": head.num_labels, "labels": list(head.labels), "mrc": head.mrc,
              "finetune": head.finetune} if head.task else {}
        student = from_pretrained(spec, task=head.task, seed=seed, dequantize=True, **kw)
        if student.config.vocab_size != teacher.config.vocab_size:
            raise ConfigError(f"{spec}: student vocabulary ({student.config.vocab_size}) differs from the "
                              f"teacher's ({teacher.config.vocab_size})")
    else:
        cfg = resolve_config(spec, **{k: getattr(teacher.config, k) for k in COMPAT})
        # the teacher's task settings, not its training info (training_info.json: the teacher's provenance)
        student = build_model(dataclasses.replace(cfg, head=dataclasses.replace(head, info={})), seed=seed)
    student.tokenizer = teacher.tokenizer
    return student.train()


def _run_distillation(dm: DistillModel, tc: TrainConfig, data, collate, eval_fn=None, lengths=None) -> dict:
    trainer = Trainer(dm, tc, data, collate, eval_fn=eval_fn, lengths=lengths,
                      step_metrics_fn=lambda out, batch: out.parts, tokenizer=dm.tokenizer)
    return trainer.train()


def _summary_write(out_dir: str, summary: dict) -> None:
    atomic_write_text(os.path.join(out_dir, "distill_summary.json"),
                      json.dumps(summary, indent=2, ensure_ascii=False, default=float) + "\n")


# ------------------------------------------------------------------ general distillation
def distill_general(teacher_dir: str, student_spec: str, corpus: Sequence[str], out_dir: str, *,
                    max_length: int = 128, mask_rate: float = 0.15, layer_map: Optional[list] = None,
                    projection: str = "auto", train: Optional[TrainConfig] = None) -> dict:
    """`train`: the trainer's settings (default TrainConfig(); out_dir is `out_dir`); its seed also draws
    the student's initial weights and the instances."""
    from ..objectives.collator import PretrainCollator
    from ..objectives.masking import MaskingConfig
    from ..objectives.pipeline import DataConfig, build_instances, make_masker

    tc = dataclasses.replace(train if train is not None else TrainConfig(), out_dir=out_dir)
    seed = tc.seed
    teacher = from_pretrained(teacher_dir)
    tok = _need_tokenizer(teacher, teacher_dir)
    student = build_student(student_spec, teacher, HeadConfig(task=None), seed)
    instances, held, stats = build_instances(DataConfig(corpus=list(corpus), pair="none", max_seq_len=max_length,
                                                        seed=seed), tok)
    masker = make_masker(MaskingConfig(rate=mask_rate), tok, teacher.config.vocab_size)
    collate = PretrainCollator(masker, tok.pad_token_id, pair=False, masked_positions=False)
    dm = DistillModel(student, teacher, DistillConfig(stage="general", layer_map=layer_map, projection=projection))

    def eval_fn(model) -> dict:  # mean distillation loss on held-out, statically masked instances
        tot = [model(**_to(collate(held[i:i + 32]), model)).loss.item() for i in range(0, len(held), 32)]
        return {"loss": sum(tot) / len(tot)} if tot else {}

    res = _run_distillation(dm, tc, instances, collate, eval_fn if held else None)
    student.save_pretrained(out_dir, tok)  # clean student directory (no projection tensors)
    summary = {"mode": "general", "teacher": teacher_dir, "student": student_spec, "corpus": stats.summary(),
               "train_instances": len(instances), "steps": res["steps"], "elapsed_s": res["elapsed_s"],
               "student_parameters": student.num_parameters()["total"],
               "teacher_parameters": teacher.num_parameters()["total"],
               "final_eval": [h for h in res["history"] if "eval_loss" in h][-1:]}
    _summary_write(out_dir, summary)
    return summary


# ------------------------------------------------------------------ task-specific distillation
def distill_task(teacher_dir: str, student_spec: str, task: str, train_path: str, dev_path: Optional[str],
                 out_dir: str, *, max_length: int = 128, epochs_intermediate: float = 1,
                 epochs_prediction: float = 1, temperature: float = 1.0, layer_map: Optional[list] = None,
                 projection: str = "auto", augmenter: Optional[Callable] = None, max_train: Optional[int] = None,
                 max_dev: Optional[int] = None, train: Optional[TrainConfig] = None) -> dict:
    """`train`: the trainer's settings of both stages (default TrainConfig(); each stage has its own out_dir
    under `out_dir` and its epochs); its seed also draws the training subset and a new student."""
    from ..tasks.inputs import InputBuilder, collect_labels, gold, lengths, score
    from ..tasks.table import get_task

    base = train if train is not None else TrainConfig()
    seed = base.seed
    spec = get_task(task)
    teacher = from_pretrained(teacher_dir)
    tok = _need_tokenizer(teacher, teacher_dir)
    if teacher.config.head.task != spec.head:
        raise ConfigError(f"{teacher_dir}: the teacher has a {teacher.config.head.task!r} head but task {task} "
                          f"needs {spec.head!r} (fine-tune the teacher first)")
    train_ex = spec.read(train_path)
    if max_train and len(train_ex) > max_train:  # the same subset `bertfam finetune --max-train` draws
        train_ex = random.Random(seed).sample(train_ex, max_train)
    labels = list(teacher.config.head.labels) or collect_labels(spec, train_ex)
    student = build_student(student_spec, teacher, teacher.config.head, seed)
    builder = InputBuilder(tok, spec, labels, max_length)
    dev_ex = spec.read(dev_path)[:max_dev] if dev_path else []
    dev_inputs = builder.build(dev_ex) if dev_ex else []

    def evaluate(model) -> dict:
        preds = builder.predict(model, dev_inputs)
        return score(spec, builder.label_names(preds), gold(dev_ex, spec))

    stage1_ex = augmenter(train_ex) if augmenter is not None else train_ex
    inputs1 = builder.build(stage1_ex)
    summary = {"mode": "task", "task": task, "teacher": teacher_dir, "student": student_spec,
               "train_examples": len(train_ex), "stage1_examples": len(stage1_ex), "dev_examples": len(dev_ex)}
    if epochs_intermediate > 0:
        dm = DistillModel(student, teacher, DistillConfig(stage="intermediate", layer_map=layer_map,
                                                          projection=projection))
        tc = dataclasses.replace(base, out_dir=os.path.join(out_dir, "stage1-intermediate"),
                                 epochs=epochs_intermediate)
        r = _run_distillation(dm, tc, inputs1, builder.collate, lengths=lengths(inputs1))
        summary["stage1"] = {"steps": r["steps"], "elapsed_s": r["elapsed_s"]}
    if epochs_prediction > 0:
        inputs2 = inputs1 if augmenter is not None else builder.build(train_ex)
        dm = DistillModel(student, teacher, DistillConfig(stage="prediction", temperature=temperature))
        tc = dataclasses.replace(base, out_dir=os.path.join(out_dir, "stage2-prediction"), epochs=epochs_prediction)
        r = _run_distillation(dm, tc, inputs2, builder.collate, (lambda m: evaluate(m.student)) if dev_inputs else None,
                   lengths(inputs2))
        summary["stage2"] = {"steps": r["steps"], "elapsed_s": r["elapsed_s"]}
    student.eval().save_pretrained(out_dir, tok)
    if dev_inputs:
        summary["teacher_dev"], summary["teacher_infer_s"] = _timed(evaluate, teacher)
        summary["student_dev"], summary["student_infer_s"] = _timed(evaluate, student)
        summary["speedup"] = summary["teacher_infer_s"] / max(summary["student_infer_s"], 1e-9)
    summary["teacher_parameters"] = teacher.num_parameters()["total"]
    summary["student_parameters"] = student.num_parameters()["total"]
    _summary_write(out_dir, summary)
    return summary


def _timed(fn, model) -> tuple[dict, float]:
    t0 = time.perf_counter()
    m = fn(model)
    return m, time.perf_counter() - t0


def _to(batch: dict, model) -> dict:
    device = next(model.parameters()).device
    return {k: v.to(device) if torch.is_tensor(v) else v for k, v in batch.items()}


def _need_tokenizer(model: TaskModel, path: str):
    if model.tokenizer is None:
        raise DataError(f"{path}: the teacher directory has no tokenizer (tokenizer.json or vocab.txt)")
    return model.tokenizer
