"""Stages 1-5 of the Chinese MRC model: tune a trained MRC model's no-answer thresholds and score it on the held-out splits, per type.

Thresholds are tuned (official-metric F1) on the stage-1 dev split (held-out CMRC2018 / DuReader-robust
passages, ~45 % unanswerable by construction) plus, with --checklist-tune, the DuReader-checklist tuning
half; scores are then reported on: dev by source x answerable/unanswerable, the checklist held-out half
(never trained or tuned on) and all 100 checklist questions, each next to the always-"no answer" baseline.
With --save DIR the model is written there with the thresholds and the checklist qids it saw
(training_info.json demo_seen_qids, so `bertfam demo` scores the held-out half apart).

Usage: python recipes/mrc_split_eval.py MODEL_DIR --dev RUN/data4/dev.json --checklist-dir RUN/data5
       [--checklist-tune | --no-tune] [--seen-qids] [--save OUT_DIR] [--json OUT.json]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import bertfam  # noqa: E402
from bertfam.data.mrc import read_mrc  # noqa: E402
from bertfam.evaluation.dureader import NO_ANSWER, Reference, evaluate  # noqa: E402
from bertfam.tasks.mrc import (MRCPredictor, predict_examples, save_thresholds, settings_of,  # noqa: E402
                               tune_thresholds)


def scores(examples, preds) -> dict:
    refs = OrderedDict((ex.qid, Reference(ex.answer_texts, ex.is_impossible, ex.qtype)) for ex in examples)
    m = evaluate(refs, {q: preds[q] for q in refs})
    b = evaluate(refs, {q: NO_ANSWER for q in refs})
    answered = sum(preds[q] != NO_ANSWER for q in refs)
    return {"n": len(refs), "F1": float(m["F1"]), "EM": float(m["EM"]), "baseline_F1": float(b["F1"]),
            "answered": answered}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--dev", required=True)
    ap.add_argument("--checklist-dir", required=True, help="output of recipes/checklist_tuning_mix.py")
    ap.add_argument("--checklist-tune", action="store_true", help="tune thresholds on dev + the checklist tuning half")
    ap.add_argument("--seen-qids", action="store_true", help="record the tuning half as seen (demo_seen_qids)")
    ap.add_argument("--no-tune", action="store_true", help="score with the model's saved thresholds")
    ap.add_argument("--save")
    ap.add_argument("--json")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-length", type=int, help="window tokens (default: the model's training setting)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    model = bertfam.from_pretrained(a.model)
    windows = {"max_length": a.max_length} if a.max_length is not None else {}  # else the model's own setting
    pred = MRCPredictor(model, settings_of(model, **windows))
    dev, _ = read_mrc(a.dev, mode="train")
    tune_ck, _ = read_mrc(os.path.join(a.checklist_dir, "checklist_tune.json"), mode="train")
    held_ck, _ = read_mrc(os.path.join(a.checklist_dir, "checklist_heldout.json"), mode="train")
    if a.no_tune:
        tuned = {"null_threshold": pred.settings.null_threshold,
                 "answerable_threshold": pred.settings.answerable_threshold}
    else:
        tuned = tune_thresholds(pred, dev + (tune_ck if a.checklist_tune else []))
        pred.settings = dataclasses.replace(pred.settings, null_threshold=tuned["null_threshold"],
                                            answerable_threshold=tuned["answerable_threshold"])
    everything = dev + tune_ck + held_ck
    preds, _, qps = predict_examples(pred, everything)
    out = {"model": a.model, "max_length": pred.settings.max_length, "thresholds": tuned, "questions_per_s": qps, "splits": {}}
    for src in ("cmrc2018", "robust"):
        part = [ex for ex in dev if ex.qid.startswith("TRAIN_") == (src == "cmrc2018")]
        for kind, imp in (("answerable", False), ("unanswerable", True)):
            out["splits"][f"dev {src} {kind}"] = scores([ex for ex in part if ex.is_impossible == imp], preds)
        out["splits"][f"dev {src}"] = scores(part, preds)
    out["splits"]["dev all"] = scores(dev, preds)
    out["splits"]["checklist held-out half"] = scores(held_ck, preds)
    out["splits"]["checklist tuning half"] = scores(tune_ck, preds)
    out["splits"]["checklist all 100"] = scores(tune_ck + held_ck, preds)
    print(f"{a.model}: windows of {pred.settings.max_length} tokens; thresholds null {tuned['null_threshold']:.3f}, "
          f"P(answerable) {tuned['answerable_threshold']}; tuning-set F1 {tuned.get('dev_f1', float('nan')):.2f}")
    print(f"{'split':34s} {'n':>4s} {'F1':>6s} {'EM':>6s} {'base F1':>8s} {'answered':>8s}")
    for name, r in out["splits"].items():
        print(f"{name:34s} {r['n']:4d} {r['F1']:6.1f} {r['EM']:6.1f} {r['baseline_F1']:8.1f} {r['answered']:8d}")
    if a.json:
        with open(a.json, "w", encoding="utf-8") as f:
            json.dump(out, f, indent=1)
    if a.save:
        head = model.config.head
        head.mrc = dataclasses.replace(head.mrc_settings, max_length=pred.settings.max_length)
        if a.seen_qids:  # training_info.json
            head.info = dict(head.info, demo_seen_qids=sorted(ex.qid for ex in tune_ck))
        model.save_pretrained(a.save)
        save_thresholds(model, a.save, tuned, "stage-1 dev split" + (" + DuReader-checklist tuning half"
                                                                      if a.checklist_tune else ""))


if __name__ == "__main__":
    main()
