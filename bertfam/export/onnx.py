"""ONNX export of any bertfam model, one graph per task head, dynamic batch and length axes.

`export_onnx(model, path)` traces the model with `torch.onnx.export(..., dynamo=True)` (torch.export +
onnxscript), writes the file atomically and stores the bertfam config (head, labels) in the ONNX metadata
so a runtime can map outputs back to labels. `verify_onnx` runs onnxruntime against PyTorch.

`int8=True` then quantizes the exported float graph with onnxruntime's own dynamic quantization
(`quantize_dynamic`: int8 weights per channel, activations quantized per batch at run time), the ONNX
counterpart of modeling/int8.py. A bertfam int8 model (`bertfam quantize`) is exported from the weights its
int8 tensors stand for (q x scale): its quantized kernels have no ONNX form. Int8 word embeddings alone are
weight-only (a row lookup): that float graph computes what the int8 model computes, and is checked against
it like any float export. Int8 linear layers also quantize activations, so a float graph would be a
different model: those export with int8=True (onnxruntime's int8 of the same weights).
"""
from __future__ import annotations

import json
import logging
import math
import os
from typing import Optional

import torch
from torch import nn

from ..errors import ConfigError
from ..modeling.model import TaskModel
from ..utils import atomic_path

log = logging.getLogger("bertfam")

# ModelOutput fields each head returns (a bare backbone: the encoder states)
_OUTPUTS = {
    None: ("last_hidden_state", "pooler_output"),
    "mlm": ("logits",),
    "pretraining": ("logits", "pair_logits"),
    "classification": ("logits",),
    "regression": ("logits",),
    "token": ("logits",),
    "span": ("start_logits", "end_logits", "answerable_logits"),
}
_MAX_PROTO_BYTES = 2 * 1024 ** 3 - 64 * 1024 ** 2  # protobuf's 2 GiB limit, with room for the graph


def input_names(model: TaskModel) -> list[str]:
    names = ["input_ids", "attention_mask"]
    if model.config.type_vocab_size > 0:
        names.append("token_type_ids")
    return names


def output_names(model: TaskModel) -> list[str]:
    if model.task not in _OUTPUTS:
        raise ConfigError(f"export: no ONNX output layout for task {model.task!r}")
    names = list(_OUTPUTS[model.task])
    if model.task == "pretraining" and model.pair is None:
        names.remove("pair_logits")
    if model.task == "span" and model.span.answerable is None:
        names.remove("answerable_logits")
    return names


class _Graph(nn.Module):
    """Positional tensors in, a tuple of tensors out: the calling convention ONNX needs."""

    def __init__(self, model: TaskModel, inputs: list[str], outputs: list[str]):
        super().__init__()
        self.model, self.inputs, self.outputs = model, inputs, outputs

    def forward(self, *tensors: torch.Tensor):
        feed = dict(zip(self.inputs, tensors))
        mask = feed["attention_mask"]  # (B, T)
        # handed over as the equivalent (B, T, T) key-padding matrix: the model's (B, T) path takes
        # data-dependent shortcuts (skip the mask when nothing is padded, pack real tokens) that
        # torch.export cannot trace; the (B, T, T) path is the plain padded computation
        feed["attention_mask"] = mask[:, None, :].expand(-1, mask.shape[1], -1)  # (B, T, T)
        out = self.model(**feed)
        return tuple(getattr(out, name) for name in self.outputs)


def max_length(model: TaskModel) -> int:
    """Longest sequence the position table allows (RoBERTa's table starts after the padding rows)."""
    return model.config.max_position_embeddings - model.config.position_offset


def example_inputs(model: TaskModel, batch: int, length: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Random ids with some padding in the first row (so masking is exercised)."""
    g = torch.Generator().manual_seed(seed)
    cfg = model.config
    low = min(cfg.pad_token_id + 1, cfg.vocab_size - 1)
    ids = torch.randint(low, cfg.vocab_size, (batch, length), generator=g)  # (B, T)
    mask = torch.ones(batch, length, dtype=torch.long)
    if length > 2:
        mask[0, length // 2:] = 0
        ids[0, length // 2:] = cfg.pad_token_id
    out = {"input_ids": ids, "attention_mask": mask}
    if cfg.type_vocab_size > 0:
        types = torch.zeros(batch, length, dtype=torch.long)
        if cfg.type_vocab_size > 1:
            types[:, length // 2:] = 1
        out["token_type_ids"] = types
    return out


def exportable(model: TaskModel, int8: bool = False) -> TaskModel:
    """The model itself, or for a bertfam int8 model a float copy holding the weights its int8 tensors stand
    for (see the module docstring); int8 linear layers need int8=True (ConfigError otherwise)."""
    import copy

    from ..modeling.int8 import dequantize_int8, is_int8

    if not is_int8(model):
        return model
    modules = list(model.config.quantization.modules) if model.config.quantization else []
    linear = [m for m in modules if m != "embeddings.word"]
    if linear and not int8:
        raise ConfigError(f"export: the model's linear layers are int8 ({', '.join(linear)}: int8 activations "
                          "too, which a float graph would drop); give --int8 for onnxruntime's int8 of the same "
                          "weights")
    log.info("export: int8 %s written as the float weights they stand for", "+".join(modules) or "modules")
    return dequantize_int8(copy.deepcopy(model))


def export_onnx(model: TaskModel, path: str, opset: Optional[int] = None, int8: bool = False) -> dict:
    """Write `model` as ONNX to `path` (int8: then quantized by onnxruntime, see above). Returns {"inputs",
    "outputs", "task", "int8"}."""
    model = exportable(model, int8).eval()
    n_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    if n_bytes > _MAX_PROTO_BYTES:
        raise ConfigError(f"export: the model's weights ({n_bytes / 1e9:.1f} GB) exceed what one ONNX file holds")
    inputs, outputs = input_names(model), output_names(model)
    graph = _Graph(model, inputs, outputs).eval()
    example = example_inputs(model, 2, min(8, max_length(model)))
    # the example sizes (2, 8) must not be 0/1, or torch.export would specialise the axes to them
    batch = torch.export.Dim("batch", min=1, max=4096)
    seq = torch.export.Dim("sequence", min=1, max=max_length(model))
    dynamic = {"tensors": tuple({0: batch, 1: seq} for _ in inputs)}
    kw = {} if opset is None else {"opset_version": opset}
    with _quiet(), torch.no_grad():
        program = torch.onnx.export(graph, tuple(example[n] for n in inputs), dynamo=True, dynamic_shapes=dynamic,
                                    input_names=inputs, output_names=outputs, verbose=False, **kw)
    if not int8:
        _write(program, path, model, outputs)
    else:
        import tempfile

        where = os.path.dirname(os.path.abspath(path))  # beside the output: the float graph may be large
        os.makedirs(where, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".bertfam-onnx-", dir=where) as d:
            plain = os.path.join(d, "float.onnx")
            _write(program, plain, model, outputs)
            quantize_onnx(plain, path)
    return {"inputs": inputs, "outputs": outputs, "task": model.task, "int8": int8}


def quantize_onnx(src: str, path: str) -> None:
    """onnxruntime's dynamic int8 quantization of the ONNX file `src` into `path` (atomically): weights int8
    per channel (QInt8), activations quantized per batch; the metadata (bertfam config) is kept."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with atomic_path(path) as tmp, _quiet(root=True):
        quantize_dynamic(src, tmp, weight_type=QuantType.QInt8, per_channel=True)
        proto = onnx.load(tmp)
        have = {p.key for p in proto.metadata_props}
        for p in onnx.load(src, load_external_data=False).metadata_props:
            if p.key not in have:
                proto.metadata_props.add(key=p.key, value=p.value)
        proto.metadata_props.add(key="bertfam_quantization", value="onnxruntime dynamic int8, per-channel QInt8")
        onnx.save(proto, tmp)


def _write(program, path: str, model: TaskModel, outputs: list[str]) -> None:
    import onnx

    with atomic_path(path) as tmp:
        program.save(tmp, external_data=False)
        proto = onnx.load(tmp)
        meta = {"bertfam_config": json.dumps(model.config.to_dict(), ensure_ascii=False),
                "bertfam_task": str(model.task), "bertfam_outputs": ",".join(outputs)}
        for k, v in meta.items():
            proto.metadata_props.add(key=k, value=v)
        onnx.save(proto, tmp)


class _quiet:
    """torch.onnx logs a warning per missing optional op library (torchvision); keep the CLI output clean."""

    def __init__(self, root: bool = False):
        self.root = root  # onnxruntime.quantization logs its advice to pre-process the graph on the root logger

    def __enter__(self):
        self.loggers = [logging.getLogger(n) for n in ("torch.onnx", "torch.export", "torch._export", "onnxscript")]
        if self.root:
            self.loggers.append(logging.getLogger())
        self.levels = [lg.level for lg in self.loggers]
        for lg in self.loggers:
            lg.setLevel(logging.ERROR)
        import warnings

        self.warn = warnings.catch_warnings()
        self.warn.__enter__()
        warnings.simplefilter("ignore")

    def __exit__(self, *exc):
        self.warn.__exit__(*exc)
        for lg, lvl in zip(self.loggers, self.levels):
            lg.setLevel(lvl)


def onnx_session(path: str, threads: Optional[int] = None):
    import onnxruntime as ort

    if not os.path.isfile(path):
        raise ConfigError(f"{path}: ONNX file not found")
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def verify_onnx(path: str, model: TaskModel, shapes=((1, 5), (3, 17)), session=None,
                relative: bool = False) -> dict[str, float]:
    """Largest |onnxruntime - PyTorch| per output over random inputs of several (batch, length) shapes;
    relative: divided by the largest |PyTorch| of that output (how an int8 graph is judged)."""
    sess = session or onnx_session(path)
    names = [o.name for o in sess.get_outputs()]
    inputs = [i.name for i in sess.get_inputs()]
    worst = {n: 0.0 for n in names}
    scale = {n: 0.0 for n in names}
    model = model.eval()
    for i, (b, t) in enumerate(shapes):
        feed = example_inputs(model, b, min(t, max_length(model)), seed=i + 1)
        got = sess.run(None, {n: feed[n].numpy() for n in inputs})
        with torch.no_grad():
            ref = model(**feed)
        real = feed["attention_mask"].bool()  # (B, T)
        for n, g in zip(names, got):
            diff = (torch.from_numpy(g).float() - getattr(ref, n).float()).abs()
            ref_n = getattr(ref, n).float().abs()
            if diff.dim() >= 2 and diff.shape[:2] == real.shape:
                diff, ref_n = diff[real], ref_n[real]  # per-token outputs: padding positions carry no meaning
            d = float(diff.max()) if diff.numel() else 0.0
            worst[n] = max(worst[n], d if math.isfinite(d) else math.inf)  # NaN must not hide behind max()
            scale[n] = max(scale[n], float(ref_n.max()))
    return {n: worst[n] / max(scale[n], 1e-12) for n in names} if relative else worst
