"""Encoder throughput on CPU, fp32 and int8: bertfam vs Hugging Face transformers, onnxruntime and OpenVINO,
same weights, batches, threads.

    make bench                                                              # installs the bench extra first
    nice -n 10 .venv/bin/python benchmarks/encoder_throughput.py            # full run (~20-30 min on 2 cores)
    .venv/bin/python benchmarks/encoder_throughput.py --quick               # bert-mini only, ~6 min

One run measures, for BERT-base and bert-mini (21128-piece Chinese vocabulary, random weights made by
bertfam and converted with bertfam.convert.hf.export_hf, so every engine runs the very same weights):
1. inference, REAL (non-padding) tokens/s, batch lengths uniform in 16-128 and 16-512, on nine engines
   (benchmarks/bench/engines.py says exactly what each is): transformers fp32 and int8 (torch.ao
   quantize_dynamic), onnxruntime fp32 and int8 (quantize_dynamic of a torch.onnx.export(dynamo=True)
   export of that same HF model), OpenVINO fp32, int8 weights-only (nncf.compress_weights) and static int8
   (nncf.quantize, calibrated on random token ids), bertfam fp32 and int8
   (optimize_for_inference(int8=True)). The padded engines get batches padded to their longest sequence;
   bertfam gets the same padded batches and its default (unpadded) path. An engine that cannot run here
   (OpenVINO / nncf not installed, a file that cannot be built) is reported as unavailable, with why;
2. inference at full length 128 and 512 (no padding);
3. MLM training steps (AdamW, dropout on): bertfam TaskModel (MLM head on masked positions only) vs
   BertForMaskedLM, both fed the same batches from bertfam's PretrainCollator (15 % token masking);
4. peak resident memory of each engine per case, each in its own subprocess (ru_maxrss), also as growth
   over the process's RSS once its libraries are imported.
Also the machine's fp32 matmul ceiling (GFLOP/s) and int8 GEMM ceiling (GOP/s), each product on the fastest
kernel the engines here have (torch's matmul, oneDNN's prepacked linear or onnxruntime's MatMul; torch's
dynamic-quantized linear, oneDNN's static int8 linear or onnxruntime's DynamicQuantizeMatMul:
bench/probes.py), and each result as a fraction of both (model FLOPs of
real tokens only: 2 x linear MACs + attention; x3 for training; the MLM head is not counted); int8 engines
are read against the int8 ceiling, fp32 ones against the fp32 ceiling. Ratios: to transformers fp32 (×HF),
and bertfam's to the fastest other engine of its precision (×best peer).
Timings: the engines of one case run interleaved in one process (engine order rotates every repetition,
so load drift hits all alike); each number is the median of --reps repetitions after one warm-up (one
repetition = passes over the case's batches for at least --min-rep-s seconds, time per pass), with
the spread (min-max) beside it. Writes the table to stdout and one page per CPU kind: docs/benchmarks.md /
.png / .json on an AVX2-only CPU, docs/benchmarks-epyc-zen4-avx512.* on an AMD EPYC Zen 4 (family 25) with AVX-512,
-zen5- on a Zen 5, -xeon-avx512-amx on a Xeon with AMX (bench/probes.py page_stem), so a run never overwrites
another machine's table. The accuracy cost of the int8 engines: benchmarks/int8_accuracy.py.

This script is the run's order of work (main); the parts are in benchmarks/bench/: the batches and FLOP
model (cases.py), the engines (engines.py), the measurements done in worker processes (jobs.py, over the
protocol of worker.py), the ceilings and memory readings (probes.py) and the report (report.py).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from bench import cases, jobs, report, worker  # noqa: E402  (benchmarks/ is on the path when run as a script)
from bench.probes import environment  # noqa: E402
from bench import engines as E  # noqa: E402


def run_job(args, what: str, **kw) -> dict:
    """Job `what` in a worker process with this run's common options."""
    return jobs.run_job(what, threads=args.threads, spin=args.spin, reps=args.reps, workdir=args.workdir,
                        scale=args.scale, min_rep_s=args.min_rep_s, ceiling_scale=args.ceiling_scale, **kw)


BASE = ("transformers", "onnxruntime", "bertfam")  # made and checked by the prepare worker; a failure is fatal


def probe_engines(args, mname: str, requested: list[str]) -> dict:
    """{engine: probe result} for the requested engines beyond the base three: all in one process, or, if
    that process dies (a native crash), each in its own, so that one broken engine is reported alone."""
    extra = [e for e in requested if e not in BASE and e in E.INFER]
    if not extra:
        return {}
    try:
        out = run_job(args, "probe", model=mname, engines=",".join(extra))
    except worker.WorkerError:
        out = {}
        for e in extra:
            try:
                out.update(run_job(args, "probe", model=mname, engines=e))
            except worker.WorkerError as ex:  # reported, the run goes on
                out[e] = {"available": False, "reason": f"crashed: {worker.last_line(ex)}"}
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
        return run_job(args, "time", model=mname, case=case, engines=",".join(live))
    except worker.WorkerError as ex:
        extra = [e for e in live if e not in BASE]
        if not extra:
            raise
        t = run_job(args, "time", model=mname, case=case, engines=",".join(e for e in live if e in BASE))
        t["unavailable"].update({e: f"the timing worker failed with it: {worker.last_line(ex)}" for e in extra})
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
    ap.add_argument("--cases", default=",".join(cases.CASES))
    ap.add_argument("--engines", default=",".join(E.ALL),
                    help="comma list of " + ", ".join(E.INFER) + " (default: all but " + ", ".join(E.OPTIONAL)
                         + ", bertfam's fp32 projection kernels, to compare them; training cases: transformers "
                           "and bertfam only)")
    ap.add_argument("--no-memory", action="store_true")
    ap.add_argument("--ceiling-scale", type=float, default=1.0,
                    help="rows of the ceiling matmuls x this (the smoke test: 1/16, a rough ceiling in little time)")
    ap.add_argument("--wait-policy", choices=("auto", "spin", "sleep"), default="auto",
                    help="what idle worker threads do between parallel regions, for every engine alike. spin: the "
                         "libraries' defaults (OpenMP and onnxruntime busy-wait a while); sleep: OMP_WAIT_POLICY="
                         "PASSIVE and no onnxruntime spinning, which keeps a shared machine from collapsing (2 "
                         "threads that spin on 2 busy cores run ~10x slower), but OpenVINO's own thread pool has no "
                         "such switch and keeps spinning, so sleep handicaps the torch and onnxruntime engines "
                         "only; auto (default): spin when the machine is quiet at start (under "
                         f"{worker.QUIET_LOAD} cores busy over a {worker.SAMPLE_S:g} s sample of /proc/stat; the "
                         "1-minute load average where there is none), else sleep")
    ap.add_argument("--spin", action="store_true", help="the same as --wait-policy spin")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "docs"), help="benchmarks.md/.png/.json go here")
    ap.add_argument("--workdir", default=None, help="model files (default: a temporary directory)")
    ap.add_argument("--worker", choices=list(jobs.JOBS), help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    ap.add_argument("--case", help=argparse.SUPPRESS)
    ap.add_argument("--render", metavar="JSON", help="only re-write the .md/.png from a results JSON")
    args = ap.parse_args()
    if args.render:
        with open(args.render) as f:
            results = json.load(f)
        report.write_outputs(results, args, final=results.get("complete", True))
        return 0
    if args.worker:
        worker.emit(jobs.JOBS[args.worker](args))
        return 0
    requested = args.engines.split(",")
    unknown = [e for e in requested if e not in E.INFER]
    if unknown:
        ap.error(f"unknown engine(s) {', '.join(unknown)}; valid: {', '.join(E.INFER)}")
    if args.quick:
        args.reps = min(args.reps, 3)
    if args.scale is None:
        args.scale = 0.5 if args.quick else 1.0
    models = (args.models or ("bert-mini" if args.quick else "bert-base,bert-mini")).split(",")
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bertfam-bench-")
    started = time.time()
    load_start = os.getloadavg()
    policy = "spin" if args.spin else args.wait_policy
    busy, measure = worker.machine_busy()  # other processes' work now: the report says whether it was shared
    args.spin, why = worker.wait_policy(policy, busy, measure) if policy == "auto" \
        else worker.wait_policy(policy, 0.0)
    print(f"threads {args.threads}, reps {args.reps}, load average at start {load_start[0]:.1f}; idle threads "
          f"{'spin' if args.spin else 'sleep'} ({why})", flush=True)
    ceiling = run_job(args, "ceiling")
    print(f"fp32 matmul ceiling (fastest of {', '.join(ceiling['fp32_compared'])}): {ceiling['ceiling']:.1f} GFLOP/s "
          + ", ".join(f"{k} {v:.1f} {ceiling['fp32_kernels'][k]}" for k, v in ceiling["gflops"].items()), flush=True)
    print(f"int8 GEMM ceiling (fastest of {', '.join(ceiling['int8_compared'])}): {ceiling['int8_ceiling']:.1f} "
          "GOP/s " + ", ".join(f"{k} {v:.1f} {ceiling['int8_kernels'][k]}" for k, v in ceiling["int8_gops"].items()),
          flush=True)
    # bertfam's fp32 kernel choice (linear="auto") is probed afresh in this run, as its ceilings are: a choice
    # cached from another time (perhaps a loaded spell) would not be this run's; the probe's cache for the
    # workers lives in the run's workdir, never in the user's ~/.cache
    os.makedirs(args.workdir, exist_ok=True)
    os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="linear-probe-", dir=args.workdir)
    results = {"ceiling": ceiling, "models": {}, "args": vars(args),
               "environment": dict(environment(args.threads, args.spin), wait_policy=why),
               "engine_labels": {e: E.LABELS[e] for e in requested},
               "busy_cores": {"start": busy, "sampled": measure != "load average"}}
    for mname in models:
        prep = run_job(args, "prepare", model=mname)
        print(f"{mname}: {prep['params_m']:.1f}M parameters; max |diff| vs transformers on real tokens: bertfam "
              f"{prep['diff_bertfam_vs_hf']:.1e}, onnxruntime {prep['diff_onnx_vs_hf']:.1e} "
              f"(export {prep['export_s']:.0f} s)", flush=True)
        probes = probe_engines(args, mname, requested)
        live = [e for e in requested if e in BASE or probes.get(e, {}).get("available")]
        rows = {}
        results["models"][mname] = {"prepare": prep, "engines": probes, "cases": rows}
        if any(e.startswith("bertfam") and not E.is_int8(e) for e in live):
            lp = run_job(args, "linear_probe", model=mname)
            results["models"][mname]["linear_probe"] = lp
            print(f"{mname}: bertfam's fp32 projection kernels (probe {lp['probe_s']:.1f} s): "
                  f"{report.kernel_choice(lp['choice'])}", flush=True)
        for case in args.cases.split(","):
            kind = cases.CASES[case][0]
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
                s = report.summarize(ts, t["real_tokens"])
                # per repetition, in order: the engines of one repetition ran back to back, so ratios of
                # these pair up (report.paired_peer) and the machine's drift between repetitions cancels
                s["rates"] = [t["real_tokens"] / x for x in ts]
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
                        s.update(run_job(args, "memory", model=mname, case=case, engines=e))
                    except worker.WorkerError as ex:
                        s["memory_error"] = worker.last_line(ex)
                row["engines"][e] = s
            rows[case] = row
            print(report.format_row(mname, case, row), flush=True)
            results["minutes"] = (time.time() - started) / 60
            results["load_average"] = {"start": load_start, "end": os.getloadavg()}
            report.write_outputs(results, args, final=False)  # partial results survive an interrupted run
    results["busy_cores"]["end"] = worker.machine_busy()[0]  # the run's own workers have exited
    report.write_outputs(results, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
