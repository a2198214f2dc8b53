"""Tune a Chinese MRC model's decoding on the checklist-like dev set and score it on that dev set and on the
DuReader-checklist demo (held out: never trained or tuned on), per answerability, next to always "no answer".

Tuned on dev only (official DuReader F1, EM breaks ties): the longest answer (tokens, --lengths), the
answer extension (none / clause / sentence, --extensions), the no-answer rule (span null score, the
answerability classifier, both, and with --verifier the verifier alone or all three) and its thresholds.
One forward pass per set; every setting is decoded from it.

Usage: python recipes/mrc_checklist_eval.py MODEL_DIR [MODEL_DIR ...] --dev runs/mrc-data/dev_checklist_like.json
       [--demo ../shared/data/mrc/dureader_checklist/demo.json] [--save OUT_DIR] [--json OUT.json]
       [--max-length 384] [--lengths 32,48,64,96,128] [--extensions none,clause,sentence]
       [--rules both,null,cls,verifier,all] [--verifier VERIFIER_DIR] [--no-tune] [--tune-demo-half]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from collections import OrderedDict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from bertfam.data.mrc import read_mrc  # noqa: E402
from bertfam.evaluation.dureader import NO_ANSWER, Reference, evaluate  # noqa: E402
from bertfam.tasks.mrc import answered, decode, load_predictor, save_thresholds, tune_on_raw  # noqa: E402
from bertfam.tasks.mrc.crossval import items_of  # noqa: E402

DEMO = os.path.join(ROOT, "..", "shared", "data", "mrc", "dureader_checklist", "demo.json")
# the 50 demo questions the stage-5 model was trained on (split by passage, seed 0: checklist_tuning_mix.py)
TUNING_HALF = os.path.join(ROOT, "recipes", "checklist_demo_tuning_half.txt")


def answers(raws, tn: float, ta: float, tv: float = -1.0) -> list[str]:
    """Each question's answer text (or NO_ANSWER) under the predictor's own no-answer rule."""
    return [r.best.text if answered(r, tn, ta, tv) else NO_ANSWER for r in raws]


def signal_aucs(exs, raws) -> dict:
    """ROC AUC of each answerability signal (answerable = positive): how well it ranks, apart from thresholds."""
    from sklearn.metrics import roc_auc_score

    y = [not e.is_impossible for e in exs]
    if len(set(y)) < 2:
        return {}
    out = {"null_diff": [r.null_diff if r.nbest else -1e9 for r in raws],
           "p_answerable": [r.p_answerable for r in raws], "relevance": [r.relevance for r in raws]}
    return {k: round(float(roc_auc_score(y, v)), 3) for k, v in out.items() if None not in v}


def decoded(ws, exs, rel, pred, length: int, extension: str) -> list:
    """decode() of each question's windows (RawScores), with the verifier's relevance (rel: None per example
    without one)."""
    raws = [decode(w, e.context, pred.settings.n_best, length, extension) for w, e in zip(ws, exs)]
    return [dataclasses.replace(r, relevance=float(v) if v is not None else None) for r, v in zip(raws, rel)]


def score(examples, preds: list[str]) -> dict:
    """Official F1/EM overall and per answerability, the always-"no answer" baseline, answered counts."""
    res = {}
    groups = {"all": examples, "answerable": [e for e in examples if not e.is_impossible],
              "unanswerable": [e for e in examples if e.is_impossible]}
    by_qid = {e.qid: p for e, p in zip(examples, preds)}
    for name, exs in groups.items():
        if not exs:
            continue
        refs = OrderedDict((e.qid, Reference(e.answer_texts, e.is_impossible, e.qtype)) for e in exs)
        m = evaluate(refs, {q: by_qid[q] for q in refs})
        b = evaluate(refs, {q: NO_ANSWER for q in refs})
        res[name] = {"n": len(exs), "F1": round(float(m["F1"]), 2), "EM": round(float(m["EM"]), 2),
                     "baseline_F1": round(float(b["F1"]), 2), "answered": sum(by_qid[q] != NO_ANSWER for q in refs)}
    lens = [len(by_qid[e.qid]) for e in examples if by_qid[e.qid] != NO_ANSWER]
    res["mean_answer_chars"] = round(sum(lens) / len(lens), 1) if lens else None
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--dev", required=True)
    ap.add_argument("--demo", default=DEMO)
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--doc-stride", type=int, default=None)
    ap.add_argument("--lengths", default="32,48,64,96,128", help="max answer lengths (tokens) tried on dev")
    ap.add_argument("--extensions", default="none,clause,sentence", help="answer extensions tried on dev")
    ap.add_argument("--rules", default="both,null,cls,verifier,all",
                    help="no-answer rules tried on dev (verifier, all: need a verifier)")
    ap.add_argument("--verifier", default=None,
                    help="a question-passage verifier directory (tasks/mrc/verifier.py); --save copies it in")
    ap.add_argument("--no-tune", action="store_true", help="score with the model's saved settings")
    ap.add_argument("--tune-demo-half", action="store_true",
                    help=f"tune on dev + the demo questions listed in {os.path.basename(TUNING_HALF)}; score the "
                         "demo's other half as held out")
    ap.add_argument("--save", default=None, help="write the (single) model with the tuned settings here")
    ap.add_argument("--json", default=None)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    windows = {k: getattr(args, k) for k in ("max_length", "doc_stride") if getattr(args, k) is not None}
    pred = load_predictor(args.models, overrides=windows,  # the others: the model's own settings
                          verifier=args.verifier)  # None: the model's own verifier, if it has one
    sets = {}  # name -> (examples, window scores, relevance or None per example)
    for name, path in (("dev", args.dev), ("demo", args.demo)):
        exs, rep = read_mrc(path, source=name)
        print(rep.summary(), file=sys.stderr)
        rel = pred.relevance(items_of(exs))
        sets[name] = (exs, pred.window_scores(items_of(exs)), [None] * len(exs) if rel is None else list(rel))
    s = pred.settings
    report = {"models": args.models, "max_length": s.max_length,
              "verifier": args.verifier or (pred.models[0].config.head.mrc_settings.verifier
                                            if pred.verifier is not None else None), "settings": []}
    if args.tune_demo_half:
        # the demo's tuning half joins dev for tuning; its other half is the held-out set
        half = set(open(TUNING_HALF, encoding="utf-8").read().split())
        exs, ws, rel = sets.pop("demo")
        for name, keep in (("demo_tuning_half", True), ("demo_held_out_half", False)):
            idx = [i for i, e in enumerate(exs) if (e.qid in half) == keep]
            sets[name] = ([exs[i] for i in idx], [ws[i] for i in idx], [rel[i] for i in idx])
        sets["dev+demo_tuning_half"] = tuple(a + b for a, b in zip(sets["dev"], sets["demo_tuning_half"]))
    dev_ex, dev_ws, dev_rel = sets["dev+demo_tuning_half" if args.tune_demo_half else "dev"]
    if args.no_tune:
        chosen = {"max_answer_length": s.max_answer_length, "answer_extension": s.answer_extension,
                  "rule": "saved", "null_threshold": s.null_threshold,
                  "answerable_threshold": s.answerable_threshold, "verifier_threshold": s.verifier_threshold}
    else:
        rules = [r for r in args.rules.split(",")
                 if (r not in ("both", "cls", "all") or pred.has_answerability)
                 and (r not in ("verifier", "all") or pred.verifier is not None)]
        best = None
        for ext in args.extensions.split(","):
            for L in (int(x) for x in args.lengths.split(",")):
                raws = decoded(dev_ws, dev_ex, dev_rel, pred, L, ext)
                forced = score(dev_ex, [r.best.text if r.nbest else NO_ANSWER for r in raws])
                for rule in rules:
                    t = tune_on_raw(raws, dev_ex, s.null_threshold, s.answerable_threshold,
                                    pred.has_answerability, rule=rule)
                    row = {"max_answer_length": L, "answer_extension": ext, "rule": rule,
                           "null_threshold": t["null_threshold"], "answerable_threshold": t["answerable_threshold"],
                           "verifier_threshold": t["verifier_threshold"], "dev_f1": round(t["dev_f1"], 2),
                           "dev_em": round(t["dev_em"], 2), "dev_forced_answerable_f1": forced["answerable"]["F1"]}
                    report["settings"].append(row)
                    print(json.dumps(row), file=sys.stderr)
                    if best is None or (row["dev_f1"], row["dev_em"]) > (best["dev_f1"], best["dev_em"]):
                        best = row
        chosen = best
    report["chosen"] = chosen
    rule = (chosen["null_threshold"], chosen["answerable_threshold"], chosen["verifier_threshold"])
    for name, (exs, ws, rel) in sets.items():
        raws = decoded(ws, exs, rel, pred, chosen["max_answer_length"], chosen["answer_extension"])
        report[name] = score(exs, answers(raws, *rule))
        report[name]["auc"] = signal_aucs(exs, raws)
        report[name]["forced_answerable"] = score(
            [e for e in exs if not e.is_impossible],
            [r.best.text if r.nbest else NO_ANSWER for r, e in zip(raws, exs) if not e.is_impossible]
        )["all"]
    # a model continued from one that saw half of the demo (training_info.json demo_seen_qids) is scored on
    # the other half apart: only that half is held out for it
    seen = set(pred.models[0].config.head.info.get("demo_seen_qids", []))
    if seen and "demo" in sets:
        exs, ws, rel = sets["demo"]
        keep = [i for i, e in enumerate(exs) if e.qid not in seen]
        sub = [exs[i] for i in keep]
        raws = decoded([ws[i] for i in keep], sub, [rel[i] for i in keep], pred, chosen["max_answer_length"],
                       chosen["answer_extension"])
        report["demo_unseen_half"] = score(sub, answers(raws, *rule))
    print(json.dumps({k: v for k, v in report.items() if k != "settings"}, ensure_ascii=False, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, ensure_ascii=False, indent=1)
    if args.save:
        if len(args.models) != 1:
            print("--save takes one model", file=sys.stderr)
            return 2
        if os.path.abspath(args.save) != os.path.abspath(args.models[0]):
            shutil.copytree(args.models[0], args.save, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("checkpoints", "best", "*.jsonl"))
        uses = chosen["rule"] in ("verifier", "all")
        verifier = pred.models[0].config.head.mrc_settings.verifier if uses else None
        if args.verifier and uses:  # the verifier tuned with goes inside the model directory, as "verifier"
            verifier = "verifier"
            dst = os.path.join(args.save, verifier)
            if os.path.abspath(dst) != os.path.abspath(args.verifier):
                shutil.rmtree(dst, ignore_errors=True)
                shutil.copytree(args.verifier, dst)
        m = pred.models[0]
        if args.tune_demo_half:  # `bertfam demo` then scores the held-out half apart
            seen = sorted(set(m.config.head.info.get("demo_seen_qids", [])) | half)
            m.config.head.info = dict(m.config.head.info, demo_seen_qids=seen)  # into training_info.json
        save_thresholds(m, args.save, {"null_threshold": chosen["null_threshold"],
                                       "answerable_threshold": chosen["answerable_threshold"],
                                       "dev_f1": report["dev"]["all"]["F1"],
                                       "max_answer_length": chosen["max_answer_length"],
                                       "answer_extension": chosen["answer_extension"],
                                       "verifier": verifier,
                                       "verifier_threshold": chosen["verifier_threshold"]},
                        tuned_on=os.path.basename(args.dev) + (" + checklist demo tuning half"
                                                               if args.tune_demo_half else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
