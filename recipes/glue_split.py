"""Write the GLUE folders the GLUE recipe trains on: dev splits carved from train where no dev file exists.

    python recipes/glue_split.py SHARED_GLUE_DIR OUT_DIR

SST-2, CoLA and STS-B ship train + (unlabelled) test only, MRPC only Microsoft's original training file:
each gets 10 % of its training lines as dev.tsv (seed 42, the rule of `bertfam finetune --dev-ratio`), the
rest as train.tsv, and its test file copied. RTE and WNLI come from the re-split folder (marked not
official), which has its own dev.tsv. bertfam and the transformers baseline then read the same files.
"""
from __future__ import annotations

import os
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bertfam.data.splits import dev_split  # noqa: E402

CARVE = {"SST-2": ("train.tsv", True), "CoLA": ("train.tsv", False), "STS-B": ("train.tsv", True),
         "MRPC": ("msr_paraphrase_train.txt", True)}  # folder: (training file, has a header line)
RESPLIT = ("RTE", "WNLI")
RATIO, SEED = 0.1, 42


def carve(lines: list[str]) -> tuple[list[str], list[str]]:
    return dev_split(lines, RATIO, SEED, min_dev=1)  # runners.finetune.split_train_dev's call


def write(path: str, lines: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)


def main(src: str, out: str) -> None:
    for task, (name, header) in CARVE.items():
        with open(os.path.join(src, task, name), encoding="utf-8-sig") as f:  # MSR's file starts with a BOM
            lines = [line if line.endswith("\n") else line + "\n" for line in f if line.strip()]
        head, body = (lines[:1], lines[1:]) if header else ([], lines)
        train, dev = carve(body)
        os.makedirs(os.path.join(out, task), exist_ok=True)
        write(os.path.join(out, task, "train.tsv"), head + train)
        write(os.path.join(out, task, "dev.tsv"), head + dev)
        test = os.path.join(src, task, "test.tsv")
        if os.path.isfile(test):
            shutil.copyfile(test, os.path.join(out, task, "test.tsv"))
        print(f"{task}: {len(train)} train / {len(dev)} dev lines (carved, seed {SEED})")
    for task in RESPLIT:
        d = os.path.join(src, "resplit_NOT_OFFICIAL", task)
        shutil.copytree(d, os.path.join(out, task), dirs_exist_ok=True)
        print(f"{task}: copied from the re-split folder (not official)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
