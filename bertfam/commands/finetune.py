"""Fine-tuning commands: finetune, evaluate, predict, glue, embed (the jobs: runners.finetune, runners.embed)."""
from __future__ import annotations

import dataclasses
import json

from .common import (CHECKPOINT_FLAGS, OPTIMIZATION_FLAGS, PRECISIONS, add_threads_arg, check_checkpoints,
                     float_range, int_range, non_negative_float, non_negative_int, open_fraction, positive_float,
                     positive_int, set_threads)
from .flags import Flag, Flags

INT8_HELP = "run the model in int8 (quantized weights and activations; an int8 checkpoint needs no flag)"
TASK_HELP = ("sst2, cola, mrpc, stsb, qqp, mnli, mnli-mm, qnli, rte, wnli, tnews, iflytek, afqmc, ocnli, cmnli, "
             "csl, cluewsc, eprstmt, bustm, csldcp, cluener, msra, peoples_daily, resume, medical_ner, ner, "
             "chnsenticorp, book_review, shopping, or custom")


def _train_args(p) -> None:
    """finetune's and glue's training options: the FinetuneOptions fields of their run configs (the trainer's:
    its defaults)."""
    p.fields(OPTIMIZATION_FLAGS)
    p.fields({
        # 4: the builder's minimum
        "max_length": Flag(int_range(4), "tokens per example; more than the model's positions is an error (as in "
                                         "pretrain)"),
        "train.weight_decay": Flag(non_negative_float),
        "train.layerwise_lr_decay": Flag(float_range(0, 1, lo_open=True), "e.g. 0.95 (lower layers learn slower)"),
        "train.head_lr": Flag(positive_float, "peak lr of the pooler and the new head (default: --lr); e.g. 1e-3 "
                                              "for a head on e5", metavar="LR"),
        "train.early_stopping_patience": Flag(positive_int, "stop after N evaluations without dev improvement",
                                              name="--early-stopping", metavar="N"),
        "train.eval_every": Flag(non_negative_int, "optimizer steps between dev evaluations (0: per epoch)"),
        "train.log_every": Flag(positive_int, "optimizer steps between loss lines (metrics.jsonl, and the console "
                                              "without a terminal)"),
        "train.group_by_length": Flag(help="plain shuffled batches", name="--no-group-by-length"),
        "max_train": Flag(positive_int, "random subset of this many training examples"),
        "max_eval": Flag(positive_int, "random subset of this many dev examples (default: all of --dev; a split "
                                       "carved from a --max-train subset is --dev-ratio of it)"),
        "overwrite_output_dir": Flag(help="replace the run in a non-empty --out (without it, or --resume, such an "
                                          "--out is refused)"),
        "dev_ratio": Flag(open_fraction, "dev split carved from train when no --dev"),
        "train.precision": Flag(choices=PRECISIONS),
        "freeze_word_embeddings": Flag(help="do not train the word-embedding matrix (fast with huge multilingual "
                                            "vocabularies)"),
        "freeze_layers": Flag(non_negative_int, "do not train the embeddings and the first N encoder layers "
                                                "(default 0: train all)", metavar="N"),
        "classifier_pooling": Flag(help="what the classification head reads (default: the base model's own; mean: "
                                        "the token mean, for encoders trained with mean-pooled embeddings such as "
                                        "e5)", choices=("pooler", "cls_dense", "mean")),
        "train.progress": Flag(name="--no-progress"),
    })
    add_threads_arg(p)
    p.add_argument_group("checkpoints").fields(CHECKPOINT_FLAGS)


def register(sub) -> None:
    from ..runners.finetune import EvaluateConfig, FinetuneRunConfig, GlueRunConfig, PredictConfig, custom_kinds

    p = Flags(sub.add_parser("finetune", help="fine-tune a model on a GLUE/CLUE/NER/custom task"), FinetuneRunConfig)
    p.fields({"task": Flag(help=TASK_HELP),
              "model": Flag(help="model directory (bertfam or Hugging Face)"),
              "train_file": Flag(name="--train"),
              "dev": Flag(help="dev file (default: carve --dev-ratio of train)"),
              "out": Flag()})
    # comma-separated on the command line, a list in the config: the command splits it (_run_config)
    p.add_argument("--kg", default=None, help="K-BERT knowledge graph file(s), comma-separated .spo")
    p.fields({"resume": Flag(help="continue from the latest checkpoint in --out")})
    g = p.add_argument_group("custom task (--task custom)")
    g.add_argument("--format", choices=["tsv", "jsonl"], default="tsv")
    g.add_argument("--kind", choices=custom_kinds(), default=None,
                   help="default: pair with two text columns, else single")
    g.add_argument("--text-cols", default=None, help="text column name(s) or 0-based numbers, comma-separated")
    g.add_argument("--label-col", default=None)
    g.add_argument("--labels", default=None, help="comma-separated label list (default: those in train)")
    g.add_argument("--no-header", action="store_true", help="the TSV has no header (columns by number)")
    _train_args(p)
    p.command(_finetune)

    p = sub.add_parser("evaluate", help="score a fine-tuned model on a labelled file")
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--task", default=None, help="default: the task the model was fine-tuned on")
    p.add_argument("--out", default=None, help="write eval_results.json and predictions here")
    p.add_argument("--kg", default=None)
    p.add_argument("--batch-size", type=positive_int, default=EvaluateConfig.batch_size)
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="default: the length the model was fine-tuned with; more than the model's positions is "
                        "clamped to them with a warning (as in embed)")
    p.add_argument("--int8", action="store_true", help=INT8_HELP)
    p.set_defaults(func=_evaluate)

    p = sub.add_parser("predict", help="predict a file; GLUE tasks write the submission TASK.tsv")
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--task", default=None)
    p.add_argument("--kg", default=None)
    p.add_argument("--batch-size", type=positive_int, default=PredictConfig.batch_size)
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="default: the length the model was fine-tuned with; more than the model's positions is "
                        "clamped to them with a warning (as in embed)")
    p.add_argument("--int8", action="store_true", help=INT8_HELP)
    p.set_defaults(func=_predict)

    p = Flags(sub.add_parser("glue", help="fine-tune + evaluate every GLUE task found in a directory"), GlueRunConfig)
    p.fields({"model": Flag(), "data": Flag(help="GLUE directory (CoLA/, SST-2/, MRPC/, ...)"), "out": Flag()})
    p.add_argument("--tasks", default=None, help="comma-separated subset")  # a list in the config, as --kg
    _train_args(p)
    p.command(_glue)

    p = sub.add_parser("embed", help="token and sentence vectors (CLS, mean; chosen layers) to .npy / JSONL")
    p.add_argument("--model", required=True)
    p.add_argument("--input", required=True,
                   help="text file, one input per line ('a ||| b' for a pair). Row i of the outputs is line i: a "
                        "blank line gives the empty text's vectors ([CLS] [SEP]), a line that is not UTF-8 a row "
                        "of NaN (each reported as FILE:LINE)")
    p.add_argument("--out", required=True, help="output prefix: PREFIX.cls.npy, PREFIX.mean.npy, PREFIX.jsonl")
    p.add_argument("--layers", default="-1",
                   help="comma-separated layer indices, 0 = embeddings, -1 = last (write --layers=-1,-2)")
    p.add_argument("--pooling", default="cls,mean", help="cls and/or mean")
    p.add_argument("--tokens", action="store_true", help="also write per-token vectors to PREFIX.jsonl")
    p.add_argument("--max-length", type=positive_int, default=128,
                   help="more than the model's positions is clamped to them with a warning")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--int8", action="store_true", help=INT8_HELP)
    p.set_defaults(func=_embed)


def _csv(s):
    return [x.strip() for x in s.split(",") if x.strip()] if s else None


def _run_config(args, cfg):
    """The finetune run config with what its options give as text: the K-BERT graphs, a custom task's columns
    and labels (the custom-task options are read with --task custom only)."""
    from ..config import CustomTaskSettings
    from ..errors import ConfigError

    cfg = dataclasses.replace(cfg, kg=_csv(args.kg))
    if cfg.task != "custom":
        for flag in ("text_cols", "label_col"):
            if getattr(args, flag):
                raise ConfigError(f"--{flag.replace('_', '-')} is for --task custom")
        return cfg
    cols = _csv(args.text_cols)
    if not cols and args.kind != "token":  # said in the options' words (the reader's own check says it too)
        raise ConfigError("--task custom needs --text-cols (and --label-col)")
    custom = CustomTaskSettings(format=args.format, text_cols=cols or [], label_col=args.label_col,
                                header=not args.no_header)
    return dataclasses.replace(cfg, kind=args.kind, custom=custom, labels=_csv(args.labels))


def _print_result(r: dict) -> None:
    print(json.dumps({k: v for k, v in r.items() if k not in ("history", "written")}, indent=2, ensure_ascii=False))


def _finetune(args, cfg) -> int:
    from ..runners.finetune import run_finetune

    check_checkpoints(args)
    set_threads(args)
    r = run_finetune(_run_config(args, cfg))
    if "written" in r:  # the main process (under torchrun every rank gets here with the same result)
        _print_result(r)
        # bertfam's one convention: metrics x 100 (0-100), as the GLUE/CLUE leaderboards print them; said so
        print(f"{r['task']}: dev {r['metric']} = {r['value']:.2f} on a 0-100 scale ({r['n_dev']} examples); "
              f"model in {cfg.out}")
        print(r["written"])
    return 0


def _evaluate(args) -> int:
    from ..runners.finetune import EvaluateConfig, run_evaluate

    _print_result(run_evaluate(EvaluateConfig(model=args.model, data=args.data, task=args.task, out=args.out,
                                              kg=_csv(args.kg), max_length=args.max_length,
                                              batch_size=args.batch_size, int8=args.int8)))
    return 0


def _predict(args) -> int:
    from ..runners.finetune import PredictConfig, run_predict

    path = run_predict(PredictConfig(model=args.model, data=args.data, out=args.out, task=args.task, kg=_csv(args.kg),
                                     max_length=args.max_length, batch_size=args.batch_size, int8=args.int8))
    print(f"wrote {path}")
    return 0


def _glue(args, cfg) -> int:
    from ..runners.finetune import run_glue

    check_checkpoints(args)
    set_threads(args)
    table = run_glue(dataclasses.replace(cfg, tasks=_csv(args.tasks)))
    if table is not None:  # None on the other torchrun ranks
        print(table)
    return 0


def _embed(args) -> int:
    from ..errors import ConfigError
    from ..runners.embed import EmbedConfig, run_embed

    try:
        layers = [int(x) for x in _csv(args.layers) or []]
    except ValueError:
        raise ConfigError(f"--layers: expected comma-separated integers, got {args.layers!r}") from None
    for path in run_embed(EmbedConfig(model=args.model, input=args.input, out=args.out, layers=layers,
                                      pooling=_csv(args.pooling), tokens=args.tokens, max_length=args.max_length,
                                      batch_size=args.batch_size, int8=args.int8)):
        print(f"wrote {path}")
    return 0
