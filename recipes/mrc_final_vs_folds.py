"""Does a cross-validation run's final model decide as its fold models did, on questions none of them trained on?

Usage: python recipes/mrc_final_vs_folds.py RUN (--data FILE | --fused-extra SPEC) [--model DIR] [--no-titles]
                                            [--limit N] [--threads N]

The out-of-fold score of recipes/mrc_checklist_cv.py is measured with the fold models (each trained on 4/5 of
the questions), and their thresholds and fused answerability model go into the final model, trained on all of
them: the score predicts the final model only if it answers as often and as well as the fold models do. This
reads FILE (SQuAD layout, with references; questions that no model of the run trained on) with the final model
(--model, default RUN/final) and with every RUN/foldK, all under the final model's decoding settings,
thresholds and fused model, and prints per model how many questions it answers (answerable / unanswerable),
the mean fused P(answerable) and the official F1 (a declined unanswerable question scores 1). --no-titles
drops the titles, as the API and the web page send passages. Instead of FILE, --fused-extra SPEC builds the
questions mrc_checklist_cv.py --fused-extra SPEC builds (e.g. trial-sent:300,trial-swap:150: CMRC2018 trial
questions and their negatives, titles dropped; the run's --seed; needs ../shared/data as that recipe does).

Exit 2 with one line for a RUN without fold models, a model directory that holds no model, or a FILE that
cannot be read.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
sys.path.insert(0, HERE)

from mrc_paired_compare import run_as_script  # noqa: E402

from bertfam.errors import BertfamError  # noqa: E402


def fold_dirs(run: str) -> list[str]:
    """RUN/fold0, RUN/fold1, ... as far as they hold a model (SystemExit when there is none)."""
    out = []
    while os.path.isfile(os.path.join(run, f"fold{len(out)}", "config.json")):
        out.append(os.path.join(run, f"fold{len(out)}"))
    if not out:
        raise SystemExit(f"{run}: no fold models (RUN/fold0/config.json missing): not a mrc_checklist_cv.py run")
    return out


def decisions(model_dir: str, settings, items: list[dict]) -> list:
    """MRCPredictions of `items` by the model in model_dir under `settings` (decoding, thresholds, fused model)."""
    from bertfam.checkpoint import from_pretrained
    from bertfam.tasks.mrc.predictor import MRCPredictor

    pred = MRCPredictor(from_pretrained(model_dir), verifier=False)
    pred.settings = settings
    return pred.predict_batch(items, details=True)


def summary(examples: list, preds: list) -> dict:
    """Answered counts, mean fused P(answerable) and official F1 (x100) of one model's predictions."""
    from bertfam.evaluation.dureader import f1_score

    f1, answered_pos, answered_neg = [], 0, 0
    for ex, p in zip(examples, preds):
        refs = [a.text for a in ex.answers]
        if ex.is_impossible or not refs:
            answered_neg += p.answer is not None
            f1.append(0.0 if p.answer is not None else 1.0)
        else:
            answered_pos += p.answer is not None
            f1.append(f1_score(refs, p.answer) if p.answer is not None else 0.0)
    return {"answered": answered_pos + answered_neg, "answered_answerable": answered_pos,
            "answered_unanswerable": answered_neg, "mean_p": statistics.mean(p.p_answerable for p in preds),
            "f1": 100 * statistics.mean(f1)}


def questions(args) -> tuple[list, str]:
    """(the MRC examples to read, what they are) from --data or --fused-extra."""
    if args.data:
        from bertfam.data.mrc import read_mrc

        exs, rep = read_mrc(args.data, mode="predict")
        print(rep.summary(), file=sys.stderr)
        return exs, args.data
    import json

    from mrc_checklist_cv import fit_extra_examples

    cv = os.path.join(args.run, "cv.json")
    seed = json.load(open(cv)).get("args", {}).get("seed", 0) if os.path.isfile(cv) else 0
    return fit_extra_examples(args.fused_extra, "", seed), f"--fused-extra {args.fused_extra} (seed {seed})"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a recipes/mrc_checklist_cv.py output directory with fold0, fold1, ...")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--data", help="questions no model of the run trained on (SQuAD layout)")
    src.add_argument("--fused-extra", metavar="SPEC", help="the questions mrc_checklist_cv.py --fused-extra SPEC "
                     "builds (none of the run's models trains on them)")
    ap.add_argument("--model", default=None, help="the final model (default: RUN/final)")
    ap.add_argument("--no-titles", action="store_true", help="drop the questions' titles")
    ap.add_argument("--limit", type=int, default=0, help="the first N questions only (0: all)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    import torch

    from bertfam.checkpoint import from_pretrained
    from bertfam.tasks.mrc.predictor import MRCPredictor

    torch.set_num_threads(args.threads)
    folds = fold_dirs(args.run)
    final = args.model or os.path.join(args.run, "final")
    try:
        settings = MRCPredictor(from_pretrained(final), verifier=False).settings
        exs, source = questions(args)
    except BertfamError as e:
        raise SystemExit(str(e)) from None
    exs = exs[:args.limit] if args.limit > 0 else exs
    if not exs:
        raise SystemExit(f"{source}: no questions to read")
    items = [{"question": e.question, "passage": e.context, "title": None if args.no_titles else e.title}
             for e in exs]
    s = dataclasses.replace(settings, verifier=None)
    n_pos = sum(not e.is_impossible and bool(e.answers) for e in exs)
    print(f"{source}: {len(exs)} questions ({n_pos} answerable){', titles dropped' if args.no_titles else ''}; "
          f"the final model's settings: {s.answer_extension}/{s.max_answer_length}, overlap penalty "
          f"{s.question_overlap_penalty:g}, {'fused model' if s.answerability else 'reader rules'}, "
          f"P(answerable) >= {s.answerable_threshold:g}")
    print(f"{'model':>8s} {'answered':>9s} {'answerable':>11s} {'unanswerable':>13s} {'mean P':>7s} {'F1':>6s}")
    for name, d in [("final", final)] + [(os.path.basename(f), f) for f in folds]:
        try:
            r = summary(exs, decisions(d, s, items))
        except BertfamError as e:
            raise SystemExit(str(e)) from None
        print(f"{name:>8s} {r['answered']:9d} {r['answered_answerable']:11d} {r['answered_unanswerable']:13d} "
              f"{r['mean_p']:7.3f} {r['f1']:6.1f}")
    return 0


if __name__ == "__main__":
    run_as_script(main, "mrc_final_vs_folds")
