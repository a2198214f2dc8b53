"""Static int8 CPU inference (issue #26): activation scales calibrated once, GELU and residual adds fused.

Method "static-int8" (`QuantizationConfig.method`; `bertfam quantize SRC DST --calibrate FILE`). Weights: the
dynamic method's (int8.py), the same `weight_int8` / `weight_scale` / `bias` tensors, so one checkpoint's
weights serve both methods. Activations: uint8 per tensor, with a scale and zero point per projection input
fixed at calibration (calibration.py: a float forward over real inputs, real tokens only) and stored as the
buffers `input_scale` (float32, ()) and `input_zero_point` (int32, ()) of each encoder projection. Dynamic
quantization finds each batch's range (a reduction over the whole activation), quantizes in a pass of its
own, and leaves GELU, bias and residual adds to separate float ops; here the range is known, so quantizing
an input is one elementwise op and the rest happens inside the GEMM's post-ops. Per encoder layer:

    x ─quantize─► qkv ─► float32 ─► attention (float32) ─► ctx ─quantize─► out (+ x) ─► attn_norm ─► x1
    x1 ─quantize─► ffn_in (GELU; uint8 at ffn_out's input scale) ─► ffn_out (+ x1, in place) ─► ffn_norm

so an FFN's intermediate activation is never float32, and ffn_out's input needs no quantize pass.

Kernel: PyTorch's own oneDNN quantized linear, what its PT2E X86InductorQuantizer lowers a static int8 linear
to: `torch.ops.onednn.qlinear_prepack` once (a cache, rebuilt lazily as Int8Linear's), then
`torch.ops.onednn.qlinear_pointwise` per call. Its semantics, checked on small tensors against a float
reference (tests/test_int8_static.py asserts each point), torch 2.13:
- qlinear_prepack(w int8 (N, K), x_shape or None): an opaque mkldnn tensor; None packs for any row count.
- qlinear_pointwise(qx, x_scale, x_zp, packed, w_scale, w_zp, bias, out_scale, out_zp, out_dtype, post_op,
  post_op_args, post_op_algorithm): y = post_op((qx - x_zp) * x_scale @ (qw * w_scale[:, None]).T + bias).
  qx: uint8 with any zero point in 0..255, or int8; both exact where the CPU has VNNI or AMX (without them,
  on AVX2, the products of neighbouring weights along K, (2j, 2j+1), are added in pairs in int16 and
  saturate: there the kernel packs each output channel's weights rescaled just enough that no pair can:
  exact_u8s8, fit_weights). We use uint8 with an asymmetric zero point:
  u8 x s8 is the VNNI instruction's own operand pair, and GELU's output (ffn_out's input) is far from
  symmetric. qx may be (M, K) or (..., K) (the output keeps the leading shape).
  w_scale: float32 (N,) per output channel ((1,) per tensor also works; float64 is refused). w_zp: ignored
  (any value gives the zero-point-0 result), so weights must be symmetric, as ours are.
  out_dtype float32 (or bfloat16): y itself, and then out_scale must be 1.0 and out_zp 0 (else a
  RuntimeError). out_dtype None: quantized codes in the input's dtype (uint8 for uint8 input) =
  clamp(round(y / out_scale) + out_zp); torch.uint8 / torch.int8 name that dtype explicitly.
  post_op "gelu" (algorithm "none": erf, "tanh": the tanh approximation), "relu", "tanh", "swish" (SiLU),
  "hardswish" with [] args; "silu" by that name is refused.
- qlinear_pointwise.binary(..., other, bias, out_scale, out_zp, out_dtype, other_scale, other_zp,
  binary_post_op, alpha, unary_post_op, ...): y + other (float32 `other`, other_scale 1.0, other_zp 0).
  "add" returns a new tensor; "sum" accumulates into `other` in place and returns it.
- A row's result does not depend on the other rows: (M, K) at once equals row by row, bit for bit.
Quantizing an input: `torch.quantize_per_tensor` (one vectorised pass; its uint8 storage read as a plain
uint8 tensor without a copy: int_repr() copies, and round/clamp/cast as torch ops are four passes).

Structure: the swap (`quantize_static_int8`, or from_pretrained of a static-int8 checkpoint through
`quantize_as_recorded`) makes the dynamic int8 modules first (int8.quantize_int8: weights, embeddings),
then replaces each encoder layer's four Int8Linear by the static module of its place (the same weight
tensors) and the layer by a `StaticInt8Layer` holding the same children (swap.py, as optimize.py does):
its one forward calls the fused modules. Inference only, CPU only (the Int8Linear rules: a forward in train
mode, or of an input that requires a gradient, is one UnsupportedError line). Unlike dynamic int8, a row's
output does not depend on the other rows of its batch, nor on padding: every scale is fixed.
"""
from __future__ import annotations

import threading
import warnings
from typing import NamedTuple, Optional, Sequence

import torch
from torch import nn

from ..config import INT8_MODULES, INT8_PROJECTIONS, QuantizationConfig
from ..errors import ConfigError
from .activations import ACT
from .attention_core import core_of, matmul_up_to
from .encoder import Encoder, Layer
from .int8 import (Int8Linear, check_inference, cpu_flags, exact_u8s8, fit_weights, pair_peaks,  # noqa: F401
                   quantize_int8, record_quantization)
from .swap import swap_modules

METHOD = "static-int8"
# the oneDNN post-op (name, algorithm) computing each activation of activations.ACT (see above)
POST_OPS = {"gelu": ("gelu", "none"), "gelu_new": ("gelu", "tanh"), "gelu_pytorch_tanh": ("gelu", "tanh"),
            "gelu_fast": ("gelu", "tanh"), "relu": ("relu", ""), "silu": ("swish", ""), "swish": ("swish", ""),
            "tanh": ("tanh", "")}
_QUIET = threading.Lock()
_quiet = [False]  # torch.quantize_per_tensor's deprecation warning was silenced (it warns once per process)


class Kernel(NamedTuple):
    """What a static projection's forward needs, made once (`StaticInt8Linear.kernel`)."""

    packed: torch.Tensor  # onednn.qlinear_prepack of weight_int8 (fitted where the CPU lacks VNNI: exact_u8s8)
    w_zp: torch.Tensor  # (N,) zeros: the op's weight zero points (ignored by it; symmetric weights)
    scale: float  # the input's calibrated scale
    zero_point: int  # and zero point (uint8 codes)
    w_scale: torch.Tensor  # (N,) the packed weights' scales: weight_scale, or the fitted weights' (fit_weights)


# ---------------------------------------------------------------- the kernels
def quantize_u8(x: torch.Tensor, scale: float, zero_point: int) -> torch.Tensor:
    """x (...) float32 -> uint8 codes clamp(round(x / scale) + zero_point, 0, 255), same shape."""
    _silence_deprecation()
    q = torch.quantize_per_tensor(x.float(), scale, zero_point, torch.quint8)
    # the quint8 storage holds exactly those bytes: read it as uint8 (int_repr() would copy it)
    return torch.empty(0, dtype=torch.uint8, device=x.device).set_(q.untyped_storage(), q.storage_offset(),
                                                                   q.shape, q.stride())


def _silence_deprecation() -> None:
    """torch.quantize_per_tensor warns (once per process) that torch.ao is deprecated: take that one warning
    here, under a lock, so that no caller sees it (catch_warnings per call would not be thread-safe)."""
    if not _quiet[0]:
        with _QUIET, warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            torch.quantize_per_tensor(torch.zeros(1), 1.0, 0, torch.quint8)
            _quiet[0] = True


def qparams_from_range(lo: float, hi: float) -> tuple[float, int]:
    """uint8 (scale, zero point) covering [lo, hi] widened to hold 0 (so that 0 is exact: zero padding)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    scale = max((hi - lo) / 255.0, torch.finfo(torch.float32).eps)  # an all-zero input: any scale
    return scale, int(min(255, max(0, round(-lo / scale))))


# ---------------------------------------------------------------- the modules
class StaticInt8Linear(Int8Linear):
    """An encoder projection with int8 weights (Int8Linear's tensors) and an input scale fixed at calibration:
    (..., in_features) float32, or uint8 codes at this input's scale -> (..., out_features) float32. attn.qkv."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None) -> None:
        super().__init__(in_features, out_features, bias, device)
        self.register_buffer("input_scale", torch.full((), float("nan"), device=device))  # nan: not calibrated
        self.register_buffer("input_zero_point", torch.zeros((), dtype=torch.int32, device=device))

    @classmethod
    def from_int8(cls, lin: Int8Linear) -> "StaticInt8Linear":
        """The static module over `lin`'s very weight tensors, not calibrated yet."""
        m = cls(lin.in_features, lin.out_features, lin.bias is not None, device=lin.weight_int8.device)
        m.weight_int8, m.weight_scale, m.bias = lin.weight_int8, lin.weight_scale, lin.bias
        return m

    def set_input_qparams(self, scale: float, zero_point: int) -> None:
        self._restore()  # the pack is dropped below: the weights must be back in their buffer first
        with torch.no_grad():
            self.input_scale.fill_(scale)
            self.input_zero_point.fill_(zero_point)
        self._packed = None

    # ---- one copy of the weights for inference (release_weights)
    _released = False  # True: weight_int8 lives only in the packed kernel; its buffer is a meta placeholder

    def release_weights(self) -> bool:
        """Pack, then drop the raw int8 buffer: oneDNN's packed tensor holds the very same int8 weights (where
        the CPU's u8 x s8 products are exact, exact_u8s8; elsewhere it packs fitted ones, and the buffer
        stays), so inference keeps one copy of them, not two. `weight_int8`, state_dict, save_pretrained,
        pickling and .to() get them back from the packed tensor (a copy per call); a load_state_dict, a new
        weight_int8 or new input qparams put them back into the buffer first. Returns whether released."""
        if self._released:
            return True
        w = self._buffers["weight_int8"]
        if not exact_u8s8() or w is None or w.is_meta or self.input_scale.is_meta or not float(self.input_scale) > 0:
            return False  # fitted packing, nothing loaded yet, or not calibrated (its forward says so)
        self.kernel()
        self._buffers["weight_int8"] = torch.empty(w.shape, dtype=w.dtype, device="meta")  # shape, dtype, numel
        self.__dict__["_released"] = True
        return True

    def _unpacked(self) -> torch.Tensor:
        """(out, in) int8: the weights back from the packed tensor (mkldnn (in, out) -> plain, transposed)."""
        return self._packed.packed.to_dense().t().contiguous()

    def _restore(self) -> None:
        if self._released:
            w = self._unpacked()
            self.__dict__["_released"] = False
            self._buffers["weight_int8"] = w

    def __getattr__(self, name: str):
        if name == "weight_int8" and self.__dict__.get("_released"):
            return self._unpacked()
        return super().__getattr__(name)

    def __setattr__(self, name: str, value) -> None:
        if name == "weight_int8" and self.__dict__.get("_released"):
            self.__dict__["_released"] = False
            self.__dict__["_packed"] = None  # packed from the weights being replaced
        super().__setattr__(name, value)

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self._released:
            destination[prefix + "weight_int8"] = self._unpacked()

    def _load_from_state_dict(self, *args, **kwargs):
        self._restore()
        return super()._load_from_state_dict(*args, **kwargs)

    def _apply(self, fn, recurse: bool = True):
        self._restore()
        return super()._apply(fn, recurse)

    def __getstate__(self):
        state = super().__getstate__()  # _PackedCache's copy, _packed dropped
        if self._released:
            state["_buffers"] = dict(state["_buffers"], weight_int8=self._unpacked())
            state["_released"] = False
        return state

    def kernel(self) -> Kernel:
        """The packed weights and the input's qparams as Python numbers, made on first use (a cache, dropped
        on load_state_dict or a device change as Int8Linear's)."""
        if self._packed is None:
            scale, zp = float(self.input_scale), int(self.input_zero_point)
            if not scale > 0:  # nan: the swap ran without calibration and nothing was loaded since
                raise ConfigError("static int8: a projection has no calibrated input scale (calibrate first: "
                                  "bertfam quantize --calibrate FILE, or load a static-int8 checkpoint)")
            w_zp = torch.zeros(self.out_features, dtype=torch.long)
            w, w_scale = self.weight_int8, self.weight_scale
            if not exact_u8s8():
                w, w_scale = fit_weights(w, w_scale)
            self._packed = Kernel(torch.ops.onednn.qlinear_prepack(w, None), w_zp, scale, zp, w_scale)
        return self._packed

    def packed(self):
        return self.kernel().packed

    def input_qparams(self) -> tuple[float, int]:
        k = self.kernel()
        return k.scale, k.zero_point

    def quantize(self, x: torch.Tensor) -> torch.Tensor:
        """x as uint8 codes at this projection's input scale (uint8 input: already so, from the one before)."""
        if x.dtype == torch.uint8:
            return x
        k = self.kernel()
        return quantize_u8(x, k.scale, k.zero_point)

    def rows(self, x: torch.Tensor) -> torch.Tensor:
        """x (..., K) as (M, K) uint8 codes (the kernel flattens an empty input's leading shape: we reshape
        back ourselves, the same way for every input)."""
        return self.quantize(x).reshape(-1, self.in_features)

    # what forward returns: float32, or bfloat16 for attn.qkv where attention runs in bf16
    # (set_attention_dtype); the kernel writes either directly
    out_dtype = torch.float32

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_inference(self, x)
        k = self.kernel()
        y = torch.ops.onednn.qlinear_pointwise(self.rows(x), k.scale, k.zero_point, k.packed, k.w_scale,
                                               k.w_zp, self.bias, 1.0, 0, self.out_dtype, "none", [], "")  # (M, N)
        return y.view(*x.shape[:-1], self.out_features)


class StaticInt8LinearAdd(StaticInt8Linear):
    """x W^T + b + residual in one kernel (the residual added by its binary post-op): attn.out, ffn_out.
    inplace=True (as nn.ReLU's) writes the sum into `residual` and returns it: ffn_out, whose residual is
    its own layer's intermediate; attn.out's residual is the layer's input, which callers may still hold."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 inplace: bool = False) -> None:
        super().__init__(in_features, out_features, bias, device)
        self.inplace = inplace

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        """x (..., in) float32 or uint8 codes, residual (..., out) float32 contiguous -> (..., out) float32."""
        check_inference(self, x)
        k = self.kernel()
        other = residual.contiguous().view(-1, self.out_features)  # (M, N), residual's own memory
        y = torch.ops.onednn.qlinear_pointwise.binary(
            self.rows(x), k.scale, k.zero_point, k.packed, k.w_scale, k.w_zp, other, self.bias, 1.0, 0,
            torch.float32, 1.0, 0, "sum" if self.inplace else "add", 1.0, "none", [], "")  # (M, N)
        return y.view(residual.shape)

    def extra_repr(self) -> str:
        return super().extra_repr() + (", inplace=True" if self.inplace else "")


class StaticInt8LinearAct(StaticInt8Linear):
    """act(x W^T + b) in one kernel (the activation a post-op), returned as uint8 codes at the next
    projection's input scale, which reads them as they are: ffn_in (then ffn_out)."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None,
                 act: str = "gelu") -> None:
        super().__init__(in_features, out_features, bias, device)
        if act not in POST_OPS:
            raise ConfigError(f"static int8: no fused kernel for the activation {act!r} (known: "
                              f"{', '.join(POST_OPS)})")
        self.act = act

    def forward(self, x: torch.Tensor, out_qparams: tuple[float, int]) -> torch.Tensor:
        """x (..., in) float32 -> (..., out) uint8 codes of act(x W^T + b) at out_qparams (scale, zero point)."""
        check_inference(self, x)
        k = self.kernel()
        name, algorithm = POST_OPS[self.act]
        y = torch.ops.onednn.qlinear_pointwise(self.rows(x), k.scale, k.zero_point, k.packed, k.w_scale,
                                               k.w_zp, self.bias, out_qparams[0], out_qparams[1], torch.uint8,
                                               name, [], algorithm)  # (M, N) uint8
        return y.view(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, act={self.act}"


class StaticInt8Layer(Layer):
    """A post-LN layer over static int8 projections: the same computation as Layer in eval mode, with GELU
    and both residual adds inside the int8 kernels (module docstring). Made by the swap, never directly."""

    float_class = Layer  # what dequantize_int8 swaps it back to

    def forward(self, x: torch.Tensor, mask, need_scores: bool = False):
        """x: (B, T, H) with an additive mask (or None), or packed (N, H) with a varlen.Packed plan."""
        check_inference(self, x)
        ctx, scores = self.attn.context(x, mask, need_scores)  # x's shape, float32
        x1 = self.attn_norm(self.attn.out(ctx, x))  # LN(x + out(ctx))
        f = self.ffn_in(x1, self.ffn_out.input_qparams())  # (..., I) uint8: GELU(ffn_in(x1)) at ffn_out's scale
        return self.ffn_norm(self.ffn_out(f, x1)), scores  # LN(x1 + ffn_out(f)), the sum written over x1


# ---------------------------------------------------------------- what the CPU computes exactly
# ---------------------------------------------------------------- attention precision
def native_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512_BF16 or AMX): there bf16 attention is 2.7-3.2x
    faster than float32 (docs/int8_kernels.md); elsewhere bf16 is emulated and slower."""
    flags = cpu_flags()
    return "avx512_bf16" in flags or "amx_bf16" in flags


def set_attention_dtype(model: nn.Module, dtype: Optional[torch.dtype] = None,
                        core: Optional[str] = None) -> nn.Module:
    """The dtype static int8 layers compute attention in (QKᵀ, softmax, PV): torch.float32, torch.bfloat16,
    or None = bfloat16 where the CPU has native bf16 (`native_bf16`), else float32. In a static int8 layer
    everything around attention is 8-bit already (its input and output are quantized to uint8), so bf16's
    8-bit mantissa adds little error there (docs/int8_kernels.md measures it); qkv writes q, k, v in that
    dtype, and out quantizes the context from it. `core` ("sdpa" or "matmul", attention_core) computes it at
    every length; None = float32 through SDPA, bf16 as `attention_core.matmul_up_to` measured on this CPU
    (two matmuls up to length 128 on an AMD Zen 4, SDPA's flash kernel everywhere with AMX). Returns the
    model; float layers are left alone."""
    dtype = dtype or (torch.bfloat16 if native_bf16() else torch.float32)
    if dtype not in (torch.float32, torch.bfloat16):
        raise ConfigError(f"static int8 attention runs in float32 or bfloat16, not {dtype}")
    try:
        up_to = core_of(core) if core is not None else None
    except ValueError as e:
        raise ConfigError(f"static int8: {e}") from None
    layers = [m for m in model.modules() if isinstance(m, StaticInt8Layer)]
    if layers and up_to is None:
        up_to = matmul_up_to(dtype) if dtype == torch.bfloat16 else 0
    for m in layers:
        m.attn.qkv.out_dtype = dtype
        m.attn.matmul_up_to = up_to
    return model


# ---------------------------------------------------------------- the swap
def quantize_static_int8(model: nn.Module, calibration: Optional[dict] = None,
                         modules: Sequence[str] = INT8_MODULES) -> nn.Module:
    """Swap `model`'s encoder layers for static int8 ones, in place (and the other `modules`: the word
    embeddings as the dynamic method's); returns it, in eval mode, its config recording static-int8.
    calibration: {projection module name in `model`: (scale, zero point)} of all its encoder projections
    (calibration.calibrate of this float model); None leaves them to a load_state_dict (from_pretrained
    swaps on the meta device, then loads a static checkpoint's scales). Works on the meta device."""
    modules = [modules] if isinstance(modules, str) else list(modules)
    missing = [p for p in INT8_PROJECTIONS if p not in modules]
    if missing:
        raise ConfigError(f"static int8 quantizes every encoder projection: modules lack {', '.join(missing)}")
    model = quantize_int8(model, modules)
    _swap_projections(model)
    # every layer over static projections (a buffer-reusing one too): only StaticInt8Layer can call them
    model = swap_modules(model, lambda m: StaticInt8Layer if isinstance(m, Layer) and _static(m) else None)
    if calibration is not None:  # the swaps keep every module's name
        _set_calibration(model, calibration)
    record_quantization(model, modules, METHOD)
    set_attention_dtype(model)  # a property of this machine, not of the checkpoint: chosen at every load
    return model.eval()


def quantize_as_recorded(model: nn.Module, q: QuantizationConfig) -> nn.Module:
    """The swap a checkpoint's quantization record names (from_pretrained, verifier deltas); the static
    scales come with the checkpoint's tensors."""
    if q.method == METHOD:
        return quantize_static_int8(model, None, q.modules)
    return quantize_int8(model, q.modules)


def is_static_int8(model: nn.Module) -> bool:
    return any(isinstance(m, StaticInt8Linear) for m in model.modules())


def release_weights(model: nn.Module) -> int:
    """Every static projection of `model` packed and its raw int8 buffer dropped (StaticInt8Linear.
    release_weights); then, if any was, the model's other tensors copied into memory of their own (tied
    ones kept tied): a checkpoint's tensors all keep its memory-mapped file alive, and its pages count in
    the process's RSS until the last of them is gone. Returns how many projections were released (0 on a
    CPU without exact u8 x s8 products, where the packed weights are fitted ones)."""
    released = [m for m in model.modules() if isinstance(m, StaticInt8Linear) and m.release_weights()]
    if released:
        _own_tensors(model)
        for m in released:  # the kernel's scales are the weight_scale buffer itself (exact: not fitted)
            m._packed = m._packed._replace(w_scale=m.weight_scale)
    return len(released)


def _own_tensors(model: nn.Module) -> None:
    """Each parameter and buffer of `model` replaced by a copy, the same copy wherever one tensor is held."""
    copies: dict = {}
    for mod in model.modules():
        for store in (mod._parameters, mod._buffers):
            for name, t in store.items():
                if t is None or t.is_meta:
                    continue
                if id(t) not in copies:
                    c = t.detach().clone()
                    copies[id(t)] = nn.Parameter(c, requires_grad=t.requires_grad) if isinstance(t, nn.Parameter) else c
                store[name] = copies[id(t)]


# each projection's place in a layer (owner attribute or None for the layer itself) and its static module
_PLACES = (("attn", "qkv", StaticInt8Linear), ("attn", "out", StaticInt8LinearAdd),
           (None, "ffn_in", StaticInt8LinearAct), (None, "ffn_out", StaticInt8LinearAdd))


def _swap_projections(model: nn.Module) -> None:
    """Each layer's four Int8Linear -> the static module of its place, over the same tensors."""
    for enc in [m for m in model.modules() if isinstance(m, Encoder)]:
        for layer in enc.layers:
            for parent, attr, cls in _PLACES:
                owner = getattr(layer, parent) if parent else layer
                lin = getattr(owner, attr)
                if type(lin) is Int8Linear:
                    m = cls.from_int8(lin)
                    if attr == "ffn_out":
                        m.inplace = True  # its residual is the layer's own x1
                    if attr == "ffn_in":
                        m.act = _act_name(layer)
                    setattr(owner, attr, m)


def _act_name(layer: Layer) -> str:
    """The activations.ACT name of the layer's activation (its fused post-op is looked up by name)."""
    name = next((k for k, f in ACT.items() if f is layer.act), None)
    if name not in POST_OPS:
        raise ConfigError(f"static int8: no fused kernel for the layer's activation {name or layer.act!r} "
                          f"(known: {', '.join(POST_OPS)})")
    return name


def _static(layer: Layer) -> bool:
    return isinstance(layer.attn.qkv, StaticInt8Linear)


def _set_calibration(model: nn.Module, calibration: dict) -> None:
    """Each static projection's input qparams from `calibration` (keyed by module name)."""
    todo = {n: m for n, m in model.named_modules() if isinstance(m, StaticInt8Linear)}
    lacking = sorted(n for n in todo if n not in calibration)
    if lacking:
        raise ConfigError(f"static int8: the calibration has no scale for {lacking[0]} ({len(lacking)} "
                          "projections lack one); calibrate this very model")
    for n, m in todo.items():
        m.set_input_qparams(*calibration[n])
