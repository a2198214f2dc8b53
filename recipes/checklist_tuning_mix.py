"""Stage 5 data of the Chinese MRC model: DuReader-checklist in-domain questions.

A training mix of CMRC2018 + DuReader-robust + the DuReader-checklist demo, holding out a part. The
checklist demo (100 questions) is split by passage (seed 0) into a tuning half, used here, and a held-out
half that no training step or threshold ever sees; `bertfam demo` reports the two halves separately.
Checklist answers are long descriptive spans and its unanswerable questions are hard (same topic,
no answer), unlike the robust / CMRC data, so the tuning half is repeated and mixed with a sample of the
stage-4 training file.

Usage: python recipes/checklist_tuning_mix.py --stage4 RUN/data4/train.json --out RUN/data5 [--repeat 4]
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bertfam.data.mrc import read_mrc, split_examples, write_squad  # noqa: E402

CHECKLIST = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data",
                         "mrc", "dureader_checklist", "demo.json")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage4", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--repeat", type=int, default=4)
    ap.add_argument("--sample", type=int, default=1200, help="stage-4 training questions mixed in")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    ck, rep = read_mrc(CHECKLIST, mode="train")
    print(rep.summary(), file=sys.stderr)
    tune, held = split_examples(ck, 0.5, seed=a.seed)
    s4, _ = read_mrc(a.stage4, mode="train")
    rng = random.Random(a.seed)
    copies = [dataclasses.replace(ex, qid=f"{ex.qid}-r{k}") for k in range(a.repeat) for ex in tune]  # ids unique
    mix = copies + rng.sample(s4, min(a.sample, len(s4)))
    rng.shuffle(mix)
    os.makedirs(a.out, exist_ok=True)
    write_squad(mix, os.path.join(a.out, "train.json"))
    write_squad(tune, os.path.join(a.out, "checklist_tune.json"))
    write_squad(held, os.path.join(a.out, "checklist_heldout.json"))
    with open(os.path.join(a.out, "checklist_tune_qids.json"), "w", encoding="utf-8") as f:
        json.dump(sorted(ex.qid for ex in tune), f)
    print(f"checklist: tune {len(tune)} ({sum(e.is_impossible for e in tune)} unanswerable), held out {len(held)} "
          f"({sum(e.is_impossible for e in held)} unanswerable); train mix {len(mix)} questions", file=sys.stderr)


if __name__ == "__main__":
    main()
