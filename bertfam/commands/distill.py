"""`bertfam distill`: TinyBERT general (--corpus) or task-specific (--task) distillation (runners.distill)."""
from __future__ import annotations

from .common import (add_checkpoint_args, add_grad_accum_arg, add_run_config, add_threads_arg, non_negative_float,
                     open_fraction, positive_float, positive_int, probability, seed, set_threads, train_config)


def register(sub) -> None:
    p = sub.add_parser("distill", help="TinyBERT distillation: general (--corpus) or task-specific (--task)")
    p.add_argument("--teacher", required=True, help="teacher directory (fine-tuned for --task)")
    p.add_argument("--student-config", default="tinybert-4l-312",
                   help="preset name, config JSON, or a model directory (e.g. a general-distilled student)")
    p.add_argument("--out", required=True, help="output directory of the student")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", nargs="+", help="general distillation: text files / directories")
    src.add_argument("--task", help="task-specific distillation: a task name of `bertfam finetune`")
    p.add_argument("--train", help="--task: training file")
    p.add_argument("--dev", help="--task: dev file (teacher and student are scored and timed on it)")
    p.add_argument("--max-length", type=positive_int, default=128)
    p.add_argument("--layer-map", help="teacher layer per student layer, e.g. 3,6,9,12 (default m*N/M)")
    p.add_argument("--projection", choices=["auto", "none"], default="auto",
                   help="auto: learnable W when the widths differ; none: widths must match")
    p.add_argument("--temperature", type=positive_float, default=1.0, help="prediction-layer soft CE temperature")
    p.add_argument("--epochs", type=positive_float, default=1, help="--corpus: epochs")
    p.add_argument("--epochs-intermediate", type=non_negative_float, default=1, help="--task: stage 1 epochs (0 skips)")
    p.add_argument("--epochs-prediction", type=non_negative_float, default=1, help="--task: stage 2 epochs (0 skips)")
    p.add_argument("--mask-rate", type=open_fraction, default=0.15, help="--corpus: MLM-style masking of the inputs")
    p.add_argument("--augment-mlm", help="--task: a masked-LM model directory; enables data augmentation")
    p.add_argument("--augment-n", type=positive_int, default=20, help="augmented copies per example")
    p.add_argument("--augment-p", type=probability, default=0.4, help="replacement probability per word")
    p.add_argument("--augment-top-k", type=positive_int, default=15)
    p.add_argument("--max-train", type=positive_int,
                   help="a random subset of N training examples (as `finetune --max-train` with the same seed)")
    p.add_argument("--max-dev", type=positive_int, help="use only the first N dev examples")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--lr", type=positive_float, default=5e-5)
    add_grad_accum_arg(p)
    p.add_argument("--max-steps", type=positive_int, help="optimizer steps per stage (overrides epochs)")
    p.add_argument("--log-every", type=positive_int, default=10)
    p.add_argument("--seed", type=seed, default=42)
    add_threads_arg(p)
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_checkpoint_args(p)
    p.set_defaults(func=add_run_config(p, _distill))


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
    if not args.train:
        raise ConfigError("--task needs --train FILE")
    if args.epochs_intermediate == 0 and args.epochs_prediction == 0:
        raise ConfigError("--epochs-intermediate and --epochs-prediction are both 0: no stage would train")


def _distill(args) -> int:
    _check(args)
    import json

    from ..runners.distill import DistillRunConfig, run_distill

    set_threads(args)
    tc = train_config(args)  # --epochs: general distillation's; the task stages have their own
    cfg = DistillRunConfig(teacher=args.teacher, out=args.out, student_config=args.student_config, corpus=args.corpus,
                        task=args.task, train_file=args.train, dev=args.dev, max_length=args.max_length,
                        layer_map=_layer_map(args.layer_map), projection=args.projection,
                        temperature=args.temperature, epochs_intermediate=args.epochs_intermediate,
                        epochs_prediction=args.epochs_prediction, mask_rate=args.mask_rate,
                        augment_mlm=args.augment_mlm, augment_n=args.augment_n, augment_p=args.augment_p,
                        augment_top_k=args.augment_top_k, max_train=args.max_train, max_dev=args.max_dev, train=tc)
    s = run_distill(cfg)
    if "written" in s:  # the main process (under torchrun every rank ends here)
        print(json.dumps({k: v for k, v in s.items() if k not in ("final_eval", "written")}, ensure_ascii=False,
                         default=float))
        print(f"wrote {s['written']}")
    return 0
