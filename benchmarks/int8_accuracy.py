"""Accuracy cost of int8 inference: fp32 vs int8 for bertfam and for its peers (transformers, onnxruntime,
OpenVINO), the engines of benchmarks/encoder_throughput.py (benchmarks/bench/engines.py).

    nice -n 10 .venv/bin/python benchmarks/int8_accuracy.py \\
        --sst2-model runs/glue/bertfam/sst2 --sst2-dev runs/glue/data/SST-2/dev.tsv \\
        --mrc-model models/mrc-zh-e5small-l12 --mrc-dev runs/mrc-data/dev_checklist_like.json
    .venv/bin/python benchmarks/int8_accuracy.py --models bert-mini --limit 200      # a few minutes

Three measurements (those paths are the defaults; a section whose files are missing is skipped, saying so):
(a) hidden states: max / mean |last_hidden_state(int8) - last_hidden_state(fp32)| on real tokens, each
    int8 engine against its own fp32 engine and against transformers fp32, on the benchmark's random-weight
    models (bert-base, bert-mini: random token ids, lengths 16-128 and 16-512) and on the real weights of
    the two models below (their own dev inputs, tokenized by their tokenizers);
(b) SST-2 dev accuracy of a fine-tuned classifier (the GLUE recipe's MiniLM-L6, recipes/glue_minilm.sh:
    bertfam directory runs/glue/bertfam/sst2, dev split runs/glue/data/SST-2/dev.tsv): bertfam fp32 /
    int8 (dynamic, and static calibrated on dev sentences after the measured ones) and transformers fp32 /
    int8 (the same weights, bertfam.convert.hf.export_hf; an HF directory is loaded as it is), all fed the
    same token ids;
(c) MRC on the checklist-like dev (recipes/dureader_checklist_data.py; runs/mrc-data/dev_checklist_like.json)
    with the shipped Chinese model (models/mrc-zh-e5small-l12): bertfam's MRCPredictor fp32 vs int8 (dynamic,
    and static calibrated on dev questions after the measured ones), the
    model's saved decoding and thresholds, the official DuReader metric (bertfam/evaluation/dureader.py)
    as recipes/mrc_checklist_eval.py scores it, plus "forced" F1 (answerable questions, top span always
    given: span quality alone) and how many answers stay the same.
Writes docs/int8_accuracy.json and .md (a section the docs link to), one page per CPU kind as `make bench`
does (bench/probes.py page_stem: docs/int8_accuracy.md on AVX2-only CPUs, e.g.
docs/int8_accuracy-epyc-zen4-avx512.md elsewhere), since the int8 kernels differ by CPU: without VNNI the
static kernel packs 7-bit weights (bertfam/modeling/int8_static.py exact_u8s8), and the page says which.
--limit N: the first N examples of each set (the smoke test runs it on tiny models and the test fixtures in
seconds); --mrc-limit N: of the MRC set alone, so that the static engine calibrates on questions after them.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import cases, jobs  # noqa: E402  (benchmarks/ is on the path when run as a script)
from bench import engines as E  # noqa: E402

DEFAULT_SST2_MODEL = os.path.join(ROOT, "runs", "glue", "bertfam", "sst2")
DEFAULT_SST2_DEV = os.path.join(ROOT, "runs", "glue", "data", "SST-2", "dev.tsv")
DEFAULT_MRC_MODEL = os.path.join(ROOT, "models", "mrc-zh-e5small-l12")
DEFAULT_MRC_DEV = os.path.join(ROOT, "runs", "mrc-data", "dev_checklist_like.json")


def rel(path: str) -> str:
    p = os.path.relpath(os.path.abspath(path), ROOT)
    return path if p.startswith("..") else p


def failure(ex: Exception) -> str:
    return str(ex) if isinstance(ex, E.Unavailable) else f"failed: {type(ex).__name__}: {str(ex)[:300]}"


# ----------------------------------------------------------------------------- inputs
def encode(tok, texts: list, pairs: list | None, max_length: int, batch_size: int) -> list[dict]:
    """Token-id batches (the model's tokenizer, longest padding), in the given order."""
    out = []
    for a in range(0, len(texts), batch_size):
        enc = tok(texts[a:a + batch_size], pairs[a:a + batch_size] if pairs else None, max_length=max_length)
        out.append({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    return out


def calibration_slice(n: int, total: int) -> slice:
    """The inputs to calibrate on (nncf.quantize, bertfam-int8-static): up to 32 after the first n measured
    ones, or the first 32 when the set has too few beyond them."""
    return slice(n, n + 4 * 8) if total >= n + 8 else slice(0, min(total, 32))


def sst2_examples(path: str, limit: int | None):
    from bertfam.data.glue import read_glue

    exs = read_glue("sst2", path)
    return exs[:limit] if limit else exs


def mrc_examples(path: str, limit: int | None):
    from bertfam.data.mrc import read_mrc

    exs, rep = read_mrc(path, source=os.path.basename(path))
    print(rep.summary(), file=sys.stderr)
    return exs[:limit] if limit else exs


# ----------------------------------------------------------------------------- (a) hidden states
def prepare_real(d: str, model_dir: str, example_batch: dict) -> dict:
    """d/hf (export_hf of the bertfam model, or the HF directory itself) and d/model.onnx."""
    import bertfam
    from bertfam.convert.hf import export_hf

    os.makedirs(d, exist_ok=True)
    if not os.path.isdir(os.path.join(d, "hf")):
        export_hf(bertfam.from_pretrained(model_dir), os.path.join(d, "hf"))
    info = {}
    if not os.path.exists(os.path.join(d, "model.onnx")):
        import torch

        # the export traces dynamic batch and length dims: an example of 2 or more rows
        b = {k: torch.cat([v, v]) for k, v in example_batch.items()}
        info["export_s"] = E.export_onnx(d, b)
    return info


def hidden_section(name: str, d: str, batches: list[dict], calib: list[dict], engine_names: list[str]) -> dict:
    """Every engine's last_hidden_state on `batches`; each int8 engine against its fp32 engine and against
    transformers fp32, each fp32 engine against transformers fp32 (the same weights: ~1e-6)."""
    import torch

    outs, res = {}, {"engines": {}}
    for e in engine_names:
        t0 = time.perf_counter()
        try:
            E.build(e, d, calib)
            fn = E.load_hidden(e, d)
            outs[e] = [fn(b) for b in batches]
            res["engines"][e] = {"available": True, "seconds": time.perf_counter() - t0}
        except Exception as ex:  # never fatal: the engine is reported unavailable, with why
            res["engines"][e] = {"available": False, "reason": failure(ex)}
            print(f"{name} {e}: UNAVAILABLE: {res['engines'][e]['reason']}", flush=True)

    def stats(e: str, ref: str) -> dict:
        m = torch.cat([b["attention_mask"].reshape(-1) for b in batches]).bool()
        flat = [torch.cat([o.reshape(-1, o.shape[-1]) for o in outs[x]])[m] for x in (e, ref)]
        dlt = (flat[0] - flat[1]).abs()
        cos = torch.nn.functional.cosine_similarity(flat[0], flat[1], dim=-1)
        return {"max_abs_diff": float(dlt.max()), "mean_abs_diff": float(dlt.mean()),
                "mean_abs_ref": float(flat[1].abs().mean()), "max_cosine_distance": float((1 - cos).max()),
                "mean_cosine_distance": float((1 - cos).mean())}

    for e in engine_names:
        if e not in outs:
            continue
        r = res["engines"][e]
        if E.is_int8(e) and E.FP32_OF[e] in outs:
            r["vs_own_fp32"] = stats(e, E.FP32_OF[e])
        if e != "transformers" and "transformers" in outs:
            r["vs_transformers_fp32"] = stats(e, "transformers")
    res["tokens"] = int(sum(int(b["attention_mask"].sum()) for b in batches))
    res["sequences"] = int(sum(len(b["input_ids"]) for b in batches))
    for e, r in res["engines"].items():
        if "vs_own_fp32" in r:
            s = r["vs_own_fp32"]
            print(f"{name} {e} vs {E.FP32_OF[e]}: max |diff| {s['max_abs_diff']:.2e}, mean {s['mean_abs_diff']:.2e} "
                  f"(mean |x| {s['mean_abs_ref']:.2f}), max 1-cosine {s['max_cosine_distance']:.1e}", flush=True)
    return res


def random_sets(args) -> list[tuple]:
    """(name, d, batches, calibration batches) of the benchmark's random-weight models."""
    import numpy as np

    import bertfam

    sets = []
    for mname in [m for m in args.models.split(",") if m]:
        jobs.worker_prepare(argparse.Namespace(threads=args.threads, workdir=args.workdir, model=mname))
        d = os.path.join(args.workdir, mname)
        vocab = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json")).vocab_size
        batches = cases.make_batches("infer 16-128", vocab, seed=3) + cases.make_batches("infer 16-512", vocab, seed=4)
        if args.limit:  # sequences, not batches
            batches = [{k: v[:max(2, args.limit)] for k, v in b.items()} for b in batches]
        rng = np.random.default_rng(2)  # the benchmark's calibration batches (the same files when reused)
        calib = [cases.random_batch(rng, 4, 16, 128, vocab) for _ in range(E.CALIB_ITEMS)]
        sets.append((f"{mname} (random weights)", d, batches, calib))
    return sets


# ----------------------------------------------------------------------------- (b) SST-2
def load_hf_classifier(model_dir: str, work: str):
    """transformers AutoModelForSequenceClassification of the same weights: the directory itself when it is
    a Hugging Face one, else its export_hf."""
    import transformers as T

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    if "bertfam_config_version" in cfg or "model_type" not in cfg:
        hf_dir = os.path.join(work, "sst2-hf")
        if not os.path.isdir(hf_dir):
            import bertfam
            from bertfam.convert.hf import export_hf

            export_hf(bertfam.from_pretrained(model_dir), hf_dir)
    else:
        hf_dir = model_dir
    return T.AutoModelForSequenceClassification.from_pretrained(hf_dir, attn_implementation="sdpa").eval()


def sst2_section(args) -> dict:
    import torch
    from torch import nn

    import bertfam
    from bertfam.modeling.optimize import optimize_for_inference

    exs = sst2_examples(args.sst2_dev, args.limit)
    model = bertfam.from_pretrained(args.sst2_model)
    labels = list(model.config.head.labels or [])
    order = sorted(range(len(exs)), key=lambda i: len(exs[i].text_a))  # less padding; same order for all
    batches = encode(model.tokenizer, [exs[i].text_a for i in order], None, args.max_length, args.batch_size)
    # class index of each gold label (an HF classifier may name its classes LABEL_0, LABEL_1)
    gold = [labels.index(str(exs[i].label)) if str(exs[i].label) in labels else int(exs[i].label) for i in order]
    every = sst2_examples(args.sst2_dev, None)
    calib = encode(model.tokenizer, [x.text_a for x in every[calibration_slice(len(exs), len(every))]], None,
                   args.max_length, 4)

    def make(e: str):
        if e.startswith("bertfam"):
            m = bertfam.from_pretrained(args.sst2_model).eval()
            if e == "bertfam-int8-static":
                m = E.static_bertfam(m, calib)
            return E.quantize_bertfam(m) if e == "bertfam-int8" else optimize_for_inference(m)
        m = load_hf_classifier(args.sst2_model, args.workdir)
        return torch.ao.quantization.quantize_dynamic(m, {nn.Linear}, dtype=torch.qint8) if e.endswith("int8") else m

    res = {"model": rel(args.sst2_model), "dev": rel(args.sst2_dev), "examples": len(exs), "labels": labels,
           "engines": {}}
    logits = {}
    for e in ("bertfam", "bertfam-int8", "bertfam-int8-static", "transformers", "transformers-int8"):
        try:
            m = make(e)
            t0 = time.perf_counter()
            with torch.inference_mode():
                logits[e] = torch.cat([m(**b).logits.float() for b in batches])
            pred = logits[e].argmax(-1).tolist()
            res["engines"][e] = {"available": True, "seconds": time.perf_counter() - t0,
                                 "accuracy": 100.0 * sum(p == g for p, g in zip(pred, gold)) / len(gold)}
        except Exception as ex:
            res["engines"][e] = {"available": False, "reason": failure(ex)}
    for e in ("bertfam-int8", "bertfam-int8-static", "transformers-int8"):
        f = E.FP32_OF[e]
        if e in logits and f in logits:
            r = res["engines"][e]
            r["accuracy_change"] = r["accuracy"] - res["engines"][f]["accuracy"]
            r["agreement_with_fp32"] = 100.0 * float((logits[e].argmax(-1) == logits[f].argmax(-1)).float().mean())
            r["max_abs_logit_diff"] = float((logits[e] - logits[f]).abs().max())
    if "bertfam" in logits and "transformers" in logits:  # the same weights: fp32 engines agree
        res["fp32_max_abs_logit_diff_bertfam_vs_transformers"] = float((logits["bertfam"] - logits["transformers"])
                                                                       .abs().max())
    for e, r in res["engines"].items():
        print(f"SST-2 {e}: " + (f"accuracy {r['accuracy']:.2f}" + (f" ({r['accuracy_change']:+.2f}, agreement "
              f"{r['agreement_with_fp32']:.2f} %)" if "accuracy_change" in r else "")
              if r["available"] else f"UNAVAILABLE: {r['reason']}"), flush=True)
    return res


# ----------------------------------------------------------------------------- (c) MRC
def mrc_scores(exs, raws, pred) -> dict:
    """Official DuReader F1/EM (x100) overall and per answerability under the model's saved no-answer rule,
    and forced F1 (answerable questions, the top span always given), as recipes/mrc_checklist_eval.py."""
    from collections import OrderedDict

    from bertfam.evaluation.dureader import NO_ANSWER, Reference, evaluate
    from bertfam.tasks.mrc import answered

    s = pred.settings
    answers = [r.best.text if answered(r, s.null_threshold, s.answerable_threshold) else NO_ANSWER for r in raws]
    forced = [r.best.text if r.nbest else NO_ANSWER for r in raws]
    out = {}
    groups = {"all": range(len(exs)), "answerable": [i for i, e in enumerate(exs) if not e.is_impossible],
              "unanswerable": [i for i, e in enumerate(exs) if e.is_impossible]}
    for name, idx in groups.items():
        if not idx:
            continue
        refs = OrderedDict((exs[i].qid, Reference(exs[i].answer_texts, exs[i].is_impossible, exs[i].qtype))
                           for i in idx)
        m = evaluate(refs, {exs[i].qid: answers[i] for i in idx})
        out[name] = {"n": len(idx), "F1": round(float(m["F1"]), 2), "EM": round(float(m["EM"]), 2),
                     "answered": sum(answers[i] != NO_ANSWER for i in idx)}
    ans = groups["answerable"]
    if ans:
        refs = OrderedDict((exs[i].qid, Reference(exs[i].answer_texts, False, exs[i].qtype)) for i in ans)
        m = evaluate(refs, {exs[i].qid: forced[i] for i in ans})
        out["forced_answerable"] = {"n": len(ans), "F1": round(float(m["F1"]), 2), "EM": round(float(m["EM"]), 2)}
    return out, answers, forced


def mrc_section(args) -> dict:
    import numpy as np

    import bertfam
    from bertfam.tasks.mrc import MRCPredictor, decode

    exs = mrc_examples(args.mrc_dev, args.mrc_limit)
    items = [{"question": e.question, "passage": e.context, "title": e.title} for e in exs]
    res = {"model": rel(args.mrc_model), "dev": rel(args.mrc_dev), "examples": len(exs), "engines": {}}
    got = {}
    for e in ("bertfam", "bertfam-int8", "bertfam-int8-static"):
        try:
            m = bertfam.from_pretrained(args.mrc_model).eval()
            if e == "bertfam-int8":
                m = E.quantize_bertfam(m)  # before the predictor, as an int8 checkpoint would load
            elif e == "bertfam-int8-static":
                m = E.static_bertfam(m, mrc_calibration(m, args.mrc_dev, len(exs)))
            pred = MRCPredictor(m, batch_size=args.batch_size)
            t0 = time.perf_counter()
            ws = pred.window_scores(items)
            s = pred.settings
            raws = [decode(w, ex.context, s.n_best, s.max_answer_length) for w, ex in zip(ws, exs)]
            scores, answers, forced = mrc_scores(exs, raws, pred)
            got[e] = (ws, raws, answers, forced)
            res["engines"][e] = {"available": True, "seconds": time.perf_counter() - t0, **scores,
                                 "windows": int(sum(len(w) for w in ws))}
            res["settings"] = {"max_length": s.max_length, "doc_stride": s.doc_stride,
                               "max_answer_length": s.max_answer_length, "null_threshold": s.null_threshold,
                               "answerable_threshold": s.answerable_threshold}
        except Exception as ex:
            res["engines"][e] = {"available": False, "reason": failure(ex)}
    for e in [x for x in got if x != "bertfam" and "bertfam" in got]:
        (w32, r32, a32, f32), (w8, r8, a8, f8) = got["bertfam"], got[e]
        dl = [float(np.abs(x[1] - y[1]).max()) for wa, wb in zip(w32, w8) for x, y in zip(wa, wb)]
        pa = [abs(a.p_answerable - b.p_answerable) for a, b in zip(r32, r8)
              if a.p_answerable is not None and b.p_answerable is not None]
        r = res["engines"][e]
        r["F1_change"] = round(r["all"]["F1"] - res["engines"]["bertfam"]["all"]["F1"], 2)
        if "forced_answerable" in r:
            r["forced_F1_change"] = round(r["forced_answerable"]["F1"]
                                          - res["engines"]["bertfam"]["forced_answerable"]["F1"], 2)
        r["same_answer"] = sum(x == y for x, y in zip(a32, a8))
        r["same_top_span"] = sum(x == y for x, y in zip(f32, f8))
        r["max_abs_start_logit_diff"] = max(dl) if dl else None
        if pa:
            r["max_abs_p_answerable_diff"], r["mean_abs_p_answerable_diff"] = max(pa), float(np.mean(pa))
    for e, r in res["engines"].items():
        print(f"MRC {e}: " + (f"F1 {r['all']['F1']:.2f} EM {r['all']['EM']:.2f} answered {r['all']['answered']}"
              f"/{r['all']['n']}" + (f", forced F1 {r['forced_answerable']['F1']:.2f}"
                                     if "forced_answerable" in r else "")
              if r["available"] else f"UNAVAILABLE: {r['reason']}"), flush=True)
    return res


def mrc_calibration(model, dev: str, n: int) -> list[dict]:
    """Calibration batches for bertfam-int8-static: questions and passages of the dev file after the n
    measured ones, at the model's window length."""
    every = mrc_examples(dev, None)
    cal = every[calibration_slice(n, len(every))]
    return encode(model.tokenizer, [e.question for e in cal], [e.context for e in cal],
                  model.config.head.mrc_settings.max_length, 4)


def real_sets(args, res: dict) -> list[tuple]:
    """(name, d, batches, calibration) on the real weights of the SST-2 and MRC models, their own inputs."""
    import bertfam

    sets = []
    n = args.hidden_examples if not args.limit else min(args.hidden_examples, args.limit)
    for key, model_dir, dev, reader in (("sst2", args.sst2_model, args.sst2_dev, "sst2"),
                                        ("mrc", args.mrc_model, args.mrc_dev, "mrc")):
        if key not in res["skipped_real"]:
            tok = bertfam.from_pretrained(model_dir).tokenizer
            if reader == "sst2":
                exs = sst2_examples(dev, None)
                texts, pairs, L, bs = [e.text_a for e in exs], None, args.max_length, 16
            else:
                exs = mrc_examples(dev, None)
                texts, pairs, L, bs = [e.question for e in exs], [e.context for e in exs], 256, 8
            # the measured inputs, and a disjoint slice after them for the static engines' calibration
            batches = encode(tok, texts[:n], pairs[:n] if pairs else None, L, bs)
            cal = calibration_slice(n, len(texts))
            calib = encode(tok, texts[cal], pairs[cal] if pairs else None, L, 4)
            d = os.path.join(args.workdir, f"real-{key}")
            prepare_real(d, model_dir, batches[0])
            sets.append((f"{os.path.basename(os.path.normpath(model_dir))} (real weights, {key} inputs)", d,
                         batches, calib))
    return sets


# ----------------------------------------------------------------------------- output
def machine() -> dict:
    """The CPU this run measured on (the int8 kernels depend on it) and what the static int8 engine packs here."""
    from bench.probes import cpu_family, cpu_simd

    from bertfam.modeling.int8_static import exact_u8s8

    cpu, simd = cpu_simd()
    return {"cpu": cpu, "cpu_family": cpu_family(), "simd": simd,
            "static_int8_weights": "8-bit" if exact_u8s8() else
            "fitted (no VNNI: oneDNN's u8 x s8 kernel adds the products of neighbouring weights in int16, so each "
            "channel holding a pair of large weights of one sign is rescaled just enough not to saturate; "
            "int8_static.fit_weights)"}


def page_stem(env: dict) -> str:
    """This CPU kind's page name: `make bench`'s page name with int8_accuracy for benchmarks."""
    from bench.probes import page_stem as bench_stem

    return "int8_accuracy" + bench_stem(env.get("cpu", ""), env.get("simd", []),
                                        env.get("cpu_family"))[len("benchmarks"):]


def cpu_line(env: dict) -> str:
    from bench.report import NOTABLE_FLAGS

    if "cpu" not in env:  # a results file from before the CPU was recorded
        return "CPU: not recorded."
    fam = f", cpu family {env['cpu_family']}" if env.get("cpu_family") is not None else ""
    flags = " ".join(f for f in NOTABLE_FLAGS if f in env.get("simd", [])) or "none of " + " ".join(NOTABLE_FLAGS)
    return (f"CPU: {env['cpu']}{fam}; flags: {flags}. Static int8 (bertfam-int8-static) packs "
            f"{env['static_int8_weights']} weights here.")


def null_rule(threshold: float) -> str:
    """The null-score test as words: a threshold of -1e9 or below (what the saved decoding stores to turn
    the test off) is no test."""
    return "no null-score test" if threshold <= -1e8 else f"null threshold {threshold:.2f}"


def markdown(res: dict) -> str:
    env = res["environment"]
    bench_page = "benchmarks" + page_stem(env)[len("int8_accuracy"):] + ".md"
    lines = ["## Accuracy cost of int8 inference", "",
             f"Produced by `benchmarks/int8_accuracy.py` ({res['minutes']:.0f} min; torch {env['torch']}, "
             f"transformers {env['transformers']}, onnxruntime {env['onnxruntime']}, OpenVINO {env['openvino']}, "
             f"nncf {env['nncf']}; {env['threads']} threads)" + (f", --limit {res['limit']}" if res["limit"] else "")
             + (f", --mrc-limit {res['mrc_limit']}" if res.get("mrc_limit") not in (None, res["limit"]) else "")
             + f". The engines are those of [{bench_page}]({bench_page}) (`benchmarks/bench/engines.py`).", "",
             cpu_line(env), ""]
    if res.get("hidden"):
        lines += ["### Hidden states", "",
                  "|Δ| = |last_hidden_state(int8) − last_hidden_state(fp32 of the same engine)| over real tokens "
                  "(max and mean; mean |x| = the fp32 values' mean magnitude), 1 − cos = one minus the cosine "
                  "similarity of a token's two vectors (max and mean over tokens); vs HF = max |Δ| against "
                  "transformers fp32.", "",
                  "| weights (inputs) | engine | max abs Δ | mean abs Δ | mean abs x | max 1 − cos | mean 1 − cos "
                  "| max abs Δ vs HF |",
                  "|---|---|---:|---:|---:|---:|---:|---:|"]
        for name, h in res["hidden"].items():
            for e, r in h["engines"].items():
                if not E.is_int8(e):
                    continue
                if not r["available"]:
                    lines.append(f"| {name} | {e} | unavailable: {r['reason']} | | | | | |")
                    continue
                s, v = r.get("vs_own_fp32"), r.get("vs_transformers_fp32")
                if s is None:
                    continue
                lines.append(f"| {name} | {e} | {s['max_abs_diff']:.2e} | {s['mean_abs_diff']:.2e} | "
                             f"{s['mean_abs_ref']:.2f} | {s['max_cosine_distance']:.1e} | "
                             f"{s['mean_cosine_distance']:.1e} | "
                             + (f"{v['max_abs_diff']:.2e}" if v else "-") + " |")
        lines.append("")
    for key, title in (("sst2", "SST-2 dev accuracy"), ("mrc", "MRC F1, int8 against fp32")):
        sec = res.get(key)
        if sec is None:
            why = res["skipped"].get(key)
            if why:
                lines += [f"### {title}", "", f"Not measured: {why}.", ""]
            continue
        lines += [f"### {title}", "", f"Model `{sec['model']}`, dev `{sec['dev']}` ({sec['examples']} examples)."
                  + (" This table measures what int8 costs against fp32 on one model and one dev set (read the "
                     "differences; a model may have been trained on these questions): it is not a quality figure "
                     "for the MRC system, whose quality is the out-of-fold score in its model card."
                     if key == "mrc" else ""), ""]
        if key == "sst2":
            lines += ["| engine | accuracy | change vs fp32 | same prediction as fp32 | max abs Δ logit | seconds |",
                      "|---|---:|---:|---:|---:|---:|"]
            for e, r in sec["engines"].items():
                if not r["available"]:
                    lines.append(f"| {e} | unavailable: {r['reason']} | | | | |")
                    continue
                lines.append(f"| {e} | {r['accuracy']:.2f} | "
                             + (f"{r['accuracy_change']:+.2f} | {r['agreement_with_fp32']:.2f} % | "
                                f"{r['max_abs_logit_diff']:.3f}" if "accuracy_change" in r else "- | - | -")
                             + f" | {r['seconds']:.1f} |")
        else:
            st = sec.get("settings", {})
            lines += ["Official DuReader F1 / EM (×100) with the model's saved decoding "
                      f"(windows {st.get('max_length')}, stride {st.get('doc_stride')}, answers up to "
                      f"{st.get('max_answer_length')} tokens, " + null_rule(st.get("null_threshold", 0)) + ", "
                      f"P(answerable) ≥ {st.get('answerable_threshold', 0):.2f}); forced = F1 on the answerable "
                      "questions with the top span always given (span quality alone).", "",
                      "| engine | F1 | EM | answered | forced F1 | same answer as fp32 | same top span | "
                      "max abs Δ P(answerable) | seconds |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
            for e, r in sec["engines"].items():
                if not r["available"]:
                    lines.append(f"| {e} | unavailable: {r['reason']} | | | | | | | |")
                    continue
                n = r["all"]["n"]
                fa = r.get("forced_answerable", {}).get("F1")
                lines.append(f"| {e} | {r['all']['F1']:.2f} | {r['all']['EM']:.2f} | {r['all']['answered']}/{n} | "
                             + (f"{fa:.2f}" if fa is not None else "-") + " | "
                             + (f"{r['same_answer']}/{n} | {r['same_top_span']}/{n} | "
                                + (f"{r['max_abs_p_answerable_diff']:.3f}" if "max_abs_p_answerable_diff" in r
                                   else "-") if "same_answer" in r else "- | - | -")
                             + f" | {r['seconds']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert-base,bert-mini",
                    help="random-weight benchmark models for (a), comma list ('' for none; bert-tiny: smoke test)")
    ap.add_argument("--engines", default=None, help="engines for (a) (default: all, fp32 and int8)")
    ap.add_argument("--sst2-model", default=DEFAULT_SST2_MODEL, help="fine-tuned SST-2 classifier directory")
    ap.add_argument("--sst2-dev", default=DEFAULT_SST2_DEV, help="SST-2 dev.tsv (sentence, label)")
    ap.add_argument("--mrc-model", default=DEFAULT_MRC_MODEL, help="span (MRC) model directory")
    ap.add_argument("--mrc-dev", default=DEFAULT_MRC_DEV, help="SQuAD-layout dev file")
    ap.add_argument("--sections", default="hidden,sst2,mrc")
    ap.add_argument("--limit", type=int, default=None, help="first N examples (sequences for (a)) of each set")
    ap.add_argument("--mrc-limit", type=int, default=None, help="first N questions of the MRC set "
                    "(default: --limit); the static engine calibrates on the 32 after them")
    ap.add_argument("--hidden-examples", type=int, default=64, help="real-weight inputs for (a)")
    ap.add_argument("--max-length", type=int, default=128, help="SST-2 tokens")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs"), help="int8_accuracy.json/.md go here")
    ap.add_argument("--workdir", default=None, help="model files (default: a temporary directory); the "
                    "benchmark's --workdir can be reused")
    args = ap.parse_args()
    args.mrc_limit = args.mrc_limit or args.limit
    # before torch is imported: the benchmark's thread policy (idle threads sleep)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no load report per engine
    import logging

    logging.getLogger().setLevel(logging.ERROR)  # onnxruntime.quantization warns through the root logger
    logging.getLogger("nncf").setLevel(logging.ERROR)
    os.environ.update(OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
                      BENCH_THREADS=str(args.threads), BENCH_SPIN="0", TOKENIZERS_PARALLELISM="false")
    import warnings

    warnings.filterwarnings("ignore")
    import torch

    torch.set_num_threads(args.threads)
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bertfam-int8acc-")
    sections = args.sections.split(",")
    started = time.time()
    import onnxruntime
    import transformers

    res = {"limit": args.limit, "mrc_limit": args.mrc_limit, "skipped": {}, "skipped_real": {},
           "environment": {**machine(), "torch": torch.__version__, "transformers": transformers.__version__,
                           "onnxruntime": onnxruntime.__version__, **E.versions(), "threads": args.threads,
                           "python": platform.python_version()}}
    for key, model, dev in (("sst2", args.sst2_model, args.sst2_dev), ("mrc", args.mrc_model, args.mrc_dev)):
        missing = [p for p in (model, dev) if not os.path.exists(p)]
        if key not in sections:
            res["skipped_real"][key] = "not asked for (--sections)"
        elif missing:
            res["skipped"][key] = res["skipped_real"][key] = f"{', '.join(rel(p) for p in missing)} not found"
            print(f"{key}: skipped, {res['skipped'][key]}", flush=True)
    if "hidden" in sections:
        names = args.engines.split(",") if args.engines else list(E.ALL)
        res["hidden"] = {}
        for name, d, batches, calib in random_sets(args) + real_sets(args, res):
            res["hidden"][name] = hidden_section(name, d, batches, calib, names)
    for key, fn in (("sst2", sst2_section), ("mrc", mrc_section)):
        if key in sections and key not in res["skipped"]:
            res[key] = fn(args)
    res["minutes"] = (time.time() - started) / 60
    from bertfam.utils import atomic_write_text

    os.makedirs(args.out_dir, exist_ok=True)
    md = markdown(res)
    print("\n" + md)
    stem = page_stem(res["environment"])
    atomic_write_text(os.path.join(args.out_dir, stem + ".md"), md + "\n")
    atomic_write_text(os.path.join(args.out_dir, stem + ".json"),
                      json.dumps(res, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
