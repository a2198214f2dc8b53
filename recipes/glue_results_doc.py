"""Write the GLUE table of docs/results.md from a GLUE recipe run (see recipes/glue_minilm.sh).

    python recipes/glue_results_doc.py RUN_DIR docs/results.md

Reads RUN_DIR/bertfam/results.json (`bertfam glue`) and RUN_DIR/transformers/TASK/eval_results.json
(recipes/glue_transformers.py), prints the markdown table and replaces the part of the doc between the
`<!-- glue-table -->` markers with it, so the doc holds exactly what the run measured.
"""
from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import doc_section  # noqa: E402  (recipes/ beside this script)

from bertfam.evaluation.glue import BERT_BASE_PAPER_TEST  # noqa: E402

# MiniLM 6x384 (22M parameters, the base all-MiniLM-L6-v2 was trained from), GLUE dev, as published in the
# table of the microsoft/xtremedistil-l6-h384-uncased model card; the other tasks are not in that table.
MINILM_L6_PUBLISHED_DEV = {"sst2": 91.3, "mrpc": 86.6, "rte": 68.9}
BEGIN, END = "<!-- glue-table -->", "<!-- /glue-table -->"


def _fmt(v) -> str:
    return "–" if v is None else f"{v:.1f}"


def table(run: str) -> str:
    rows = json.load(open(os.path.join(run, "bertfam", "results.json"), encoding="utf-8"))
    lines = ["| task | metric | train / dev | bertfam | transformers Trainer | MiniLM-L6 published (dev) "
             "| BERT-base paper (test server) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["task"]
        hf_path = os.path.join(run, "transformers", t, "eval_results.json")
        hf = json.load(open(hf_path, encoding="utf-8")) if os.path.isfile(hf_path) else None
        extra = f" (acc {r['metrics']['accuracy']:.1f})" if t == "mrpc" else ""
        hf_cell = "–" if hf is None else _fmt(hf["value"]) + (f" (acc {hf['metrics']['accuracy']:.1f})"
                                                             if t == "mrpc" else "")
        lines.append(f"| {t} | {r['metric']} | {r['n_train']} / {r['n_dev']} | **{_fmt(r['value'])}**{extra} "
                     f"| {hf_cell} | {_fmt(MINILM_L6_PUBLISHED_DEV.get(t))} | {_fmt(BERT_BASE_PAPER_TEST.get(t))} |")
    return "\n".join(lines)


def replace_section(doc: str, text: str) -> None:
    doc_section.replace_section(doc, text, BEGIN, END)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    t = table(sys.argv[1])
    print(t)
    replace_section(sys.argv[2], t)
