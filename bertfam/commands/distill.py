"""`bertfam distill`: TinyBERT general (--corpus) or task-specific (--task) distillation (runners.distill)."""
from __future__ import annotations

import dataclasses

from .common import (CHECKPOINT_FLAGS, OPTIMIZATION_FLAGS, add_threads_arg, check_checkpoints, non_negative_float,
                     open_fraction, positive_float, positive_int, probability, seed, set_threads)
from .flags import Flag, Flags


def register(sub) -> None:
    from ..runners.distill import DistillRunConfig

    p = Flags(sub.add_parser("distill", help="TinyBERT distillation: general (--corpus) or task-specific (--task)"),
              DistillRunConfig)
    p.fields({
        "teacher": Flag(help="teacher directory (fine-tuned for --task)"),
        "student_config": Flag(help="preset name, config JSON, or a model directory (e.g. a general-distilled "
                                    "student)"),
        "out": Flag(help="output directory of the student"),
    })
    p.add_mutually_exclusive_group(required=True).fields({
        "corpus": Flag(help="general distillation: text files / directories"),
        "task": Flag(help="task-specific distillation: a task name of `bertfam finetune`"),
    })
    p.fields({
        "train_file": Flag(help="--task: training file", name="--train"),
        "dev": Flag(help="--task: dev file (teacher and student are scored and timed on it)"),
        "max_length": Flag(positive_int),
    })
    p.add_argument("--layer-map", help="teacher layer per student layer, e.g. 3,6,9,12 (default m*N/M)")
    p.fields({
        "projection": Flag(help="auto: learnable W when the widths differ; none: widths must match",
                           choices=("auto", "none")),
        "temperature": Flag(positive_float, "prediction-layer soft CE temperature"),
        "train.epochs": Flag(positive_float, "--corpus: epochs"),
        "epochs_intermediate": Flag(non_negative_float, "--task: stage 1 epochs (0 skips)"),
        "epochs_prediction": Flag(non_negative_float, "--task: stage 2 epochs (0 skips)"),
        "mask_rate": Flag(open_fraction, "--corpus: MLM-style masking of the inputs"),
        "augment_mlm": Flag(help="--task: a masked-LM model directory; enables data augmentation"),
        "augment_n": Flag(positive_int, "augmented copies per example"),
        "augment_p": Flag(probability, "replacement probability per word"),
        "augment_top_k": Flag(positive_int),
        "max_train": Flag(positive_int, "a random subset of N training examples (as `finetune --max-train` with "
                                        "the same seed)"),
        "max_dev": Flag(positive_int, "use only the first N dev examples"),
        "train.batch_size": Flag(positive_int),
        "train.lr": Flag(positive_float),
        "train.grad_accum": OPTIMIZATION_FLAGS["train.grad_accum"],
        "train.max_steps": Flag(positive_int, "optimizer steps per stage (overrides epochs)"),
        "train.log_every": Flag(positive_int),
        "train.seed": Flag(seed),
    })
    add_threads_arg(p)
    p.fields({"train.progress": Flag(name="--no-progress")})
    p.add_argument_group("checkpoints").fields(CHECKPOINT_FLAGS)
    p.command(_distill)


def _layer_map(s):
    if not s:
        return None
    from ..errors import ConfigError

    try:
        return [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"--layer-map {s!r}: give comma-separated integers, e.g. 3,6,9,12") from None


def _check(args) -> None:
    """Option combinations argparse cannot reject, refused before loading any model."""
    from ..errors import ConfigError

    if args.corpus:
        return
    if not args.train_file:
        raise ConfigError("--task needs --train FILE")
    if args.epochs_intermediate == 0 and args.epochs_prediction == 0:
        raise ConfigError("--epochs-intermediate and --epochs-prediction are both 0: no stage would train")


def _distill(args, cfg) -> int:
    _check(args)
    check_checkpoints(args)
    import json

    from ..runners.distill import run_distill

    set_threads(args)
    # --epochs is general distillation's; the task stages have their own
    s = run_distill(dataclasses.replace(cfg, layer_map=_layer_map(args.layer_map)))
    if "written" in s:  # the main process (under torchrun every rank ends here)
        print(json.dumps({k: v for k, v in s.items() if k not in ("final_eval", "written")}, ensure_ascii=False,
                         default=float))
        print(f"wrote {s['written']}")
    return 0
