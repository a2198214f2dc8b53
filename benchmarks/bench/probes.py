"""What the machine and the process can do and hold, read by the benchmarks beside their timings: memory
of this process (/proc, Linux) and the machine's compute ceilings (fp32 matmul, int8 GEMM), against which
an engine's useful FLOP/s are read."""
from __future__ import annotations

import os
import platform
import resource
import statistics
import time

from .engines import versions


# ----------------------------------------------------------------------------- memory
def status_mb(field: str = "VmRSS") -> float:
    """A /proc/self/status field in MB: VmRSS (resident now) or VmHWM (peak resident); NaN if absent."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # the kernel reports KiB
    return float("nan")


def rss_mb() -> float:
    return status_mb("VmRSS")


def vm_hwm_mb() -> float:
    return status_mb("VmHWM")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) of this process; False where not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- ceilings
# Each ceiling is the fastest of the kernels per product that the engines here run: torch's default,
# oneDNN's on a weight prepacked once (the kernels bertfam's projections run on where its probe, or the
# static int8 path, picks them) and onnxruntime's (MLAS: the onnxruntime engines' own). On the AVX2 EPYC
# torch's and oneDNN's were level; on AVX-512 ones oneDNN's can be twice as fast (Zen 5, fp32: torch's matmul
# 192 GFLOP/s, oneDNN's linear about 400), and a ceiling of torch's default alone put bertfam at 160-180 % "of
# the ceiling" there. onnxruntime's int8 kernel beat torch's dynamic one by 10-15 % on the AVX2 EPYC: a peer's
# faster kernel is part of what the hardware can do, so it belongs in the ceiling too.
FP32_KERNELS = ("matmul", "onednn", "onnxruntime")
INT8_KERNELS = ("dynamic", "onednn-static", "onnxruntime-dynamic")
_ORT_SESSIONS: dict = {}  # (k, n, int8, threads, spin) -> (an onnxruntime session of x @ W, W)


def ort_product(k: int, n: int, int8: bool):
    """(an onnxruntime session computing x (M, k) @ W (k, n), W (numpy float32)), W a constant: fp32
    (MatMul: MLAS's sgemm on B packed at load), or int8 as the onnxruntime-int8 engine is made
    (quantize_dynamic, QInt8 weights per channel: DynamicQuantizeMatMul, activation quantization included).
    Made once per shape and kept; None where onnxruntime or onnx does not import (the ceiling is then the
    torch kernels')."""
    from .worker import spin, threads

    key = (k, n, int8, threads(), spin())
    if key not in _ORT_SESSIONS:
        _ORT_SESSIONS[key] = _build_ort_product(k, n, int8)
    return _ORT_SESSIONS[key]


def _build_ort_product(k: int, n: int, int8: bool):
    import tempfile

    import numpy as np
    from .worker import spin, threads

    try:
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        return None
    wn = (np.random.default_rng(0).standard_normal((k, n)) * 0.02).astype(np.float32)
    w = numpy_helper.from_array(wn, "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "product",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", n])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads(), 1
    if not spin():
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    if not int8:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]), wn
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with tempfile.TemporaryDirectory() as d:
        src, dst = os.path.join(d, "product.onnx"), os.path.join(d, "product.int8.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, dst, per_channel=True, weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"])
        return ort.InferenceSession(dst, so, providers=["CPUExecutionProvider"]), wn


def fp32_kernels(m: int, k: int, n: int) -> dict:
    """name -> a callable computing one (m, k) x (k, n) fp32 product: "matmul" (torch's a @ b) and, where
    this torch has it, "onednn" (mkldnn._linear_pointwise on a prepacked (n, k) weight), and where
    onnxruntime imports, "onnxruntime" (its MatMul on a constant weight: ort_product)."""
    import torch

    from bertfam.modeling import linear as L

    a, w = torch.randn(m, k), torch.randn(n, k)
    b = w.t().contiguous()  # (k, n)
    fns = {"matmul": lambda: a @ b}
    if L.kernel_ops_present("mkldnn"):
        packed = L.pack("mkldnn", w)
        fns["onednn"] = lambda: L.packed_linear("mkldnn", a, packed, w, None)
    ort = ort_product(k, n, False)
    if ort is not None:
        x = a.numpy()
        fns["onnxruntime"] = lambda: torch.from_numpy(ort[0].run(None, {"x": x})[0])  # a @ its own W
    return fns


def int8_kernels(m: int, k: int, n: int) -> dict:
    """name -> a callable computing one (m, k) x (k, n) int8 product with a float32 result: "dynamic"
    (torch.ops.quantized.linear_dynamic: quantizes the fp32 input each call, int8 GEMM, dequantizes; the
    kernel of quantize_dynamic's nn.Linear), where this torch has it, "onednn-static" (onednn's
    qlinear_pointwise on uint8 codes with a calibrated scale, as bertfam's static int8 projections run it),
    and where onnxruntime imports, "onnxruntime-dynamic" (the onnxruntime-int8 engine's kernel: ort_product)."""
    import torch

    w = torch.randn(n, k)
    qw = torch.quantize_per_tensor(w, float(w.abs().max()) / 127, 0, torch.qint8)
    packed = torch.ops.quantized.linear_prepack(qw, None)
    x = torch.randn(m, k)
    fns = {"dynamic": lambda: torch.ops.quantized.linear_dynamic(x, packed, True)}
    if hasattr(torch.ops, "onednn") and hasattr(torch.ops.onednn, "qlinear_pointwise"):
        w8 = torch.randint(-127, 128, (n, k), dtype=torch.int8)
        u8 = torch.randint(0, 256, (m, k), dtype=torch.uint8)
        p8 = torch.ops.onednn.qlinear_prepack(w8, None)
        ws, wz = torch.full((n,), 0.01), torch.zeros(n, dtype=torch.long)
        fns["onednn-static"] = lambda: torch.ops.onednn.qlinear_pointwise(
            u8, 0.05, 128, p8, ws, wz, None, 1.0, 0, torch.float32, "none", [], "")
    ort = ort_product(k, n, True)
    if ort is not None:
        xn = x.numpy()
        fns["onnxruntime-dynamic"] = lambda: torch.from_numpy(ort[0].run(None, {"x": xn})[0])
    return fns


def _rates(fns: dict, ops: float, reps: int, warmup: int, best: bool) -> dict:
    """name -> ops per second of each kernel (the best of `reps` timed calls, or their median), after
    `warmup` calls; a kernel that raises here (an op this CPU cannot run) is left out."""
    rates = {}
    for name, fn in fns.items():
        try:
            for _ in range(warmup):
                fn()
            ts = []
            for _ in range(reps):
                t0 = time.perf_counter()
                fn()
                ts.append(time.perf_counter() - t0)
        except RuntimeError:
            continue
        rates[name] = ops / (min(ts) if best else statistics.median(ts))
    return rates


def _best_kernel(rates: dict) -> tuple[str, float]:
    name = max(rates, key=rates.get)
    return name, rates[name]


def matmul_gflops(m: int = 1024, k: int = 768, n: int = 3072, reps: int = 5) -> float:
    """fp32 GFLOP/s of one BERT-shaped product (FFN input) on the faster kernel (fp32_kernels), the best of
    `reps` calls."""
    return _best_kernel(_rates(fp32_kernels(m, k, n), 2 * m * k * n / 1e9, reps, 1, True))[1]


def int8_gops(m: int = 2048, k: int = 1024, n: int = 1024, reps: int = 5, best: bool = True) -> float:
    """int8 GOP/s of one product on the faster kernel (int8_kernels); 2*m*k*n operations a call. Best of
    `reps` (or median with best=False)."""
    return _best_kernel(_rates(int8_kernels(m, k, n), 2 * m * k * n / 1e9, reps, 2, best))[1]


def ceilings(scale: float = 1.0, reps: int = 5) -> dict:
    """fp32 GFLOP/s of a square and two BERT-shaped products and int8 GOP/s of a square-ish and the same two,
    each the median of its calls on the faster kernel (named in "fp32_kernels" / "int8_kernels"), and the
    best product of each precision as its ceiling. `scale`: the products' rows (1 for measuring, smaller for
    a smoke test)."""
    r = scale
    res, i8, k32, k8, ran32, ran8 = {}, {}, {}, {}, set(), set()
    for m, k, n in [(round(2048 * r), 2048, 2048), (round(1024 * r), 768, 3072), (round(1024 * r), 3072, 768)]:
        key = f"{m}x{k}x{n}"
        rates = _rates(fp32_kernels(m, k, n), 2 * m * k * n / 1e9, max(5, reps), 3, False)
        k32[key], res[key] = _best_kernel(rates)
        ran32 |= set(rates)
    for m, k, n in [(round(2048 * r), 1024, 1024), (round(1024 * r), 768, 3072), (round(1024 * r), 3072, 768)]:
        key = f"{m}x{k}x{n}"
        rates = _rates(int8_kernels(m, k, n), 2 * m * k * n / 1e9, max(5, reps), 2, False)
        k8[key], i8[key] = _best_kernel(rates)
        ran8 |= set(rates)
    # the kernels that ran, in FP32_KERNELS / INT8_KERNELS order: what the report says was compared
    return {"gflops": res, "ceiling": max(res.values()), "fp32_kernels": k32,
            "int8_gops": i8, "int8_ceiling": max(i8.values()), "int8_kernels": k8,
            "fp32_compared": [x for x in FP32_KERNELS if x in ran32],
            "int8_compared": [x for x in INT8_KERNELS if x in ran8]}


# ----------------------------------------------------------------------------- the machine
def cpu_simd() -> tuple[str, list[str]]:
    """The CPU's model name and its SIMD flags (avx*, amx*, *vnni*), from /proc/cpuinfo."""
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), "?")
    flags = next((ln.split(":", 1)[1].split() for ln in open("/proc/cpuinfo") if ln.startswith("flags")), [])
    return cpu, [f for f in flags if f.startswith(("avx", "amx")) or "vnni" in f]


def cpu_family(path: str = "/proc/cpuinfo") -> int | None:
    """The CPU's family number (/proc/cpuinfo's "cpu family"), None where it has none: a virtual machine's
    model name can be only "AMD EPYC", and the family is what tells its generation."""
    try:
        with open(path) as f:
            line = next((ln for ln in f if ln.startswith("cpu family")), None)
        return int(line.split(":", 1)[1]) if line else None
    except (OSError, ValueError):
        return None


# AMD's families with AVX-512: 25 (0x19) is Zen 3 and Zen 4, and only Zen 4 has AVX-512; 26 (0x1A) is Zen 5,
# whose AVX-512 runs at full 512-bit width (Zen 4 splits it in two halves): different tables
AMD_AVX512_GENERATIONS = {25: "zen4", 26: "zen5"}


def page_stem(cpu: str, simd: list, family: int | None = None) -> str:
    """The report's file name for this CPU kind: docs keep one table per kind, so a run on one machine never
    overwrites another's. AVX2-only machines keep the historical `benchmarks`; AVX-512 ones get their own
    page, e.g. `benchmarks-xeon-avx512-amx`, and an AMD EPYC its generation from the family
    (`benchmarks-epyc-zen4-avx512`; `benchmarks-epyc-avx512` where the family is unknown)."""
    if "avx512f" not in simd:
        return "benchmarks"
    vendor = "epyc" if "EPYC" in cpu else "xeon" if "Xeon" in cpu else "cpu"
    if vendor == "epyc" and family is not None:
        vendor += "-" + AMD_AVX512_GENERATIONS.get(family, f"family{family}")
    return f"benchmarks-{vendor}-avx512" + ("-amx" if any(f.startswith("amx") for f in simd) else "")


def environment(threads: int, spin: bool) -> dict:
    """The machine and libraries a run measured on, and its thread settings, for the report."""
    import onnxruntime
    import torch
    import transformers

    cpu, simd = cpu_simd()
    v = versions()
    return {"cpu": cpu, "cpu_family": cpu_family(), "cores": os.cpu_count(), "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__, "onnxruntime": onnxruntime.__version__,
            "openvino": v["openvino"], "nncf": v["nncf"], "simd": simd,
            "torch_quantized_engine": torch.backends.quantized.engine,
            "threads": threads, "idle_threads": "busy-wait (library defaults)" if spin else
            "sleep (OMP_WAIT_POLICY=PASSIVE for torch, allow_spinning=0 for onnxruntime; OpenVINO has no "
            "such switch)"}
