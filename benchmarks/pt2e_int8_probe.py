"""Is PyTorch's own static int8 (PT2E: torch.export + X86InductorQuantizer + torch.compile, inductor with
freezing) faster on this CPU than bertfam's hand-written static int8 (bertfam/modeling/int8_static.py)?

    .venv/bin/python benchmarks/pt2e_int8_probe.py --model bert-base --out pt2e_int8_probe.json
    .venv/bin/python benchmarks/pt2e_int8_probe.py --model bert-mini --shapes 8x128,1x128 --reps 3

One process, the benchmarks' random-weight model (bench/cases.bertfam_model) and random token ids
(cases.random_batch), full-length batches (no padding) of each --shapes B x T, the padded forward
(packing="padded": one static graph, no packing), these variants:

  eager-fp32            the backbone's plain forward (the reference of every |diff|)
  compile-fp32          torch.export of that forward, torch.compile (inductor, freezing=True)
  pt2e-int8             the same export, prepare_pt2e / calibrate / convert_pt2e with X86InductorQuantizer's
                        default static config, then the same torch.compile; needs the PT2E API (PT2E_MODULES:
                        torchao, or torch.ao before torch moved it out)
  qdq-int8              without that API: the graph convert_pt2e writes for that config, built here
                        (`insert_qdq`): every aten.linear's input observed by a HistogramObserver (uint8 per
                        tensor, affine), its weight int8 per output channel (symmetric); quantize/dequantize
                        nodes of torch.ops.quantized_decomposed, as convert_pt2e leaves them; the same
                        torch.compile, whose freezing passes lower them to oneDNN's qlinear (counts reported)
  bertfam-int8-static   bertfam's static int8 (engine `bertfam-int8-static` of encoder_throughput.py),
                        calibrated on the same batches, saved and loaded as that engine does

Calibration: --calib-batches batches of B sequences, lengths uniform in 16..T, right-padded to T (the
exported graph is static; encoder_throughput.py calibrates nncf on such random batches). The PT2E observers
see padding rows too (as nncf's do); bertfam's calibration keeps real tokens only.

Timing as encoder_throughput.py's: the variants interleaved in one process (order rotating every
repetition), one warm-up pass, then each repetition passes over the batch for at least --min-rep-s seconds;
the median of --reps repetitions, the spread beside it. Tokens/s are real tokens (all, here). compile_s is
the first call of the compiled module (torch.compile is lazy; export and quantization are timed apart).
The exported graph keeps the (all-ones) attention mask; eager drops a mask without padding (layout.py).

A variant that cannot run here (the PT2E API not importable, no C++ compiler for inductor, an export or
lowering error) is one line saying which stage failed and why, recorded in the JSON; the others go on.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

VARIANTS = ("eager-fp32", "compile-fp32", "pt2e-int8", "qdq-int8", "bertfam-int8-static")
REFERENCE = "eager-fp32"
# (quantize_pt2e module, X86InductorQuantizer module), first importable wins: torch 2.13 no longer ships
# torch.ao.quantization.quantize_pt2e (PT2E quantization moved to torchao)
PT2E_MODULES = (
    ("torchao.quantization.pt2e.quantize_pt2e", "torchao.quantization.pt2e.quantizer.x86_inductor_quantizer"),
    ("torch.ao.quantization.quantize_pt2e", "torch.ao.quantization.quantizer.x86_inductor_quantizer"),
)
EPS = 2 ** -12  # the observers' eps in get_default_x86_inductor_quantization_config


class Failed(RuntimeError):
    """A variant cannot run here; str(e) says why (one line)."""


def one_line(e: BaseException) -> str:
    """An exception as one line: its type and its first informative line (dynamo / inductor wrap the cause
    under a 'backend=... raised:' header)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.endswith("raised:") and not ln.startswith(("Traceback", "Set TORCH"))]
    return f"{type(e).__name__}: {lines[0] if lines else ''}"[:400]


# ----------------------------------------------------------------------------- what is there
def pt2e_api():
    """(prepare_pt2e, convert_pt2e, X86 quantizer with its default static config, where from); Failed
    naming each candidate's import error where none imports."""
    import importlib
    import importlib.util

    errors = []
    for qmod, xmod in PT2E_MODULES:
        try:
            q, x = importlib.import_module(qmod), importlib.import_module(xmod)
            quantizer = x.X86InductorQuantizer()
            quantizer.set_global(x.get_default_x86_inductor_quantization_config())
            return q.prepare_pt2e, q.convert_pt2e, quantizer, f"{qmod}, {xmod}"
        except Exception as e:  # ImportError, or a module that fails while importing
            errors.append(f"{qmod}: {one_line(e)}")
    import torch

    torchao = "not installed" if importlib.util.find_spec("torchao") is None else "installed"
    raise Failed(f"PT2E API not importable ({'; '.join(errors)}); torch {torch.__version__.split('+')[0]} has no "
                 f"torch.ao.quantization.quantize_pt2e (PT2E quantization moved to torchao, {torchao} here)")


def qdq_ops():
    """torch.ops.quantized_decomposed (registered by importing torch.ao.quantization.fx._decomposed) and the
    two observers of X86InductorQuantizer's default config; Failed where this torch lacks them."""
    import torch

    try:
        import torch.ao.quantization.fx._decomposed  # noqa: F401  (registers the quantized_decomposed ops)
        from torch.ao.quantization.observer import HistogramObserver, PerChannelMinMaxObserver
        return torch.ops.quantized_decomposed, HistogramObserver, PerChannelMinMaxObserver
    except Exception as e:
        raise Failed(f"torch.ao quantized_decomposed ops / observers missing: {one_line(e)}") from None


def cxx_missing() -> str | None:
    """Why inductor's CPU backend cannot compile here (no C++ compiler), or None."""
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
        return None
    except Exception as e:
        return f"inductor finds no C++ compiler (install g++, or set CXX): {one_line(e)}"


# ----------------------------------------------------------------------------- the graph
def padded_forward(backbone):
    """The backbone's padded forward as a module returning tensors: (last_hidden_state, pooler_output)."""
    import torch

    class Padded(torch.nn.Module):
        def __init__(self, b):
            super().__init__()
            self.backbone = b

        def forward(self, input_ids, attention_mask, token_type_ids):
            o = self.backbone(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids,
                              packing="padded")
            return o.last_hidden_state, o.pooler_output

    return Padded(backbone).eval()


def export_as_is(backbone, batch) -> dict:
    """torch.export of BertfamModel.forward as it is (default packing, its ModelOutput return): whether it
    traces, and if not why (one line) and whether it does once ModelOutput is a registered pytree dataclass
    (registered in this process only; the probe itself exports `padded_forward`, which returns tensors).
    Under export, layout.choose_layout always takes the padded path (layout.tracing())."""
    import torch

    try:
        torch.export.export(backbone, (), kwargs=batch, strict=False)
        return {"ok": True}
    except Exception as e:
        out = {"ok": False, "reason": one_line(e)}
    try:
        from bertfam.modeling.model import ModelOutput

        torch.export.register_dataclass(ModelOutput)
        torch.export.export(backbone, (), kwargs=batch, strict=False)
        out["with_ModelOutput_registered"] = "traces"
    except Exception as e:
        out["with_ModelOutput_registered"] = f"fails too: {one_line(e)}"
    return out


def export(module, batch):
    """torch.export (static shapes) of `module` on `batch`: the unlifted GraphModule PT2E works on."""
    import torch

    return torch.export.export(module, (), kwargs=batch, strict=False).module()


def linear_nodes(gm) -> list:
    import torch

    return [n for n in gm.graph.nodes if n.op == "call_function" and n.target is torch.ops.aten.linear.default]


def insert_qdq(gm, calib: list[dict]):
    """What prepare_pt2e + calibration + convert_pt2e with X86InductorQuantizer's default static config make of
    `gm`'s linear layers (the only ops of this graph that config quantizes), in place: each distinct linear
    input observed over `calib` by a HistogramObserver (uint8, 0..255, per-tensor affine) and replaced by
    quantize_per_tensor -> dequantize_per_tensor at its qparams; each weight quantized per output channel
    (PerChannelMinMaxObserver, int8 -128..127 symmetric), kept as an int8 buffer read through
    dequantize_per_channel (convert_pt2e's folded weights). Returns the number of linear layers."""
    import torch

    qd, Histogram, PerChannel = qdq_ops()
    g = gm.graph
    lins = linear_nodes(gm)
    if not lins:
        raise Failed("the exported graph has no aten.linear node")
    observers = {}  # input node -> observer node
    for n in lins:
        x = n.args[0]
        if x not in observers:
            name = f"_probe_act_obs_{len(observers)}"
            gm.add_submodule(name, Histogram(dtype=torch.quint8, qscheme=torch.per_tensor_affine, quant_min=0,
                                             quant_max=255, eps=EPS))
            with g.inserting_after(x):
                observers[x] = g.call_module(name, (x,))
        n.replace_input_with(x, observers[x])
    gm.recompile()
    with torch.no_grad():
        for b in calib:
            gm(**b)
    for x, o in observers.items():
        scale, zp = (float(v) for v in gm.get_submodule(o.target).calculate_qparams())
        qargs = (scale, int(zp), 0, 255, torch.uint8)
        with g.inserting_after(o):
            q = g.call_function(qd.quantize_per_tensor.default, (x, *qargs))
        with g.inserting_after(q):
            dq = g.call_function(qd.dequantize_per_tensor.default, (q, *qargs))
        o.replace_all_uses_with(dq)
        g.erase_node(o)
        delattr(gm, o.target)
    for i, n in enumerate(lins):
        w = n.args[1]
        if w.op != "get_attr":
            raise Failed(f"{n.name}: its weight is not a module attribute ({w.op} {w.target})")
        weight = gm
        for part in w.target.split("."):  # a parameter or buffer of a submodule
            weight = getattr(weight, part)
        weight = weight.detach()
        obs = PerChannel(ch_axis=0, dtype=torch.qint8, qscheme=torch.per_channel_symmetric, quant_min=-128,
                         quant_max=127, eps=EPS)
        obs(weight)
        scale, zp = obs.calculate_qparams()
        wq = qd.quantize_per_channel(weight, scale, zp, 0, -128, 127, torch.int8)
        names = (f"_probe_w_int8_{i}", f"_probe_w_scale_{i}", f"_probe_w_zp_{i}")
        for name, t in zip(names, (wq, scale.float(), zp.long())):
            gm.register_buffer(name, t)
        with g.inserting_before(n):
            attrs = [g.get_attr(name) for name in names]
            dq = g.call_function(qd.dequantize_per_channel.default, (*attrs, 0, -128, 127, torch.int8))
        n.replace_input_with(w, dq)
    g.eliminate_dead_code()
    g.lint()
    gm.recompile()
    return len(lins)


def pt2e_quantize(gm, calib: list[dict], api):
    """prepare_pt2e -> calibration forwards -> convert_pt2e of `gm` with the X86 quantizer of `api`."""
    import torch

    prepare, convert, quantizer, _ = api
    prepared = prepare(gm, quantizer)
    with torch.no_grad():
        for b in calib:
            prepared(**b)
    return convert(prepared)


def compiled(gm):
    """torch.compile(gm) (inductor; freezing is set globally in main); a callable batch -> hidden states."""
    import torch

    c = torch.compile(gm)

    def run(b):
        with torch.no_grad():
            return c(**b)[0]
    return run


def inductor_int8_counts() -> dict:
    """The inductor pattern counters of the quantized linear lowering since the last counters.clear()."""
    from torch._dynamo.utils import counters

    return {k: v for k, v in counters["inductor"].items() if k.startswith("qlinear") and k.endswith("_count")}


# ----------------------------------------------------------------------------- the variants
def build_variant(name: str, backbone, model, batch: dict, calib: list[dict], workdir: str):
    """(callable batch -> last hidden state, facts) of variant `name`; compiled ones compiled (first call
    timed). Raises Failed naming the stage that failed (import, export, quantize, compile...) and why."""
    import torch

    facts: dict = {"stage": "setup"}
    try:
        if name == "eager-fp32":
            mod = padded_forward(backbone)

            def run(b):
                with torch.no_grad():
                    return mod(**b)[0]
            return run, facts
        if name == "bertfam-int8-static":
            import copy

            from bench import engines as E

            facts["stage"] = "calibrate"
            static = E.static_bertfam(copy.deepcopy(model), calib)
            static.save_pretrained(os.path.join(workdir, os.path.dirname(E.FILES[name])))
            del static
            facts["stage"] = "load"
            return E.load_hidden(name, workdir), facts
        # the exported variants
        facts["stage"] = "import"
        api = pt2e_api() if name == "pt2e-int8" else None
        if name == "qdq-int8":
            qdq_ops()
        facts["stage"] = "compiler check"
        why = cxx_missing()
        if why:
            raise Failed(why)
        facts["stage"] = "export"
        t0 = time.perf_counter()
        gm = export(padded_forward(backbone), batch)
        facts["export_s"] = time.perf_counter() - t0
        facts["linear_layers"] = len(linear_nodes(gm))
        if name != "compile-fp32":
            facts["stage"] = "quantize"
            t0 = time.perf_counter()
            if name == "pt2e-int8":
                gm = pt2e_quantize(gm, calib, api)
                facts["pt2e_modules"] = api[3]
            else:
                insert_qdq(gm, calib)
            facts["quantize_s"] = time.perf_counter() - t0
        facts["stage"] = "compile"
        from torch._dynamo.utils import counters

        counters.clear()
        run = compiled(gm)
        t0 = time.perf_counter()
        run(batch)
        facts["compile_s"] = time.perf_counter() - t0
        if name != "compile-fp32":  # how many linear layers inductor turned into oneDNN int8 kernels
            facts["inductor_qlinear"] = counts = inductor_int8_counts()
            facts["int8_linears_lowered"] = counts.get("qlinear_unary_lower_count", 0) \
                + counts.get("qlinear_binary_lower_count", 0)
        return run, facts
    except Failed as e:
        raise Failed(f"at {facts['stage']}: {e}") from None
    except Exception as e:  # an export, quantization or lowering error: one line, no traceback
        raise Failed(f"at {facts['stage']}: {one_line(e)}") from None


def full_batch(B: int, T: int, vocab: int, seed: int = 0) -> dict:
    """B sequences of T real tokens ([CLS] ... [SEP], no padding), as the timed batch."""
    import numpy as np

    from bench import cases

    return cases.random_batch(np.random.default_rng(seed), B, T, T, vocab)


def calib_batches(n: int, B: int, T: int, vocab: int, seed: int = 2) -> list[dict]:
    """n batches of B sequences, lengths uniform in min(16, T)..T, right-padded to T (static shape)."""
    import numpy as np
    import torch.nn.functional as F

    from bench import cases

    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = cases.random_batch(rng, B, min(16, T), T, vocab)
        pad = T - b["input_ids"].shape[1]
        out.append({k: F.pad(v, (0, pad)) for k, v in b.items()})
    return out


def time_variants(fns: dict, batch: dict, reps: int, min_rep_s: float, warmup: int) -> dict:
    """{variant: seconds per pass, one per repetition}, the variants interleaved (order rotating)."""
    names = list(fns)
    for v in names:
        for _ in range(warmup):
            fns[v](batch)
    times = {v: [] for v in names}
    for r in range(reps):
        for v in names[r % len(names):] + names[:r % len(names)]:
            t0, passes = time.perf_counter(), 0
            while True:
                fns[v](batch)
                passes += 1
                elapsed = time.perf_counter() - t0
                if elapsed >= min_rep_s:
                    break
            times[v].append(elapsed / passes)
    return times


def run_shape(args, model, B: int, T: int) -> dict:
    """Every requested variant at batch B x length T: {variant: result}."""
    import torch

    from bench import engines as E

    vocab = model.config.vocab_size
    batch = full_batch(B, T, vocab)
    calib = calib_batches(args.calib_batches, B, T, vocab)
    fns, res = {}, {}
    with tempfile.TemporaryDirectory(prefix="pt2e-probe-") as workdir:
        for v in args.variants:
            t0 = time.perf_counter()
            try:
                fn, facts = build_variant(v, model.backbone, model, batch, calib, workdir)
            except Failed as e:
                res[v] = {"ok": False, "reason": str(e)}
                print(f"{v} @ {B}x{T}: FAILED: {e}", flush=True)
                continue
            facts.pop("stage", None)
            facts["build_s"] = time.perf_counter() - t0
            fns[v], res[v] = fn, {"ok": True, **facts}
            print(f"{v} @ {B}x{T}: ready in {facts['build_s']:.1f} s"
                  + (f" (compile {facts['compile_s']:.1f} s)" if "compile_s" in facts else "")
                  + (f"; {facts['int8_linears_lowered']} of {facts['linear_layers']} linear layers lowered to "
                     f"oneDNN int8 (inductor counters {facts['inductor_qlinear']})" if "inductor_qlinear" in facts
                     else ""),
                  flush=True)
        if not fns:
            return res
        ref = fns[REFERENCE](batch) if REFERENCE in fns else None
        for v, fn in list(fns.items()):  # accuracy first: a variant that runs but gives nonsense is reported so
            try:
                out = fn(batch)
            except Exception as e:
                res[v] = {"ok": False, "reason": f"at run: {one_line(e)}"}
                print(f"{v} @ {B}x{T}: FAILED: {res[v]['reason']}", flush=True)
                del fns[v]
                continue
            if ref is not None:
                d = E.diff_stats(out, ref, batch["attention_mask"])
                res[v].update(max_abs_diff=d["max_abs_diff"], mean_abs_diff=d["mean_abs_diff"],
                              mean_abs_ref=d["mean_abs_ref"])
            res[v]["finite"] = bool(torch.isfinite(out).all())
        times = time_variants(fns, batch, args.reps, args.min_rep_s, args.warmup)
    tokens = int(batch["attention_mask"].sum())
    for v, ts in times.items():
        med = statistics.median(ts)
        res[v].update(seconds=ts, median_s=med, tokens_per_s=tokens / med, tokens_per_s_min=tokens / max(ts),
                      tokens_per_s_max=tokens / min(ts), real_tokens=tokens)
    return res


# ----------------------------------------------------------------------------- report
def table(mname: str, B: int, T: int, res: dict) -> str:
    ref = res.get(REFERENCE, {}).get("tokens_per_s")
    rows = [f"{mname}, batch {B} x {T}:",
            f"  {'variant':<20} {'tokens/s':>9} {'(min-max)':>15} {'x eager':>7} {'compile s':>9} "
            f"{'max|diff|':>9} {'mean|diff|':>10}"]
    for v, r in res.items():
        if not r["ok"]:
            rows.append(f"  {v:<20} unavailable: {r['reason']}")
            continue
        spread = f"{r['tokens_per_s_min']:.0f}-{r['tokens_per_s_max']:.0f}"
        ratio = f"{r['tokens_per_s'] / ref:.2f}" if ref else "-"
        comp = f"{r['compile_s']:.1f}" if "compile_s" in r else "-"
        diff = (f"{r['max_abs_diff']:.2e} {r['mean_abs_diff']:>10.2e}" if "max_abs_diff" in r
                else f"{'-':>9} {'-':>10}")
        rows.append(f"  {v:<20} {r['tokens_per_s']:>9.0f} {spread:>15} {ratio:>7} {comp:>9} {diff}")
    return "\n".join(rows)


def parse_shapes(s: str) -> list[tuple[int, int]]:
    out = []
    for part in s.split(","):
        b, _, t = part.strip().lower().partition("x")
        if not (b.isdigit() and t.isdigit() and int(b) > 0 and int(t) > 1):
            raise argparse.ArgumentTypeError(f"shape {part!r} is not BxT (e.g. 8x128)")
        out.append((int(b), int(t)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="bert-base", choices=["bert-base", "bert-mini", "bert-tiny"])
    ap.add_argument("--shapes", type=parse_shapes, default=parse_shapes("8x128"),
                    help="comma list of BATCHxLENGTH (default 8x128, the 'infer full 128' case)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma list of " + ", ".join(VARIANTS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1, help="passes per variant before the timed ones")
    ap.add_argument("--min-rep-s", type=float, default=1.0,
                    help="each repetition passes over the batch until this many seconds have gone by")
    ap.add_argument("--calib-batches", type=int, default=None, help="calibration batches (default: "
                    "encoder_throughput.py's, engines.CALIB_ITEMS)")
    ap.add_argument("--compile-threads", type=int, default=None,
                    help="inductor's compile workers (torch._inductor.config.compile_threads; default: its own "
                         "choice, one per core); 1 compiles in this process, much faster on a busy 2-core machine")
    ap.add_argument("--spin", action="store_true", help="let idle OpenMP threads busy-wait (default: "
                    "OMP_WAIT_POLICY=PASSIVE, as the encoder benchmark)")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args()
    args.variants = args.variants.split(",")
    unknown = [v for v in args.variants if v not in VARIANTS]
    if unknown:
        ap.error(f"unknown variant(s) {', '.join(unknown)}; valid: {', '.join(VARIANTS)}")
    if not args.spin:  # before torch starts its OpenMP pool
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    warnings.filterwarnings("ignore")  # torch.ao's deprecation notes, export's and inductor's chatter
    import torch
    import torch._inductor.config as inductor_config

    from bench import cases, worker
    from bench import engines as E
    from bench.probes import cpu_simd

    if args.calib_batches is None:
        args.calib_batches = E.CALIB_ITEMS
    worker.set_threads(args.threads)
    inductor_config.freezing = True  # weights as constants: what lets inductor prepack them (and fold the int8 ones)
    if args.compile_threads:
        inductor_config.compile_threads = args.compile_threads
    cpu, simd = cpu_simd()
    try:
        api_where = pt2e_api()[3]
        print(f"PT2E API: {api_where}", flush=True)
    except Failed as e:
        api_where = None
        print(str(e), flush=True)
    model = cases.bertfam_model(args.model)
    first = full_batch(*args.shapes[0], model.config.vocab_size)
    as_is = export_as_is(model.backbone, first)
    print("torch.export of BertfamModel.forward as it is: "
          + ("traces" if as_is["ok"] else f"fails: {as_is['reason'][:160]}...; with ModelOutput registered "
             f"(torch.export.register_dataclass): {as_is['with_ModelOutput_registered']}")
          + ". This probe exports (last_hidden_state, pooler_output) of forward(..., packing='padded')", flush=True)
    results = {"model": args.model, "threads": args.threads, "reps": args.reps, "min_rep_s": args.min_rep_s,
               "compile_threads": inductor_config.compile_threads,
               "calib_batches": args.calib_batches, "torch": torch.__version__, "cpu": cpu, "simd": simd,
               "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
               "pt2e_api": api_where, "export_as_is": as_is, "shapes": {}}
    for B, T in args.shapes:
        res = run_shape(args, model, B, T)
        results["shapes"][f"{B}x{T}"] = {"variants": res}
        print(table(args.model, B, T, res), flush=True)
        if args.out:  # partial results survive an interrupted run
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
