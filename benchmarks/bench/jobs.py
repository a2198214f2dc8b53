"""The encoder benchmark's measurements, each one job of a worker process (bench/worker.py): `prepare` the
model files, `probe` the extra engines, `time` one case's engines interleaved, the `memory` of one engine
on one case, the machine's `ceiling`. encoder_throughput.py runs them (`run_job`); varlen_kernels.py and
int8_accuracy.py reuse `prepare`.

A job reads its options from an argparse namespace: threads, reps, workdir, scale, min_rep_s,
ceiling_scale, model, case, engines (those of encoder_throughput.py's worker command line)."""
from __future__ import annotations

import json
import os
import sys
import time

from . import cases, probes, worker
from . import engines as E

SCRIPT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "encoder_throughput.py")


def load_engine(engine: str, kind: str, d: str):
    """A callable batch -> None running one forward (inference, engines.load_hidden) or one optimizer step
    (training, engines.load_train_step); raises engines.Unavailable for an engine that cannot run here."""
    if kind == "infer":
        return E.load_hidden(engine, d)
    return E.load_train_step(engine, d)


def case_inputs(args):
    """(model directory, its bertfam config, the case's kind, its batches: MLM batches for training) of the
    job's --model and --case."""
    import bertfam

    d = os.path.join(args.workdir, args.model)
    cfg = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json"))
    kind = cases.CASES[args.case][0]
    batches = cases.make_batches(args.case, cfg.vocab_size, scale=args.scale)
    if kind == "train":
        batches = cases.mlm_batches(batches, cfg.vocab_size)
    return d, cfg, kind, batches


def worker_time(args) -> dict:
    """All engines of one case in this process, interleaved; seconds per pass over the case's batches."""
    import torch  # noqa: F401

    worker.set_threads(args.threads)
    d, cfg, kind, batches = case_inputs(args)
    fns, unavailable = {}, {}
    for e in (E.TRAIN if kind == "train" else E.INFER):
        if e in args.engines.split(","):
            try:
                fns[e] = load_engine(e, kind, d)
            except E.Unavailable as ex:
                unavailable[e] = str(ex)
    engines = list(fns)
    times = {e: [] for e in engines}
    for e in engines:  # warm-up
        for b in batches:
            fns[e](b)
    gflops, gops = [], []
    for r in range(args.reps):
        order = engines[r % len(engines):] + engines[:r % len(engines)]
        for e in order:
            if args.threads > 1:  # let the other engine's spinning threads go to sleep (one thread: none)
                time.sleep(0.2)
            # a short case (bert-mini: ~0.1 s a pass) is passed over repeatedly for at least --min-rep-s,
            # so one repetition is not one noisy sample of a few milliseconds
            t0, passes = time.perf_counter(), 0
            while True:
                for b in batches:
                    fns[e](b)
                passes += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= args.min_rep_s:
                    break
            times[e].append(elapsed / passes)
        m = max(16, round(1024 * args.ceiling_scale))  # rows of the products (--ceiling-scale)
        gflops.append(probes.matmul_gflops(m))  # the ceilings under this repetition's load
        if kind == "infer":
            gops.append(probes.int8_gops(2 * m))
    # a ceiling is the best rate seen: a median of short products under a passing disturbance read
    # 91 GFLOP/s once while the engines around it ran at 140 (146 % "of the ceiling")
    out = {"times": times, "real_tokens": cases.real_tokens(batches), "ceiling": max(gflops), "ceilings": gflops,
           "padded_tokens": int(sum(b["input_ids"].numel() for b in batches)),
           "flops": cases.model_flops(cfg, batches, kind == "train"), "unavailable": unavailable}
    if gops:
        out.update(int8_ceiling=max(gops), int8_ceilings=gops)
    return out


def worker_memory(args) -> dict:
    """One engine, one pass over the case's batches: peak RSS and its growth over the imports' RSS."""
    import torch  # noqa: F401

    worker.set_threads(args.threads)
    import bertfam  # noqa: F401  (imported before the base RSS is read: the library is part of the base)

    for lib in ("transformers", "onnxruntime", "openvino"):  # the engine's libraries: part of the base RSS
        if args.engines.startswith(lib):
            __import__(lib)
    if args.engines.startswith("openvino-int8"):
        import nncf  # noqa: F401
    base = probes.rss_mb()
    d, cfg, kind, batches = case_inputs(args)
    fn = load_engine(args.engines, kind, d)
    load_peak = probes.vm_hwm_mb()
    reset_hwm = probes.reset_peak()
    for b in batches:
        fn(b)
    # resetting VmHWM also resets ru_maxrss, so the overall peak is the larger of the two phases
    out = {"peak_mb": max(probes.peak_mb(), load_peak), "import_rss_mb": base, "load_peak_mb": load_peak}
    if reset_hwm:  # the peak while running, loading excluded (the model's weights are still resident)
        out["run_peak_mb"] = probes.vm_hwm_mb()
    return out


def worker_ceiling(args) -> dict:
    """The machine's fp32 matmul and int8 GEMM ceilings (probes.ceilings), under the benchmark's threads."""
    worker.set_threads(args.threads)
    return probes.ceilings(args.ceiling_scale, args.reps)


def worker_prepare(args) -> dict:
    """Random bertfam weights -> HF directory (export_hf) -> ONNX export of the HF BertModel; parity check."""
    import torch

    worker.set_threads(args.threads)
    import transformers as T

    from bertfam.convert.hf import export_hf

    d = os.path.join(args.workdir, args.model)
    if os.path.isfile(os.path.join(d, "prepare.json")):  # --workdir reused: same seed, same files
        with open(os.path.join(d, "prepare.json")) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    model = cases.bertfam_model(args.model, seed=0)
    cfg = model.config
    model.save_pretrained(os.path.join(d, "bertfam"))
    export_hf(model, os.path.join(d, "hf"))
    hf = T.BertModel.from_pretrained(os.path.join(d, "hf"), attn_implementation="sdpa").eval()
    batches = cases.make_batches("infer 16-128", cfg.vocab_size, seed=1, scale=0.5)
    b = batches[0]
    names = E.ONNX_INPUTS
    export_s = E.export_onnx(d, b, hf)
    import onnxruntime as ort

    sess = ort.InferenceSession(os.path.join(d, "model.onnx"), providers=["CPUExecutionProvider"])
    m = b["attention_mask"].bool()
    with torch.inference_mode():
        ref = hf(**{k: b[k] for k in names}).last_hidden_state
        ours = model.backbone(**{k: b[k] for k in names}).last_hidden_state
    onnx_out = torch.from_numpy(sess.run(["last_hidden_state"], {k: b[k].numpy() for k in names})[0])
    res = {"export_s": export_s, "params_m": sum(p.numel() for p in model.backbone.parameters()) / 1e6,
           "diff_bertfam_vs_hf": float((ours - ref)[m].abs().max()),
           "diff_onnx_vs_hf": float((onnx_out - ref)[m].abs().max())}
    with open(os.path.join(d, "prepare.json"), "w") as f:
        json.dump(res, f)
    return res


def worker_probe(args) -> dict:
    """Engines beyond the base three (comma list): build each one's files (engines.build), run one batch,
    compare its last_hidden_state with transformers fp32 on real tokens. {engine: result}; a result is
    {"available": False, "reason": ...} for an engine that cannot run here."""
    worker.set_threads(args.threads)
    import numpy as np

    import bertfam

    d = os.path.join(args.workdir, args.model)
    cfg = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json"))
    b = cases.make_batches("infer 16-128", cfg.vocab_size, seed=1, scale=0.5)[0]
    rng = np.random.default_rng(2)  # calibration for nncf.quantize: random ids, like the timed batches
    calib = [cases.random_batch(rng, 4, 16, 128, cfg.vocab_size) for _ in range(E.CALIB_ITEMS)]
    ref = None
    out = {}
    for e in args.engines.split(","):
        cached = os.path.join(d, f"probe-{e}.json")
        if os.path.isfile(cached):  # --workdir reused
            with open(cached) as f:
                out[e] = json.load(f)
            continue
        try:
            res = {"available": True, **E.build(e, d, calib)}
            fn = E.load_hidden(e, d)
            if ref is None:
                ref = E.load_hidden("transformers", d)(b)
            diff = E.diff_stats(fn(b), ref, b["attention_mask"])
            del fn
            res.update(max_abs_diff_vs_hf=diff["max_abs_diff"], mean_abs_diff_vs_hf=diff["mean_abs_diff"],
                       mean_abs_hf=diff["mean_abs_ref"])
        except E.Unavailable as ex:
            out[e] = {"available": False, "reason": str(ex)}
            continue
        except Exception as ex:  # a library that is there but fails on this model: reported, not fatal
            out[e] = {"available": False, "reason": f"{type(ex).__name__}: {str(ex)[:300]}"}
            continue
        with open(cached, "w") as f:
            json.dump(res, f)
        out[e] = res
    return out


def worker_linear_probe(args) -> dict:
    """bertfam's fp32 projection-kernel probe (linear="auto", bertfam/modeling/linear_probe.py) for the
    model's shapes, run once here so that the engines' workers find its choice in the cache (XDG_CACHE_HOME,
    set by encoder_throughput.py to a directory of this run) and no timed or memory-measured process probes.
    {"choice", "rows", "seconds", "probe_s"} as cached."""
    worker.set_threads(args.threads)
    from bertfam.modeling import linear as L
    from bertfam.modeling import linear_probe as P

    model = cases.bertfam_model(args.model)
    shapes = sorted({L.shape_class(lin) for _, _, lin in L.projections(model)})
    P.choose(shapes)
    with open(P.cache_path()) as f:
        entries = json.load(f)["entries"]
    key, _ = P.cache_key(shapes)
    return {k: entries[key][k] for k in ("choice", "rows", "seconds", "probe_s")}


JOBS = {"time": worker_time, "memory": worker_memory, "ceiling": worker_ceiling, "prepare": worker_prepare,
        "probe": worker_probe, "linear_probe": worker_linear_probe}


def run_job(what: str, *, threads: int, spin: bool = False, **options) -> dict:
    """Run job `what` in a worker process of encoder_throughput.py (`--worker what --key value` for each of
    `options`), under the benchmark's thread settings (worker.env); its result."""
    cmd = [sys.executable, SCRIPT, "--worker", what, "--threads", str(threads)]
    for k, v in options.items():
        cmd += [f"--{k.replace('_', '-')}", str(v)]
    return worker.run(cmd, worker.env(threads, spin), what=f"worker {what} {options}")
