"""The shipped Chinese MRC reader, trained, tuned and judged on real DuReader-checklist questions with k-fold
cross-validation (bertfam.tasks.mrc.crossval).

For each fold (split by passage, question and title: none is in two folds) a copy of --base is fine-tuned on
the other folds (x --repeat) plus --extra data, and predicts its own fold. Every decoding setting (answer
length x extension) and no-answer rule is then chosen out of fold: each fold is decided by the setting and
thresholds tuned on the other folds' predictions. The pooled out-of-fold F1 (bootstrap 95 % interval,
per type and answerability) is the estimate for new checklist questions. `--final` then trains one model on
all folds the same way and saves it with the setting chosen on all out-of-fold predictions.

Every step is resumable: a fold whose predictions are on disk is not trained again.

Usage: python recipes/mrc_checklist_cv.py --out runs/cv [--base models/mrc-zh-e5small-l12]
         [--data ../shared/data/mrc/dureader_checklist/dev_public.json] [--folds 5] [--steps 150]
         [--extra robust:400] [--overlap-penalties 0,2,5] [--extensions none,trim,clause,sentence]
         [--lengths 8,16,24,32,48,64,96] [--no-train] [--final] [--verifier DIR]

Decoding settings are answer length x extension x question-overlap penalty; the no-answer rules are the
reader's (both / null / cls), the verifier's with --verifier, and "fused": the answerability model of
bertfam.tasks.mrc.answerability (reader signals + question/title/passage match), fitted on the other folds.
A run's kept fold predictions are scored again by its kept fold models when settings are added.
`--members RUN --decide-on RUN` with a prediction-time read (--keyword-title, --keyword-extension) scores that read
under RUN's own choices (tuned and fitted on RUN's predictions, applied to this run's): the read as it would
ship into RUN's final model, without refitting anything.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import sys
import logging
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bertfam.data.dureader2 import read_dureader2  # noqa: E402
from bertfam.data.mrc import read_mrc  # noqa: E402
from bertfam.data.mrc_negatives import (answer_sentence_example, copula_swapped_example,  # noqa: E402
                                        definition_question_examples, entity_swapped_negative, name_pool,
                                        similar_passage_negatives)
from bertfam.tasks.mrc import (MRCPredictor, RawScores, decode, load_span_model, save_thresholds,  # noqa: E402
                               train_mrc)
from bertfam.tasks.mrc.crossval import (FitExtra, assign_folds, bootstrap_interval, breakdown, fold_sizes,  # noqa: E402
                                        items_of, leaks, tune_out_of_fold)
from bertfam.tasks.mrc.answerability import CUE_FEATURES, FEATURES, KNOWN_FEATURES, WORD_FEATURES  # noqa: E402
from bertfam.tasks.mrc.decoding import SPAN_CHOICES, extension_for  # noqa: E402  (the fold files keep both; --span-choices searches)
from bertfam.training import TrainConfig  # noqa: E402
from bertfam.training.interpolation import interpolate_  # noqa: E402
from bertfam.utils import atomic_write_text  # noqa: E402

D = os.path.join(ROOT, "..", "shared", "data")
CHECKLIST = os.path.join(D, "mrc", "dureader_checklist", "dev_public.json")
EXTRA = {  # name -> (file, source): answerable sets whose similar passages become unanswerable examples
    "robust": (os.path.join(D, "mrc", "dureader_robust", "dev.json"), "dureader-robust"),
    "cmrc": (os.path.join(D, "mrc", "cmrc2018", "cmrc2018_train.json"), "cmrc2018"),
    "drcd": (os.path.join(D, "mrc", "drcd", "DRCD_dev.json"), "drcd"),
    "trial": (os.path.join(D, "mrc", "cmrc2018", "cmrc2018_trial.json"), "cmrc2018"),  # no stage trains on it
}
# DuReader 2.0's search demo (JSON lines, train and dev): the checklist's own domain, with same-search negatives
DUREADER2 = [os.path.join(D, "corpus", "zh", "dureader2_search_demo", f"search.{s}.json") for s in ("train", "dev")]
LENGTHS = (8, 16, 24, 32, 48, 64, 96)
EXTENSIONS = ("none", "trim", "clause", "sentence")


def extra_examples(spec: str, seed: int, flag: str = "--extra") -> list:
    """--extra name:N,name:N -> N answerable questions of each set + one similar-passage negative each.
    NAME-sent (e.g. robust-sent:300): N other questions of the set with each passage cut to its answer's
    sentence (half the time with the next one too), their negatives drawn from those short passages.
    NAME-swap (e.g. cmrc-swap:200): up to N other questions whose answer ends a clause "X是ANSWER", the passage
    rewritten as the one sentence "ANSWER是X。" (`copula_swapped_example`), negatives drawn from those.
    NAME-swap2: the same questions twice, as that sentence and rewritten in place inside their passage (the
    answer opening its clause within a longer text), negatives drawn from both.
    NAME-ent: N answerable questions, each with its entity-swapped twin as its negative instead of a similar
    passage (the question's topic name replaced by another name of its kind from the set's questions, one
    written mostly with the passage's own characters where there is one: `entity_swapped_negative`,
    hard=True): the checklist's "same passage, another entity" question.
    NAME-def: up to N questions made from the defining sentences of the set's passages ("X，简称…，是Y的Z" ->
    "Y的Z是什么？" answered by X, `definition_question_examples`; one per passage) in their whole passage,
    negatives drawn from those passages, never one that states the question's predicate (it would answer).
    dureader2:N: N of DuReader 2.0 search demo's answerable questions (its answer paragraph, with the page's
    title) and, as their negatives, the same searches' unselected paragraphs (`read_dureader2`), not similar
    passages: the checklist's own domain and kind of negative."""
    rng = random.Random(seed)
    out = []
    used: set = set()  # a question is in one extra set only
    for part in filter(None, spec.split(",")):
        name, _, n = part.partition(":")
        if name == "dureader2":
            out += dureader2_examples(int(n or 400), rng)
            continue
        base, _, kind = name.partition("-")
        if base not in EXTRA or kind not in ("", "sent", "swap", "swap2", "def", "ent"):
            print(f"{flag}: {name!r} not in {', '.join(EXTRA)}, dureader2 (or NAME-sent, NAME-swap, NAME-swap2, "
                  "NAME-def, NAME-ent)",
                  file=sys.stderr)
            raise SystemExit(2)
        exs, rep = read_mrc(EXTRA[base][0], source=EXTRA[base][1])
        print(rep.summary(), file=sys.stderr)
        free = [e for e in exs if not e.is_impossible and (base, e.qid) not in used]
        if kind in ("swap", "swap2"):
            free = [e for e in free if copula_swapped_example(e) is not None]
        elif kind == "def":
            seen: set = set()
            free = [e for e in free if not (e.context in seen or seen.add(e.context)) and definition_question_examples(e)]
        if kind == "ent":
            pos, negs = entity_twins(free, int(n or 400), rng)
            used.update((base, e.qid) for e in pos)
            print(f"--extra {name}: {len(pos)} answerable + their entity-swapped twins", file=sys.stderr)
            out += pos + negs
            continue
        pos = rng.sample(free, min(int(n or 400), len(free)))
        used.update((base, e.qid) for e in pos)
        if kind == "sent":
            cut = np.random.default_rng(seed)
            pos = [x for x in (answer_sentence_example(e, cut, p_next=0.5) for e in pos) if x is not None]
        elif kind == "swap":
            pos = [copula_swapped_example(e) for e in pos]
        elif kind == "swap2":
            pos = [copula_swapped_example(e, in_context=c) for e in pos for c in (False, True)]
        elif kind == "def":
            pos = [definition_question_examples(e, max_per_passage=1)[0] for e in pos]
        print(f"--extra {name}: {len(pos)} answerable + their negatives", file=sys.stderr)
        negs = similar_passage_negatives(pos, seed=seed)
        if kind == "def":  # "唇形科中的一个属是什么？" is answered by any passage that says "…是唇形科中的一个属"
            negs = [x for x in negs if x.question.rsplit("是", 1)[0] not in x.context]
        out += pos + negs
    return out


def entity_twins(free: list, n: int, rng: random.Random) -> tuple[list, list]:
    """Up to n of `free` (in rng's order) that have an entity-swapped twin, and the twins (hard draws)."""
    pool = name_pool(free)
    pos, negs = [], []
    for e in rng.sample(free, len(free)):
        if len(pos) == n:
            break
        twin = entity_swapped_negative(e, pool, rng, hard=True)
        if twin is not None:
            pos.append(e)
            negs.append(twin)
    return pos, negs


def fit_extra_examples(spec: str, extra_spec: str, seed: int) -> list:
    """--fused-extra: questions built as --extra builds them (e.g. trial-sent:300,trial-swap:150: CMRC2018
    trial questions cut to their answer's sentence, or rewritten "ANSWER是X。", each with a similar-passage
    negative), without titles; only the fused answerability model is fitted on them. A set that --extra
    trains on is refused (its questions would not be new to the models)."""
    trained = {p.partition(":")[0].partition("-")[0] for p in extra_spec.split(",") if p}
    clash = sorted({p.partition(":")[0].partition("-")[0] for p in spec.split(",") if p} & trained)
    if clash:
        print(f"--fused-extra: {', '.join(clash)} is in --extra too (the fused model must be fitted on questions "
              "no model trained on)", file=sys.stderr)
        raise SystemExit(2)
    return [dataclasses.replace(e, qid=f"fit-{e.qid}", title=None) for e in extra_examples(spec, seed + 7, "--fused-extra")]


def fit_extra_raws(args, fit_exs: list, penalties, f: int) -> dict:
    """Fold f's model's decode results of the --fused-extra questions ({setting: [RawScores]}), kept in
    OUT/foldF.fused-extra.json with the spec they were built from (another spec: predicted again)."""
    path = os.path.join(args.out, f"fold{f}.fused-extra.json")
    if os.path.isfile(path):
        kept = json.load(open(path))
        if kept.get("spec") == args.fused_extra and kept.get("qids") == [e.qid for e in fit_exs] \
                and not set(setting_names(penalties, bonuses=length_bonuses(args))) - set(kept["raws"]):
            return {k: [RawScores.from_dict(r, path) for r in v] for k, v in kept["raws"].items()}
    if args.no_train and f > 0:  # --base scores every fold: fold 0's predictions of these questions are each fold's
        return fit_extra_raws(args, fit_exs, penalties, 0)
    model = trained_fold_model(args, f)
    cands = raw_candidates(model, fit_exs, [None] * len(fit_exs), penalties, reads_title(args),
                           reads_twice(args), length_bonuses(args), keyword_reads(args))
    atomic_write_text(path, json.dumps({"spec": args.fused_extra, "qids": [e.qid for e in fit_exs],
                                        "raws": {k: [r.to_dict() for r in v] for k, v in cands.items()}}))
    return cands


def start(ap: argparse.ArgumentParser):
    """--threads added and parsed, threads and logging set, --out made; (args, questions, their folds)."""
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    os.makedirs(args.out, exist_ok=True)
    return (args, *checklist_folds(args))


def checklist_folds(args) -> tuple[list, list[int]]:
    """--data's questions and their folds (--folds, --fold-seed); a split with a text in two folds stops here."""
    exs, rep = read_mrc(args.data, source="checklist")
    print(rep.summary(), file=sys.stderr)
    folds = assign_folds(exs, args.folds, args.fold_seed)
    bad = leaks(exs, folds)
    if bad:
        raise SystemExit("fold leak: " + "; ".join(bad[:5]))
    print(f"folds (questions, unanswerable): {fold_sizes(exs, folds)}", file=sys.stderr)
    return exs, folds


def fold_training_set(exs, folds, held: int | None, repeat: int, extra: list, untitled: int = 0) -> list:
    """The other folds' questions (x repeat, each copy its own id; the first `untitled` copies without their
    title) + the extra data."""
    own = [e for e, f in zip(exs, folds) if f != held]
    train = [dataclasses.replace(e, qid=f"{e.qid}#{k}", title="" if k < untitled else e.title)
             for k in range(repeat) for e in own] + extra
    random.Random(len(train)).shuffle(train)
    return train


def training_set(args, exs, folds, held: int | None, extra: list) -> list:
    """fold_training_set with the command line's --repeat and --untitled-copies."""
    return fold_training_set(exs, folds, held, args.repeat, extra, args.untitled_copies)


def reads_title(args) -> bool:
    """Whether the reader's input holds the title (--reader-title kept or both: trained with it)."""
    return args.reader_title != "dropped"


def reads_twice(args) -> bool:
    """Whether each titled question is predicted with and without its title, logits averaged (--reader-title both)."""
    return args.reader_title == "both"


def keyword_reads(args) -> tuple:
    """(keyword queries read with the title, their answer extension or None): --keyword-title, --keyword-extension."""
    return args.keyword_title == "kept", args.keyword_extension


def check_reads(args) -> None:
    """The run's reads (--reader-title, --keyword-title, --keyword-extension) recorded in OUT/reads.json: the
    kept fold predictions were made with them, so an --out that holds another run's stops here (one line,
    exit 2)."""
    path = os.path.join(args.out, "reads.json")
    reads = {"reader_title": args.reader_title, "keyword_title": args.keyword_title,
             "keyword_extension": args.keyword_extension}
    if os.path.isfile(path):
        kept = json.load(open(path))
        if kept != reads:
            print(f"{path}: this --out's predictions were made with {kept}, not {reads}: use another --out",
                  file=sys.stderr)
            raise SystemExit(2)
    elif any(os.path.isfile(os.path.join(args.out, f"fold{f}.raw.json")) for f in range(args.folds)) \
            and reads != {"reader_title": "kept", "keyword_title": "kept", "keyword_extension": None}:
        print(f"{args.out}: holds fold predictions of a run with the default reads: use another --out for {reads}",
              file=sys.stderr)
        raise SystemExit(2)
    atomic_write_text(path, json.dumps(reads) + "\n")


def train_one(args, train_exs, out_dir: str):
    model = load_span_model(args.base, seed=args.seed)
    tc = TrainConfig(max_steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup_ratio=0.1,
                     seed=args.seed, log_every=10, checkpoints=False, progress=False,
                     precision=args.precision, save_final=True, group_by_length=True)
    t0 = time.time()
    summary = train_mrc(model, train_exs, out_dir, tune=False, train=tc, max_length=args.max_length,
                        doc_stride=args.doc_stride, use_title=reads_title(args),
                        info={"recipe": "recipes/mrc_checklist_cv.py", "data": os.path.basename(args.data),
                              "repeat": args.repeat, "untitled_copies": args.untitled_copies, "extra": args.extra,
                              "base_weight": args.base_weight,
                              "reader_title": args.reader_title})
    print(f"  trained {summary.get('steps')} steps in {time.time() - t0:.0f} s "
          f"(final loss {summary.get('train_loss', summary.get('loss'))})", file=sys.stderr)
    if args.base_weight > 0:  # WiSE-FT: the fine-tuned weights mixed back with --base's, saved in their place
        interpolate_(model, load_span_model(args.base, seed=args.seed).state_dict(), args.base_weight)
        model.save_pretrained(out_dir)
        print(f"  weights: {args.base_weight:g} x base + {1 - args.base_weight:g} x fine-tuned", file=sys.stderr)
    return model


def dureader2_examples(n: int, rng: random.Random) -> list:
    """n answerable DuReader 2.0 search-demo questions and every same-search negative of those questions."""
    exs = []
    for path in DUREADER2:
        got, rep = read_dureader2(path, source=os.path.basename(path))
        print(rep.summary(), file=sys.stderr)
        exs += got
    pos = [e for e in exs if not e.is_impossible]
    pos = rng.sample(pos, min(n, len(pos)))
    keep = {e.qid.split(":")[0] for e in pos}
    negs = [e for e in exs if e.is_impossible and e.qid.split(":")[0] in keep]
    print(f"--extra dureader2: {len(pos)} answerable + {len(negs)} same-search negatives", file=sys.stderr)
    return pos + negs


def setting_names(penalties, extensions=EXTENSIONS, lengths=LENGTHS, choices=SPAN_CHOICES,
                  bonuses=(0.0,)) -> list[str]:
    """Every decoding setting: "EXT/LENGTH", with a question-overlap penalty "EXT/LENGTH/qPENALTY", with a
    length bonus ".../bBONUS" after that, and with the span of highest expected F1 as the answer (span choice
    expected_f1) "/ef1" after any of them."""
    return [f"{ext}/{L}" + (f"/q{q:g}" if q else "") + (f"/b{b:g}" if b else "")
            + ("/ef1" if c == "expected_f1" else "") for c in choices for b in bonuses for q in penalties for ext in extensions for L in lengths]


def length_bonuses(args) -> list[float]:
    """--length-bonuses as numbers (each >= 0; otherwise one line, exit 2)."""
    try:
        vals = [float(x) for x in args.length_bonuses.split(",") if x.strip()]
    except ValueError:
        vals = []
    if not vals or any(not v >= 0 for v in vals):
        print(f"--length-bonuses: {args.length_bonuses!r}: a comma list of numbers >= 0", file=sys.stderr)
        raise SystemExit(2)
    return vals


def search_space(args) -> tuple[list[float], tuple, tuple, tuple]:
    """(penalties, extensions, lengths, span choices) the out-of-fold choice searches: --overlap-penalties,
    --extensions, --lengths, --span-choices (each a comma list; an unknown extension, length or choice stops
    here); the length bonuses are `length_bonuses(args)`. Fewer choices select less noise on ~113-question
    folds."""
    def listed(flag, text, known, cast):
        vals = tuple(cast(x) for x in text.split(",") if x.strip())
        bad = [v for v in vals if v not in known]
        if bad or not vals:
            print(f"{flag}: {text!r}: each must be one of {', '.join(map(str, known))}", file=sys.stderr)
            raise SystemExit(2)
        return vals
    try:
        penalties = [float(x) for x in args.overlap_penalties.split(",")]
        lengths = listed("--lengths", args.lengths, LENGTHS, int)
    except ValueError as e:
        print(f"--overlap-penalties / --lengths: not a number ({e})", file=sys.stderr)
        raise SystemExit(2)
    return (penalties, listed("--extensions", args.extensions, EXTENSIONS, str), lengths,
            listed("--span-choices", args.span_choices, SPAN_CHOICES, str))


def parse_setting(name: str) -> tuple[str, int, float, str, float]:
    """(answer extension, max answer length, question-overlap penalty, span choice, length bonus) of a setting
    name."""
    ext, length, *rest = name.split("/")
    q = next((float(r[1:]) for r in rest if r.startswith("q")), 0.0)
    b = next((float(r[1:]) for r in rest if r.startswith("b")), 0.0)
    return ext, int(length), q, "expected_f1" if "ef1" in rest else "score", b


def raw_candidates(model, exs, relevance, penalties, use_title: bool = True, title_ensemble: bool = False,
                   bonuses=(0.0,), keyword: tuple = (True, None)) -> dict:
    """{"none/32": [RawScores per example], ...}: one forward pass, every decoding setting. use_title=False:
    the reader reads the passage without its title (the fused model's title features still see it);
    title_ensemble: with and without it, logits averaged (MRCSettings.title_ensemble). keyword: (whether
    keyword queries are read with the title, their answer extension or None) (`keyword_reads`)."""
    pred = MRCPredictor(model, verifier=False)  # a list of models: their logits averaged
    pred.settings = dataclasses.replace(pred.settings, use_title=use_title, title_ensemble=title_ensemble,
                                        keyword_use_title=keyword[0], keyword_extension=keyword[1])
    ws = pred.window_scores(items_of(exs))
    out = {}
    for name in setting_names(penalties, bonuses=bonuses):
        ext, L, q, choice, b = parse_setting(name)
        raws = (decode(w, e.context, pred.settings.n_best, L, extension_for(e.question, ext, keyword[1]), e.question, q,
                       choice, b) for w, e in zip(ws, exs))
        # the top span alone is kept (the fold files stay small): all that the out-of-fold choice reads
        out[name] = [dataclasses.replace(r, nbest=r.nbest[:1], relevance=rel) for r, rel in zip(raws, relevance)]
    return out


def save_candidates(path: str, cands: dict) -> None:
    """A fold's candidates as OUT/foldF.raw.json ({setting: [RawScores.to_dict() per example]})."""
    atomic_write_text(path, json.dumps({k: [r.to_dict() for r in v] for k, v in cands.items()}))


def load_candidates(path: str, relevance: list) -> dict:
    """A kept fold file back, each example with this run's verifier score (relevance: one per example)."""
    kept = json.load(open(path))
    return {k: [dataclasses.replace(RawScores.from_dict(r, path), relevance=rel) for r, rel in zip(v, relevance)]
            for k, v in kept.items()}


def trained_fold_model(args, f: int):
    """Fold f's model as trained before (OUT/foldF), the --members' fold models, or --base (--no-train)."""
    from bertfam.checkpoint import from_pretrained

    if args.members:
        return [from_pretrained(os.path.join(r, f"fold{f}")) for r in args.members.split(",")]
    return from_pretrained(args.base if args.no_train else os.path.join(args.out, f"fold{f}"))


def relevance_of(exs, verifier_dir, path: str) -> list:
    """One verifier score per example: a verifier directory's, or the out-of-fold scores of a
    recipes/mrc_verifier_cv.py run (its oof.json: each fold scored by a verifier trained without it)."""
    if not verifier_dir:
        return [None] * len(exs)
    oof = os.path.join(verifier_dir, "oof.json")
    if os.path.isfile(oof):
        rel = json.load(open(oof))
        if len(rel) != len(exs):
            raise SystemExit(f"{oof}: {len(rel)} scores for {len(exs)} questions (another data file?)")
        return rel
    if os.path.isfile(path):
        return json.load(open(path))
    from bertfam.tasks.mrc.verifier import load_verifier

    v = load_verifier(verifier_dir)
    rel = [float(x) for x in v.scores(items_of(exs))]
    atomic_write_text(path, json.dumps(rel))
    return rel


def signal_quality(exs, cands) -> dict:
    """Out-of-fold ROC AUC of each answerability signal (answerable = positive) and the forced-answer F1 on
    the answerable questions (the top span always given), per decoding setting."""
    from sklearn.metrics import roc_auc_score
    from bertfam.evaluation.dureader import Reference, score_one

    y = [not e.is_impossible for e in exs]
    any_raws = next(iter(cands.values()))
    auc = {}
    for key in ("null_diff", "p_answerable", "relevance"):
        v = [getattr(r, key) for r in any_raws]
        if None not in v:
            auc[key] = round(float(roc_auc_score(y, [x if x > -1e30 else -1e9 for x in v])), 3)
    forced = {}
    for name, raws in cands.items():
        f = [score_one(Reference(e.answer_texts, False, e.qtype), r.best.text if r.nbest else "")[0]
             for e, r in zip(exs, raws) if not e.is_impossible]
        forced[name] = round(100 * sum(f) / len(f), 1)
    return {"auc": auc, "forced_f1_answerable": forced}


def report(exs, folds, cands, rules, label: str, features=None, fit_extra=None, applied=None) -> dict:
    res = tune_out_of_fold(cands, exs, folds, rules, features, fit_extra, applied)
    table = breakdown(exs, res["f1"], res["em"], res["answers"])
    lo, hi = bootstrap_interval(res["f1"])
    base = table["all"]["baseline_F1"]
    import numpy as np
    from bertfam.evaluation.dureader import Reference, score_one
    from bertfam.tasks.mrc import NO_ANSWER

    b = np.array([score_one(Reference(e.answer_texts, e.is_impossible, e.qtype), NO_ANSWER)[0] for e in exs])
    glo, ghi = bootstrap_interval(res["f1"] - b)
    lens = [len(a) for a in res["answers"] if a != NO_ANSWER]
    print(f"\n== {label}: out-of-fold F1 {table['all']['F1']} [95% {lo:.1f}, {hi:.1f}] EM {table['all']['EM']} | "
          f"always no answer {base} | gain [{glo:+.1f}, {ghi:+.1f}] | answered {table['all']['answered']}/"
          f"{len(exs)}, mean answer {sum(lens) / max(1, len(lens)):.1f} chars")
    for name, row in table.items():
        print(f"   {name:32s} n={row['n']:4d}  F1 {row['F1']:5.1f}  EM {row['EM']:5.1f}  "
              f"no-answer {row['baseline_F1']:5.1f}  answered {row['answered']}")
    for f, c in res["choices"].items():
        print(f"   fold {f}: {c['setting']} rule {c['rule']} null>{c['null_threshold']:.2f} "
              f"P>={c['answerable_threshold']:.2f} rel>={c['verifier_threshold']:.3f} (other folds {c['dev_f1']:.1f})")
    p = res["pooled"]
    print(f"   pooled choice: {p['setting']} rule {p['rule']} (in-sample {p['dev_f1']:.1f})")
    auc = applied_auc(exs, res["p_answerable"])
    print(f"   out-of-fold AUC of the P(answerable) each fold's rule used: {auc}")
    return {"label": label, "applied_auc": auc, "oof_f1": table["all"]["F1"], "oof_em": table["all"]["EM"], "ci95": [lo, hi],
            "gain_ci95": [glo, ghi], "table": table, "pooled": p, "folds": {str(k): v for k, v in res["choices"].items()},
            "mean_answer_chars": round(sum(lens) / max(1, len(lens)), 1),
            # per question, for paired comparisons of two runs on the same folds (recipes/mrc_paired_compare.py)
            "questions": [{"qid": e.qid, "f1": round(float(f), 4), "answer": a}
                          for e, f, a in zip(exs, res["f1"], res["answers"])]}


def decided_on(args, exs, folds, rel, searched: set, fit_exs: list) -> tuple[dict, "FitExtra | None"]:
    """--decide-on RUN: RUN's kept fold predictions of the same questions ({setting: [RawScores]}) and of the
    --fused-extra questions, which every choice is tuned and fitted on while this run's predictions are what
    it is applied to. One line and exit 2 for a RUN without them, or with other folds or another spec."""
    run = args.decide_on

    def stop(msg: str):
        print(f"--decide-on {run}: {msg}", file=sys.stderr)
        raise SystemExit(2)

    try:
        kept_folds = json.load(open(os.path.join(run, "folds.json")))
    except (OSError, ValueError) as e:
        stop(f"no readable folds.json ({e.__class__.__name__}): not a mrc_checklist_cv.py run")
    if kept_folds != {e.qid: f for e, f in zip(exs, folds)}:
        stop("its folds differ from this run's (another --data, --folds or --fold-seed)")
    cands: dict = {}
    for f in range(args.folds):
        idx = [i for i, g in enumerate(folds) if g == f]
        path = os.path.join(run, f"fold{f}.raw.json")
        if not os.path.isfile(path):
            stop(f"fold{f}.raw.json missing")
        got = load_candidates(path, [rel[i] for i in idx])
        if searched - set(got):
            stop(f"fold {f} lacks settings {sorted(searched - set(got))[:3]}")
        for name in searched:
            cands.setdefault(name, [None] * len(exs))
            for i, r in zip(idx, got[name]):
                cands[name][i] = r
    if not fit_exs:
        return cands, None
    raws = {}
    for f in range(args.folds):
        path = os.path.join(run, f"fold{0 if args.no_train else f}.fused-extra.json")  # --no-train: one model
        kept = json.load(open(path)) if os.path.isfile(path) else {}
        if kept.get("spec") != args.fused_extra or kept.get("qids") != [e.qid for e in fit_exs]:
            stop(f"fold{f}.fused-extra.json missing or made for another --fused-extra")
        raws[f] = {k: [RawScores.from_dict(r, path) for r in v] for k, v in kept["raws"].items() if k in searched}
    return cands, FitExtra(fit_exs, raws)


def uses_verifier(choice: dict) -> bool:
    """A fused choice whose answerability model weighs the verifier's relevance (it then ships with it)."""
    f = choice.get("fusion")
    return bool(f) and any(n == "relevance" and c != 0.0 for n, c in zip(f["features"], f["coef"]))


TITLE_FEATURES = ("has_title", "q_in_title", "title_in_q", "q_bigrams_in_title", "title_bigrams_in_q")


def fused_features(text: str) -> tuple:
    """--fused-features: all, no-title, all+words / all+cues (the default set and the optional word-level / question
    word ones) or a comma
    list of feature names (an unknown one stops here, exit 2)."""
    if text == "all":
        return FEATURES
    if text == "all+words":
        return FEATURES + WORD_FEATURES
    if text == "all+cues":
        return FEATURES + CUE_FEATURES
    if text == "no-title":
        return tuple(f for f in FEATURES if f not in TITLE_FEATURES)
    names = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [n for n in names if n not in KNOWN_FEATURES]
    if bad or not names:
        print(f"--fused-features: {text!r}: all, all+words, all+cues, no-title or a comma list of {', '.join(KNOWN_FEATURES)}",
              file=sys.stderr)
        raise SystemExit(2)
    return names


def only_folds(text: str | None, n: int) -> tuple[set, bool]:
    """--only-folds: (the folds to train and predict, whether 'final' was listed); a bad entry stops here, exit 2."""
    if not text:
        return set(range(n)), False
    names = [x.strip() for x in text.split(",") if x.strip()]
    bad = [x for x in names if x != "final" and not (x.isdigit() and int(x) < n)]
    if bad or not names:
        print(f"--only-folds: {text!r}: each must be a fold number below {n} or 'final'", file=sys.stderr)
        raise SystemExit(2)
    return {int(x) for x in names if x != "final"}, "final" in names


def applied_auc(exs, p) -> float | None:
    """ROC AUC (answerable = positive) of the per-question P(answerable) the folds' rules thresholded."""
    from sklearn.metrics import roc_auc_score

    if any(x is None for x in p):
        return None
    return round(float(roc_auc_score([not e.is_impossible for e in exs], p)), 3)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--base", default=os.path.join(ROOT, "models", "mrc-zh-e5small-l12"))
    ap.add_argument("--data", default=CHECKLIST)
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--fold-seed", type=int, default=0)
    ap.add_argument("--only-folds", default=None,
                    help="train only these folds (comma list; 'final': the model on all folds too), e.g. for a "
                         "pilot, or to split the folds between processes of --threads 1 each")
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-5)
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--base-weight", type=float, default=0.0, metavar="A",
                    help="each trained model's weights become A x --base's + (1 - A) x its own (WiSE-FT weight "
                         "interpolation; 0: the fine-tuned model as trained), before it predicts and is saved")
    ap.add_argument("--repeat", type=int, default=2, help="copies of the training folds' questions")
    ap.add_argument("--untitled-copies", type=int, default=0,
                    help="how many of the --repeat copies read without their title (the reader then also learns "
                         "the title-less passages that the API and the web page send); 0: none")
    ap.add_argument("--extra", default="robust:400", help="extra data, name[-KIND]:N,... (robust, cmrc, drcd, trial; KIND sent, swap, swap2,"
                         " def or ent; or dureader2:N: see extra_examples; '' none)")
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--doc-stride", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verifier", default=None,
                    help="a verifier directory, or a recipes/mrc_verifier_cv.py run (its out-of-fold scores): "
                         "adds the verifier and all rules")
    ap.add_argument("--overlap-penalties", default="0,2,5",
                    help="question-overlap penalties tried as decoding settings (comma list; 0: none)")
    ap.add_argument("--length-bonuses", default="0",
                    help="length bonuses tried as decoding settings (comma list; each span's score + BONUS x log(1 + "
                         "its characters); 0: none)")
    ap.add_argument("--extensions", default=",".join(EXTENSIONS),
                    help="answer extensions tried as decoding settings (comma list of " + ", ".join(EXTENSIONS) + ")")
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)),
                    help="maximum answer lengths (tokens) tried as decoding settings (comma list of "
                         + ", ".join(map(str, LENGTHS)) + ")")
    ap.add_argument("--reader-title", choices=("kept", "dropped", "both"), default="kept",
                    help="the reader's input: [CLS] question [SEP] title + passage (kept) or without the title "
                         "(dropped; fold models trained, and the fold questions predicted, so), or both: trained "
                         "as kept, each titled question predicted with and without its title, logits averaged "
                         "(MRCSettings.title_ensemble, written into the final config); the fused "
                         "answerability model's title features see the title either way. The run's kept fold "
                         "predictions were made one way: use a new --out to compare")
    ap.add_argument("--keyword-title", choices=("kept", "dropped"), default="kept",
                    help="with the title kept: whether keyword queries (no question word: 番石榴汁热量; "
                         "bertfam.tasks.mrc.query_form) are read with it too (kept) or without it (dropped; "
                         "MRCSettings.keyword_use_title, written into the final config). Prediction only")
    ap.add_argument("--keyword-extension", choices=EXTENSIONS, default=None,
                    help="keyword queries' answers widened this way in every decoding setting (the setting's own "
                         "extension for the other questions; MRCSettings.keyword_extension). Prediction only")
    ap.add_argument("--span-choices", default="score",
                    help="span choices tried as decoding settings (comma list of " + ", ".join(SPAN_CHOICES)
                         + "; expected_f1: the n-best's consensus span, settings named .../ef1)")
    ap.add_argument("--no-train", action="store_true", help="score --base itself out of fold (no fine-tuning)")
    ap.add_argument("--members", default=None, metavar="RUN,RUN",
                    help="no training: score the logit-averaged ensemble of these runs' fold models out of fold")
    ap.add_argument("--fused-features", default="all",
                    help="inputs of the fused answerability model: all, all+words (with the optional jieba "
                         "word-level features), all+cues (with what the question asks for: how, yes/no, an "
                         "entity), no-title (without the title's match with the question), or a "
                         "comma list of " + ", ".join(KNOWN_FEATURES))
    ap.add_argument("--fused-extra", default="", metavar="NAME:N,...",
                    help="questions no model trains on, added to the fused answerability model's fit (not to the "
                         "thresholds' tuning or the table), built as --extra builds them, without titles: e.g. "
                         "trial-sent:300,trial-swap:150 (CMRC2018 trial: one-sentence passages)")
    ap.add_argument("--final", action="store_true", help="then train on all folds and save OUT/final")
    ap.add_argument("--decide-on", default=None, metavar="RUN",
                    help="no new choice of its own: every fold's setting, rule, fused model and thresholds are tuned "
                         "on RUN's kept predictions of the same folds (e.g. the run with the default reads) and "
                         "applied to this run's: how a prediction-time read (--keyword-title, --keyword-extension) "
                         "scores when it ships into a model tuned without it; with --final the pooled choice is "
                         "RUN's, written with this run's reads")
    ap.add_argument("--final-model", default=None, metavar="DIR",
                    help="with --final: DIR already holds the model this recipe trained on all folds (e.g. the "
                         "shipped one, or with --members the int8 copy of a run's final model); only the "
                         "out-of-fold choice is written into its config")
    args, exs, folds = start(ap)
    if not 0 <= args.untitled_copies <= args.repeat:
        print(f"--untitled-copies: {args.untitled_copies} is not in [0, --repeat {args.repeat}]", file=sys.stderr)
        return 2
    if not 0.0 <= args.base_weight <= 1.0:
        print(f"--base-weight: {args.base_weight:g} is not in [0, 1]", file=sys.stderr)
        return 2
    penalties, extensions, lengths, choices = search_space(args)
    features = fused_features(args.fused_features)
    only, final_too = only_folds(args.only_folds, args.folds)
    if args.members and args.final and not args.final_model:
        print("--final with --members needs --final-model DIR (the model the members' folds stand for; nothing is "
              "trained)", file=sys.stderr)
        return 2
    check_reads(args)
    atomic_write_text(os.path.join(args.out, "folds.json"),
                      json.dumps({e.qid: f for e, f in zip(exs, folds)}, indent=0) + "\n")
    rel = relevance_of(exs, args.verifier, os.path.join(args.out, "relevance.json"))
    rules = ("both", "null", "cls") + (("verifier", "all") if args.verifier else ())
    bonuses = length_bonuses(args)
    searched = set(setting_names(penalties, extensions, lengths, choices, bonuses))
    fit_exs = fit_extra_examples(args.fused_extra, args.extra, args.seed) if args.fused_extra else []
    extra = extra_examples(args.extra, args.seed) if args.extra and not (args.no_train or args.members) else []
    if args.decide_on and not (args.members or args.no_train):
        print("--decide-on scores kept models' predictions: it needs --members (or --no-train)", file=sys.stderr)
        return 2
    decided = decided_on(args, exs, folds, rel, searched, fit_exs) if args.decide_on else None
    pieces: dict = {}
    if final_too and not (args.no_train or args.members):  # the final model now; --final later only loads it
        final_dir = os.path.join(args.out, "final")
        if not os.path.isfile(os.path.join(final_dir, "model.safetensors")):
            train_one(args, training_set(args, exs, folds, None, extra), final_dir)
    for f in sorted(only):
        path = os.path.join(args.out, f"fold{f}.raw.json")
        idx = [i for i, g in enumerate(folds) if g == f]
        kept = json.load(open(path)) if os.path.isfile(path) else None
        if kept is None or set(setting_names(penalties, bonuses=bonuses)) - set(kept):  # new, or new settings
            print(f"fold {f}: {len(idx)} questions held out", file=sys.stderr)
            if kept is None and not (args.no_train or args.members):
                model = train_one(args, training_set(args, exs, folds, f, extra),
                                  os.path.join(args.out, f"fold{f}"))
            else:  # predictions kept from a run with fewer settings: the fold's model scores them again
                model = trained_fold_model(args, f)
            save_candidates(path, raw_candidates(model, [exs[i] for i in idx], [rel[i] for i in idx], penalties,
                                                 reads_title(args), reads_twice(args), bonuses, keyword_reads(args)))
            del model
        pieces[f] = {k: v for k, v in load_candidates(path, [rel[i] for i in idx]).items()  # this run's verifier scores
                     if k in searched}
        if fit_exs and not args.decide_on:  # the fold's --fused-extra predictions too, kept: a run of some folds leaves the table run less
            fit_extra_raws(args, fit_exs, penalties, f)
    if len(pieces) < args.folds:
        print(f"{len(pieces)} of {args.folds} folds done; the out-of-fold table needs all", file=sys.stderr)
        return 0
    cands = {}
    for name in pieces[0]:
        cands[name] = [None] * len(exs)
        for f, c in pieces.items():
            for i, r in zip([i for i, g in enumerate(folds) if g == f], c[name]):
                cands[name][i] = r
    quality = signal_quality(exs, cands)
    print(f"out-of-fold AUC (answerable vs not): {quality['auc']}\nforced-answer F1 on answerable questions: "
          f"{quality['forced_f1_answerable']}")
    applied, tail = None, ""
    if decided is not None:  # choices tuned on the other run's reads, applied to this run's
        applied, tail = cands, f", decided on {args.decide_on}'s predictions"
        cands, fit_extra = decided
    results = {"args": vars(args), "signals": quality,
               "reports": [report(exs, folds, cands, ("both", "null", "cls"), "reader" + tail, applied=applied)]}
    if args.verifier:
        results["reports"].append(report(exs, folds, cands, rules, "reader + verifier rules" + tail, applied=applied))
    if not args.decide_on:
        fit_extra = FitExtra(fit_exs, {f: fit_extra_raws(args, fit_exs, penalties, f) for f in range(args.folds)}) \
            if fit_exs else None
    results["reports"].append(report(exs, folds, cands, rules + ("fused",), "fused signals (logistic regression)"
                                     + (f" + {len(fit_exs)} --fused-extra questions in its fit" if fit_exs else "")
                                     + tail, features, fit_extra, applied))
    if args.verifier:  # the same without the verifier's score: a system without a second encoder
        bare = {k: [dataclasses.replace(r, relevance=None) for r in v] for k, v in cands.items()}
        bare_applied = {k: [dataclasses.replace(r, relevance=None) for r in v] for k, v in applied.items()} \
            if applied is not None else None
        results["reports"].append(report(exs, folds, bare, ("both", "null", "cls", "fused"),
                                         "fused signals without the verifier" + tail, features, fit_extra,
                                         bare_applied))
    best = max(results["reports"], key=lambda r: r["oof_f1"])
    results["best"] = best["label"]
    atomic_write_text(os.path.join(args.out, "cv.json"), json.dumps(results, ensure_ascii=False, indent=1) + "\n")
    if args.final and not args.no_train:
        final_dir = args.final_model or os.path.join(args.out, "final")
        if not os.path.isfile(os.path.join(final_dir, "model.safetensors")):
            model = train_one(args, training_set(args, exs, folds, None, extra), final_dir)
        else:
            from bertfam.checkpoint import from_pretrained

            model = from_pretrained(final_dir)
        p = best["pooled"]
        ext, length, q, choice, b = parse_setting(p["setting"])
        tuned = dict(p, max_answer_length=length, answer_extension=ext, question_overlap_penalty=q, span_choice=choice,
                     length_bonus=b,
                     use_title=reads_title(args), title_ensemble=reads_twice(args),
                     keyword_use_title=keyword_reads(args)[0], keyword_extension=keyword_reads(args)[1])
        if p["rule"] not in ("verifier", "all") and not uses_verifier(p):
            tuned["verifier"] = None  # the shipped rule does without one
        elif model.config.head.mrc_settings.verifier is None:  # it needs one: the e5 cosine `mrc build-verifier` builds
            tuned["verifier"] = "verifier"
        tuned["answerability"] = p["fusion"] if p["rule"] == "fused" else None
        save_thresholds(model, final_dir, tuned, f"out of fold on {os.path.basename(args.data)}")
        info_path = os.path.join(final_dir, "training_info.json")
        info = json.load(open(info_path)) if os.path.isfile(info_path) else {}
        info["cross_validation"] = {k: best[k] for k in ("label", "oof_f1", "oof_em", "ci95", "gain_ci95",
                                                         "mean_answer_chars")}
        info["cross_validation"].update(questions=len(exs), folds=args.folds,
                                        baseline_f1=best["table"]["all"]["baseline_F1"],
                                        by_answerability={k: best["table"][k] for k in ("answerable", "unanswerable")})
        atomic_write_text(info_path, json.dumps(info, ensure_ascii=False, indent=1) + "\n")
        print(f"final model: {final_dir} ({p['setting']}, rule {p['rule']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
