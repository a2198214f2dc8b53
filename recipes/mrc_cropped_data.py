"""Training / dev files of stages 1-4 of the Chinese MRC model, from ../shared/data/mrc.

CPU time, not data, is the limit here, so every training window should teach something:
- passages are cropped to at most --crop characters around the answer (a random offset, so the answer is
  not always in the middle): one window per question instead of several mostly answer-less ones;
- unanswerable questions: DuReader-checklist's demo is the demo's TEST set and is not used at all, and
  CMRC2018 / DuReader-robust have no unanswerable questions, so --neg-fraction of the questions are paired
  with another passage of the same source that does not contain the answer, picked as the most similar
  to the question (character-bigram overlap) among 30 random candidates (a "hard-ish" negative);
- dev (threshold tuning): whole passages held out per source, same construction.

Usage: python recipes/mrc_cropped_data.py --out runs/mrc-zh-e5small/data [--cmrc 900] [--seed 8]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bertfam.data.mrc import MRCAnswer, read_mrc, split_examples, write_squad  # noqa: E402

D = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "mrc")
SOURCES = {"cmrc2018": ["cmrc2018/cmrc2018_train.json"],
           "robust": ["dureader_robust/demo_train.json", "dureader_robust/demo_dev.json", "dureader_robust/dev.json"]}


def crop(ex, width: int, rng: random.Random):
    """The example with its context cut to <= width characters around the first answer."""
    if len(ex.context) <= width:
        return ex
    a = ex.answers[0] if ex.answers else None
    if a is None or a.start < 0 or len(a.text) >= width:
        lo = rng.randrange(0, len(ex.context) - width + 1)
    else:
        first = max(0, a.end - width)
        last = min(a.start, len(ex.context) - width)
        lo = rng.randint(first, max(first, last))
    ctx = ex.context[lo:lo + width]
    answers = [MRCAnswer(x.text, x.start - lo) for x in ex.answers if x.start >= lo and x.end <= lo + width]
    return dataclasses.replace(ex, context=ctx, answers=answers or ex.answers[:0])


def bigrams(s: str) -> set:
    return {s[i:i + 2] for i in range(len(s) - 1)}


def negative(ex, pool: list, rng: random.Random, width: int):
    """The question paired with the most question-like passage (of 30 random ones) lacking its answers."""
    qb = bigrams(ex.question)
    cands = [p for p in rng.sample(pool, min(30, len(pool)))
             if p.context != ex.context and not any(a.text and a.text in p.context for a in ex.answers)]
    if not cands:
        return None
    best = max(cands, key=lambda p: len(qb & bigrams(p.context)))
    ctx = best.context
    if len(ctx) > width:
        lo = rng.randrange(0, len(ctx) - width + 1)
        ctx = ctx[lo:lo + width]
    return dataclasses.replace(ex, qid=ex.qid + "-neg", context=ctx, title=best.title, answers=[],
                               is_impossible=True)


def build(examples: list, n_neg: int, rng: random.Random, width: int) -> list:
    pos = [crop(ex, width, rng) for ex in examples]
    pos = [ex for ex in pos if ex.answers]
    negs = [negative(ex, examples, rng, width) for ex in rng.sample(examples, min(n_neg, len(examples)))]
    out = pos + [n for n in negs if n is not None]
    rng.shuffle(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cmrc", type=int, default=900, help="CMRC2018 training questions to sample")
    ap.add_argument("--robust", type=int, default=0, help="DuReader-robust training questions (0: all)")
    ap.add_argument("--neg-fraction", type=float, default=0.35)
    ap.add_argument("--crop", type=int, default=300, help="max passage characters (train)")
    ap.add_argument("--dev-crop", type=int, default=400)
    ap.add_argument("--dev-per-source", type=int, default=60, help="held-out answerable questions per source")
    ap.add_argument("--seed", type=int, default=8)
    a = ap.parse_args()
    rng = random.Random(a.seed)
    os.makedirs(a.out, exist_ok=True)
    train, dev = [], []
    for name, files in SOURCES.items():
        exs = []
        for f in files:
            e, rep = read_mrc(os.path.join(D, f), source=name)
            print(rep.summary(), file=sys.stderr)
            exs += [x for x in e if not x.is_impossible]
        seen: set = set()  # DuReader-robust's demo files repeat questions of its dev.json
        exs = [x for x in exs if not (x.qid in seen or seen.add(x.qid))]
        frac = min(0.5, 1.5 * a.dev_per_source / len(exs))  # by passage; trimmed to dev_per_source below
        tr, dv = split_examples(exs, frac, seed=a.seed)
        dv = rng.sample(dv, min(a.dev_per_source, len(dv)))
        limit = a.cmrc if name == "cmrc2018" else (a.robust or len(tr))
        tr = rng.sample(tr, min(limit, len(tr)))
        k = int(len(tr) * a.neg_fraction / (1 - a.neg_fraction))
        train += build(tr, k, rng, a.crop)
        dev += build(dv, int(len(dv) * 0.8), rng, a.dev_crop)  # dev: ~45% unanswerable, like the demo's 51%
        print(f"{name}: train {len(tr)} answerable questions, dev {len(dv)}", file=sys.stderr)
    rng.shuffle(train)
    write_squad(train, os.path.join(a.out, "train.json"))
    write_squad(dev, os.path.join(a.out, "dev.json"))
    for part, xs in (("train", train), ("dev", dev)):
        print(f"{part}: {len(xs)} questions, {sum(x.is_impossible for x in xs)} unanswerable", file=sys.stderr)


if __name__ == "__main__":
    main()
