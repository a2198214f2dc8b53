"""Encoder throughput on CPU, fp32 and int8: bertfam vs Hugging Face transformers, onnxruntime and OpenVINO,
same weights, batches, threads.

    make bench                                                              # installs the bench extra first
    nice -n 10 .venv/bin/python benchmarks/encoder_throughput.py            # full run (~35-45 min quiet)
    .venv/bin/python benchmarks/encoder_throughput.py --quick               # bert-mini only, ~6 min

One run measures, for BERT-base and bert-mini (21128-piece Chinese vocabulary, random weights made by
bertfam and converted with bertfam.convert.hf.export_hf, so every engine runs the very same weights):
1. inference, REAL (non-padding) tokens/s, batch lengths uniform in 16-128 and 16-512, on nine engines
   (benchmarks/engines.py says exactly what each is): transformers fp32 and int8 (torch.ao
   quantize_dynamic), onnxruntime fp32 and int8 (quantize_dynamic of a torch.onnx.export(dynamo=True)
   export of that same HF model), OpenVINO fp32, int8 weights-only (nncf.compress_weights) and static int8
   (nncf.quantize, calibrated on random token ids), bertfam fp32 and int8
   (optimize_for_inference(int8=True)). The padded engines get batches padded to their longest sequence;
   bertfam gets the same padded batches and its default (unpadded) path. An engine that cannot run here
   (OpenVINO / nncf not installed, bertfam's int8 path not there yet) is reported as unavailable, with why;
2. inference at full length 128 and 512 (no padding);
3. MLM training steps (AdamW, dropout on): bertfam TaskModel (MLM head on masked positions only) vs
   BertForMaskedLM, both fed the same batches from bertfam's PretrainCollator (15 % token masking);
4. peak resident memory of each engine per case, each in its own subprocess (ru_maxrss), also as growth
   over the process's RSS once its libraries are imported.
Also the machine's fp32 matmul ceiling (torch, GFLOP/s) and int8 GEMM ceiling (torch's dynamic-quantized
linear, torch.ops.quantized.linear_dynamic, GOP/s), and each result as a fraction of both (model FLOPs of
real tokens only: 2 x linear MACs + attention; x3 for training; the MLM head is not counted); int8 engines
are read against the int8 ceiling, fp32 ones against the fp32 ceiling. Ratios: to transformers fp32 (×HF),
and bertfam's to the fastest other engine of its precision (×best peer).
Timings: the engines of one case run interleaved in one process (engine order rotates every repetition,
so load drift hits all alike); each number is the median of --reps repetitions after one warm-up (one
repetition = passes over the case's batches for at least --min-rep-s seconds, time per pass), with
the spread (min-max) beside it. Writes the table to stdout, docs/benchmarks.md, docs/benchmarks.png and
docs/benchmarks.json. The accuracy cost of the int8 engines: benchmarks/int8_accuracy.py.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
import engines as E  # noqa: E402  (benchmarks/ is on the path when run as a script)
from proc_memory import status_mb  # noqa: E402

MODELS = {"bert-base": "bert-base-chinese", "bert-mini": "bert-mini-chinese",
          "bert-tiny": "bert-tiny-chinese"}  # bert-tiny: the smoke test only
# case: (kind, batch size, min length, max length, batches per repetition); quick mode halves the work
CASES = {
    "infer 16-128": ("infer", 8, 16, 128, 2),
    "infer full 128": ("infer", 8, 128, 128, 1),
    "train MLM 16-128": ("train", 8, 16, 128, 1),
    "infer 16-512": ("infer", 8, 16, 512, 1),
    "infer full 512": ("infer", 2, 512, 512, 1),
}
ENGINES_INFER = E.ALL  # fp32 and int8, see engines.py
ENGINES_TRAIN = ("transformers", "bertfam")


# ----------------------------------------------------------------------------- helpers (workers)
def rss_mb() -> float:
    return status_mb("VmRSS")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set, or parallel work started (a worker called in-process: int8_accuracy.py)
        pass


def make_batches(case: str, vocab: int, seed: int = 0, scale: float = 1.0) -> list[dict]:
    """The case's batches, padded to their longest sequence (right padding, as tokenizers do)."""
    import numpy as np

    kind, B, lo, hi, n = CASES[case]
    B = max(1 if lo == hi else 2, round(B * scale))
    rng = np.random.default_rng(seed)
    return [random_batch(rng, B, lo, hi, vocab) for _ in range(n)]


def random_batch(rng, B: int, lo: int, hi: int, vocab: int) -> dict:
    """B sequences [CLS] random ids [SEP], lengths uniform in lo..hi, right-padded to the longest."""
    import numpy as np
    import torch

    lengths = rng.integers(lo, hi + 1, size=B)
    T = int(lengths.max())
    mask = torch.from_numpy((np.arange(T)[None] < lengths[:, None]).astype(np.int64))
    ids = torch.from_numpy(rng.integers(106, vocab, size=(B, T))) * mask  # 106+: no special ids
    ids[:, 0] = 101  # [CLS]
    ids[torch.arange(B), torch.from_numpy(lengths - 1)] = 102  # [SEP]
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids)}


def mlm_batches(batches: list[dict], vocab: int, seed: int = 0) -> list[dict]:
    """Re-collate with bertfam's PretrainCollator: 15 % token masking, labels and masked_positions."""
    import numpy as np
    import torch

    from bertfam.objectives.collator import PretrainCollator
    from bertfam.objectives.masking import WORD_BEGIN, Masker, MaskingConfig

    masker = Masker(MaskingConfig(strategy="token", rate=0.15), vocab, mask_id=103, special_ids=[0, 100, 101, 102, 103])
    coll = PretrainCollator(masker, pad_id=0, pair=False, masked_positions=True)
    torch.manual_seed(seed)
    out = []
    for b in batches:
        exs = []
        for ids, m in zip(b["input_ids"], b["attention_mask"]):
            real = ids[m.bool()].numpy()
            exs.append({"input_ids": real, "flags": np.full(len(real), WORD_BEGIN, np.uint8)})
        out.append(coll(exs))
    return out


def real_tokens(batches: list[dict]) -> int:
    return int(sum(int(b["attention_mask"].sum()) for b in batches))


def model_flops(cfg, batches: list[dict], train: bool) -> float:
    """Useful FLOPs of the encoder on the real tokens (no padding), per pass over `batches`."""
    H, I, L = cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers
    total = 0.0
    for b in batches:
        for n in b["attention_mask"].sum(1).tolist():
            total += L * (2 * n * (4 * H * H + 2 * H * I) + 4 * n * n * H)
    return total * (3 if train else 1)


# ----------------------------------------------------------------------------- engines
def load_engine(engine: str, kind: str, d: str):
    """A callable batch -> None running one forward (inference, engines.load_hidden) or one optimizer step
    (training); raises engines.Unavailable for an engine that cannot run here."""
    import torch

    if kind == "infer":
        return E.load_hidden(engine, d)
    if engine == "transformers":
        import transformers as T

        model = T.BertForMaskedLM.from_pretrained(os.path.join(d, "hf"), attn_implementation="sdpa")
        keys = ("input_ids", "attention_mask", "token_type_ids", "labels")
    else:
        import bertfam

        model = bertfam.from_pretrained(os.path.join(d, "hf"), task="mlm")
        keys = ("input_ids", "attention_mask", "token_type_ids", "labels", "masked_positions")
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)

    def step(b):
        loss = model(**{k: b[k] for k in keys}).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return step


def worker_time(args) -> dict:
    """All engines of one case in this process, interleaved; seconds per pass over the case's batches."""
    import torch  # noqa: F401

    set_threads(args.threads)
    import bertfam

    d = os.path.join(args.workdir, args.model)
    cfg = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json"))
    kind = CASES[args.case][0]
    batches = make_batches(args.case, cfg.vocab_size, scale=args.scale)
    if kind == "train":
        batches = mlm_batches(batches, cfg.vocab_size)
    fns, unavailable = {}, {}
    for e in (ENGINES_TRAIN if kind == "train" else ENGINES_INFER):
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
            time.sleep(0.2)  # let the other engine's spinning threads go to sleep
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
        gflops.append(matmul_gflops(m))  # the ceilings under this repetition's load
        if kind == "infer":
            gops.append(E.int8_gops(2 * m))
    # a ceiling is the best rate seen: a median of short products under a passing disturbance read
    # 91 GFLOP/s once while the engines around it ran at 140 (146 % "of the ceiling")
    out = {"times": times, "real_tokens": real_tokens(batches), "ceiling": max(gflops), "ceilings": gflops,
           "padded_tokens": int(sum(b["input_ids"].numel() for b in batches)),
           "flops": model_flops(cfg, batches, kind == "train"), "unavailable": unavailable}
    if gops:
        out.update(int8_ceiling=max(gops), int8_ceilings=gops)
    return out


def matmul_gflops(m: int = 1024, k: int = 768, n: int = 3072, reps: int = 5) -> float:
    """fp32 GFLOP/s of one BERT-shaped matmul (FFN input), the best of `reps`."""
    import torch

    a, b = torch.randn(m, k), torch.randn(k, n)
    a @ b
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        a @ b
        ts.append(time.perf_counter() - t0)
    return 2 * m * k * n / min(ts) / 1e9


def worker_memory(args) -> dict:
    """One engine, one pass over the case's batches: peak RSS and its growth over the imports' RSS."""
    import torch  # noqa: F401

    set_threads(args.threads)
    import bertfam

    for lib in ("transformers", "onnxruntime", "openvino"):  # the engine's libraries: part of the base RSS
        if args.engines.startswith(lib):
            __import__(lib)
    if args.engines.startswith("openvino-int8"):
        import nncf  # noqa: F401
    base = rss_mb()
    d = os.path.join(args.workdir, args.model)
    cfg = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json"))
    kind = CASES[args.case][0]
    batches = make_batches(args.case, cfg.vocab_size, scale=args.scale)
    if kind == "train":
        batches = mlm_batches(batches, cfg.vocab_size)
    fn = load_engine(args.engines, kind, d)
    load_peak = vm_hwm_mb()
    reset_hwm = reset_peak()
    for b in batches:
        fn(b)
    # resetting VmHWM also resets ru_maxrss, so the overall peak is the larger of the two phases
    out = {"peak_mb": max(peak_mb(), load_peak), "import_rss_mb": base, "load_peak_mb": load_peak}
    if reset_hwm:  # the peak while running, loading excluded (the model's weights are still resident)
        out["run_peak_mb"] = vm_hwm_mb()
    return out


def vm_hwm_mb() -> float:
    return status_mb("VmHWM")


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def worker_ceiling(args) -> dict:
    """fp32 matmul GFLOP/s of torch here: the best median over a square and two BERT-shaped products."""
    import torch

    set_threads(args.threads)
    res = {}
    r = args.ceiling_scale  # the products' rows: 1 for measuring, smaller for the smoke test
    for m, k, n in [(round(2048 * r), 2048, 2048), (round(1024 * r), 768, 3072), (round(1024 * r), 3072, 768)]:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        ts = []
        for _ in range(max(5, args.reps)):
            t0 = time.perf_counter()
            a @ b
            ts.append(time.perf_counter() - t0)
        res[f"{m}x{k}x{n}"] = 2 * m * k * n / statistics.median(ts) / 1e9
    # int8: torch's dynamic-quantized linear (what quantize_dynamic's nn.Linear runs), a square-ish product
    # and the two BERT-shaped ones; GOP/s, median of the repetitions like the fp32 numbers above
    i8 = {f"{m}x{k}x{n}": E.int8_gops(m, k, n, reps=max(5, args.reps), best=False)
          for m, k, n in [(round(2048 * r), 1024, 1024), (round(1024 * r), 768, 3072), (round(1024 * r), 3072, 768)]}
    return {"gflops": res, "ceiling": max(res.values()), "int8_gops": i8, "int8_ceiling": max(i8.values())}


def worker_prepare(args) -> dict:
    """Random bertfam weights -> HF directory (export_hf) -> ONNX export of the HF BertModel; parity check."""
    import torch

    set_threads(args.threads)
    import transformers as T

    import bertfam
    from bertfam.convert.hf import export_hf

    d = os.path.join(args.workdir, args.model)
    if os.path.isfile(os.path.join(d, "prepare.json")):  # --workdir reused: same seed, same files
        with open(os.path.join(d, "prepare.json")) as f:
            return json.load(f)
    os.makedirs(d, exist_ok=True)
    cfg = bertfam.preset(MODELS[args.model], head=bertfam.HeadConfig(task="mlm"))
    model = bertfam.build_model(cfg, seed=0).eval()
    model.save_pretrained(os.path.join(d, "bertfam"))
    export_hf(model, os.path.join(d, "hf"))
    hf = T.BertModel.from_pretrained(os.path.join(d, "hf"), attn_implementation="sdpa").eval()
    batches = make_batches("infer 16-128", cfg.vocab_size, seed=1, scale=0.5)
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
    set_threads(args.threads)
    import numpy as np

    import bertfam

    d = os.path.join(args.workdir, args.model)
    cfg = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json"))
    b = make_batches("infer 16-128", cfg.vocab_size, seed=1, scale=0.5)[0]
    rng = np.random.default_rng(2)  # calibration for nncf.quantize: random ids, like the timed batches
    calib = [random_batch(rng, 4, 16, 128, cfg.vocab_size) for _ in range(E.CALIB_ITEMS)]
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


WORKERS = {"time": worker_time, "memory": worker_memory, "ceiling": worker_ceiling, "prepare": worker_prepare,
           "probe": worker_probe}


# ----------------------------------------------------------------------------- parent
def run_worker(args, what: str, **kw) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", what, "--threads", str(args.threads),
           "--reps", str(args.reps), "--workdir", args.workdir, "--scale", str(args.scale),
           "--min-rep-s", str(args.min_rep_s), "--ceiling-scale", str(args.ceiling_scale)]
    for k, v in kw.items():
        cmd += [f"--{k}", str(v)]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads),
               BENCH_THREADS=str(args.threads), TOKENIZERS_PARALLELISM="false", PYTHONWARNINGS="ignore",
               BENCH_SPIN=str(int(args.spin)))
    if not args.spin:  # idle OpenMP threads sleep instead of spinning (both torch engines alike)
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"worker {what} {kw} failed:\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT "):])


def summarize(times: list[float], work: float) -> dict:
    rates = sorted(work / t for t in times)
    return {"median": statistics.median(rates), "min": rates[0], "max": rates[-1]}


BASE = ("transformers", "onnxruntime", "bertfam")  # made and checked by the prepare worker; a failure is fatal


def last_line(err: Exception) -> str:
    lines = [ln for ln in str(err).splitlines() if ln.strip()]
    return lines[-1][:300] if lines else type(err).__name__


def probe_engines(args, mname: str, requested: list[str]) -> dict:
    """{engine: probe result} for the requested engines beyond the base three: all in one process, or, if
    that process dies (a native crash), each in its own, so that one broken engine is reported alone."""
    extra = [e for e in requested if e not in BASE and e in ENGINES_INFER]
    if not extra:
        return {}
    try:
        out = run_worker(args, "probe", model=mname, engines=",".join(extra))
    except RuntimeError:
        out = {}
        for e in extra:
            try:
                out.update(run_worker(args, "probe", model=mname, engines=e))
            except RuntimeError as ex:  # reported, the run goes on
                out[e] = {"available": False, "reason": f"crashed: {last_line(ex)}"}
    for e in extra:
        p = out[e]
        if p["available"]:
            print(f"{mname} {e}: ready (files built in {p.get('build_s', 0):.0f} s); |diff| vs transformers fp32 "
                  f"on real tokens: max {p['max_abs_diff_vs_hf']:.1e}, mean {p['mean_abs_diff_vs_hf']:.1e}",
                  flush=True)
        else:
            print(f"{mname} {e}: UNAVAILABLE: {p['reason']}", flush=True)
    return {e: out[e] for e in extra}


def time_case(args, mname: str, case: str, live: list[str]) -> dict:
    """The case's interleaved timing worker; if it dies with the extra engines in it, again with the base
    three only (the extras then reported unavailable with the failure)."""
    try:
        return run_worker(args, "time", model=mname, case=case, engines=",".join(live))
    except RuntimeError as ex:
        extra = [e for e in live if e not in BASE]
        if not extra:
            raise
        t = run_worker(args, "time", model=mname, case=case, engines=",".join(e for e in live if e in BASE))
        t["unavailable"].update({e: f"the timing worker failed with it: {last_line(ex)}" for e in extra})
        return t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="bert-mini only, half batches, 3 repetitions")
    ap.add_argument("--scale", type=float, default=None,
                    help="batch sizes x this (default 1; 0.5 with --quick); for a busy machine")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--min-rep-s", type=float, default=1.0,
                    help="each repetition passes over the case's batches until this many seconds have gone by "
                         "(seconds per pass = elapsed / passes)")
    ap.add_argument("--models", default=None, help="comma list of bert-base,bert-mini (bert-tiny: smoke test)")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--engines", default=",".join(ENGINES_INFER),
                    help="comma list of " + ", ".join(ENGINES_INFER) + " (training cases: transformers and "
                         "bertfam only)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--ceiling-scale", type=float, default=1.0,
                    help="rows of the ceiling matmuls x this (the smoke test: 1/16, a rough ceiling in little time)")
    ap.add_argument("--spin", action="store_true",
                    help="let idle worker threads busy-wait (OpenMP / onnxruntime defaults); without it every "
                         "engine runs with OMP_WAIT_POLICY=PASSIVE and no onnxruntime spinning, which keeps "
                         "a shared machine from collapsing (2 threads that spin on 2 busy cores run ~10x slower)")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs"), help="benchmarks.md/.png/.json go here")
    ap.add_argument("--workdir", default=None, help="model files (default: a temporary directory)")
    ap.add_argument("--worker", choices=list(WORKERS), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--render", metavar="JSON", help="only re-write the .md/.png from a results JSON")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            results = json.load(f)
        write_outputs(results, args, final=results.get("complete", True))
        return 0
    if args.worker:
        print("RESULT " + json.dumps(WORKERS[args.worker](args)), flush=True)
        return 0
    requested = args.engines.split(",")
    unknown = [e for e in requested if e not in ENGINES_INFER]
    if unknown:
        ap.error(f"unknown engine(s) {', '.join(unknown)}; valid: {', '.join(ENGINES_INFER)}")
    if args.quick:
        args.reps = min(args.reps, 3)
    if args.scale is None:
        args.scale = 0.5 if args.quick else 1.0
    models = (args.models or ("bert-mini" if args.quick else "bert-base,bert-mini")).split(",")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bertfam-bench-")
    started = time.time()
    load_start = os.getloadavg()
    print(f"threads {args.threads}, reps {args.reps}, load average at start {load_start[0]:.1f}", flush=True)
    ceiling = run_worker(args, "ceiling")
    print(f"fp32 matmul ceiling (torch): {ceiling['ceiling']:.1f} GFLOP/s "
          + ", ".join(f"{k} {v:.1f}" for k, v in ceiling["gflops"].items()), flush=True)
    print(f"int8 GEMM ceiling (torch quantized::linear_dynamic): {ceiling['int8_ceiling']:.1f} GOP/s "
          + ", ".join(f"{k} {v:.1f}" for k, v in ceiling["int8_gops"].items()), flush=True)
    results = {"ceiling": ceiling, "models": {}, "args": vars(args), "environment": environment(args),
               "engine_labels": {e: E.LABELS[e] for e in requested}}
    for mname in models:
        prep = run_worker(args, "prepare", model=mname)
        print(f"{mname}: {prep['params_m']:.1f}M parameters; max |diff| vs transformers on real tokens: bertfam "
              f"{prep['diff_bertfam_vs_hf']:.1e}, onnxruntime {prep['diff_onnx_vs_hf']:.1e} "
              f"(export {prep['export_s']:.0f} s)", flush=True)
        probes = probe_engines(args, mname, requested)
        live = [e for e in requested if e in BASE or probes.get(e, {}).get("available")]
        rows = {}
        results["models"][mname] = {"prepare": prep, "engines": probes, "cases": rows}
        for case in args.cases.split(","):
            kind = CASES[case][0]
            t = time_case(args, mname, case, live)
            row = {"real_tokens": t["real_tokens"], "padded_tokens": t["padded_tokens"], "flops": t["flops"],
                   "ceiling": t["ceiling"], "engines": {}}
            if "int8_ceiling" in t:
                row["int8_ceiling"] = t["int8_ceiling"]
            if kind == "infer":  # what was asked for and cannot run, with why
                row["unavailable"] = {e: probes[e]["reason"] for e in requested
                                      if e in probes and not probes[e]["available"]}
                row["unavailable"].update(t.get("unavailable", {}))
            for e, ts in t["times"].items():
                s = summarize(ts, t["real_tokens"])
                s["precision"] = "int8" if E.is_int8(e) else "fp32"
                # against the ceilings measured between this case's repetitions (the load drifts between cases)
                rate = t["flops"] / statistics.median(ts) / 1e9
                s["fraction_of_fp32_ceiling"] = rate / t["ceiling"]
                if "int8_ceiling" in t:
                    s["fraction_of_int8_ceiling"] = rate / t["int8_ceiling"]
                # each engine against the ceiling of its own precision
                s["fraction_of_ceiling"] = s.get("fraction_of_int8_ceiling", 0) if E.is_int8(e) \
                    else s["fraction_of_fp32_ceiling"]
                if not args.no_memory:
                    try:
                        s.update(run_worker(args, "memory", model=mname, case=case, engines=e))
                    except RuntimeError as ex:
                        s["memory_error"] = last_line(ex)
                row["engines"][e] = s
            rows[case] = row
            print(format_row(mname, case, row), flush=True)
            results["minutes"] = (time.time() - started) / 60
            results["load_average"] = {"start": load_start, "end": os.getloadavg()}
            write_outputs(results, args, final=False)  # partial results survive an interrupted run
    write_outputs(results, args)
    return 0


def environment(args) -> dict:
    import onnxruntime
    import torch
    import transformers

    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("flags")), [])
    simd = [f for f in flags if f.startswith(("avx", "amx")) or "vnni" in f]
    v = E.versions()
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
            "openvino": v["openvino"], "nncf": v["nncf"], "simd": simd,
            "torch_quantized_engine": torch.backends.quantized.engine,
            "threads": args.threads, "idle_threads": "busy-wait (library defaults)" if args.spin else
            "sleep (OMP_WAIT_POLICY=PASSIVE for torch, allow_spinning=0 for onnxruntime; OpenVINO has no "
            "such switch)"}


def best_peer(row: dict, e: str):
    """(ratio, peer): bertfam's (or bertfam-int8's) rate over the fastest other engine of its precision."""
    group = E.INT8 if E.is_int8(e) else E.FP32
    peers = [(s["median"], p) for p, s in row["engines"].items() if p in group and not p.startswith("bertfam")]
    if not e.startswith("bertfam") or not peers:
        return None
    rate, peer = max(peers)
    return row["engines"][e]["median"] / rate, peer


def format_row(mname: str, case: str, row: dict) -> str:
    e = row["engines"]
    hf = e.get("transformers", {}).get("median")
    parts = [f"{mname:9s} {case:17s}"]
    for name, s in e.items():
        ratio = f" ({s['median'] / hf:.2f}x)" if hf and name != "transformers" else ""
        bp = best_peer(row, name)
        peer = f" [{bp[0]:.2f}x {bp[1]}]" if bp else ""
        mem = f" {s['peak_mb']:.0f} MB" if "peak_mb" in s else ""
        parts.append(f"{name} {s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]{ratio}{peer}{mem}")
    for name, why in row.get("unavailable", {}).items():
        parts.append(f"{name} unavailable")
    return " | ".join(parts)


def pct(x) -> str:
    return f"{100 * x:.0f} %" if x is not None else "-"


def markdown(results: dict) -> str:
    env, c = results["environment"], results["ceiling"]
    la = results["load_average"]
    has_int8 = "int8_ceiling" in c
    lines = [
        "# Benchmarks: bertfam vs Hugging Face transformers, onnxruntime and OpenVINO, fp32 and int8 (CPU)", "",
        "Produced by `benchmarks/encoder_throughput.py` (`make bench`) in one run "
        f"({results['minutes']:.0f} min); {env['cpu']}, {env['cores']} cores"
        + (f" ({' '.join(env['simd'])})" if env.get("simd") else "")
        + f", {env['threads']} threads for every engine, idle threads {env['idle_threads']}; torch {env['torch']}, "
        f"transformers {env['transformers']}, onnxruntime {env['onnxruntime']}"
        + (f", OpenVINO {env['openvino']}, nncf {env['nncf']}" if "openvino" in env else "") + ". "
        f"Load average {la['start'][0]:.1f} at start, {la['end'][0]:.1f} at end: "
        + ("**the machine was shared with other jobs, so absolute numbers are low and noisy; the ratios "
           "(engines interleaved within each case) are what this run shows.**"
           if max(la["start"][0], la["end"][0]) > 1.5 else "the machine was quiet."), "",
        *(["**Partial results: the run was still going or was interrupted.**", ""] if not results.get("complete")
          else []),
        f"fp32 matmul ceiling measured in this run (torch): **{c['ceiling']:.1f} GFLOP/s** ("
        + ", ".join(f"{k}: {v:.1f}" for k, v in c["gflops"].items()) + ")"
        + (f"; int8 GEMM ceiling (torch's dynamic-quantized linear, `torch.ops.quantized.linear_dynamic`, "
           f"{env.get('torch_quantized_engine', 'x86')} backend, activation quantization included): "
           f"**{c['int8_ceiling']:.1f} GOP/s** ("
           + ", ".join(f"{k}: {v:.1f}" for k, v in c["int8_gops"].items()) + ")" if has_int8 else "") + ".", "",
        *(["**% ceiling above 100 %: this run divided by the ceiling measured once at its start, under more load "
           "than the later cases saw; read those columns as relative only.** (Newer runs measure the ceiling "
           "between the repetitions of every case.)", ""]
          if any(s["fraction_of_ceiling"] > 1 and "ceiling" not in row for m in results["models"].values()
                 for row in m["cases"].values() for s in row["engines"].values()) else []),
        "Throughput = real (non-padding) tokens per second, median of "
        f"{results['args']['reps']} repetitions after a warm-up (a repetition passes over the case's batches "
        f"until {results['args'].get('min_rep_s', 0):g} s have gone by), [min-max] beside it; ×HF = ratio to "
        "transformers fp32; ×best peer (bertfam rows) = ratio to the fastest other engine of the same precision "
        "(named); % fp32 / % int8 = useful model FLOP/s (real tokens only) over the fp32 matmul ceiling "
        "(GFLOP/s of a 1024x768x3072 matmul) and over the int8 GEMM ceiling (GOP/s of torch's dynamic int8 "
        "linear on 2048x1024x1024), each the best rate measured between the case's repetitions and shown after "
        "the case name; **bold** = the ceiling of the engine's own precision. An int8 engine still runs "
        "attention, softmax, LayerNorm and GELU in fp32, and onnxruntime / OpenVINO use their own int8 kernels, "
        "so % int8 is a yardstick, not a bound. bound = padded tokens / real tokens of the case's batches: the "
        "speed-up that skipping padding alone can give when every token costs the same (attention, quadratic in "
        "length, adds a little on top); peak RSS = ru_maxrss of a separate process running that engine alone "
        "on the case, loading included (growth over the RSS after imports in brackets); peak running = the peak "
        "RSS (VmHWM) while running the case, reset after loading.",
        "",
    ]
    labels = results.get("engine_labels")
    if labels:
        lines += ["Engines (same weights everywhere; `benchmarks/engines.py`):", ""]
        lines += [f"- `{e}`: {what}" for e, what in labels.items()]
        lines += [""]
    for mname, m in results["models"].items():
        p = m["prepare"]
        lines += [f"## {mname} ({p['params_m']:.1f}M parameters, 21128 vocab)", "",
                  f"Same weights: max |difference| of last_hidden_state from transformers on real tokens: "
                  f"bertfam {p['diff_bertfam_vs_hf']:.1e}, onnxruntime {p['diff_onnx_vs_hf']:.1e}"
                  + "".join(f", {e} {q['max_abs_diff_vs_hf']:.1e} (mean {q['mean_abs_diff_vs_hf']:.1e})"
                            for e, q in m.get("engines", {}).items() if q.get("available"))
                  + " (int8: the quantization error on random weights; real weights: "
                    "[int8_accuracy.md](int8_accuracy.md)).", ""]
        missing = {e: q["reason"] for e, q in m.get("engines", {}).items() if not q.get("available")}
        for row in m["cases"].values():
            missing.update({e: r for e, r in row.get("unavailable", {}).items() if e not in missing})
        if missing:
            lines += ["Not measured here:", ""] + [f"- `{e}`: {why}" for e, why in missing.items()] + [""]
        lines += ["| case | engine | tokens/s | spread | ×HF | ×best peer | % fp32 | % int8 | "
                  "peak RSS MB (growth) | peak running MB |",
                  "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for case, row in m["cases"].items():
            hf = row["engines"].get("transformers", {}).get("median")
            ceil = []
            if "ceiling" in row:
                ceil.append(f"{row['ceiling']:.0f} GF/s")
            if "int8_ceiling" in row:
                ceil.append(f"{row['int8_ceiling']:.0f} GOP/s")
            bound = row["padded_tokens"] / row["real_tokens"] if row.get("real_tokens") else 1.0
            if bound > 1.001:
                ceil.append(f"bound {bound:.2f}×")
            label = f"{case} ({', '.join(ceil)})" if ceil else case
            for e, s in row["engines"].items():
                ratio = f"{s['median'] / hf:.2f}" if hf else "-"
                bp = best_peer(row, e)
                peer = f"{bp[0]:.2f} ({bp[1]})" if bp else "-"
                f32 = pct(s.get("fraction_of_fp32_ceiling", s["fraction_of_ceiling"]))
                i8 = pct(s.get("fraction_of_int8_ceiling"))
                if E.is_int8(e):
                    i8 = f"**{i8}**"
                elif i8 != "-":
                    f32 = f"**{f32}**"
                peak = max(s.get("peak_mb", 0), s.get("load_peak_mb", 0))
                mem = f"{peak:.0f} ({peak - s['import_rss_mb']:.0f})" if "peak_mb" in s else "-"
                run = f"{s['run_peak_mb']:.0f}" if "run_peak_mb" in s else "-"
                lines.append(f"| {label} | {e} | {s['median']:.0f} | {s['min']:.0f}-{s['max']:.0f} | {ratio} | "
                             f"{peer} | {f32} | {i8} | {mem} | {run} |")
        lines.append("")
    sc = results["args"]["scale"]
    sizes = "; ".join(f"{c}: {n} x batch {max(1 if lo == hi else 2, round(B * sc))}"
                      for c, (_, B, lo, hi, n) in CASES.items())
    lines += [
        f"Batches per repetition: {sizes}.", "",
        "Cases: `infer 16-128` = batches with lengths uniform in 16-128 (the padded engines pay for "
        "padding up to the longest in the batch; bertfam packs the real tokens); `infer full N` = no padding; "
        "`train MLM` = one AdamW step per batch, dropout on, batches from bertfam's PretrainCollator "
        "(15 % token masking); bertfam's MLM head runs on the masked positions only, BertForMaskedLM on all. "
        "The int8 engines run inference cases only.",
        "", "![speed-up over transformers](benchmarks.png)", "",
        "Accuracy cost of the int8 engines (hidden-state differences, SST-2 accuracy, MRC F1): "
        "[int8_accuracy.md](int8_accuracy.md), from `benchmarks/int8_accuracy.py`.", ""]
    return "\n".join(lines)


def write_outputs(results: dict, args, final: bool = True) -> None:
    from bertfam.utils import atomic_write_text

    os.makedirs(args.out_dir, exist_ok=True)
    results["complete"] = final
    md = markdown(results)
    if final:
        print("\n" + md)
    atomic_write_text(os.path.join(args.out_dir, "benchmarks.md"), md)
    atomic_write_text(os.path.join(args.out_dir, "benchmarks.json"), json.dumps(results, indent=2) + "\n")
    try:
        plot(results, os.path.join(args.out_dir, "benchmarks.png"))
    except ImportError:
        print("matplotlib not installed: no chart")


COLORS = {"transformers": "#7f7f7f", "onnxruntime": "#1f77b4", "openvino": "#9467bd", "bertfam": "#d62728"}


def plot(results: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bertfam.utils import atomic_path

    models = list(results["models"])
    fig, axes = plt.subplots(len(models), 1, figsize=(13, 4.4 * len(models)), squeeze=False)
    for ax, mname in zip(axes[:, 0], models):
        cases = results["models"][mname]["cases"]
        names = list(cases)
        engines = [e for e in ENGINES_INFER if e != "transformers" and any(e in cases[c]["engines"] for c in names)]
        width = 0.8 / max(1, len(engines))
        for e in engines:
            xs, ys = [], []
            for j, c in enumerate(names):
                eng = cases[c]["engines"]
                here = [x for x in engines if x in eng]  # the case's bars, centred on its tick
                if e in eng and "transformers" in eng:
                    hf = eng["transformers"]["median"]
                    xs.append(j + (here.index(e) - (len(here) - 1) / 2) * width)
                    ys.append(eng[e]["median"] / hf)
            ax.bar(xs, ys, width, label=e, color=COLORS.get(e.split("-")[0], "#2ca02c"),
                   hatch="//" if E.is_int8(e) else None, edgecolor="white" if E.is_int8(e) else None,
                   alpha=0.6 if e == "openvino-int8w" else 1.0)
            for x, y in zip(xs, ys):
                ax.text(x, y + 0.03, f"{y:.2f}", ha="center", fontsize=6.5, rotation=90 if len(engines) > 4 else 0)
        ax.axhline(1.0, color="gray", lw=1, ls="--", label="transformers fp32 = 1")
        top = max([b.get_height() for b in ax.patches] + [1.0])
        ax.set_ylim(0, top * 1.3)
        ax.set_xticks(range(len(names)))
        ax.set_xticklabels(names, fontsize=8)
        ax.set_title(f"{mname}: real tokens/s relative to transformers fp32 (hatched: int8)")
        ax.legend(fontsize=7, loc="upper left", ncol=5)
    fig.tight_layout()
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


if __name__ == "__main__":
    sys.exit(main())
