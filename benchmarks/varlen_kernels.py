"""Which attention kernel should the unpadded encoder use here? One run, engines interleaved.

    nice -n 10 .venv/bin/python benchmarks/varlen_kernels.py --models bert-mini,bert-base

Compares, on the `infer 16-128` batches of encoder_throughput.py (same weights, threads, batches): bertfam's
unpadded path with each attention kernel of bertfam.modeling.varlen (loop, njt, pad, block), bertfam's padded
path, and transformers; each bertfam engine is the model's one packing setting (`packing=` per call: a kernel
name, or "padded"), with the fused attention kernel off, plus, where it runs, a row with it on
(bertfam.modeling.fused_attention, which optimize_for_inference switches on by default and which then stands in
for every packing kernel). Real tokens/s, median of --reps after a warm-up, [min-max]. Writes
docs/varlen_kernels.md. The kernel of packing "auto" (varlen.default_kernel) is chosen from this table.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
from bench import cases, jobs, report, worker  # noqa: E402  (benchmarks/ is on the path when run as a script)
from bench.engines import load_hidden  # noqa: E402

KERNELS = ("loop", "njt", "pad", "block")


def time_kernels(args) -> dict:
    """The worker: every engine on the case's batches, interleaved; seconds per pass."""
    import torch

    import bertfam
    from bertfam.modeling import fused_attention
    from bertfam.modeling.optimize import set_fused_attention

    worker.set_threads(args.threads)
    d = os.path.join(args.workdir, args.model)
    cfg = bertfam.ModelConfig.load(os.path.join(d, "bertfam", "config.json"))
    batches = cases.make_batches(args.case, cfg.vocab_size, scale=args.scale)
    # the packing kernels compared with the fused attention kernel off (it would stand in for all of them),
    # then the fused kernel as one more row where it runs here
    model = bertfam.optimize_for_inference(bertfam.from_pretrained(os.path.join(d, "hf"), task=None).backbone.eval(),
                                           fused_attention=False)
    keys = ("input_ids", "attention_mask", "token_type_ids")

    def engine(packing, fused=False):
        def run(b):
            set_fused_attention(model, fused)  # a flag per attention module: microseconds
            with torch.inference_mode():
                model(**{k: b[k] for k in keys}, packing=packing)
        return run

    fns = {f"bertfam unpadded, {k}": engine(k) for k in KERNELS}
    if fused_attention.available(torch.float32):
        fns["bertfam unpadded, fused attention kernel"] = engine("auto", fused=True)
    fns["bertfam padded"] = engine("padded")
    fns["transformers"] = load_hidden("transformers", d)
    names = list(fns)
    times = {n: [] for n in names}
    for n in names:
        for b in batches:
            fns[n](b)
    for r in range(args.reps):
        for n in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(0.1)
            t0 = time.perf_counter()
            for b in batches:
                fns[n](b)
            times[n].append(time.perf_counter() - t0)
    return {"times": times, "real_tokens": cases.real_tokens(batches)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="bert-mini,bert-base")
    ap.add_argument("--case", default="infer 16-128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--workdir", default=None, help="model files (shared with encoder_throughput.py --workdir)")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(HERE), "docs", "varlen_kernels.md"))
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker.emit(time_kernels(args))
        return 0
    args.workdir = args.workdir or tempfile.mkdtemp(prefix="bertfam-bench-")
    load = os.getloadavg()[0]
    lines = ["# Attention kernels for the unpadded encoder (CPU)", "",
             f"`benchmarks/varlen_kernels.py`, one run, {args.threads} threads, case `{args.case}` of "
             f"benchmarks/encoder_throughput.py (batch scale {args.scale}), real tokens/s, median of {args.reps} "
             f"[min-max]; load average {load:.1f} at start"
             + (" (shared machine: compare within a table only)." if load > 1.5 else "."), "",
             "Each bertfam row is a value of the model's one packing setting (`model.packing = ...`, or "
             "`packing=` per call; bertfam/modeling/layout.py): a kernel name runs the unpadded encoder with "
             "that attention kernel, \"padded\" the padded path. The default, \"auto\", packs with "
             "`varlen.default_kernel(device)`: \"loop\" on CPU, \"njt\" on CUDA; to use another kernel on a "
             "machine where this table says it is faster, set `packing` to its name.", ""]
    for m in args.models.split(","):
        jobs.run_job("prepare", threads=args.threads, workdir=args.workdir, model=m)  # encoder_throughput's files
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", m, "--case", args.case,
               "--threads", str(args.threads), "--reps", str(args.reps), "--scale", str(args.scale),
               "--workdir", args.workdir]
        r = worker.run(cmd, worker.env(args.threads), what=f"{m} kernels")
        hf = statistics.median(r["real_tokens"] / t for t in r["times"]["transformers"])
        lines += [f"## {m}", "", "| engine | tokens/s | spread | ×transformers |", "|---|---:|---:|---:|"]
        for name, ts in r["times"].items():
            s = report.summarize(ts, r["real_tokens"])
            lines.append(f"| {name} | {s['median']:.0f} | {s['min']:.0f}-{s['max']:.0f} | {s['median'] / hf:.2f} |")
        lines.append("")
        print("\n".join(lines), flush=True)
    from bertfam.utils import atomic_write_text

    atomic_write_text(args.out, "\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
