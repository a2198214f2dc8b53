"""GLUE metric per task and the BERT paper's published BERT-base test-server numbers.

Paper numbers: Devlin et al. 2019 (BERT), Table 1, BERT-BASE row, scored by the GLUE evaluation
server on the hidden TEST sets (not comparable one-to-one with a dev split carved from train).
F1 for QQP and MRPC, Spearman for STS-B, Matthews corr. for CoLA, accuracy for the rest. The paper
leaves out WNLI.
"""
from __future__ import annotations

GLUE_METRIC = {  # task: (metric function key, headline metric name)
    "cola": ("mcc", "mcc"), "sst2": ("accuracy", "accuracy"), "mrpc": ("f1", "f1"), "stsb": ("corr", "spearman"),
    "qqp": ("f1", "f1"), "mnli": ("accuracy", "accuracy"), "mnli-mm": ("accuracy", "accuracy"),
    "qnli": ("accuracy", "accuracy"), "rte": ("accuracy", "accuracy"), "wnli": ("accuracy", "accuracy"),
}

BERT_BASE_PAPER_TEST = {
    "mnli": 84.6, "mnli-mm": 83.4, "qqp": 71.2, "qnli": 90.5, "sst2": 93.5, "cola": 52.1, "stsb": 85.8,
    "mrpc": 88.9, "rte": 66.4, "wnli": None,
}
PAPER_LABEL = "BERT-base, paper (Devlin et al. 2019, Table 1; GLUE test server)"


def results_table(rows: list[dict]) -> str:
    """rows: {task, metric, value, n_train, n_dev, note}. One table, paper column clearly labelled."""
    head = f"{'task':<8} {'metric':<9} {'bertfam (dev)':>13} {'paper test':>11}  {'train':>7} {'dev':>6}  note"
    lines = [head, "-" * len(head)]
    for r in rows:
        paper = BERT_BASE_PAPER_TEST.get(r["task"])
        lines.append(f"{r['task']:<8} {r['metric']:<9} {r['value']:>13.1f} "
                     f"{('%.1f' % paper) if paper is not None else 'n/a':>11}  {r.get('n_train', 0):>7} "
                     f"{r.get('n_dev', 0):>6}  {r.get('note', '')}")
    lines.append(f"paper test = {PAPER_LABEL}; bertfam (dev) = this run on the dev split named in `note`.")
    return "\n".join(lines)
