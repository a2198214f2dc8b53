"""The encoder benchmark's report: a progress line per case, the markdown table (docs/benchmarks.md), the
results JSON and the chart (docs/benchmarks.png), all from the results dictionary that
encoder_throughput.py builds (`--render JSON` re-writes them from a saved one)."""
from __future__ import annotations

import json
import os
import statistics

from . import engines as E
from .cases import CASES, batch_size
from .worker import QUIET_LOAD, SAMPLE_S


FP32_KERNEL_WORDS = {"matmul": "torch's matmul", "onednn": "oneDNN's linear on a prepacked weight",
                     "onnxruntime": "onnxruntime's MatMul on a constant weight (MLAS, the onnxruntime engine's)"}
INT8_KERNEL_WORDS = {
    "dynamic": "torch's dynamic-quantized linear, `quantized.linear_dynamic`, {engine} backend, activation "
               "quantization included",
    "onednn-static": "oneDNN's static int8 linear on uint8 codes, `onednn.qlinear_pointwise`, as bertfam's static "
                     "int8 projections run it",
    "onnxruntime-dynamic": "onnxruntime's DynamicQuantizeMatMul (quantize_dynamic of one MatMul, as the "
                           "onnxruntime-int8 engine is made; activation quantization included)"}


def _kernel_list(names: list, words: dict, engine: str = "x86") -> str:
    """'A, B and C: `a` / `b` / `c`': each kernel described, then the names the per-product rates carry."""
    said = [words.get(x, x).format(engine=engine) for x in names]
    text = said[0] if len(said) == 1 else "; ".join(said[:-1]) + "; and " + said[-1]
    return text + ": " + " / ".join(f"`{x}`" for x in names)


def ceiling_sentence(c: dict, env: dict, has_int8: bool) -> str:
    """The report's ceiling line: each product's rate and, for runs that chose between kernels
    (probes.ceilings), the kernel that gave it."""
    def rates(values: dict, kernels: dict) -> str:
        return ", ".join(f"{k}: {v:.1f}" + (f" {kernels[k]}" if k in kernels else "") for k, v in values.items())

    if "fp32_kernels" not in c:  # a run from before the kernels were compared: torch's default kernels only
        fp32 = "fp32 matmul ceiling measured in this run (torch)"
        int8 = (f"int8 GEMM ceiling (torch's dynamic-quantized linear, `torch.ops.quantized.linear_dynamic`, "
                f"{env.get('torch_quantized_engine', 'x86')} backend, activation quantization included)")
    elif "fp32_compared" in c:  # the kernels compared are listed (onnxruntime's among them where it ran)
        fp32 = ("fp32 matmul ceiling measured in this run (per product the fastest of "
                + _kernel_list(c["fp32_compared"], FP32_KERNEL_WORDS) + ")")
        int8 = ("int8 GEMM ceiling (per product the fastest of "
                + _kernel_list(c["int8_compared"], INT8_KERNEL_WORDS,
                               env.get("torch_quantized_engine", "x86")) + ")")
    else:
        fp32 = ("fp32 matmul ceiling measured in this run (per product the faster of torch's matmul and "
                "oneDNN's linear on a prepacked weight, `matmul` / `onednn`)")
        int8 = ("int8 GEMM ceiling (per product the faster of torch's dynamic-quantized linear, "
                f"`quantized.linear_dynamic`, {env.get('torch_quantized_engine', 'x86')} backend, activation "
                "quantization included, and oneDNN's static int8 linear on uint8 codes, `onednn.qlinear_pointwise`, "
                "as bertfam's static int8 projections run it: `dynamic` / `onednn-static`)")
    return (f"{fp32}: **{c['ceiling']:.1f} GFLOP/s** ({rates(c['gflops'], c.get('fp32_kernels', {}))})"
            + (f"; {int8}: **{c['int8_ceiling']:.1f} GOP/s** ({rates(c['int8_gops'], c.get('int8_kernels', {}))})"
               if has_int8 else "") + ".")


def shared(load_average: dict, threads: int, busy: dict | None = None) -> bool:
    """Whether other jobs ran beside the benchmark. With `busy` (the /proc/stat samples of other processes'
    work taken at start and, in a finished run, at end: worker.machine_busy): any sample of QUIET_LOAD cores
    or more; the load average remembers the minute before the run, so it only decides where there is none:
    load at start above 1, or at end more than the run's own `threads` (busy or spinning, they count in the
    load average) plus 1."""
    samples = [busy[k] for k in ("start", "end") if k in busy] if busy and busy.get("sampled") else []
    if samples:
        return max(samples) >= QUIET_LOAD
    return load_average["start"][0] > 1.0 or load_average["end"][0] - threads > 1.0


def busy_text(busy: dict | None) -> str:
    """The samples of other processes' work, as the report's header gives them ('' without samples)."""
    if not busy or not busy.get("sampled"):
        return ""
    end = f"{busy['end']:.2f} at end" if "end" in busy else "end not sampled"
    return (f"Other processes' work ({SAMPLE_S:g} s samples of /proc/stat): {busy['start']:.2f} cores at start, "
            f"{end}. ")


def summarize(times: list[float], work: float) -> dict:
    rates = sorted(work / t for t in times)
    return {"median": statistics.median(rates), "min": rates[0], "max": rates[-1]}


def best_peer(row: dict, e: str):
    """(ratio, peer): bertfam's (or bertfam-int8's) rate over the fastest other engine of its precision."""
    group = E.INT8 if E.is_int8(e) else E.FP32
    peers = [(s["median"], p) for p, s in row["engines"].items() if p in group and not p.startswith("bertfam")]
    if not e.startswith("bertfam") or not peers:
        return None
    rate, peer = max(peers)
    return row["engines"][e]["median"] / rate, peer


def paired_peer(row: dict, e: str):
    """(median, min, max) over the repetitions of e's rate over its best peer's (best_peer) in the same
    repetition, or None (no peer, or results without per-repetition rates). Within a repetition the engines
    run back to back, so a slow spell of the machine that spans repetitions (this run's spread) cancels in
    the ratio; what is left is the noise of seconds, not of minutes."""
    bp = best_peer(row, e)
    if bp is None:
        return None
    a, b = row["engines"][e].get("rates"), row["engines"][bp[1]].get("rates")
    if not a or not b or len(a) != len(b):
        return None
    r = sorted(x / y for x, y in zip(a, b))
    return statistics.median(r), r[0], r[-1]


def peer_text(row: dict, e: str, x: str = "") -> str:
    """bertfam's ratio to its best peer, and the paired ratio where the results have one: '0.94x onnxruntime;
    paired 0.96x [0.91-1.02]' (x = "x"), '' for an engine with no peer."""
    bp = best_peer(row, e)
    if bp is None:
        return ""
    text = f"{bp[0]:.2f}{x} ({bp[1]})" if not x else f"{bp[0]:.2f}{x} {bp[1]}"
    pp = paired_peer(row, e)
    return text + (f"; paired {pp[0]:.2f}{x} [{pp[1]:.2f}-{pp[2]:.2f}]" if pp else "")


def other_pages(out_dir: str, own: str) -> list:
    """[(stem, environment)] of the other CPU kinds' pages in out_dir (their results JSONs), by name."""
    found = []
    for name in sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []:
        stem = name[:-len(".json")]
        if not (name.startswith("benchmarks") and name.endswith(".json")) or stem == own \
                or not os.path.exists(os.path.join(out_dir, stem + ".md")):
            continue
        try:
            with open(os.path.join(out_dir, name), encoding="utf-8") as f:
                env = json.load(f).get("environment", {})
        except (OSError, ValueError, AttributeError):
            continue  # not a results file: no link rather than a broken one
        found.append((stem, env))
    return found


NOTABLE_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_tile", "amx_int8", "amx_bf16")


def others_sentence(others: list) -> str:
    """'Other CPU kinds: [page.md](page.md) (AMD EPYC, family 25: avx2 avx512f ...); ...' or ''."""
    if not others:
        return ""
    parts = []
    for stem, env in others:
        flags = " ".join(f for f in NOTABLE_FLAGS if f in env.get("simd", []))
        fam = f", family {env['cpu_family']}" if env.get("cpu_family") is not None else ""
        parts.append(f"[{stem}.md]({stem}.md) ({env.get('cpu', '?')}{fam}" + (f": {flags}" if flags else "") + ")")
    return "Other CPU kinds measured (each its own page, never overwritten by a run on another kind): " \
        + "; ".join(parts) + "."


def format_row(mname: str, case: str, row: dict) -> str:
    e = row["engines"]
    hf = e.get("transformers", {}).get("median")
    parts = [f"{mname:9s} {case:17s}"]
    for name, s in e.items():
        ratio = f" ({s['median'] / hf:.2f}x)" if hf and name != "transformers" else ""
        pt = peer_text(row, name, "x")
        peer = f" [{pt}]" if pt else ""
        mem = f" {s['peak_mb']:.0f} MB" if "peak_mb" in s else ""
        parts.append(f"{name} {s['median']:.0f} [{s['min']:.0f}-{s['max']:.0f}]{ratio}{peer}{mem}")
    for name, why in row.get("unavailable", {}).items():
        parts.append(f"{name} unavailable")
    return " | ".join(parts)


def pct(x) -> str:
    return f"{100 * x:.0f} %" if x is not None else "-"


def accuracy_page(out_dir: str, stem: str) -> str:
    """A markdown link to the int8 accuracy page of this CPU kind (benchmarks/int8_accuracy.py names its pages
    as these: int8_accuracy.md on AVX2-only CPUs, int8_accuracy-epyc-zen4-avx512.md ...), or, where that kind
    has none in out_dir yet, to the AVX2 one, said so."""
    own = "int8_accuracy" + stem[len("benchmarks"):] + ".md"
    if own == "int8_accuracy.md" or os.path.exists(os.path.join(out_dir, own)):
        return f"[{own}]({own})"
    return ("[int8_accuracy.md](int8_accuracy.md) (measured on an AVX2-only CPU: this kind has no page of its own "
            "yet; notes per CPU kind in [int8_kernels.md](int8_kernels.md))")


def markdown(results: dict, others: list = (), accuracy: str = "[int8_accuracy.md](int8_accuracy.md)") -> str:
    """The page; `others` = other_pages(...): the other CPU kinds' pages, linked under the title; `accuracy` =
    accuracy_page(...): the link to the int8 accuracy page."""
    env, c = results["environment"], results["ceiling"]
    la = results["load_average"]
    has_int8 = "int8_ceiling" in c
    lines = [
        "# Benchmarks: bertfam vs Hugging Face transformers, onnxruntime and OpenVINO, fp32 and int8 (CPU)", "",
        *([others_sentence(others), ""] if others else []),
        "Produced by `benchmarks/encoder_throughput.py` (`make bench`) in one run "
        f"({results['minutes']:.0f} min); {env['cpu']}"
        + (f" (family {env['cpu_family']})" if env.get("cpu_family") is not None else "") + f", {env['cores']} cores"
        + (f" ({' '.join(env['simd'])})" if env.get("simd") else "")
        + f", {env['threads']} threads for every engine, idle threads {env['idle_threads']}"
        + (f" ({env['wait_policy']})" if env.get("wait_policy") else "") + f"; torch {env['torch']}, "
        f"transformers {env['transformers']}, onnxruntime {env['onnxruntime']}"
        + (f", OpenVINO {env['openvino']}, nncf {env['nncf']}" if "openvino" in env else "") + ". "
        + busy_text(results.get("busy_cores"))
        + f"Load average {la['start'][0]:.1f} at start, {la['end'][0]:.1f} at end (this run's own "
        f"{env['threads']} threads count up to {env['threads']} of it): "
        + ("**the machine was shared with other jobs, so absolute numbers are low and noisy; the ratios "
           "(engines interleaved within each case) are what this run shows.**"
           if shared(la, env["threads"], results.get("busy_cores")) else "the machine was quiet."), "",
        *(["**Partial results: the run was still going or was interrupted.**", ""] if not results.get("complete")
          else []),
        ceiling_sentence(c, env, has_int8), "",
        *(["**% ceiling above 100 %: this run divided by the ceiling measured once at its start, under more load "
           "than the later cases saw; read those columns as relative only.** (Newer runs measure the ceiling "
           "between the repetitions of every case.)", ""]
          if any(s["fraction_of_ceiling"] > 1 and "ceiling" not in row for m in results["models"].values()
                 for row in m["cases"].values() for s in row["engines"].values()) else []),
        "Throughput = real (non-padding) tokens per second, median of "
        f"{results['args']['reps']} repetitions after a warm-up (a repetition passes over the case's batches "
        f"until {results['args'].get('min_rep_s', 0):g} s have gone by), [min-max] beside it; ×HF = ratio to "
        "transformers fp32; ×best peer (bertfam rows) = ratio to the fastest other engine of the same precision "
        "(named), and where the results have per-repetition rates, paired = the same ratio within each repetition "
        "(the engines of one repetition run back to back), median [min-max] over the repetitions: the "
        "machine's slow spells, which widen each engine's spread, cancel in it; % fp32 / % int8 = useful "
        "model FLOP/s (real tokens only) over the fp32 matmul ceiling "
        "(GFLOP/s of a 1024x768x3072 product) and over the int8 GEMM ceiling (GOP/s of a 2048x1024x1024 "
        "product; each on the fastest of the kernels compared, as above), each the best rate measured between the "
        "case's repetitions and shown after "
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
        lines += ["Engines (same weights everywhere; `benchmarks/bench/engines.py`):", ""]
        lines += [f"- `{e}`: {what}" for e, what in labels.items()]
        lines += [""]
    for mname, m in results["models"].items():
        p = m["prepare"]
        lines += [f"## {mname} ({p['params_m']:.1f}M parameters, 21128 vocab)", "",
                  f"Same weights: max |difference| of last_hidden_state from transformers on real tokens: "
                  f"bertfam {p['diff_bertfam_vs_hf']:.1e}, onnxruntime {p['diff_onnx_vs_hf']:.1e}"
                  + "".join(f", {e} {q['max_abs_diff_vs_hf']:.1e} (mean {q['mean_abs_diff_vs_hf']:.1e})"
                            for e, q in m.get("engines", {}).items() if q.get("available"))
                  + f" (int8: the quantization error on random weights; real weights: {accuracy}).", ""]
        if m.get("linear_probe"):
            lp = m["linear_probe"]
            lines += [f"bertfam's fp32 projection kernels, probed at this model's start in this run "
                      f"(`linear=\"auto\"`, rows {', '.join(str(r) for r in lp['rows'])}; {lp['probe_s']:.1f} s): "
                      f"{kernel_choice(lp['choice'])}.", ""]
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
                peer = peer_text(row, e) or "-"
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
    sizes = "; ".join(f"{c}: {n} x batch {batch_size(c, sc)}" for c, (*_, n) in CASES.items())
    lines += [
        f"Batches per repetition: {sizes}.", "",
        "Cases: `infer 16-128` = batches with lengths uniform in 16-128 (the padded engines pay for "
        "padding up to the longest in the batch; bertfam packs the real tokens); `infer full N` = no padding; "
        "`train MLM` = one AdamW step per batch, dropout on, batches from bertfam's PretrainCollator "
        "(15 % token masking); bertfam's MLM head runs on the masked positions only, BertForMaskedLM on all. "
        "The int8 engines run inference cases only.",
        "", f"![speed-up over transformers]({stem_of(results)}.png)", "",
        "Accuracy cost of the int8 engines (hidden-state differences, SST-2 accuracy, MRC F1): "
        f"{accuracy}, from `benchmarks/int8_accuracy.py`.", ""]
    return "\n".join(lines)


def stem_of(results: dict) -> str:
    """The file name (no extension) of this run's report: one page per CPU kind (probes.page_stem)."""
    from .probes import page_stem

    env = results.get("environment", {})
    return page_stem(env.get("cpu", ""), env.get("simd", []), env.get("cpu_family"))


def write_outputs(results: dict, args, final: bool = True) -> None:
    from bertfam.utils import atomic_write_text

    os.makedirs(args.out_dir, exist_ok=True)
    results["complete"] = final
    md = markdown(results, other_pages(args.out_dir, stem_of(results)), accuracy_page(args.out_dir, stem_of(results)))
    if final:
        print("\n" + md)
    stem = os.path.join(args.out_dir, stem_of(results))
    atomic_write_text(stem + ".md", md)
    atomic_write_text(stem + ".json", json.dumps(results, indent=2) + "\n")
    try:
        plot(results, stem + ".png")
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
        engines = [e for e in E.INFER if e != "transformers" and any(e in cases[c]["engines"] for c in names)]
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


def kernel_choice(choice: dict) -> str:
    """'in x out: kernel' per projection shape, as the swapped modules label themselves (linear.label)."""
    from bertfam.modeling import linear as L

    return "; ".join(f"{shape} {L.label(*L.parse_spec(spec))}" for shape, spec in sorted(choice.items()))
