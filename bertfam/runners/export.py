"""Export jobs (library entry points of `bertfam export --onnx` and `bertfam quantize`): one config per job.

- `run_onnx_export(OnnxExportConfig)`: the ONNX file of a model directory (optionally int8), then
  `run_onnx_check(the OnnxExport it returned)`: the onnxruntime vs PyTorch comparison (what to print, and
  the error to raise after printing it when the difference is too large);
- `run_quantize(QuantizeConfig)`: an int8 copy of a model directory (modeling/int8.py), for CPU inference;
  with `calibrate` (a file of real inputs) static int8, its activation scales calibrated on those inputs
  (modeling/calibration.py, modeling/int8_static.py).
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..config import INT8_PROJECTIONS
from ..errors import ConfigError


@dataclass
class OnnxExportConfig:
    """Export `src` (a model directory) to `out` (.onnx) with head `task` (None: the checkpoint's own);
    check it against PyTorch (`verify`) within `atol`, or with `int8` by relative difference within `rtol`
    (None: report it only)."""

    src: str
    out: str
    task: Optional[str] = None
    opset: Optional[int] = None
    int8: bool = False
    verify: bool = True
    atol: float = 1e-4
    rtol: Optional[float] = None


@dataclass
class OnnxExport:
    """An exported file: its config, the PyTorch model it came from, what `export_onnx` returned."""

    config: OnnxExportConfig
    model: Any
    info: dict

    @property
    def written(self) -> str:
        """The line `bertfam export` prints of the file."""
        info, out = self.info, self.config.out
        return (f"wrote {out} (task {info['task'] or 'encoder'}; inputs {', '.join(info['inputs'])}; "
                f"outputs {', '.join(info['outputs'])}; axes batch x sequence dynamic"
                + (f"; int8, {os.path.getsize(out) / 1e6:.1f} MB)" if self.config.int8 else ")"))


def run_onnx_export(cfg: OnnxExportConfig) -> OnnxExport:
    """Load the model and write the ONNX file (ConfigError for --rtol without --int8, before any load)."""
    from ..checkpoint import from_pretrained
    from ..export.onnx import export_onnx

    if cfg.rtol is not None and not cfg.int8:
        raise ConfigError("--rtol is for --int8 exports (a float export is checked with --atol)")
    model = from_pretrained(cfg.src, task=cfg.task, load_tokenizer=False)
    return OnnxExport(cfg, model, export_onnx(model, cfg.out, opset=cfg.opset, int8=cfg.int8))


def run_onnx_check(exp: OnnxExport) -> tuple[Optional[str], Optional[str]]:
    """(the comparison line to print or None, the error message to raise after it or None). An int8 graph
    is loaded in onnxruntime even unverified: it must load."""
    from ..export.onnx import onnx_session, verify_onnx

    cfg, model, out = exp.config, exp.model, exp.config.out
    if cfg.int8:
        sess = onnx_session(out)  # the quantized graph must load, verified or not
        if not cfg.verify:
            return None, None
        diffs = verify_onnx(out, model, session=sess, relative=True)
        line = (f"onnxruntime int8 vs PyTorch ({'bertfam int8' if model.config.quantization else 'float'}), max abs "
                "difference / max abs output: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items()))
        worst = max(diffs.values())
        if not math.isfinite(worst) or (cfg.rtol is not None and worst > cfg.rtol):
            return line, (f"{out}: onnxruntime int8 differs from PyTorch by {worst:.2e} of the largest output"
                          + (f" (> --rtol {cfg.rtol})" if math.isfinite(worst) else ""))
        return line, None
    if not cfg.verify:
        return None, None
    diffs = verify_onnx(out, model)
    worst = max(diffs.values())
    line = "onnxruntime vs PyTorch, max abs difference: " + ", ".join(f"{k} {v:.2e}" for k, v in diffs.items())
    if worst > cfg.atol:
        return line, f"{out}: onnxruntime differs from PyTorch by {worst:.2e} (> --atol {cfg.atol})"
    return line, None


CALIBRATION_BATCH = 8  # inputs per calibration batch


@dataclass
class QuantizeConfig:
    """An int8 copy of `src` in `dst` (a different directory), quantizing `modules` (config.INT8_MODULES);
    with `calibrate` (a file of real inputs: data/calibration_inputs.py) static int8, its activation scales
    observed over the first `calibration_batches` batches of CALIBRATION_BATCH inputs."""

    src: str
    dst: str
    modules: Sequence[str]
    calibrate: Optional[str] = None
    calibration_batches: int = 8
    weights_only: bool = False  # method weight-int8: int8 on disk, float weights again when loaded


def run_quantize(cfg: QuantizeConfig) -> dict:
    """Write the int8 copy; returns {"src_file", "dst_file", "src_bytes", "dst_bytes"} of the weight files, and
    for static int8 "calibration": {"file", "inputs", "tokens", "max_length", "observer"}."""
    from ..checkpoint import from_pretrained, weights_file
    from ..modeling.int8 import is_int8, quantize_int8, record_quantization

    if os.path.isdir(cfg.dst) and os.path.isdir(cfg.src) and os.path.samefile(cfg.src, cfg.dst):
        raise ConfigError(f"quantize: DST {cfg.dst} is SRC; write the int8 copy elsewhere (SRC stays float)")
    if cfg.weights_only and cfg.calibrate:
        raise ConfigError("quantize: --weights-only stores int8 weights for float computing; --calibrate is for "
                          "static int8 activations: choose one")
    if cfg.calibration_batches < 1:
        raise ConfigError(f"quantize: --calibration-batches must be at least 1, got {cfg.calibration_batches}")
    missing = [p for p in INT8_PROJECTIONS if p not in cfg.modules]
    if cfg.calibrate and missing:  # before the load and the calibration forwards
        raise ConfigError(f"quantize --calibrate: static int8 quantizes every encoder projection; --modules lacks "
                          f"{', '.join(missing)}")
    model = from_pretrained(cfg.src)
    if is_int8(model):
        raise ConfigError(f"quantize: {cfg.src} is already int8")
    out: dict = {}
    if cfg.calibrate:
        out["calibration"] = _quantize_static(model, cfg)
    else:
        quantize_int8(model, list(cfg.modules))
        if cfg.weights_only:
            record_quantization(model, list(cfg.modules), method="weight-int8")
    info = {"quantized_from": cfg.src, **({"calibrated_on": out["calibration"]} if out else {})}
    model.config.head.info = {**model.config.head.info, **info}  # training_info.json
    model.save_pretrained(cfg.dst)
    src, dst = weights_file(cfg.src), weights_file(cfg.dst)
    return {"src_file": src, "dst_file": dst, "src_bytes": os.path.getsize(src), "dst_bytes": os.path.getsize(dst),
            **out}


def _quantize_static(model, cfg: QuantizeConfig) -> dict:
    """Calibrate the float `model` on cfg.calibrate's inputs, then swap it to static int8; what it saw."""
    from ..modeling.calibration import DEFAULT_OBSERVER, calibrate
    from ..modeling.int8_static import quantize_static_int8

    batches, facts = calibration_batches(model, cfg.calibrate, cfg.calibration_batches)
    quantize_static_int8(model, calibrate(model, batches, DEFAULT_OBSERVER), list(cfg.modules))
    return {**facts, "observer": DEFAULT_OBSERVER}


def calibration_batches(model, path: str, n_batches: int) -> tuple[list[dict], dict]:
    """Padded batches of `path`'s first n_batches x CALIBRATION_BATCH inputs, tokenized by the model's own
    tokenizer at its inference length (an MRC model's window length, a fine-tuned model's max_length, else
    128); and {"file", "inputs", "tokens", "max_length"}."""
    from ..config import fit_max_length
    from ..data.calibration_inputs import read_calibration_inputs

    tok = model.tokenizer
    if tok is None:
        raise ConfigError(f"quantize --calibrate: {model.name_or_path} has no tokenizer to read {path} with")
    pairs = read_calibration_inputs(path, n_batches * CALIBRATION_BATCH)
    head = model.config.head
    length = head.mrc_settings.max_length if head.task == "span" else head.finetune.max_length if head.finetune \
        else 128
    length = fit_max_length(model.config, length)
    batches = []
    for kind in ([p for p in pairs if p[1] is None], [p for p in pairs if p[1] is not None]):  # texts, pairs
        for a in range(0, len(kind), CALIBRATION_BATCH):
            chunk = kind[a:a + CALIBRATION_BATCH]
            enc = tok([t for t, _ in chunk], [b for _, b in chunk] if chunk[0][1] is not None else None,
                      max_length=length)
            batches.append({k: enc[k] for k in ("input_ids", "attention_mask", "token_type_ids")})
    tokens = int(sum(int(b["attention_mask"].sum()) for b in batches))
    return batches, {"file": path, "inputs": len(pairs), "tokens": tokens, "max_length": length}
