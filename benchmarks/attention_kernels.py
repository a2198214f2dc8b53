"""How fast can bert-base's attention core run on this CPU, and how close is bertfam's? (issue #26)

    nice -n 10 .venv/bin/python benchmarks/attention_kernels.py          # ~1 min on 2 quiet cores
    .venv/bin/python benchmarks/attention_kernels.py --quick             # the smoke test: seconds

softmax(q kᵀ / √d) v for 12 heads of 64 (--heads) at the full-length batches of `make bench` (8 x 128 and 2 x 512
tokens; --shapes), q, k and v strided views of one fused QKV projection's output (B, T, 3, h, d) as the
encoder hands them to `attention_core.attend`, COPIES layers' worth of inputs in turn so that they come from
memory as in a model. Every repetition runs each variant once, in rotating order (a drifting load hits them
alike); each variant's result is checked against SDPA's first. Variants, where this CPU runs them:
- sdpa: torch's scaled_dot_product_attention (its CPU flash kernel), what bertfam runs in float32.
- matmul: bertfam's two-matmul core (`attention_core`, the scores in a reused buffer, softmax in place).
- matmul/128: the same per block of 128 queries (the scores of a block stay in cache).
- parts: the core's three steps timed apart on contiguous operands, QKᵀ and PV as one bmm each and the
  softmax in place; their sum is what an attention built from these kernels costs without any copy.
- int8 quantized.matmul: torch's quantized-tensor matmul of uint8 codes (QKᵀ and PV, no softmax).
- int8 qlinear per head: oneDNN's static int8 linear (the static projections' kernel) with K (and Vᵀ) as
  each head's "weight": qlinear_prepack per head and call, then the two products.
- bf16 sdpa / bf16 matmul: the same in bfloat16, only where the CPU has native bf16 (avx512_bf16 or AMX).
Rates: GFLOP/s (GOP/s for int8) = 4 B h T² d / time, best of --reps; the table gives best and median ms per
layer. The CPU and its flags come first; `--json PATH` writes everything measured.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench import probes, worker  # noqa: E402  (benchmarks/ is on the path when run as a script)

HEADS, HEAD_DIM = 12, 64  # bert-base (--heads 4: bert-mini)
COPIES = 6  # layers' worth of distinct inputs, taken in turn
BLOCK = 128  # matmul/128's query block


def cpu_line() -> str:
    model, simd = probes.cpu_simd()
    return f"CPU: {model}, {os.cpu_count()} cores; flags: {' '.join(simd) or '(none of avx/amx/vnni)'}"


def fail(msg: str) -> None:
    """Bad input: one line on stderr, exit status 2."""
    print(f"attention_kernels.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """"8x128,2x512" -> [(8, 128), (2, 512)]; a bad item is one clear error."""
    out = []
    for item in text.split(","):
        try:
            b, t = (int(v) for v in item.lower().split("x"))
        except ValueError:
            fail(f"--shapes: {item!r} is not BxT (e.g. 8x128)")
        if b < 1 or t < 1:
            fail(f"--shapes: {item!r} needs B and T of at least 1")
        out.append((b, t))
    return out


def variants(B: int, T: int, heads: int, native_bf16: bool):
    """{label: (fn(qkv) -> (B, h, T, d) float tensor or None, counts-as-int8)}: see the module docstring."""
    import torch
    import torch.nn.functional as F

    from bertfam.modeling import attention_core as ac

    h, d = heads, HEAD_DIM

    def qkv_views(qkv):
        return qkv.view(B, T, 3, h, d).permute(2, 0, 3, 1, 4)  # 3 x (B, h, T, d)

    def sdpa(qkv):
        q, k, v = qkv_views(qkv)
        return F.scaled_dot_product_attention(q, k, v)

    def matmul(qkv):
        q, k, v = qkv_views(qkv)
        return ac.attend(q, k, v, matmul_up_to=ac.core_of("matmul"))

    def matmul_blocks(qkv):
        q, k, v = qkv_views(qkv)
        out = torch.empty(B, h, T, d)
        for i in range(0, T, BLOCK):
            out[:, :, i:i + BLOCK] = ac.attend(q[:, :, i:i + BLOCK], k, v, matmul_up_to=ac.core_of("matmul"))
        return out

    # parts: contiguous operands made once, outside the timing
    g = torch.Generator().manual_seed(1)
    q_c, kt_c, v_c = (torch.randn(B * h, T, d, generator=g), torch.randn(B * h, d, T, generator=g),
                      torch.randn(B * h, T, d, generator=g))
    s_c, o_c = torch.empty(B * h, T, T), torch.empty(B * h, T, d)

    def part_qk(_):
        torch.bmm(q_c, kt_c, out=s_c)

    def part_softmax(_):
        torch.ops.aten._softmax.out(s_c, -1, False, out=s_c)

    def part_pv(_):
        torch.bmm(s_c, v_c, out=o_c)

    out = {"sdpa": (sdpa, False), "matmul": (matmul, False)}
    if T > BLOCK:
        out[f"matmul/{BLOCK}"] = (matmul_blocks, False)
    out.update({"parts: QKᵀ bmm": (part_qk, False), "parts: softmax": (part_softmax, False),
                "parts: PV bmm": (part_pv, False)})
    out.update(int8_variants(B, T, heads))
    if native_bf16:
        def bf16(fn):
            return lambda qkv: fn(qkv.to(torch.bfloat16))
        out["bf16 sdpa"] = (bf16(sdpa), False)
        out["bf16 matmul"] = (bf16(matmul), False)
    return out


def int8_variants(B: int, T: int, heads: int) -> dict:
    """The int8 candidates (module docstring), on uint8 / int8 codes of random values made once."""
    import warnings

    import torch

    h, d = heads, HEAD_DIM
    g = torch.Generator().manual_seed(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.quantize_per_tensor's deprecation warning
        qa = torch.quantize_per_tensor(torch.randn(B * h, T, d, generator=g), 0.05, 128, torch.quint8)
        qb = torch.quantize_per_tensor(torch.randn(B * h, d, T, generator=g), 0.05, 128, torch.quint8)
        qp = torch.quantize_per_tensor(torch.rand(B * h, T, T, generator=g), 1 / 255, 0, torch.quint8)
        qv = torch.quantize_per_tensor(torch.randn(B * h, T, d, generator=g), 0.05, 128, torch.quint8)

    def qmm(_):
        torch.ops.quantized.matmul(qa, qb, 0.1, 128)
        torch.ops.quantized.matmul(qp, qv, 0.05, 128)

    qs = torch.randint(0, 256, (B * h, T, d), dtype=torch.uint8, generator=g)
    ks = torch.randint(-127, 128, (B * h, T, d), dtype=torch.int8, generator=g)
    ps = torch.randint(0, 256, (B * h, T, T), dtype=torch.uint8, generator=g)
    vts = torch.randint(-127, 128, (B * h, d, T), dtype=torch.int8, generator=g)
    zt, st = torch.zeros(T, dtype=torch.long), torch.ones(T)
    zd, sd = torch.zeros(d, dtype=torch.long), torch.ones(d)
    onednn = torch.ops.onednn

    def qlinear_heads(_):
        for i in range(B * h):
            pk, pv = onednn.qlinear_prepack(ks[i], None), onednn.qlinear_prepack(vts[i], None)
            onednn.qlinear_pointwise(qs[i], 0.05, 128, pk, st, zt, None, 1.0, 0, torch.float32, "none", [], "")
            onednn.qlinear_pointwise(ps[i], 1 / 255, 0, pv, sd, zd, None, 1.0, 0, torch.float32, "none", [], "")

    return {"int8 quantized.matmul": (qmm, True), "int8 qlinear per head": (qlinear_heads, True)}


def check(fn, ref, qkv) -> float | None:
    """max |fn(qkv) - ref|, None for a variant that returns no attention output (parts, int8 probes)."""
    import torch

    with torch.inference_mode():
        y = fn(qkv)
    return None if y is None else float((y.float() - ref).abs().max())


def time_shape(B: int, T: int, heads: int, reps: int, native_bf16: bool) -> dict:
    """{label: {"best_ms", "median_ms", "rate", "max_abs_diff"} or {"error"}} per layer, plus "parts sum"."""
    import torch
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(0)
    inputs = [torch.randn(B * T, 3 * heads * HEAD_DIM, generator=g) for _ in range(COPIES)]
    q, k, v = inputs[0].view(B, T, 3, heads, HEAD_DIM).permute(2, 0, 3, 1, 4)
    ref = F.scaled_dot_product_attention(q, k, v)
    fns, res = {}, {}
    for label, (fn, _) in variants(B, T, heads, native_bf16).items():
        try:
            diff = check(fn, ref, inputs[0])
            fns[label] = fn
            res[label] = {"max_abs_diff": diff}
        except Exception as e:  # noqa: BLE001  (a variant this CPU or torch build cannot run)
            res[label] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:140] if str(e) else ''}"}
    times = {lab: [] for lab in fns}
    labels = list(fns)
    with torch.inference_mode():
        for r in range(reps + 1):  # repetition 0 warms up
            for lab in labels[r % len(labels):] + labels[:r % len(labels)]:
                t0 = time.perf_counter()
                for x in inputs:
                    fns[lab](x)
                if r:
                    times[lab].append((time.perf_counter() - t0) / len(inputs))
    flops = 4 * B * heads * T * T * HEAD_DIM
    for lab, ts in times.items():
        best = min(ts)
        res[lab].update(best_ms=best * 1e3, median_ms=statistics.median(ts) * 1e3)
        # a part does half the products (a bmm) or none (softmax): its rate is over its own work
        work = flops / 2 if lab.endswith("bmm") else (0 if lab.endswith("softmax") else flops)
        res[lab]["rate"] = work / best / 1e9 if work else None
    parts = [lab for lab in times if lab.startswith("parts: ")]
    if len(parts) == 3:
        best = sum(res[p]["best_ms"] for p in parts)
        res["parts sum"] = {"best_ms": best, "median_ms": sum(res[p]["median_ms"] for p in parts),
                            "rate": flops / best / 1e6, "max_abs_diff": None}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default=None, help="batches as BxT, comma-separated (default 8x128,2x512)")
    ap.add_argument("--heads", type=int, default=HEADS, help=f"heads of {HEAD_DIM} (default {HEADS}, bert-base)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=None, help="timed repetitions (default 12; 2 with --quick)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 2x32 and 1x160, 2 repetitions")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args()
    shapes = parse_shapes(args.shapes or ("2x32,1x160" if args.quick else "8x128,2x512"))
    reps = args.reps or (2 if args.quick else 12)
    if reps < 1 or args.threads < 1 or args.heads < 1:
        fail("--reps, --threads and --heads must be at least 1")
    os.environ.update(worker.env(args.threads))  # encoder_throughput.py's thread policy, before torch starts
    import torch

    from bertfam.modeling.int8_static import native_bf16
    from bertfam.utils import atomic_write_text

    worker.set_threads(args.threads)
    bf16 = native_bf16()
    print(cpu_line())
    print(f"torch {torch.__version__}, threads {args.threads}, reps {reps}, native bf16 {'yes' if bf16 else 'no'}; "
          f"load average {os.getloadavg()[0]:.1f} at start", flush=True)
    res = {"cpu": cpu_line(), "torch": torch.__version__, "threads": args.threads, "heads": args.heads, "native_bf16": bf16,
           "load_average_start": os.getloadavg()[0], "shapes": {}}
    for B, T in shapes:
        cell = time_shape(B, T, args.heads, reps, bf16)
        res["shapes"][f"{B}x{T}"] = cell
        print(f"{B} x {T} tokens, {args.heads} heads of {HEAD_DIM}: ms per layer (best / median), rate, "
              "max |diff| from sdpa")
        for lab, c in cell.items():
            if "error" in c:
                print(f"  {lab:<24} unavailable: {c['error']}")
                continue
            rate = f"{c['rate']:6.0f} {'GOP/s' if lab.startswith('int8') else 'GF/s'}" if c["rate"] else " " * 11
            diff = "" if c["max_abs_diff"] is None else f"  {c['max_abs_diff']:.1e}"
            print(f"  {lab:<24} {c['best_ms']:7.2f} / {c['median_ms']:7.2f}  {rate}{diff}", flush=True)
    res["load_average_end"] = os.getloadavg()[0]
    if args.json:
        atomic_write_text(args.json, json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
