"""Inference engines of the CPU benchmarks, fp32 and int8, on one model directory (encoder_throughput.py,
int8_accuracy.py, varlen_kernels.py).

A model directory `d` holds `hf/` (a Hugging Face directory, bertfam.convert.hf.export_hf of the bertfam
model) and `model.onnx` (torch.onnx.export(dynamo=True) of the transformers model loaded from `hf/`); the
engines that need more files build them from those (`build(engine, d, calib)`), once:

    model.int8.onnx        onnxruntime.quantization.quantize_dynamic of model.onnx
    ov/fp32.xml            openvino.convert_model(model.onnx), saved without fp16 compression
    ov/int8w.xml           nncf.compress_weights(ov/fp32, INT8_ASYM): int8 weights only
    ov/int8.xml            nncf.quantize(ov/fp32, calibration batches): int8 weights and activations
    bertfam-int8-static/   the bertfam model calibrated on the same batches, saved as a static-int8 checkpoint

`load_hidden(engine, d)` gives a callable batch -> last_hidden_state (float32 torch tensor, (B, T, H)).
An engine that cannot run here (a library missing, a file that could not be built) raises `Unavailable`
with the reason, which the benchmarks report instead of a number.
"""
from __future__ import annotations

import os
import time

from .worker import spin, threads

# bertfam with each fp32 projection kernel of optimize_for_inference(linear=...) (modeling/linear.py; issue
# #26): not in ALL (`make bench` runs ALL), named with --engines to compare kernels in one run
LINEAR_ENGINES = {"bertfam-aten": "aten", "bertfam-mkl": "mkl", "bertfam-mkldnn": "mkldnn", "bertfam-auto": "auto"}
OPTIONAL = tuple(LINEAR_ENGINES)
FP32 = ("transformers", "onnxruntime", "openvino", "bertfam", *OPTIONAL)
INT8 = ("transformers-int8", "onnxruntime-int8", "openvino-int8w", "openvino-int8", "bertfam-int8",
        "bertfam-int8-static")
ALL = ("transformers", "transformers-int8", "onnxruntime", "onnxruntime-int8", "openvino", "openvino-int8w",
       "openvino-int8", "bertfam", "bertfam-int8", "bertfam-int8-static")
INFER = ALL + OPTIONAL  # every inference engine; ALL is the default set, OPTIONAL only when named
# each int8 engine's fp32 counterpart (the accuracy script compares them)
FP32_OF = {"transformers-int8": "transformers", "onnxruntime-int8": "onnxruntime", "openvino-int8w": "openvino",
           "openvino-int8": "openvino", "bertfam-int8": "bertfam", "bertfam-int8-static": "bertfam"}
LABELS = {
    "transformers": "transformers AutoModel (BertModel), fp32, sdpa attention",
    "transformers-int8": "transformers + torch.ao.quantization.quantize_dynamic({nn.Linear}, qint8): int8 weights "
                         "(per tensor) and activations (per batch, dynamic), every nn.Linear; attention, "
                         "LayerNorm and embeddings fp32",
    "onnxruntime": "onnxruntime (CPU provider) on the dynamo=True ONNX export, fp32",
    "onnxruntime-int8": "onnxruntime on onnxruntime.quantization.quantize_dynamic of that export: MatMuls with "
                        "a constant weight only (the linear layers), QInt8 weights per channel, dynamic uint8 "
                        "activations",
    "openvino": "OpenVINO (CPU) on openvino.convert_model of the ONNX file, fp32 (INFERENCE_PRECISION_HINT f32)",
    "openvino-int8w": "OpenVINO on nncf.compress_weights(mode=INT8_ASYM): int8 weights only (every constant "
                      "weight, embeddings included), decompressed in the kernels; compute stays fp32",
    "openvino-int8": "OpenVINO on nncf.quantize(model_type=TRANSFORMER): static int8 weights and activations, "
                     "calibrated on a few batches (random token ids in encoder_throughput.py)",
    "bertfam": "bertfam, optimize_for_inference (buffer reuse; the encoder projections' fp32 kernel per shape "
               "and row count that the probe chose at the model's start in this run, linear=None = auto: "
               "bertfam/modeling/linear_probe.py; attention by the fused kernel where it runs (AVX-512 or AVX2) "
               "and its probe finds it faster: bertfam/modeling/fused_attention.py), unpadded (packed) path, fp32",
    "bertfam-int8": "bertfam, optimize_for_inference(int8=True): the encoder's nn.Linear layers int8 "
                    "dynamic-quantized (bertfam/modeling/int8.py)",
    "bertfam-int8-static": "bertfam static int8 (bertfam quantize --calibrate; bertfam/modeling/int8_static.py): "
                           "the same int8 weights, activation scales calibrated on the batches nncf.quantize gets, "
                           "GELU and residual adds fused into oneDNN's qlinear, attention in bf16 where the CPU has native "
                           "bf16 (AVX512_BF16 / AMX; float32 elsewhere), by the fused attention kernel where it runs "
                           "and its probe finds it faster (bertfam/modeling/fused_attention.py); loaded from the saved "
                           "checkpoint, then "
                           "optimize_for_inference",
    "bertfam-aten": "bertfam as `bertfam`, optimize_for_inference(linear=\"aten\"): torch's addmm (the kernel "
                    "before the probe; the buffer path bit for bit)",
    "bertfam-mkl": "bertfam as `bertfam`, optimize_for_inference(linear=\"mkl\"): encoder projections on MKL "
                   "packed-sgemm weights (bertfam/modeling/linear.py)",
    "bertfam-mkldnn": "bertfam as `bertfam`, optimize_for_inference(linear=\"mkldnn\"): encoder projections on "
                      "oneDNN prepacked weights (bertfam/modeling/linear.py)",
    "bertfam-auto": "bertfam as `bertfam` (whose default it is), optimize_for_inference(linear=\"auto\"): per weight "
                    "shape and row count the kernel a probe found fastest here (outside make bench cached in "
                    "~/.cache/bertfam/linear_kernels.json: delete it to probe again; "
                    "bertfam/modeling/linear_probe.py)",
}
TRAIN = ("transformers", "bertfam")  # the MLM training case: transformers' BertForMaskedLM vs bertfam
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
CALIB_ITEMS = 8  # calibration batches for nncf.quantize and bertfam-int8-static


class Unavailable(RuntimeError):
    """This engine cannot run here; str(e) says why."""


def is_int8(engine: str) -> bool:
    return engine in INT8


# ----------------------------------------------------------------------------- availability
def library_missing(engine: str) -> str | None:
    """Why the libraries an engine needs do not import, or None."""
    mods = {"onnxruntime": ["onnxruntime"], "onnxruntime-int8": ["onnxruntime", "onnxruntime.quantization"],
            "openvino": ["openvino"], "openvino-int8w": ["openvino", "nncf"], "openvino-int8": ["openvino", "nncf"],
            "transformers": ["transformers"], "transformers-int8": ["transformers"]}.get(engine, [])
    for m in mods:
        try:
            __import__(m)
        except Exception as e:  # ImportError, or a library that fails while importing
            hint = " (pip install -e '.[bench]')" if m in ("openvino", "nncf") else ""
            return f"{m} does not import: {type(e).__name__}: {str(e)[:200]}{hint}"
    return None


def versions() -> dict:
    out = {}
    for m in ("openvino", "nncf", "onnxruntime"):
        try:
            out[m] = __import__(m).__version__.split("-")[0]  # openvino: 2026.4.1-22982-<hash>-releases/...
        except Exception:
            out[m] = "not installed"
    return out


# ----------------------------------------------------------------------------- files
def export_onnx(d: str, batch: dict, model=None) -> float:
    """d/hf (transformers AutoModel) -> d/model.onnx (dynamo=True, dynamic batch and length); seconds."""
    import torch
    import transformers as T

    hf = model if model is not None else T.AutoModel.from_pretrained(os.path.join(d, "hf"),
                                                                      attn_implementation="sdpa").eval()
    outs = ["last_hidden_state"] + (["pooler_output"] if getattr(hf, "pooler", None) is not None else [])
    t0 = time.perf_counter()
    torch.onnx.export(hf, (), os.path.join(d, "model.onnx"), kwargs={k: batch[k] for k in ONNX_INPUTS},
                      input_names=list(ONNX_INPUTS), output_names=outs,
                      dynamic_shapes={k: {0: torch.export.Dim("batch"), 1: torch.export.Dim("seq")}
                                      for k in ONNX_INPUTS},
                      dynamo=True, optimize=True, verbose=False)
    return time.perf_counter() - t0


FILES = {"onnxruntime": "model.onnx", "onnxruntime-int8": "model.int8.onnx", "openvino": "ov/fp32.xml",
         "openvino-int8w": "ov/int8w.xml", "openvino-int8": "ov/int8.xml",
         "bertfam-int8-static": "bertfam-int8-static/config.json"}


def build(engine: str, d: str, calib: list[dict] | None = None) -> dict:
    """Make the files `engine` runs from (if missing); {"build_s": seconds, ...facts about the result}."""
    why = library_missing(engine)
    if why:
        raise Unavailable(why)
    name = FILES.get(engine)
    path = os.path.join(d, name) if name else None
    if path is None or os.path.exists(path):
        return {"build_s": 0.0}
    t0 = time.perf_counter()
    info: dict = {}
    if engine == "onnxruntime-int8":
        import onnx
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # MatMul only: the linear layers (MatMulConstBOnly, the dynamic default, skips attention's products);
        # the default list would also quantize the embedding Gathers, which no torch engine does
        quantize_dynamic(os.path.join(d, "model.onnx"), path, per_channel=True, weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul"])
        g = onnx.load(path, load_external_data=False).graph
        info["int8_matmuls"] = sum(n.op_type == "MatMulInteger" for n in g.node)
        info["fp32_matmuls"] = sum(n.op_type in ("MatMul", "Gemm") for n in g.node)
    elif engine == "openvino":
        import openvino as ov

        m = ov.convert_model(os.path.join(d, "model.onnx"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        ov.save_model(m, path, compress_to_fp16=False)  # the default would round the weights to fp16
    elif engine in ("openvino-int8w", "openvino-int8"):
        import logging

        import nncf
        import openvino as ov

        nncf.set_log_level(logging.ERROR)  # not its compression statistics table per build
        build("openvino", d)
        m = ov.Core().read_model(os.path.join(d, FILES["openvino"]))
        if engine == "openvino-int8w":
            q = nncf.compress_weights(m, mode=nncf.CompressWeightsMode.INT8_ASYM)
        else:
            if not calib:
                raise Unavailable("nncf.quantize needs calibration batches")
            items = [{k: b[k].numpy() for k in ONNX_INPUTS} for b in calib]
            q = nncf.quantize(m, nncf.Dataset(items), model_type=nncf.ModelType.TRANSFORMER,
                              subset_size=len(items))
            info["calibration_batches"] = len(items)
            info["calibration_sequences"] = int(sum(len(b["input_ids"]) for b in calib))
        ov.save_model(q, path, compress_to_fp16=False)
    elif engine == "bertfam-int8-static":
        info.update(build_bertfam_static(d, calib))
    info["build_s"] = time.perf_counter() - t0
    return info


def build_bertfam_static(d: str, calib: list[dict] | None) -> dict:
    """d/bertfam-int8-static: d/hf loaded by bertfam, calibrated on `calib` (the batches nncf.quantize gets),
    saved as a static-int8 checkpoint, as `bertfam quantize --calibrate` writes one."""
    import bertfam

    if not calib:
        raise Unavailable("static int8 needs calibration batches")
    model = static_bertfam(bertfam.from_pretrained(os.path.join(d, "hf"), load_tokenizer=False), calib)
    model.save_pretrained(os.path.join(d, os.path.dirname(FILES["bertfam-int8-static"])))
    return {"calibration_batches": len(calib), "calibration_sequences": int(sum(len(b["input_ids"]) for b in calib))}


# ----------------------------------------------------------------------------- engines
def count_linear(model) -> int:
    from torch import nn

    return sum(type(m) is nn.Linear for m in model.modules())


def load_hidden(engine: str, d: str):
    """A callable batch -> last_hidden_state (float32 torch tensor); raises Unavailable."""
    import numpy as np
    import torch

    why = library_missing(engine)
    if why:
        raise Unavailable(why)
    if engine.startswith("onnxruntime"):
        import onnxruntime as ort

        so = ort.SessionOptions()
        so.intra_op_num_threads = threads()
        so.inter_op_num_threads = 1
        if not spin():  # same policy as the torch engines: no busy-waiting threads
            so.add_session_config_entry("session.intra_op.allow_spinning", "0")
        path = os.path.join(d, FILES[engine])
        if not os.path.exists(path):
            raise Unavailable(f"{path} was not built")
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        # every output, as a caller of the exported model gets them (the pooler too, like the torch engines)
        k = [o.name for o in sess.get_outputs()].index("last_hidden_state")
        return lambda b: torch.from_numpy(sess.run(None, {n: b[n].numpy() for n in names})[k])
    if engine.startswith("openvino"):
        import openvino as ov

        path = os.path.join(d, FILES[engine])
        if not os.path.exists(path):
            raise Unavailable(f"{path} was not built")
        core = ov.Core()
        # fp32 compute (a CPU with bf16 support would otherwise default to it), one stream, the benchmark's
        # thread count, no pinning (the torch engines do not pin either)
        cfg = {"INFERENCE_NUM_THREADS": threads(), "NUM_STREAMS": 1, "PERFORMANCE_HINT": "LATENCY",
               "INFERENCE_PRECISION_HINT": "f32", "ENABLE_CPU_PINNING": False}
        compiled = core.compile_model(core.read_model(path), "CPU", cfg)
        out = next((o for o in compiled.outputs if "last_hidden_state" in o.get_names()), compiled.outputs[0])
        names = [i.get_any_name() for i in compiled.inputs]
        req = compiled.create_infer_request()

        def run(b):
            res = req.infer({n: b[n].numpy() for n in names})
            return torch.from_numpy(np.array(res[out], dtype=np.float32))
        return run
    if engine.startswith("transformers"):
        import transformers as T
        from torch import nn

        model = T.AutoModel.from_pretrained(os.path.join(d, "hf"), attn_implementation="sdpa").eval()
        if engine == "transformers-int8":
            model = torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
            if count_linear(model):
                raise Unavailable("quantize_dynamic left nn.Linear layers in place")
        keys = ONNX_INPUTS

        def run_hf(b):
            with torch.inference_mode():
                return model(**{k: b[k] for k in keys}).last_hidden_state
        return run_hf
    if engine.startswith("bertfam"):
        import bertfam
        from bertfam.modeling.optimize import optimize_for_inference

        src = os.path.join(d, "hf")
        if engine == "bertfam-int8-static":  # the checkpoint build() wrote, loaded as a user would
            src = os.path.dirname(os.path.join(d, FILES[engine]))
            if not os.path.isdir(src):
                raise Unavailable(f"{src} was not built")
        backbone = bertfam.from_pretrained(src).backbone.eval()
        if engine == "bertfam-int8":
            backbone = quantize_bertfam(backbone)
        elif engine in LINEAR_ENGINES:  # the same, with the projections' fp32 kernel named
            from bertfam.modeling.linear import kernel_ops_present

            kernel = LINEAR_ENGINES[engine]
            if kernel != "auto" and not kernel_ops_present(kernel):
                raise Unavailable(f"this torch build has no {kernel} linear ops")
            backbone = optimize_for_inference(backbone, linear=kernel)
        else:  # prediction as the predictors run it: buffer reuse on (modeling/optimize.py); static layers stay
            backbone = optimize_for_inference(backbone)

        def run_bf(b):
            with torch.inference_mode():
                return backbone(**{k: b[k] for k in ONNX_INPUTS}).last_hidden_state
        return run_bf
    raise ValueError(f"unknown engine {engine!r}")


def load_train_step(engine: str, d: str):
    """A callable batch -> None running one MLM optimizer step (AdamW, dropout on) of a training engine
    (TRAIN) on d/hf; the batch holds labels and masked_positions (cases.mlm_batches)."""
    import torch

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


def quantize_bertfam(model):
    """optimize_for_inference(model, int8=True), checked: it must have replaced nn.Linear layers."""
    from bertfam.modeling.optimize import optimize_for_inference

    before = count_linear(model)
    model = optimize_for_inference(model, int8=True)
    if count_linear(model) >= before:
        raise RuntimeError(f"optimize_for_inference(int8=True) left all {before} nn.Linear layers in place")
    return model


def static_bertfam(model, calib: list[dict]):
    """`model` (bertfam, float projections) calibrated on `calib` and swapped to static int8, in place."""
    from bertfam.modeling.calibration import calibrate
    from bertfam.modeling.int8_static import is_static_int8, quantize_static_int8

    model = quantize_static_int8(model, calibrate(model, calib))
    if not is_static_int8(model):
        raise RuntimeError("quantize_static_int8 left no static int8 projection")
    return model


# ----------------------------------------------------------------------------- comparison
def diff_stats(out, ref, mask) -> dict:
    """max / mean |out - ref| over real tokens, and mean |ref| for scale."""
    m = mask.bool()
    dlt = (out.float() - ref.float())[m].abs()
    return {"max_abs_diff": float(dlt.max()), "mean_abs_diff": float(dlt.mean()),
            "mean_abs_ref": float(ref.float()[m].abs().mean())}
