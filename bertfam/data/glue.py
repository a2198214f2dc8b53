"""GLUE readers for the official TSV layouts (as downloaded by GLUE's download_glue_data.py).

Columns are found by header name, so train/dev (labelled) and test (unlabelled, `index` first) files
of the same task share one description. CoLA's train/dev files have no header: four columns
(source, label, original label, sentence). MRPC is also read from Microsoft's original
`msr_paraphrase_{train,test}.txt` (same columns as GLUE's MRPC files, with a UTF-8 BOM).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from ..errors import DataError
from .labelled import Example, ReadReport, open_lines, read_tsv


@dataclass(frozen=True)
class GlueLayout:
    dir_name: str  # folder name in a GLUE download
    text: tuple  # header names of the text column(s)
    label: Optional[str]  # header name of the label column (None: regression score below)
    labels: Optional[tuple]  # class names; None: regression
    no_header_cols: Optional[tuple] = None  # (text idx, label idx) for header-less files (CoLA)
    dev_files: tuple = ("dev.tsv",)
    test_files: tuple = ("test.tsv",)
    train_files: tuple = ("train.tsv",)


GLUE = {
    "cola": GlueLayout("CoLA", ("sentence",), "label", ("0", "1"), no_header_cols=((3,), 1)),
    "sst2": GlueLayout("SST-2", ("sentence",), "label", ("0", "1")),
    "mrpc": GlueLayout("MRPC", ("#1 String", "#2 String"), "Quality", ("0", "1"),
                       train_files=("train.tsv", "msr_paraphrase_train.txt"),
                       test_files=("test.tsv", "msr_paraphrase_test.txt")),
    "stsb": GlueLayout("STS-B", ("sentence1", "sentence2"), "score", None),
    "qqp": GlueLayout("QQP", ("question1", "question2"), "is_duplicate", ("0", "1")),
    "mnli": GlueLayout("MNLI", ("sentence1", "sentence2"), "gold_label", ("contradiction", "entailment", "neutral"),
                       dev_files=("dev_matched.tsv",), test_files=("test_matched.tsv",)),
    "mnli-mm": GlueLayout("MNLI", ("sentence1", "sentence2"), "gold_label",
                          ("contradiction", "entailment", "neutral"), dev_files=("dev_mismatched.tsv",),
                          test_files=("test_mismatched.tsv",)),
    "qnli": GlueLayout("QNLI", ("question", "sentence"), "label", ("entailment", "not_entailment")),
    "rte": GlueLayout("RTE", ("sentence1", "sentence2"), "label", ("entailment", "not_entailment")),
    "wnli": GlueLayout("WNLI", ("sentence1", "sentence2"), "label", ("0", "1")),
}
# submission file names of the GLUE server
SUBMISSION_NAME = {"cola": "CoLA", "sst2": "SST-2", "mrpc": "MRPC", "stsb": "STS-B", "qqp": "QQP",
                   "mnli": "MNLI-m", "mnli-mm": "MNLI-mm", "qnli": "QNLI", "rte": "RTE", "wnli": "WNLI"}


def _has_header(path: str, layout: GlueLayout) -> bool:
    """CoLA train/dev have no header; its test file does (`index\tsentence`)."""
    if layout.no_header_cols is None:
        return True
    rep = ReadReport(path)
    first = next(open_lines(path, rep), None)
    if first is None:
        raise DataError(f"{path}: empty file")
    return first[1].split("\t")[0].strip() == "index"


def read_glue(task: str, path: str) -> list[Example]:
    """Examples of one GLUE file. Labelled if the file has the task's label column."""
    layout = GLUE.get(task)
    if layout is None:
        raise DataError(f"unknown GLUE task {task!r}; known: {', '.join(GLUE)}")
    regression = layout.labels is None
    if not _has_header(path, layout):
        text_idx, label_idx = layout.no_header_cols
        return read_tsv(path, list(text_idx), label_idx, header=False, labels=layout.labels, require_label=True)
    return read_tsv(path, list(layout.text), layout.label, header=True, labels=layout.labels,
                    regression=regression, guid_col="index")


def find_task_files(glue_dir: str, task: str) -> dict[str, str]:
    """{'train': path, 'dev': path, 'test': path} for what exists of a task under a GLUE directory.

    The task folder may sit directly in glue_dir or one level deeper (e.g. a re-split sub-folder)."""
    layout = GLUE[task]
    folder = _find_dir(glue_dir, layout.dir_name)
    if folder is None:
        return {}
    found = {}
    for split, names in (("train", layout.train_files), ("dev", layout.dev_files), ("test", layout.test_files)):
        for n in names:
            if os.path.isfile(os.path.join(folder, n)):
                found[split] = os.path.join(folder, n)
                break
    return found


def _find_dir(root: str, name: str) -> Optional[str]:
    if not os.path.isdir(root):
        raise DataError(f"{root}: GLUE directory not found")
    direct = os.path.join(root, name)
    if os.path.isdir(direct):
        return direct
    for sub in sorted(os.listdir(root)):
        cand = os.path.join(root, sub, name)
        if os.path.isdir(cand):
            return cand
    return None
