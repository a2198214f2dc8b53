"""Which fp32 projection kernel should bertfam use on this CPU? (issue #26, `optimize_for_inference(linear=)`)

    nice -n 10 .venv/bin/python benchmarks/linear_kernels.py            # ~4 min on 2 quiet cores
    .venv/bin/python benchmarks/linear_kernels.py --quick               # the smoke test: seconds

Run it on a quiet machine: timings on a loaded one say nothing. Two parts, both interleaved (every
repetition runs each kernel once, in rotating order, so a drifting load hits them alike):
1. GEMM: bert-base's four projection shapes (in x out: 768x2304 QKV, 768x768 attention output, 768x3072 FFN
   in, 3072x768 FFN out) at M = 16*128 and 16*512 rows (a full batch of 16, padded layout) and a mixed
   case (the real tokens of 16 sequences of lengths uniform in 16-512: the packed layout's M, no multiple
   of anything); kernels: aten (torch.addmm into a buffer, as the buffer reuse runs it), mkl (packed sgemm
   in chunks of MKL_CHUNK rows; also at other chunk sizes: --mkl-chunks), mkldnn (oneDNN prepacked).
   GFLOP/s = 2*M*K*N / time (best of --reps), and the ratio to aten.
2. The whole bert-base encoder (random weights, bertfam.preset("bert-base-chinese"), as
   encoder_throughput.py builds it), optimize_for_inference(linear=...) for aten, mkl, mkldnn and auto, on
   encoder_throughput.py's `infer 16-128`, `infer full 128` and `infer 16-512` batches: real tokens/s
   (median of --reps, [min-max]) and the ratio to aten. "auto" probes afresh (a temporary cache directory:
   a cached choice from another, perhaps loaded, run would hide the probe); its choice and probe time are
   printed.
The CPU model and its SIMD flags come first. A kernel that cannot run here is reported with why.
`--json PATH` writes everything measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench import cases, probes, worker  # noqa: E402  (benchmarks/ is on the path when run as a script)

SHAPES = ((768, 2304), (768, 768), (768, 3072), (3072, 768))  # (in, out) of bert-base's projections
CASES = ("infer 16-128", "infer full 128", "infer 16-512")  # encoder_throughput.py's batches (bench/cases.py)
LINEAR = ("aten", "mkl", "mkldnn", "auto")


def cpu_line() -> str:
    model, simd = probes.cpu_simd()
    return f"CPU: {model}, {os.cpu_count()} cores; flags: {' '.join(simd) or '(none of avx/amx/vnni)'}"


def mixed_rows(n: int = 16, lo: int = 16, hi: int = 512, seed: int = 0) -> int:
    """The real tokens of n sequences of lengths uniform in lo..hi (bench/cases.py's random batch)."""
    import numpy as np

    return cases.real_tokens([cases.random_batch(np.random.default_rng(seed), n, lo, hi, 21128)])


def gemm_kernels(chunks: list[int]):
    """[(label, kernel, mkl chunk or None)] of the kernels this torch has; and {label: why} of the others."""
    from bertfam.modeling import linear as L

    out, missing = [("aten", "aten", None)], {}
    for k in ("mkl", "mkldnn"):
        if not L.kernel_ops_present(k):
            missing[k] = "op not in this torch build"
        elif k == "mkl":
            out += [(f"mkl/{c}" if c != L.MKL_CHUNK else "mkl", "mkl", c) for c in chunks]
        else:
            out.append((k, k, None))
    return out, missing


def time_gemm(args) -> dict:
    """{shape: {rows label: {kernel label: {"s", "gflops", "x_aten"} or {"error"}}}}."""
    import torch

    from bertfam.modeling import linear as L

    chunks = sorted({L.MKL_CHUNK, *args.mkl_chunks})
    kernels, missing = gemm_kernels(chunks)
    mixed = mixed_rows()
    rows = {"16x128": 16 * 128, "16x512": 16 * 512, "mixed 16-512": mixed} if not args.quick else \
        {"2x32": 64, "mixed": 77}
    # a row count never seen before on every call, as packed batches give in serving: oneDNN builds (JITs) a
    # primitive per new shape, MKL's chunks do not care; cycles through CYCLE counts below M
    cycle = {"mixed, new M per call": mixed} if not args.quick else {"new M per call": 77}
    g = torch.Generator().manual_seed(0)
    res = {"unavailable": missing, "shapes": {}}
    for K, N in SHAPES:
        w, b = torch.randn(N, K, generator=g) * 0.02, torch.randn(N, generator=g) * 0.02
        shape = f"{K}x{N}"
        res["shapes"][shape] = {}
        for rl, M in [*rows.items(), *cycle.items()]:
            x = torch.randn(M, K, generator=g)
            ref = torch.addmm(b, x, w.t())
            fns, cell = {}, {}
            for label, kernel, chunk in kernels:
                try:
                    fns[label] = make_fn(L, kernel, chunk, x, w, b, ref, fresh=rl in cycle)
                except Exception as e:  # noqa: BLE001  (a kernel this CPU cannot run)
                    cell[label] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"}
            times = {lab: [] for lab in fns}
            labels = list(fns)
            for r in range(args.reps):
                for lab in labels[r % len(labels):] + labels[:r % len(labels)]:
                    times[lab].append(timed(fns[lab], args.min_rep_s))
            rows_mean = M - (min(CYCLE, M - 1) - 1) / 2 if rl in cycle else M  # fresh: rows per call, on average
            for lab, ts in times.items():
                t = min(ts)
                cell[lab] = {"s": t, "gflops": 2 * rows_mean * K * N / t / 1e9}
            for lab in times:
                cell[lab]["x_aten"] = cell["aten"]["s"] / cell[lab]["s"]
            res["shapes"][shape][f"{rl} (M={M})"] = cell
            print(f"  {shape:>9} {rl + ' (M=' + str(M) + ')':<28} " + "  ".join(
                f"{lab} {c['gflops']:.0f} GF/s ({c['x_aten']:.2f}x)" if "s" in c else f"{lab} -" for lab, c in
                cell.items()), flush=True)
    return res


CYCLE = 1100  # fresh=True: row counts M, M-1, ..., M-CYCLE+1, then again (oneDNN's primitive cache holds 1024)


def make_fn(L, kernel: str, chunk, x, w, b, ref, fresh: bool = False):
    """A call of `kernel` on x writing into a buffer where it can; checked against addmm first. fresh: each
    call on the first M - i rows, i = 0, 1, 2, ... (mod CYCLE): a row count the kernel has not just seen."""
    import itertools

    import torch

    out = torch.empty_like(ref)
    if fresh:
        M = x.shape[0]
        step = itertools.cycle(range(min(CYCLE, M - 1)))
        inner = make_fn(L, kernel, chunk, x, w, b, ref)

        def fn_fresh():
            m = M - next(step)
            return inner(x[:m], out[:m])
        return fn_fresh
    if kernel == "aten":
        fn = lambda xx=x, oo=out: torch.addmm(b, xx, w.t(), out=oo)  # noqa: E731
    else:
        old = L.MKL_CHUNK
        L.MKL_CHUNK = chunk or old  # pack and run at this chunk size (the module constant is read per call)
        try:
            p = L.pack(kernel, w)
        finally:
            L.MKL_CHUNK = old

        def fn(xx=x, oo=out):
            saved = L.MKL_CHUNK
            L.MKL_CHUNK = chunk or saved
            try:
                return L.packed_linear(kernel, xx, p, w, b, oo)
            finally:
                L.MKL_CHUNK = saved
    with torch.inference_mode():
        err = float((fn() - ref).abs().max())
    if err > 1e-4 * max(1.0, float(ref.abs().max())):
        raise RuntimeError(f"wrong result: max |diff| {err:.1e} from addmm")
    return fn


def timed(fn, min_s: float) -> float:
    """Seconds per call: calls until min_s has gone by (at least one)."""
    import torch

    with torch.inference_mode():
        n, t0 = 0, time.perf_counter()
        while True:
            fn()
            n += 1
            el = time.perf_counter() - t0
            if el >= min_s:
                return el / n


def time_encoder(args) -> dict:
    """{case: {linear: {"median", "min", "max" tokens/s, "x_aten"} or {"error"}}, "auto": probe facts}."""
    import torch

    import bertfam
    from bertfam.modeling import linear as L
    from bertfam.modeling import linear_probe as P
    from bertfam.modeling.optimize import optimize_for_inference

    name = cases.MODELS["bert-tiny" if args.quick else "bert-base"]
    model = bertfam.build_model(bertfam.preset(name), seed=0).backbone.eval()
    print(f"encoder: {name}, {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters", flush=True)
    out = {"model": name, "cases": {}}
    keys = ("input_ids", "attention_mask", "token_type_ids")
    usable = {}
    for lin in LINEAR:  # what each setting does on this machine (auto: a fresh probe, see the docstring)
        try:
            t0 = time.perf_counter()
            optimize_for_inference(model, linear=lin)
            usable[lin] = {"swap_s": time.perf_counter() - t0, "kernels": L.kernels_in_use(model),
                           "packed_mb": L.packed_bytes(model) / 1e6}
        except Exception as e:  # noqa: BLE001
            usable[lin] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''}"}
        print(f"  linear={lin}: " + (usable[lin]["error"] if "error" in usable[lin] else
              f"{usable[lin]['kernels']}, packed copies {usable[lin]['packed_mb']:.0f} MB (tensor size), "
              f"swap {usable[lin]['swap_s']:.2f} s"), flush=True)
    cache = P.cache_path()
    if os.path.isfile(cache):
        entry = next(iter(json.load(open(cache))["entries"].values()))
        usable["auto"]["probe"] = {k: entry[k] for k in ("choice", "seconds", "skipped", "probe_s")}
        print(f"  auto probe: {entry['probe_s']:.2f} s; chose {entry['choice']}; skipped {entry['skipped']}",
              flush=True)
    out["settings"] = usable
    live = [lin for lin in LINEAR if "error" not in usable[lin]]
    for case in CASES:
        batches = cases.make_batches(case, model.config.vocab_size if hasattr(model, "config") else 21128,
                                     scale=args.scale)
        real = cases.real_tokens(batches)
        times = {lin: [] for lin in live}
        for r in range(args.reps + 1):  # repetition 0: warm-up, not counted
            for lin in live[r % len(live):] + live[:r % len(live)]:
                optimize_for_inference(model, linear=lin)  # the swap (and packing) outside the timed part
                with torch.inference_mode():
                    n, t0 = 0, time.perf_counter()
                    while True:
                        for b in batches:
                            model(**{k: b[k] for k in keys})
                        n += 1
                        el = time.perf_counter() - t0
                        if el >= args.min_rep_s:
                            break
                if r:
                    times[lin].append(el / n)
        row = {}
        for lin, ts in times.items():
            rates = sorted(real / t for t in ts)
            row[lin] = {"median": statistics.median(rates), "min": rates[0], "max": rates[-1]}
        for lin in row:
            row[lin]["x_aten"] = row[lin]["median"] / row["aten"]["median"]
        for lin in LINEAR:
            if lin not in row:
                row[lin] = {"error": usable[lin]["error"]}
        out["cases"][case] = row
        print(f"  {case:<15} " + "  ".join(
            f"{lin} {c['median']:.0f} tok/s [{c['min']:.0f}-{c['max']:.0f}] ({c['x_aten']:.2f}x)" if "median" in c
            else f"{lin} -" for lin, c in row.items()), flush=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke test: small M, bert-tiny encoder, 1 repetition")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None, help="repetitions (default 5; 1 with --quick)")
    ap.add_argument("--min-rep-s", type=float, default=None,
                    help="each timing repeats its call until this many seconds have gone by (default 0.3; 0 quick)")
    ap.add_argument("--scale", type=float, default=None, help="encoder batch sizes x this (default 1; 0.25 quick)")
    ap.add_argument("--mkl-chunks", default="256,512,1024",
                    help="MKL packed chunk sizes (rows) to compare in the GEMM part, besides linear.MKL_CHUNK")
    ap.add_argument("--no-encoder", action="store_true", help="the GEMM part only")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    args.reps = args.reps or (1 if args.quick else 5)
    args.min_rep_s = args.min_rep_s if args.min_rep_s is not None else (0.0 if args.quick else 0.3)
    args.scale = args.scale or (0.25 if args.quick else 1.0)
    args.mkl_chunks = [int(c) for c in args.mkl_chunks.split(",") if c]
    if args.quick:
        args.mkl_chunks = [16]
    # same thread policy as encoder_throughput.py's workers (bench/worker.py); set before torch starts its
    # thread pool
    os.environ.update(worker.env(args.threads))
    # "auto" must probe here, not reuse a choice cached by an earlier (perhaps loaded) run
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="bertfam-linear-bench-")
    import torch

    worker.set_threads(args.threads)
    print(cpu_line())
    print(f"torch {torch.__version__}, threads {args.threads}, reps {args.reps}, load average "
          f"{os.getloadavg()[0]:.1f} at start", flush=True)
    started = time.time()
    res = {"cpu": cpu_line(), "torch": torch.__version__, "threads": args.threads,
           "load_average_start": os.getloadavg()[0]}
    print("GEMM (GFLOP/s, best of reps; x = time of aten / time of the kernel)", flush=True)
    res["gemm"] = time_gemm(args)
    for k, why in res["gemm"]["unavailable"].items():
        print(f"  {k}: unavailable ({why})")
    if not args.no_encoder:
        print("encoder forward (real tokens/s, median of reps; x = over linear=aten)", flush=True)
        res["encoder"] = time_encoder(args)
    res["load_average_end"] = os.getloadavg()[0]
    res["minutes"] = (time.time() - started) / 60
    print(f"done in {res['minutes']:.1f} min; load average {res['load_average_end']:.1f} at end", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
