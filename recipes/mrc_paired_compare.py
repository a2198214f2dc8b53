"""Two runs of recipes/mrc_checklist_cv.py on the same folds, compared question by question (paired).

Usage: python recipes/mrc_paired_compare.py A/cv.json B/cv.json [--report PREFIX]

Each cv.json holds its reports' out-of-fold F1 per question. The comparison takes the best report of each run
(or the first whose label starts with PREFIX: e.g. "fused", "reader") and prints both F1s, the mean gain of B
over A with a paired bootstrap 95 % interval (the same questions resampled for both), and how many questions
B scores higher, lower and the same on. Why paired: two readers err on much the same hard questions, so the
interval of their difference is far narrower than either run's own (about ±4 F1 on 567 questions): a gap that
is noise for two separate intervals can be a measured one here, and a gap inside the paired interval is noise.

Exit 2 with one line for a file that is missing, not JSON or without per-question records, an unknown
PREFIX, or two runs over different questions.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

from bertfam.tasks.mrc.crossval import bootstrap_interval  # noqa: E402


def chosen_report(path: str, prefix: str | None) -> dict:
    """The report of a cv.json that the comparison uses (SystemExit with one line when there is none)."""
    try:
        run = json.load(open(path, encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: cannot read a cv.json ({e.__class__.__name__}: {e})") from None
    reports = run.get("reports") if isinstance(run, dict) else None
    if not reports:
        raise SystemExit(f"{path}: no 'reports' (not a recipes/mrc_checklist_cv.py cv.json)")
    if prefix:
        hits = [r for r in reports if r.get("label", "").startswith(prefix)]
        if not hits:
            labels = "; ".join(r.get("label", "?") for r in reports)
            raise SystemExit(f"{path}: no report whose label starts with {prefix!r} (reports: {labels})")
        rep = hits[0]
    else:
        rep = next((r for r in reports if r.get("label") == run.get("best")), reports[0])
    if not rep.get("questions"):
        raise SystemExit(f"{path}: report {rep.get('label')!r} has no per-question records (scored before they "
                         "were kept: run mrc_checklist_cv.py on it again)")
    return rep


def compare(a: dict, b: dict, n_resamples: int = 10000) -> dict:
    """Paired comparison of two reports' per-question F1 (ValueError when their questions differ)."""
    qa = [q["qid"] for q in a["questions"]]
    qb = [q["qid"] for q in b["questions"]]
    if qa != qb:
        raise ValueError(f"the runs score different questions ({len(qa)} and {len(qb)}, "
                         f"{len(set(qa) ^ set(qb))} in one only)")
    fa = np.array([q["f1"] for q in a["questions"]], dtype=float)
    fb = np.array([q["f1"] for q in b["questions"]], dtype=float)
    lo, hi = bootstrap_interval(fb - fa, n_resamples=n_resamples)
    return {"n": len(qa), "f1_a": 100 * fa.mean(), "f1_b": 100 * fb.mean(), "gain": 100 * (fb - fa).mean(),
            "ci95": (lo, hi), "b_higher": int((fb > fa + 1e-9).sum()), "b_lower": int((fb < fa - 1e-9).sum()),
            "same": int((abs(fb - fa) <= 1e-9).sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the baseline run's cv.json")
    ap.add_argument("b", help="the other run's cv.json")
    ap.add_argument("--report", default=None, help="label prefix of the report to compare (default: each run's best)")
    args = ap.parse_args(argv)
    ra, rb = chosen_report(args.a, args.report), chosen_report(args.b, args.report)
    try:
        c = compare(ra, rb)
    except ValueError as e:
        raise SystemExit(f"{args.a} / {args.b}: {e}") from None
    print(f"A {args.a}: {ra['label']}\nB {args.b}: {rb['label']}")
    print(f"{c['n']} questions: F1 A {c['f1_a']:.1f}, B {c['f1_b']:.1f}; B - A {c['gain']:+.1f} "
          f"[paired 95% {c['ci95'][0]:+.1f}, {c['ci95'][1]:+.1f}]; B higher on {c['b_higher']}, lower on "
          f"{c['b_lower']}, the same on {c['same']}")
    return 0


def run_as_script(main, prog: str = "") -> None:
    """sys.exit(main()), where a SystemExit with a message (a bad file, option or run) becomes that one line on
    stderr, after "prog: " when prog is given, and exit code 2 (the recipes' convention)."""
    try:
        sys.exit(main())
    except SystemExit as e:
        if isinstance(e.code, str):
            print(f"{prog}: {e.code}" if prog else e.code, file=sys.stderr)
            sys.exit(2)
        raise


if __name__ == "__main__":
    run_as_script(main)
