"""Where one bertfam engine's encoder forward spends its time, op by op (torch.profiler), on the random-weight
models and batches of encoder_throughput.py: the tables behind docs/int8_kernels.md's profiles (issue #26).

    .venv/bin/python benchmarks/encoder_profile.py --engine bertfam-int8-static --case "infer full 128"
    .venv/bin/python benchmarks/encoder_profile.py --quick      # the smoke test: bert-tiny, seconds

Engines as encoder_throughput.py names them: `bertfam` (fp32, optimize_for_inference: buffer reuse and the
probe's projection kernel), `bertfam-int8` (dynamic int8), `bertfam-int8-static` (static int8, calibrated on
the calibration batches encoder_throughput.py gives nncf: 8 batches of 4 random sequences of 16-128 tokens).
Prints the CPU and its SIMD flags, real tokens/s without the profiler (median of --reps passes over the
case's batches after one warm-up pass), then the ops with the most self CPU time under the profiler (--forwards
passes): ms per pass, share, calls per pass. The profiler's own overhead makes its total a little larger than
the unprofiled time. Run it on a quiet machine, one heavy job at a time.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench import cases, probes, worker  # noqa: E402  (benchmarks/ is on the path when run as a script)

ENGINES = ("bertfam", "bertfam-int8", "bertfam-int8-static")
CALIB = (8, 4, 16, 128)  # batches, sequences each, shortest, longest: encoder_throughput.py's calibration set


def build(engine: str, model_name: str):
    """The engine's encoder over the benchmark's random-weight model (cases.bertfam_model)."""
    import numpy as np

    from bench import engines as E
    from bertfam.modeling.optimize import optimize_for_inference

    model = cases.bertfam_model(model_name)
    if engine == "bertfam-int8":
        return E.quantize_bertfam(model).backbone
    if engine == "bertfam-int8-static":
        n, B, lo, hi = CALIB
        rng = np.random.default_rng(2)
        calib = [cases.random_batch(rng, B, lo, hi, model.config.vocab_size) for _ in range(n)]
        model = E.static_bertfam(model, calib)
    return optimize_for_inference(model).backbone


def profile(backbone, batches: list, reps: int, forwards: int, rows: int) -> dict:
    """Real tokens/s without the profiler and the top `rows` ops by self CPU time per pass under it."""
    import torch
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    keys = ("input_ids", "attention_mask", "token_type_ids")

    def one_pass():
        with torch.inference_mode():
            for b in batches:
                backbone(**{k: b[k] for k in keys})

    one_pass()  # warm-up: packed weights, buffers, the attention probe
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        one_pass()
        times.append(time.perf_counter() - t0)
    real = cases.real_tokens(batches)
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(forwards):
            one_pass()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    ops = [{"op": e.key, "ms_per_pass": e.self_cpu_time_total / 1e3 / forwards,
            "share": e.self_cpu_time_total / total if total else 0.0, "calls_per_pass": e.count / forwards}
           for e in events[:rows]]
    return {"tokens_per_s": real / statistics.median(times), "ms_per_pass": 1e3 * statistics.median(times),
            "profiled_ms_per_pass": total / 1e3 / forwards, "real_tokens": real, "ops": ops}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", default="bertfam-int8-static", help=f"one of {', '.join(ENGINES)}")
    ap.add_argument("--model", default="bert-base", help=f"one of {', '.join(cases.MODELS)}")
    ap.add_argument("--case", default="infer full 128", help=f"one of {', '.join(cases.CASES)} (inference)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=7, help="unprofiled passes over the case's batches")
    ap.add_argument("--forwards", type=int, default=5, help="profiled passes")
    ap.add_argument("--rows", type=int, default=12, help="ops shown")
    ap.add_argument("--scale", type=float, default=1.0, help="batch sizes x this")
    ap.add_argument("--quick", action="store_true", help="bert-tiny, half batches, 2 passes each")
    ap.add_argument("--json", help="also write the result here")
    args = ap.parse_args()
    if args.quick:
        args.model, args.scale, args.reps, args.forwards = "bert-tiny", 0.5, 2, 2
    for name, value, allowed in (("--engine", args.engine, ENGINES), ("--model", args.model, cases.MODELS),
                                 ("--case", args.case, [c for c, v in cases.CASES.items() if v[0] == "infer"])):
        if value not in allowed:
            print(f"{name}: {value!r} not in {', '.join(allowed)}", file=sys.stderr)
            return 2
    for name in ("--threads", "--reps", "--forwards", "--rows"):
        if getattr(args, name[2:]) < 1:
            print(f"{name}: must be at least 1", file=sys.stderr)
            return 2
    worker.set_threads(args.threads)
    cpu, simd = probes.cpu_simd()
    print(f"CPU: {cpu} (family {probes.cpu_family()}), flags: {' '.join(simd)}; {args.threads} threads", flush=True)
    backbone = build(args.engine, args.model)
    batches = cases.make_batches(args.case, backbone.config.vocab_size, scale=args.scale)
    res = profile(backbone, batches, args.reps, args.forwards, args.rows)
    print(f"{args.engine} {args.model} {args.case} ({len(batches)} x batch {len(batches[0]['input_ids'])}): "
          f"{res['tokens_per_s']:.0f} real tokens/s, {res['ms_per_pass']:.1f} ms a pass unprofiled, "
          f"{res['profiled_ms_per_pass']:.1f} profiled")
    print(f"{'op':<52} {'ms/pass':>8} {'share':>6} {'calls':>6}")
    for o in res["ops"]:
        print(f"{o['op'][:52]:<52} {o['ms_per_pass']:>8.2f} {100 * o['share']:>5.1f}% {o['calls_per_pass']:>6.0f}")
    if args.json:
        from bertfam.utils import atomic_write_text

        atomic_write_text(args.json, json.dumps(dict(res, cpu=cpu, simd=simd, args=vars(args)), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
