"""bertfam's MRC pipeline vs Hugging Face transformers' standard SQuAD-2 recipe, same base, data and budget.

    .venv/bin/python benchmarks/mrc_vs_transformers.py --base runs/e5-l6 --train runs/mrc-data/train.json \
        --dev runs/mrc-data/dev_checklist_like.json --steps 200 --out runs/mrc-vs-hf

Both start from the same imported weights (--base, a bertfam directory; exported to a Hugging Face directory
for transformers) and train the same optimizer steps, batch, learning rate, warm-up, windows (max length,
stride) and inputs (question | title + passage) on the same examples:
- bertfam: `train_mrc` (packed encoder, length-grouped batches, span + answerability heads), decoding and
  no-answer rule tuned on dev by `tune_on_raw` (reported for the span-null rule alone and for both signals);
- transformers: the run_qa.py recipe: AutoModelForQuestionAnswering, features padded to max length,
  `Trainer`, n-best post-processing with the SQuAD-2 null score and its threshold tuned on dev.
Both are scored with the official DuReader metric on --dev and on the DuReader-checklist demo (held out).
Writes OUT/mrc_vs_transformers.json and .md; prints the table.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "recipes"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

DEMO = os.path.join(ROOT, "..", "shared", "data", "mrc", "dureader_checklist", "demo.json")


def official(examples, answers: list[str]) -> dict:
    from mrc_checklist_eval import score

    return score(examples, answers)


def forced_f1(sets, texts: dict) -> dict:
    """Official F1 on the answerable questions with the top span always given: the span quality alone
    (at a small budget both engines decline everything once the no-answer threshold is tuned)."""
    from bertfam.evaluation.dureader import NO_ANSWER

    out = {}
    for name, (exs, _) in sets.items():
        keep = [i for i, e in enumerate(exs) if not e.is_impossible]
        out[name] = official([exs[i] for i in keep], [texts[name][i] or NO_ANSWER for i in keep])["all"]["F1"]
    return out


# ----------------------------------------------------------------------------- bertfam
def run_bertfam(args, train, sets) -> dict:
    from mrc_checklist_eval import answers as decide

    from bertfam.tasks.mrc import MRCPredictor, decode, load_span_model, settings_of, train_mrc, tune_on_raw
    from bertfam.training import TrainConfig

    model = load_span_model(args.base, seed=args.seed)
    tc = TrainConfig(max_steps=args.steps, batch_size=args.batch_size, lr=args.lr, warmup_ratio=args.warmup_ratio,
                     seed=args.seed, log_every=20, group_by_length=True, progress=False)  # model kept in OUT/bertfam
    t0 = time.perf_counter()
    summary = train_mrc(model, train, os.path.join(args.out, "bertfam"), (), max_length=args.max_length,
                        doc_stride=args.doc_stride, tune=False, train=tc)
    train_s = time.perf_counter() - t0
    pred = MRCPredictor(model, settings_of(model, max_length=args.max_length, doc_stride=args.doc_stride))
    res = {"train_s": train_s, "train_tokens_per_s": summary["tokens_per_s"], "windows": summary["train_windows"]}
    raws = {}
    for name, (exs, items) in sets.items():
        t0 = time.perf_counter()
        ws = pred.window_scores(items)
        res[f"{name}_questions_per_s"] = len(items) / (time.perf_counter() - t0)
        raws[name] = [decode(w, it["passage"], 20, args.max_answer_length) for w, it in zip(ws, items)]
    res["forced"] = forced_f1(sets, {n: [r.best.text if r.nbest else "" for r in raws[n]] for n in raws})
    for rule in ("null", "both"):
        t = tune_on_raw(raws["dev"], sets["dev"][0], has_answerability=True, rule=rule)
        res[rule] = {"thresholds": t, **{name: official(exs, decide(raws[name], t["null_threshold"],
                                                                      t["answerable_threshold"]))
                                           for name, (exs, _) in sets.items()}}
    return res


# ----------------------------------------------------------------------------- transformers
def hf_features(tok, examples, max_length: int, stride: int, train: bool):
    """run_qa.py's prepare_{train,validation}_features: question | context, only_second truncation with
    stride, padded to max_length; labels = answer token span or the [CLS] index."""
    from bertfam.data.mrc_windows import second_segment

    ctx, shift = zip(*(second_segment(e.title, e.context, True) for e in examples))
    enc = tok([e.question for e in examples], list(ctx), truncation="only_second", max_length=max_length,
              stride=stride, return_overflowing_tokens=True, return_offsets_mapping=True, padding="max_length")
    feats = []
    for i in range(len(enc["input_ids"])):
        ex_i = enc["overflow_to_sample_mapping"][i]
        seq = enc.sequence_ids(i)
        offs = [o if s == 1 else None for o, s in zip(enc["offset_mapping"][i], seq)]
        f = {"input_ids": enc["input_ids"][i], "attention_mask": enc["attention_mask"][i], "example": ex_i,
             "offsets": offs, "shift": shift[ex_i]}
        if "token_type_ids" in enc:
            f["token_type_ids"] = enc["token_type_ids"][i]
        if train:
            f["start_positions"] = f["end_positions"] = 0
            ex = examples[ex_i]
            if ex.answers:
                a, b = ex.answers[0].start + shift[ex_i], ex.answers[0].end + shift[ex_i]
                inside = [k for k, o in enumerate(offs) if o is not None]
                if inside and offs[inside[0]][0] <= a and offs[inside[-1]][1] >= b:
                    f["start_positions"] = next(k for k in inside if offs[k][1] > a)
                    f["end_positions"] = max(k for k in inside if offs[k][0] < b)
        feats.append(f)
    return feats


def hf_postprocess(feats, starts, ends, examples, n_best: int, max_answer_length: int) -> list[dict]:
    """run_qa.py's postprocess_qa_predictions (version_2_with_negative): per example the best span over its
    features and the minimum null score; returns {text, score_diff} (null - best)."""
    per = [[] for _ in examples]
    for f, s, e in zip(feats, starts, ends):
        per[f["example"]].append((f, s, e))
    out = []
    for ex, fs in zip(examples, per):
        best, null = None, math.inf
        for f, s, e in fs:
            null = min(null, float(s[0] + e[0]))
            for i in np.argsort(s)[-1:-n_best - 1:-1]:
                for j in np.argsort(e)[-1:-n_best - 1:-1]:
                    oi, oj = f["offsets"][i], f["offsets"][j]
                    if oi is None or oj is None or j < i or j - i + 1 > max_answer_length:
                        continue
                    sc = float(s[i] + e[j])
                    if best is None or sc > best[0]:
                        best = (sc, oi[0] - f["shift"], oj[1] - f["shift"])
        if best is None or best[2] <= max(best[1], 0):
            out.append({"text": "", "score_diff": math.inf})
            continue
        a, b = max(best[1], 0), best[2]
        out.append({"text": ex.context[a:b], "score_diff": null - best[0]})
    return out


def run_transformers(args, train, sets) -> dict:
    import transformers as T

    from bertfam.convert.hf import export_hf
    from bertfam.evaluation.dureader import NO_ANSWER
    from bertfam.checkpoint import from_pretrained

    hf_dir = os.path.join(args.out, "hf-base")
    export_hf(from_pretrained(args.base), hf_dir)
    tok = T.AutoTokenizer.from_pretrained(hf_dir)
    model = T.AutoModelForQuestionAnswering.from_pretrained(hf_dir)
    feats = hf_features(tok, train, args.max_length, args.doc_stride, train=True)
    keys = [k for k in ("input_ids", "attention_mask", "token_type_ids", "start_positions", "end_positions")
            if k in feats[0]]
    data = [{k: torch.tensor(f[k]) for k in keys} for f in feats]
    targs = T.TrainingArguments(output_dir=os.path.join(args.out, "hf"), max_steps=args.steps,
                                per_device_train_batch_size=args.batch_size, learning_rate=args.lr,
                                warmup_steps=int(args.warmup_ratio * args.steps), weight_decay=0.01, seed=args.seed,
                                save_strategy="no", report_to=[], logging_steps=20, use_cpu=True,
                                dataloader_num_workers=0, disable_tqdm=True)
    trainer = T.Trainer(model=model, args=targs, train_dataset=data)
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0
    model.eval()
    res = {"train_s": train_s, "windows": len(feats),
           "train_tokens_per_s": sum(int(sum(f["attention_mask"])) for f in feats) / len(feats)
           * args.steps * args.batch_size / train_s}
    preds = {}
    for name, (exs, _) in sets.items():
        t0 = time.perf_counter()
        fs = hf_features(tok, exs, args.max_length, args.doc_stride, train=False)
        starts, ends = [], []
        with torch.inference_mode():
            for b in range(0, len(fs), 32):
                chunk = fs[b:b + 32]
                o = model(**{k: torch.tensor([f[k] for f in chunk]) for k in keys[:-2]})
                starts += list(o.start_logits.numpy())
                ends += list(o.end_logits.numpy())
        preds[name] = hf_postprocess(fs, starts, ends, exs, 20, args.max_answer_length)
        res[f"{name}_questions_per_s"] = len(exs) / (time.perf_counter() - t0)
    trainer.save_model(os.path.join(args.out, "hf-model"))
    res["forced"] = forced_f1(sets, {n: [p["text"] for p in ps] for n, ps in preds.items()})
    # the SQuAD-2 threshold on the null-score difference, tuned on dev for the official metric
    dev_ex = sets["dev"][0]
    grid = sorted({p["score_diff"] for p in preds["dev"] if math.isfinite(p["score_diff"])}) + [math.inf]

    def answers(ps, th):
        return [p["text"] if p["text"] and p["score_diff"] < th else NO_ANSWER for p in ps]
    best = max(grid, key=lambda th: official(dev_ex, answers(preds["dev"], th))["all"]["F1"])
    res["null"] = {"threshold": best if math.isfinite(best) else None,
                   **{name: official(exs, answers(preds[name], best)) for name, (exs, _) in sets.items()}}
    return res


# ----------------------------------------------------------------------------- report
def markdown(res: dict) -> str:
    rows = ["| engine | no-answer rule | train s | train tokens/s | dev F1 / EM | demo F1 / EM | demo answered "
            "| forced-answer F1 dev / demo | predict q/s (demo) |", "|---|---|---|---|---|---|---|---|---|"]
    for eng, rules in (("bertfam", ("both", "null")), ("transformers", ("null",))):
        r = res.get(eng)
        if not r:
            continue
        for rule in rules:
            d, m = r[rule]["dev"]["all"], r[rule]["demo"]["all"]
            rows.append(f"| {eng} | {'null score + classifier' if rule == 'both' else 'null score'} "
                        f"| {r['train_s']:.0f} | {r['train_tokens_per_s']:.0f} | {d['F1']:.1f} / {d['EM']:.1f} "
                        f"| {m['F1']:.1f} / {m['EM']:.1f} | {m['answered']}/{m['n']} "
                        f"| {r['forced']['dev']:.1f} / {r['forced']['demo']:.1f} | {r['demo_questions_per_s']:.1f} |")
    b = res["baseline"]
    rows.append(f"| always \"no answer\" | – | – | – | {b['dev']:.1f} | {b['demo']:.1f} | 0 | – | – |")
    return "\n".join(rows) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", required=True, help="bertfam model directory both engines start from")
    ap.add_argument("--train", required=True)
    ap.add_argument("--dev", required=True)
    ap.add_argument("--demo", default=DEMO)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--warmup-ratio", type=float, default=0.1)
    ap.add_argument("--max-length", type=int, default=256)
    ap.add_argument("--doc-stride", type=int, default=128)
    ap.add_argument("--max-answer-length", type=int, default=64)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, default=None, help="first N training / dev / demo questions (smoke)")
    ap.add_argument("--engines", default="bertfam,transformers")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    args.out = args.out or tempfile.mkdtemp(prefix="bertfam-mrc-vs-hf-")
    os.makedirs(args.out, exist_ok=True)
    from bertfam.data.mrc import read_mrc
    from bertfam.evaluation.dureader import NO_ANSWER

    train, _ = read_mrc(args.train)
    sets = {}
    for name, path in (("dev", args.dev), ("demo", args.demo)):
        exs, _ = read_mrc(path, source=name)
        exs = exs[:args.limit] if args.limit else exs
        sets[name] = (exs, [{"question": e.question, "passage": e.context, "title": e.title} for e in exs])
    train = train[:args.limit] if args.limit else train
    res = {"args": vars(args), "baseline": {n: official(e, [NO_ANSWER] * len(e))["all"]["F1"]
                                            for n, (e, _) in sets.items()}}
    engines = {"bertfam": run_bertfam, "transformers": run_transformers}
    for eng in args.engines.split(","):
        res[eng] = engines[eng](args, train, sets)
        print(f"{eng}: {json.dumps({k: v for k, v in res[eng].items() if not isinstance(v, dict)})}", flush=True)
    md = markdown(res)
    print(md)
    with open(os.path.join(args.out, "mrc_vs_transformers.json"), "w") as f:
        json.dump(res, f, ensure_ascii=False, indent=1, default=str)
    with open(os.path.join(args.out, "mrc_vs_transformers.md"), "w") as f:
        f.write(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
