"""Question-passage pairs for training a cross-encoder verifier (`bertfam finetune --task custom`): one JSON
line per question of an MRC file in the SQuAD layout, {"question", "passage": title + " " + passage,
"label": "yes" (the passage holds an answer) | "no"}; duplicate (question, passage) pairs are written once.

Usage: python recipes/mrc_verifier_pairs.py MRC.json OUT.jsonl [--max-chars 400]
"""
from __future__ import annotations

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bertfam.data.mrc import read_mrc  # noqa: E402
from bertfam.utils import atomic_path  # noqa: E402


def pairs(examples, max_chars: int) -> list[dict]:
    seen, out = set(), []
    for e in examples:
        passage = f"{e.title} {e.context}" if e.title else e.context
        key = (e.question, passage)
        if key in seen:
            continue
        seen.add(key)
        out.append({"question": e.question, "passage": passage[:max_chars],
                    "label": "no" if e.is_impossible else "yes"})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("data")
    ap.add_argument("out")
    ap.add_argument("--max-chars", type=int, default=400, help="passages (with their title) cut to this length")
    args = ap.parse_args()
    exs, rep = read_mrc(args.data)
    print(rep.summary(), file=sys.stderr)
    rows = pairs(exs, args.max_chars)
    with atomic_path(args.out) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    print(f"{args.out}: {len(rows)} pairs, {sum(r['label'] == 'yes' for r in rows)} with an answer", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
