"""The GLUE recipe's own scripts (recipes/glue_split.py, recipes/glue_results_doc.py) on the GLUE fixtures, so
the recipe behind docs/results.md cannot silently rot."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

from bertfam.data.glue import find_task_files, read_glue

from .conftest import FIXTURES, ROOT

GLUE = os.path.join(FIXTURES, "finetune", "glue")


def _source_layout(root):
    """The folder layout the recipe reads (GLUE task folders plus a re-split folder), made of the fixtures."""
    for task in ("SST-2", "CoLA", "STS-B", "MRPC"):
        shutil.copytree(os.path.join(GLUE, task), root / task)
    for task in ("RTE", "WNLI"):
        d = root / "resplit_NOT_OFFICIAL" / task
        d.mkdir(parents=True)
        shutil.copyfile(os.path.join(GLUE, "RTE", "train.tsv"), d / "train.tsv")
        shutil.copyfile(os.path.join(GLUE, "RTE", "train.tsv"), d / "dev.tsv")


def test_split_carves_a_seeded_dev_that_both_engines_read(tmp_path):
    _source_layout(tmp_path / "src")
    run = [sys.executable, os.path.join(ROOT, "recipes", "glue_split.py"), str(tmp_path / "src"), str(tmp_path / "out")]
    subprocess.run(run, check=True, capture_output=True)
    for task, name in (("sst2", "SST-2"), ("cola", "CoLA"), ("stsb", "STS-B"), ("mrpc", "MRPC")):
        files = find_task_files(str(tmp_path / "out"), task)
        train, dev = read_glue(task, files["train"]), read_glue(task, files["dev"])
        src = find_task_files(str(tmp_path / "src"), task)["train"]
        whole = read_glue(task, src)
        assert len(train) + len(dev) == len(whole) and len(dev) == max(1, round(len(whole) * 0.1))
        texts = {(e.text_a, e.text_b) for e in whole}
        assert {(e.text_a, e.text_b) for e in train + dev} == texts  # nothing lost, nothing made up
        assert not {(e.text_a, e.text_b) for e in dev} & {(e.text_a, e.text_b) for e in train} or task == "sst2"
    first = (tmp_path / "out" / "SST-2" / "dev.tsv").read_text()
    subprocess.run(run, check=True, capture_output=True)  # seeded: the same split again
    assert (tmp_path / "out" / "SST-2" / "dev.tsv").read_text() == first
    assert (tmp_path / "out" / "SST-2" / "test.tsv").is_file()
    assert not (tmp_path / "out" / "MRPC" / "train.tsv").read_text().startswith("\ufeff")  # BOM dropped


def test_results_doc_puts_the_run_table_between_the_markers(tmp_path):
    run = tmp_path / "run"
    (run / "bertfam" / "mrpc").mkdir(parents=True)
    (run / "transformers" / "mrpc").mkdir(parents=True)
    row = {"task": "mrpc", "metric": "f1", "value": 81.25, "metrics": {"f1": 81.25, "accuracy": 70.0},
           "n_train": 10, "n_dev": 4}
    (run / "bertfam" / "results.json").write_text(json.dumps([row]))
    (run / "transformers" / "mrpc" / "eval_results.json").write_text(json.dumps(
        {**row, "value": 79.5, "metrics": {"f1": 79.5, "accuracy": 65.0}}))
    doc = tmp_path / "results.md"
    doc.write_text("# head\n<!-- glue-table -->\nold\n<!-- /glue-table -->\ntail\n")
    subprocess.run([sys.executable, os.path.join(ROOT, "recipes", "glue_results_doc.py"), str(run), str(doc)],
                   check=True, capture_output=True, cwd=ROOT)
    text = doc.read_text()
    assert "old" not in text and text.startswith("# head\n") and text.endswith("tail\n")
    assert "| mrpc | f1 | 10 / 4 | **81.2** (acc 70.0) | 79.5 (acc 65.0) | 86.6 | 88.9 |" in text
