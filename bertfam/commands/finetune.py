"""Fine-tuning commands: finetune, evaluate, predict, glue, embed (the jobs: runners.finetune, runners.embed)."""
from __future__ import annotations

import json

from .common import (add_checkpoint_args, add_optimization_args, add_run_config, add_threads_arg, float_range,
                     int_range, non_negative_float, non_negative_int, open_fraction, positive_float, positive_int,
                     set_threads,
                     train_config)

INT8_HELP = "run the model in int8 (quantized weights and activations; an int8 checkpoint needs no flag)"
TASK_HELP = ("sst2, cola, mrpc, stsb, qqp, mnli, mnli-mm, qnli, rte, wnli, tnews, iflytek, afqmc, ocnli, cmnli, "
             "csl, cluewsc, eprstmt, bustm, csldcp, cluener, msra, peoples_daily, resume, medical_ner, ner, "
             "chnsenticorp, book_review, shopping, or custom")


def _train_args(p) -> None:
    add_optimization_args(p, epochs=3, batch_size=32, lr=5e-5)
    from ..config import FinetuneSettings

    p.add_argument("--max-length", type=int_range(4), default=FinetuneSettings.max_length,  # 4: the builder's minimum
                   help="tokens per example; more than the model's positions is an error (as in pretrain)")
    p.add_argument("--weight-decay", type=non_negative_float, default=0.01)
    p.add_argument("--layerwise-lr-decay", type=float_range(0, 1, lo_open=True), default=None,
                   help="e.g. 0.95 (lower layers learn slower)")
    p.add_argument("--head-lr", type=positive_float, default=None, metavar="LR",
                   help="peak lr of the pooler and the new head (default: --lr); e.g. 1e-3 for a head on e5")
    p.add_argument("--early-stopping", dest="early_stopping_patience", type=positive_int, default=None, metavar="N",
                   help="stop after N evaluations without dev improvement")
    p.add_argument("--eval-every", type=non_negative_int, default=0,
                   help="optimizer steps between dev evaluations (0: per epoch)")
    p.add_argument("--log-every", type=positive_int, default=10,
                   help="optimizer steps between loss lines (metrics.jsonl, and the console without a terminal)")
    p.add_argument("--no-group-by-length", dest="group_by_length", action="store_false", help="plain shuffled batches")
    p.add_argument("--max-train", type=positive_int, default=None, help="random subset of this many training examples")
    p.add_argument("--max-eval", type=positive_int, default=None,
                   help="random subset of this many dev examples (default: all of --dev; a split carved from a "
                        "--max-train subset is --dev-ratio of it)")
    p.add_argument("--overwrite-output-dir", action="store_true",
                   help="replace the run in a non-empty --out (without it, or --resume, such an --out is refused)")
    p.add_argument("--dev-ratio", type=open_fraction, default=0.1, help="dev split carved from train when no --dev")
    p.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"])
    p.add_argument("--freeze-word-embeddings", action="store_true",
                   help="do not train the word-embedding matrix (fast with huge multilingual vocabularies)")
    p.add_argument("--freeze-layers", type=non_negative_int, default=0, metavar="N",
                   help="do not train the embeddings and the first N encoder layers (default 0: train all)")
    p.add_argument("--classifier-pooling", default=None, choices=["pooler", "cls_dense", "mean"],
                   help="what the classification head reads (default: the base model's own; mean: the token "
                        "mean, for encoders trained with mean-pooled embeddings such as e5)")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    add_threads_arg(p)
    add_checkpoint_args(p)


def register(sub) -> None:
    p = sub.add_parser("finetune", help="fine-tune a model on a GLUE/CLUE/NER/custom task")
    p.add_argument("--task", required=True, help=TASK_HELP)
    p.add_argument("--model", required=True, help="model directory (bertfam or Hugging Face)")
    p.add_argument("--train", required=True)
    p.add_argument("--dev", default=None, help="dev file (default: carve --dev-ratio of train)")
    p.add_argument("--out", required=True)
    p.add_argument("--kg", default=None, help="K-BERT knowledge graph file(s), comma-separated .spo")
    p.add_argument("--resume", action="store_true", help="continue from the latest checkpoint in --out")
    g = p.add_argument_group("custom task (--task custom)")
    g.add_argument("--format", choices=["tsv", "jsonl"], default="tsv")
    g.add_argument("--kind", choices=["single", "pair", "regression", "token"], default=None,
                   help="default: pair with two text columns, else single")
    g.add_argument("--text-cols", default=None, help="text column name(s) or 0-based numbers, comma-separated")
    g.add_argument("--label-col", default=None)
    g.add_argument("--labels", default=None, help="comma-separated label list (default: those in train)")
    g.add_argument("--no-header", action="store_true", help="the TSV has no header (columns by number)")
    _train_args(p)
    p.set_defaults(func=add_run_config(p, _finetune))

    p = sub.add_parser("evaluate", help="score a fine-tuned model on a labelled file")
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--task", default=None, help="default: the task the model was fine-tuned on")
    p.add_argument("--out", default=None, help="write eval_results.json and predictions here")
    p.add_argument("--kg", default=None)
    p.add_argument("--batch-size", type=positive_int, default=64)
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
    p.add_argument("--batch-size", type=positive_int, default=64)
    p.add_argument("--max-length", type=positive_int, default=None,
                   help="default: the length the model was fine-tuned with; more than the model's positions is "
                        "clamped to them with a warning (as in embed)")
    p.add_argument("--int8", action="store_true", help=INT8_HELP)
    p.set_defaults(func=_predict)

    p = sub.add_parser("glue", help="fine-tune + evaluate every GLUE task found in a directory")
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="GLUE directory (CoLA/, SST-2/, MRPC/, ...)")
    p.add_argument("--out", required=True)
    p.add_argument("--tasks", default=None, help="comma-separated subset")
    _train_args(p)
    p.set_defaults(func=add_run_config(p, _glue))

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


def _options(args):
    """FinetuneOptions of the command's options: the trainer's (TrainConfig fields, see _train_args) in `train`."""
    from ..runners.finetune import FinetuneOptions

    return FinetuneOptions(max_length=args.max_length, dev_ratio=args.dev_ratio, max_train=args.max_train,
                           max_eval=args.max_eval, overwrite_output_dir=args.overwrite_output_dir,
                           freeze_word_embeddings=args.freeze_word_embeddings,
                           freeze_layers=args.freeze_layers, classifier_pooling=args.classifier_pooling,
                           kg=_csv(getattr(args, "kg", None)),
                           resume=getattr(args, "resume", False),
                           train=train_config(args, FinetuneOptions.default_train()))


def _task(args):
    from ..config import CustomTaskSettings
    from ..errors import ConfigError
    from ..runners.finetune import custom_spec

    if args.task != "custom":
        for flag in ("text_cols", "label_col"):
            if getattr(args, flag):
                raise ConfigError(f"--{flag.replace('_', '-')} is for --task custom")
        return args.task
    cols = _csv(args.text_cols)
    if not cols and args.kind != "token":
        raise ConfigError("--task custom needs --text-cols (and --label-col)")
    kind = args.kind or ("pair" if cols and len(cols) == 2 else "single")
    return custom_spec(kind, CustomTaskSettings(format=args.format, text_cols=cols or [], label_col=args.label_col,
                                                header=not args.no_header), _csv(args.labels))


def _print_result(r: dict) -> None:
    print(json.dumps({k: v for k, v in r.items() if k not in ("history", "written")}, indent=2, ensure_ascii=False))


def _finetune(args) -> int:
    from ..runners.finetune import finetune

    set_threads(args)
    r = finetune(_task(args), args.model, args.train, args.dev, args.out, _options(args))
    if "written" in r:  # the main process (under torchrun every rank gets here with the same result)
        _print_result(r)
        # bertfam's one convention: metrics x 100 (0-100), as the GLUE/CLUE leaderboards print them; said so
        print(f"{r['task']}: dev {r['metric']} = {r['value']:.2f} on a 0-100 scale ({r['n_dev']} examples); "
              f"model in {args.out}")
        print(r["written"])
    return 0


def _evaluate(args) -> int:
    from ..runners.finetune import evaluate

    r = evaluate(args.model, args.data, args.task, args.out, _csv(args.kg), max_length=args.max_length,
                 batch_size=args.batch_size, int8=args.int8)
    _print_result(r)
    return 0


def _predict(args) -> int:
    from ..runners.finetune import predict

    path = predict(args.model, args.data, args.out, args.task, _csv(args.kg), max_length=args.max_length,
                   batch_size=args.batch_size, int8=args.int8)
    print(f"wrote {path}")
    return 0


def _glue(args) -> int:
    from ..runners.finetune import run_glue

    set_threads(args)
    table = run_glue(args.model, args.data, args.out, _options(args), tasks=_csv(args.tasks))
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
