"""Where a run of recipes/mrc_checklist_cv.py wins and loses on answerable questions, out of fold.

Usage: python recipes/mrc_oof_breakdown.py RUN/cv.json --data DEV.json [--report PREFIX]

From the per-question records of the run's best report (or the first whose label starts with PREFIX) and the
questions' references in --data, two tables about the answerable questions:
- by where the first reference starts in its passage (characters 0-4, 5-19, 20-99, 100 on): how many, how
  many the system answers, their F1 (official metric, per question as the run scored it) and the median
  reference length. On DuReader-checklist most references open their passage, and those are long;
- what the answers it gives are: exactly a reference, inside a longer reference (12分 for 扣12分), containing
  a reference, overlapping one in part, or wrong (F1 0), with mean characters of answer and reference.
Read as a description of one run, not as a comparison: two runs are compared with mrc_paired_compare.py.

Exit 2 with one line for a cv.json that cannot be read (as mrc_paired_compare.py) or a --data file that
cannot, or whose questions do not include the run's.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from mrc_paired_compare import chosen_report, run_as_script  # noqa: E402

from bertfam.errors import BertfamError  # noqa: E402

NO_ANSWER = "no answer"
START_BUCKETS = ((0, 5), (5, 20), (20, 100), (100, None))
KINDS = ("exact", "inside a longer reference", "contains a reference", "overlaps in part", "wrong")


def answer_kind(answer: str, refs: list[str], f1: float) -> str:
    """What a given answer is against the question's references (f1: the official per-question F1)."""
    if answer in refs:
        return KINDS[0]
    if any(answer in r for r in refs):
        return KINDS[1]
    if any(r in answer for r in refs):
        return KINDS[2]
    return KINDS[3] if f1 > 0 else KINDS[4]


def breakdown(records: list[dict], examples: dict) -> dict:
    """{"by_start": [(label, n, answered, F1, median reference chars)], "kinds": {kind: (n, mean answer chars,
    mean reference chars)}} over the answerable questions among `records` (qid, f1, answer)."""
    rows = []
    for rec in records:
        ex = examples[rec["qid"]]
        if ex.is_impossible or not ex.answers:
            continue
        rows.append((ex.answers[0].start, [a.text for a in ex.answers], rec["answer"], rec["f1"]))
    by_start = []
    for lo, hi in START_BUCKETS:
        sel = [r for r in rows if r[0] >= lo and (hi is None or r[0] < hi)]
        label = f"{lo}-{hi - 1}" if hi is not None else f"{lo}+"
        if sel:
            by_start.append((label, len(sel), sum(r[2] != NO_ANSWER for r in sel),
                             100 * statistics.mean(r[3] for r in sel), statistics.median(len(r[1][0]) for r in sel)))
        else:
            by_start.append((label, 0, 0, 0.0, 0))
    kinds: dict[str, list] = {k: [] for k in KINDS}
    for _, refs, ans, f1 in rows:
        if ans != NO_ANSWER:
            kinds[answer_kind(ans, refs, f1)].append((len(ans), min(len(r) for r in refs)))
    return {"answerable": len(rows), "by_start": by_start,
            "kinds": {k: (len(v), statistics.mean(a for a, _ in v) if v else 0.0,
                          statistics.mean(r for _, r in v) if v else 0.0) for k, v in kinds.items()}}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cv", help="the run's cv.json")
    ap.add_argument("--data", required=True, help="the questions the run scored (SQuAD layout, with references)")
    ap.add_argument("--report", default=None, help="label prefix of the report (default: the run's best)")
    args = ap.parse_args(argv)
    from bertfam.data.mrc import read_mrc

    rep = chosen_report(args.cv, args.report)
    try:
        exs, _ = read_mrc(args.data, mode="predict")
    except BertfamError as e:
        raise SystemExit(f"--data: {e}") from None
    examples = {e.qid: e for e in exs}
    missing = [q["qid"] for q in rep["questions"] if q["qid"] not in examples]
    if missing:
        raise SystemExit(f"--data {args.data}: {len(missing)} of the run's {len(rep['questions'])} questions are "
                         f"not in it (first: {missing[0]})")
    b = breakdown(rep["questions"], examples)
    print(f"{args.cv}: {rep['label']}; {b['answerable']} answerable questions")
    print(f"{'reference starts at':>20s} {'n':>5s} {'answered':>9s} {'F1':>6s} {'median ref chars':>17s}")
    for label, n, answered, f1, ref_chars in b["by_start"]:
        print(f"{label:>20s} {n:5d} {answered:9d} {f1:6.1f} {ref_chars:17.1f}")
    print(f"{'answer given is':>28s} {'n':>5s} {'mean answer chars':>18s} {'mean ref chars':>15s}")
    for kind, (n, a, r) in b["kinds"].items():
        print(f"{kind:>28s} {n:5d} {a:18.1f} {r:15.1f}")
    return 0


if __name__ == "__main__":
    run_as_script(main, "mrc_oof_breakdown")
