"""Training / dev files of stages 1-4 of the Chinese MRC model, from ../shared/data/mrc.

CPU time, not data, is the limit here, so every training window should teach something:
- passages are cropped to at most --crop characters around the answer (a random offset, so the answer is
  not always in the middle): one window per question instead of several mostly answer-less ones;
- unanswerable questions: DuReader-checklist's demo is the demo's TEST set and is not used at all, and
  CMRC2018 / DuReader-robust have no unanswerable questions, so --neg-fraction of the questions are paired
  with another passage of the same source that does not contain the answer, picked as the most similar
  to the question (character-bigram overlap) among 30 random candidates (a "hard-ish" negative);
- dev (threshold tuning): whole passages held out per source, same construction.

Usage: python recipes/mrc_cropped_data.py --out runs/mrc-zh-e5small/data [--cmrc 900] [--seed 8]
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
from typing import Optional

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bertfam.data.chinese_script import simplified_examples  # noqa: E402
from bertfam.data.dureader2 import read_dureader2  # noqa: E402
from bertfam.data.mrc_negatives import (answer_sentence_example, copula_swapped_example,  # noqa: E402
                                        definition_question_examples, entity_swapped_negative, name_pool,
                                        sentences, similar_passage_negatives)
from bertfam.data.mrc import MRCAnswer, read_mrc, split_examples, write_squad  # noqa: E402

D = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "..", "shared", "data", "mrc")
SOURCES = {"cmrc2018": ["cmrc2018/cmrc2018_train.json"],
           "robust": ["dureader_robust/demo_train.json", "dureader_robust/demo_dev.json", "dureader_robust/dev.json"]}
# --add: whole sets, all their questions in train (no dev part), each after the sources above so that a run
# without --add draws the same random numbers as before
ADDED = {"cmrc-trial": "cmrc2018/cmrc2018_trial.json",  # CMRC2018's trial set (simplified Chinese)
         "drcd": "drcd/DRCD_dev.json",  # DRCD dev (Taiwan Wikipedia): converted to simplified characters (OpenCC)
         "dureader2": None}  # DuReader 2.0 search demo: answer paragraphs + same-search unanswerable ones
DR2 = os.path.join(D, "..", "corpus", "zh", "dureader2_search_demo")


def crop(ex, width: int, rng: random.Random):
    """The example with its context cut to <= width characters around the first answer."""
    if len(ex.context) <= width:
        return ex
    a = ex.answers[0] if ex.answers else None
    if a is None or a.start < 0 or len(a.text) >= width:
        lo = rng.randrange(0, len(ex.context) - width + 1)
    else:
        first = max(0, a.end - width)
        last = min(a.start, len(ex.context) - width)
        lo = rng.randint(first, max(first, last))
    ctx = ex.context[lo:lo + width]
    answers = [MRCAnswer(x.text, x.start - lo) for x in ex.answers if x.start >= lo and x.end <= lo + width]
    return dataclasses.replace(ex, context=ctx, answers=answers or ex.answers[:0])


def bigrams(s: str) -> set:
    return {s[i:i + 2] for i in range(len(s) - 1)}


def negative(ex, pool: list, rng: random.Random, width: int):
    """The question paired with the most question-like passage (of 30 random ones) lacking its answers."""
    qb = bigrams(ex.question)
    cands = [p for p in rng.sample(pool, min(30, len(pool)))
             if p.context != ex.context and not any(a.text and a.text in p.context for a in ex.answers)]
    if not cands:
        return None
    best = max(cands, key=lambda p: len(qb & bigrams(p.context)))
    ctx = best.context
    if len(ctx) > width:
        lo = rng.randrange(0, len(ctx) - width + 1)
        ctx = ctx[lo:lo + width]
    return dataclasses.replace(ex, qid=ex.qid + "-neg", context=ctx, title=best.title, answers=[],
                               is_impossible=True)


def short_negative(ex, rng: random.Random):
    """An unanswerable example cut to one or two random sentences of its passage (None if it has one only)."""
    spans = sentences(ex.context)
    if len(spans) < 2:
        return None
    i = rng.randrange(len(spans) - 1)
    a, b = spans[i][0], spans[i + rng.randint(0, 1)][1]
    ctx = ex.context[a:b].strip()
    return dataclasses.replace(ex, context=ctx) if ctx else None


def shorten(xs: list, fraction: float, rng: random.Random) -> list:
    """`fraction` of the examples (chosen by rng) cut to the sentence holding the answer (half the time with
    the next one), or for unanswerable ones to one or two random sentences: short passages whose first word
    may be the answer, which 300-character crops starting mid-sentence almost never give."""
    if fraction <= 0:
        return xs
    out = []
    for ex in xs:
        if rng.random() < fraction:
            if ex.is_impossible:
                cut = short_negative(ex, rng)
            else:
                cut = answer_sentence_example(ex, rng, p_next=0.5)
                cut = dataclasses.replace(cut, qid=ex.qid) if cut is not None else None
            ex = cut or ex
        out.append(ex)
    return out


def swapped(examples: list, copies: int, rng: random.Random, width: int) -> list:
    """`copies` of each copula-swapped example ("X是ANSWER" rewritten as "ANSWER是X", `copula_swapped_example`),
    as the one sentence and inside its cropped passage, and for each one-sentence copy the question paired
    with the most similar OTHER swapped sentence as unanswerable: the answer as a clause's subject is rare in
    real passages, and without the negatives "a short sentence that starts with a name" would itself become
    the signal."""
    sent = [s for s in map(copula_swapped_example, examples) if s is not None]
    ctx = [crop(s, width, rng) for s in (copula_swapped_example(e, in_context=True) for e in examples)
           if s is not None]
    negs = similar_passage_negatives(sent, seed=rng.randrange(1 << 30))
    base = sent + ctx + negs
    return [dataclasses.replace(x, qid=f"{x.qid}#{k}") for k in range(copies) for x in base]


def definitions(examples: list, copies: int, rng: random.Random, width: int) -> list:
    """`copies` of each question made from a defining sentence of the examples' passages ("X，简称…，是Y的Z" ->
    "Y的Z是什么？" answered by X, `definition_question_examples`), inside its cropped passage and cut to its
    sentence (half the time with the next one), and for each sentence the question paired with the most
    similar OTHER definition sentence as unanswerable ("雨果大街是法国巴黎十六区的一条街道" for a street of
    香港): the answer opening its sentence, which the sources' questions rarely ask about, without letting
    "a sentence that opens with a name" become the signal itself."""
    seen: set = set()
    made = [d for ex in examples if not (ex.context in seen or seen.add(ex.context))
            for d in definition_question_examples(ex)]
    sent = [s for s in (answer_sentence_example(d, rng, p_next=0.5) for d in made) if s is not None]
    ctx = [c for c in (crop(d, width, rng) for d in made) if c.answers]
    negs = similar_passage_negatives(sent, seed=rng.randrange(1 << 30))
    base = sent + ctx + negs
    return [dataclasses.replace(x, qid=f"{x.qid}#{k}") for k in range(copies) for x in base]


def entity_swapped(examples: list, fraction: float, rng: random.Random, hard: float = 0.0) -> list:
    """For `fraction` of the answerable examples (chosen by rng), the question with its topic name replaced by
    another name of the same kind from the examples' own questions, the passage kept, as unanswerable
    (`entity_swapped_negative`): the checklist's "same passage, another entity" negative, beside its
    answerable twin, where the similar-passage negatives differ in everything. hard: the share of them whose
    new name is written mostly with the passage's own characters (`entity_swapped_negative(hard=True)`)."""
    pos = [ex for ex in examples if not ex.is_impossible and ex.answers]
    pool = name_pool(pos)
    chosen = [ex for ex in pos if rng.random() < fraction]
    # no coin drawn without hard: the same random numbers, so the same data, as before it existed
    out = (entity_swapped_negative(ex, pool, rng, hard=hard > 0 and rng.random() < hard) for ex in chosen)
    return [n for n in out if n is not None]


def build(examples: list, n_neg: int, rng: random.Random, width: int, short: float = 0.0,
          short_rng: Optional[random.Random] = None) -> list:
    pos = [crop(ex, width, rng) for ex in examples]
    pos = [ex for ex in pos if ex.answers]
    negs = [negative(ex, examples, rng, width) for ex in rng.sample(examples, min(n_neg, len(examples)))]
    if short > 0:  # its own random numbers: the crops and negatives above are those of a run without it
        pos = shorten(pos, short, short_rng)
        negs = shorten([n for n in negs if n is not None], short, short_rng)
    out = pos + [n for n in negs if n is not None]
    rng.shuffle(out)
    return out


def added_set(name: str, n: int, rng: random.Random, neg_fraction: float, width: int, short: float,
              short_rng: random.Random) -> list:
    """n (0: all) answerable questions of one --add set, cropped; DuReader 2.0 brings its own same-search negatives, the others
    get similar-passage ones like the sources above."""
    if name == "dureader2":
        exs = []
        for split in ("train", "dev"):
            e, rep = read_dureader2(os.path.join(DR2, f"search.{split}.json"), source=f"dureader2-{split}")
            print(rep.summary(), file=sys.stderr)
            exs += e
        out = [crop(ex, width, rng) for ex in exs]
        out = shorten([ex for ex in out if ex.answers or ex.is_impossible], short, short_rng)
    else:
        e, rep = read_mrc(os.path.join(D, ADDED[name]), source=name)
        print(rep.summary(), file=sys.stderr)
        exs = [x for x in e if not x.is_impossible]
        if name == "drcd":  # the reader is judged on simplified text: its traditional characters are other pieces
            exs, dropped = simplified_examples(exs)
            print(f"drcd: {len(exs)} questions in simplified characters, {dropped} dropped (an answer that could"
                  " not be placed in the converted passage)", file=sys.stderr)
        exs = rng.sample(exs, min(n, len(exs))) if n else exs
        out = build(exs, int(len(exs) * neg_fraction / (1 - neg_fraction)), rng, width, short, short_rng)
    print(f"{name}: train {len(out)} questions ({sum(x.is_impossible for x in out)} unanswerable)", file=sys.stderr)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--cmrc", type=int, default=900, help="CMRC2018 training questions to sample")
    ap.add_argument("--robust", type=int, default=0, help="DuReader-robust training questions (0: all)")
    ap.add_argument("--neg-fraction", type=float, default=0.35)
    ap.add_argument("--crop", type=int, default=300, help="max passage characters (train)")
    ap.add_argument("--dev-crop", type=int, default=400)
    ap.add_argument("--dev-per-source", type=int, default=60, help="held-out answerable questions per source")
    ap.add_argument("--seed", type=int, default=8)
    ap.add_argument("--short", type=float, default=0.0,
                    help="share of train questions whose passage is cut to the answer's sentence (unanswerable:"
                         " one or two sentences)")
    ap.add_argument("--swap", type=int, default=0,
                    help="copies of each train question whose answer ends 'X是ANSWER', rewritten as 'ANSWER是X' (one"
                         " sentence, and in its passage) with a similar-sentence negative; 0: none")
    ap.add_argument("--definitions", type=int, default=0,
                    help="copies of the questions made from the passages' defining sentences ('X，…，是Y的Z' ->"
                         " 'Y的Z是什么？' answered by X), in the passage and as a sentence, with similar-sentence"
                         " negatives; 0: none")
    ap.add_argument("--entity-swap", type=float, default=0.0,
                    help="share of train answerable questions (of the sources above) given an unanswerable twin:"
                         " the question's topic name replaced by another name of the same kind, the passage kept;"
                         " 0: none")
    ap.add_argument("--entity-swap-hard", type=float, default=0.0,
                    help="share of the entity-swapped twins whose new name is written mostly with the passage's"
                         " own characters (北京大学 against a passage on 清华大学 in 北京); needs --entity-swap")
    ap.add_argument("--add", default="", help=f"sets added to train (no dev part): name[:N answerable, default all],... of {', '.join(ADDED)}")
    a = ap.parse_args()
    added = [x.partition(":") for x in a.add.split(",") if x]
    bad = [name + _ + n for name, _, n in added if name not in ADDED or not (n == "" or n.isdigit())]
    if bad:
        ap.error(f"--add: {bad[0]!r} is not NAME or NAME:N, NAME one of {', '.join(ADDED)}")
    if a.swap < 0:
        ap.error(f"--swap: {a.swap} is negative (copies of each swapped question; 0: none)")
    if a.definitions < 0:
        ap.error(f"--definitions: {a.definitions} is negative (copies of each definition question; 0: none)")
    if not 0 <= a.entity_swap <= 1:
        ap.error(f"--entity-swap: {a.entity_swap} is not a share between 0 and 1")
    if not 0 <= a.entity_swap_hard <= 1:
        ap.error(f"--entity-swap-hard: {a.entity_swap_hard} is not a share between 0 and 1")
    if a.entity_swap_hard > 0 and a.entity_swap == 0:
        ap.error("--entity-swap-hard: needs --entity-swap (the share of questions given a twin)")
    added = [(name, int(n or 0)) for name, _, n in added]
    rng = random.Random(a.seed)
    short_rng = random.Random(a.seed + 1)
    swap_rng = random.Random(a.seed + 2)  # its own random numbers: the rest is that of a run without --swap
    def_rng = random.Random(a.seed + 3)  # ... and without --definitions
    ent_rng = random.Random(a.seed + 4)  # ... and without --entity-swap
    os.makedirs(a.out, exist_ok=True)
    train, dev = [], []
    for name, files in SOURCES.items():
        exs = []
        for f in files:
            e, rep = read_mrc(os.path.join(D, f), source=name)
            print(rep.summary(), file=sys.stderr)
            exs += [x for x in e if not x.is_impossible]
        seen: set = set()  # DuReader-robust's demo files repeat questions of its dev.json
        exs = [x for x in exs if not (x.qid in seen or seen.add(x.qid))]
        frac = min(0.5, 1.5 * a.dev_per_source / len(exs))  # by passage; trimmed to dev_per_source below
        tr, dv = split_examples(exs, frac, seed=a.seed)
        dv = rng.sample(dv, min(a.dev_per_source, len(dv)))
        limit = a.cmrc if name == "cmrc2018" else (a.robust or len(tr))
        tr = rng.sample(tr, min(limit, len(tr)))
        k = int(len(tr) * a.neg_fraction / (1 - a.neg_fraction))
        built = build(tr, k, rng, a.crop, a.short, short_rng)
        train += built
        if a.entity_swap > 0:
            es = entity_swapped(built, a.entity_swap, ent_rng, a.entity_swap_hard)
            train += es
            print(f"{name}: {len(es)} entity-swapped unanswerable questions", file=sys.stderr)
        dev += build(dv, int(len(dv) * 0.8), rng, a.dev_crop)  # dev: ~45% unanswerable, like the demo's 51%
        if a.swap > 0:
            sw = swapped(tr, a.swap, swap_rng, a.crop)
            train += sw
            print(f"{name}: {len(sw)} copula-swapped questions ({sum(x.is_impossible for x in sw)} unanswerable)",
                  file=sys.stderr)
        if a.definitions > 0:
            df = definitions(tr, a.definitions, def_rng, a.crop)
            train += df
            print(f"{name}: {len(df)} definition questions ({sum(x.is_impossible for x in df)} unanswerable)",
                  file=sys.stderr)
        print(f"{name}: train {len(tr)} answerable questions, dev {len(dv)}", file=sys.stderr)
    for name, n in added:
        train += added_set(name, n, rng, a.neg_fraction, a.crop, a.short, short_rng)
    rng.shuffle(train)
    write_squad(train, os.path.join(a.out, "train.json"))
    write_squad(dev, os.path.join(a.out, "dev.json"))
    for part, xs in (("train", train), ("dev", dev)):
        print(f"{part}: {len(xs)} questions, {sum(x.is_impossible for x in xs)} unanswerable", file=sys.stderr)


if __name__ == "__main__":
    main()
