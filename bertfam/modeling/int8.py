"""Int8 CPU inference: `quantize_int8(model)` swaps float modules for int8 ones, in place.

What is quantized, and how. Weights: symmetric int8 per output channel (per row of the (out, in) matrix:
scale = max|w_row| / 127, zero point 0), computed once. Activations: uint8 per tensor, their range taken
from each batch at run time (dynamic quantization); the int32 accumulator is rescaled to float32 and the
float32 bias added. Swapped (config.INT8_MODULES): every encoder layer's attn.qkv, attn.out, ffn_in and
ffn_out (`Int8Linear`, about 83 % of BERT-base's weights) and the word embeddings (`Int8Embedding`, int8
rows + one float32 scale per row, about 16 % of BERT-base with the 21128-piece Chinese vocabulary), so an
int8 checkpoint is about a quarter of the float32 one (bert-base-chinese: 0.26). Positions, token types,
LayerNorms, biases, the pooler and the small heads (classifier, token, span, pair) stay float32: they
hold little of the size or the time, and the classifiers sit right at the output.

Why this kernel (measurements: docs/int8_kernels.md, one section per CPU kind). `Int8Linear` runs
`torch.ops.quantized.linear_dynamic` on weights packed by `torch.ops.quantized.linear_prepack` under the
oneDNN engine (`ENGINES`: x86 / fbgemm where a build has no onednn): the fastest int8 kernel measured, and
faster than float32 sgemm on a CPU without VNNI, where `torch._int_mm` and bfloat16 had no fast kernel. The
packed weights are a cache (not in the state dict, rebuilt lazily after load_state_dict or a device / dtype
change); the state dict holds `weight_int8` (int8, (out, in)), `weight_scale` (float32, (out,)) and `bias`
(float32), so it round-trips through safetensors. Activations use the full 8-bit range (`REDUCE_RANGE` False:
resolution costs real models more than the int16 saturation of non-VNNI kernels does), and on a CPU
without VNNI the weights are packed fitted so that nothing saturates (`fit_weights`: only channels holding a
pair of large neighbouring weights are rescaled, a quarter of a bit at the median). The MLM decoder (tied
to the word embeddings) multiplies with the same int8 rows and scales (`Int8Embedding.linear`: packed once,
nothing stored twice), so no dequantized copy of the embedding matrix is held.

Inference only. Int8 modules have no gradient: a forward in train mode, or with an input that requires a
gradient, raises one ConfigError saying so; the swap turns off requires_grad of the model's remaining float
parameters, so an ordinary forward with autograd on (no torch.no_grad) still runs. CPU only (the quantized
kernels are CPU kernels). Dynamic quantization makes a row's output depend slightly on the other rows of
its batch (they share the activation range), in the padded layout on the padding positions too.

Static int8 (int8_static.py, method "static-int8"): the same weights and embeddings, the encoder layers'
activations quantized at scales calibrated once (calibration.py), GELU and residual adds fused in the kernels.
"""
from __future__ import annotations

import dataclasses
import threading
import warnings
from typing import Optional, Sequence

import torch
from torch import nn

from ..config import INT8_MODULES, ModelConfig, QuantizationConfig
from ..errors import ConfigError, UnsupportedError
from ..utils import cpu_flags  # noqa: F401 (int8_static and others read it from here)
from .embeddings import Embeddings
from .encoder import Encoder
from .heads import MLMPredictor
from .swap import swap_modules

ENGINES = ("onednn", "x86", "fbgemm")  # quantized engines to pack under, in order of preference (see above)
REDUCE_RANGE = False  # full 8-bit activations (see above)
_LAYER_LINEARS = {"attn.qkv": ("attn", "qkv"), "attn.out": ("attn", "out"), "ffn_in": (None, "ffn_in"),
                  "ffn_out": (None, "ffn_out")}
_PACK_LOCK = threading.Lock()  # packing switches the process-wide quantized engine for a moment


# ---------------------------------------------------------------- the swap
def quantize_int8(model: nn.Module, modules: Sequence[str] = INT8_MODULES) -> nn.Module:
    """Swap `model`'s float modules named in `modules` (config.INT8_MODULES) for int8 ones, in place; returns
    it, in eval mode. Works on the meta device too (from_pretrained swaps before it loads an int8 checkpoint).
    Idempotent; records the quantization in model.config (a copy: a config shared with another model stays
    as it was)."""
    modules = [modules] if isinstance(modules, str) else list(modules)
    unknown = [m for m in modules if m not in INT8_MODULES]
    if unknown or not modules:
        raise ConfigError(f"quantize: unknown module(s) {', '.join(unknown) or '(none given)'}; known: "
                          f"{', '.join(INT8_MODULES)}")
    for enc in [m for m in model.modules() if isinstance(m, Encoder)]:
        for layer in enc.layers:
            for name in modules:
                if name in _LAYER_LINEARS:
                    parent, attr = _LAYER_LINEARS[name]
                    owner = getattr(layer, parent) if parent else layer
                    lin = getattr(owner, attr)
                    if isinstance(lin, nn.Linear):
                        setattr(owner, attr, Int8Linear.from_linear(lin))
    if "embeddings.word" in modules:
        swapped = {}
        for emb in [m for m in model.modules() if isinstance(m, Embeddings)]:
            if isinstance(emb.word, nn.Embedding):
                new = Int8Embedding.from_embedding(emb.word)
                swapped[id(emb.word)] = new
                emb.word = new
        for pred in [m for m in model.modules() if isinstance(m, MLMPredictor)]:
            tied = swapped.get(id(pred.word[0]), pred.word[0])
            if isinstance(tied, Int8Embedding):
                pred.word[0] = tied
        model = swap_modules(model, lambda m: Int8MLMPredictor if type(m) is MLMPredictor
                             and isinstance(m.word[0], Int8Embedding) else None)
    for p in model.parameters():  # what stays float is frozen too: the model can only predict now
        p.requires_grad_(False)
    record_quantization(model, modules)
    return model.eval()


def dequantize_int8(model: nn.Module) -> nn.Module:
    """The reverse swap: every int8 module back to its float kind, with the weights the int8 ones stand for
    (the rounding stays), trainable again; the quantization record is dropped. In place; returns it. For
    training from an int8 checkpoint (`from_pretrained(..., dequantize=True)`)."""
    floats: dict = {}  # id(int8 module) -> its float twin: a tied embedding is swapped once

    def twin(m):
        if id(m) not in floats:
            floats[id(m)] = _float_linear(m) if isinstance(m, Int8Linear) else _float_embedding(m)
        return floats[id(m)]

    for owner in list(model.modules()):
        for name, child in list(owner.named_children()):
            if isinstance(child, (Int8Linear, Int8Embedding)):
                setattr(owner, name, twin(child))
    for pred in [m for m in model.modules() if isinstance(m, MLMPredictor)]:
        if isinstance(pred.word[0], Int8Embedding):  # a plain list, not a child: the tied embedding
            pred.word[0] = twin(pred.word[0])
    # the modules swapped around int8 ones (the int8 MLM predictor, a static int8 layer) name their float kind
    model = swap_modules(model, lambda m: getattr(type(m), "float_class", None))
    for p in model.parameters():
        p.requires_grad_(True)
    plain: dict = {}  # a config shared by several modules stays shared
    for m in model.modules():
        cfg = m.__dict__.get("config")
        if isinstance(cfg, ModelConfig) and cfg.quantization is not None:
            m.config = plain.setdefault(id(cfg), dataclasses.replace(cfg, quantization=None))
    return model


def _float_linear(q: "Int8Linear") -> nn.Linear:
    lin = nn.Linear(q.in_features, q.out_features, q.bias is not None, device=q.weight_int8.device)
    with torch.no_grad():
        lin.weight.copy_(q.dequantize())
        if q.bias is not None:
            lin.bias.copy_(q.bias)
    return lin


def _float_embedding(q: "Int8Embedding") -> nn.Embedding:
    emb = nn.Embedding(q.num_embeddings, q.embedding_dim, q.padding_idx, device=q.weight_int8.device)
    with torch.no_grad():
        emb.weight.copy_(q.dequantize())
    return emb


def is_int8(model: nn.Module) -> bool:
    """`model` holds int8 modules (quantize_int8 or quantize_static_int8, or an int8 checkpoint loaded by
    from_pretrained)."""
    return any(isinstance(m, (Int8Linear, Int8Embedding)) for m in model.modules())


def record_quantization(model: nn.Module, modules: Sequence[str], method: Optional[str] = None) -> None:
    """model.config (and every submodule's `config` that is the same ModelConfig) gets the quantization:
    the modules already recorded plus `modules`, under `method` (None: the recorded one, else dynamic-int8;
    so the dynamic swap run again over a static-int8 model leaves its record static)."""
    new: dict = {}
    for m in model.modules():
        cfg = m.__dict__.get("config")
        if isinstance(cfg, ModelConfig):
            if id(cfg) not in new:
                q = cfg.quantization
                done = list(q.modules) if q is not None else []
                names = [n for n in INT8_MODULES if n in done or n in modules]
                how = method or (q.method if q is not None else QuantizationConfig.method)
                new[id(cfg)] = dataclasses.replace(cfg, quantization=QuantizationConfig(method=how, modules=names))
            m.config = new[id(cfg)]


def quantize_rows(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row: (R, C) float -> int8 (R, C) and float32 scales (R,), w ~ q * scale[:, None].
    A zero row gets scale 1 (all its codes are 0). On the meta device (a model built to be loaded into) only the
    shapes: the rounding there runs Python references that import torch._dynamo, ~1.3 s of a process."""
    if w.is_meta:
        return (torch.empty(w.shape, dtype=torch.int8, device="meta"),
                torch.empty(w.shape[0], dtype=torch.float32, device="meta"))
    w = w.detach().float()
    amax = w.abs().amax(dim=1)  # (R,)
    scale = torch.where(amax > 0, amax / 127.0, torch.ones_like(amax))  # (R,)
    q = torch.round(w / scale[:, None]).clamp_(-127, 127).to(torch.int8)  # (R, C)
    return q, scale


def dequantize_rows(q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return q.float() * scale[:, None]  # (R, C)


def exact_u8s8() -> bool:
    """Whether oneDNN's u8 x s8 products are exact for any int8 weight: with VNNI (AVX512_VNNI, AVX-VNNI) or
    AMX they accumulate in int32. Without them (AVX2) its kernels, dynamic and static, multiply with
    vpmaddubsw, which adds the products of neighbouring weights along K, (2j, 2j+1), in int16 and saturates
    where large codes meet a pair of large weights of one sign: up to 16.8 off on random full-range weights
    (AMD EPYC Zen 3). A pair whose same-sign magnitudes sum to at most 128 cannot (255 x 128 = 32,640 <
    32,767), so there both packers (pack_linear, StaticInt8Linear.kernel) pack weights fitted to that
    (fit_weights)."""
    flags = cpu_flags()
    return any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


_FIT_ROWS = 64  # rows per block in pair_peaks / fit_weights: their temporaries stay small (a whole-matrix
# version raised the static bert-base's peak RSS by 120-160 MB: freed blocks of 10-40 MB fragment the heap)


def pair_peaks(w: torch.Tensor) -> torch.Tensor:
    """int8 weights (N, K) -> (N,) int32: per output channel, the largest same-sign sum of a pair of
    neighbouring weights along K, w[n, 2j] and w[n, 2j+1] (a zero after the last where K is odd): the pair
    vpmaddubsw adds in int16, times an input code of up to 255."""
    n, k = w.shape
    out = torch.zeros(n, dtype=torch.int32)
    for a in range(0, n if k else 0, _FIT_ROWS):
        p = torch.nn.functional.pad(w[a:a + _FIT_ROWS].to(torch.int16), (0, k % 2)).view(-1, (k + 1) // 2, 2)
        pos = p.clamp(min=0).sum(-1, dtype=torch.int16)  # (rows, K/2): |sums| <= 254 fit int16
        neg = p.clamp(max=0).sum(-1, dtype=torch.int16).neg_()
        out[a:a + _FIT_ROWS] = torch.maximum(pos, neg).amax(-1)
    return out


def fit_weights(w: torch.Tensor, w_scale: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """int8 weights (N, K) and their per-channel scales (N,) -> the weights a CPU without VNNI multiplies
    exactly (exact_u8s8): a channel whose pair peak is over 128 divided by r = peak / 127 and rounded half to
    even, at r times its scale (two roundings add at most 1: the pair then sums to at most 128). A channel
    with no large pair stays as it is; the rest lose log2(r) bits (r = 1.25-1.33 at the median on real and
    random BERT weights, docs/int8_kernels.md), where halving every weight would lose one; r <= 254 / 127 = 2."""
    peak = pair_peaks(w)  # (N,)
    r = torch.where(peak > 128, peak.float() / 127, torch.ones(peak.shape))  # (N,)
    q = torch.empty_like(w)
    for a in range(0, w.shape[0], _FIT_ROWS):  # in blocks, as pair_peaks
        q[a:a + _FIT_ROWS] = w[a:a + _FIT_ROWS].float().div_(r[a:a + _FIT_ROWS, None]).round_()
    return q, w_scale * r


def pack_linear(q: torch.Tensor, scale: torch.Tensor, bias: Optional[torch.Tensor]):
    """quantized.linear_prepack of int8 rows (out, in) + scales (out,) (+ float bias (out,)), under the
    first engine of ENGINES this build has; the engine in use before is restored. On a CPU without VNNI the
    rows are fitted first (fit_weights): its kernel would saturate on pairs of large weights."""
    if not exact_u8s8():
        q, scale = fit_weights(q, scale)
    engine = next((e for e in ENGINES if e in torch.backends.quantized.supported_engines), None)
    if engine is None:
        raise ConfigError(f"int8: this PyTorch build has none of the quantized engines {', '.join(ENGINES)} "
                          f"(it has {', '.join(torch.backends.quantized.supported_engines) or 'none'})")
    with _PACK_LOCK:
        before = torch.backends.quantized.engine
        torch.backends.quantized.engine = engine
        try:
            with warnings.catch_warnings():  # torch.quantize_per_channel warns that torch.ao is deprecated
                warnings.simplefilter("ignore", UserWarning)
                w = torch.quantize_per_channel(dequantize_rows(q, scale), scale.double(),
                                               torch.zeros(scale.shape[0], dtype=torch.long), 0, torch.qint8)
                return torch.ops.quantized.linear_prepack(w, None if bias is None else bias.detach().float())
        finally:
            torch.backends.quantized.engine = before


def int8_linear(x: torch.Tensor, packed) -> torch.Tensor:
    """(..., K) float -> (..., N) float32 through packed int8 weights (activations quantized per call)."""
    K = x.shape[-1]
    x2 = x.reshape(-1, K)  # (M, K)
    if x2.dtype != torch.float32:
        x2 = x2.float()
    y = torch.ops.quantized.linear_dynamic(x2, packed, REDUCE_RANGE)  # (M, N)
    return y.view(*x.shape[:-1], y.shape[-1])


def check_inference(module: nn.Module, x: Optional[torch.Tensor] = None) -> None:
    """One UnsupportedError line unless `module` may run int8 kernels: eval mode, no gradient wanted, CPU."""
    if module.training or (x is not None and x.requires_grad and torch.is_grad_enabled()):
        raise UnsupportedError("int8 model: inference only (int8 weights have no gradient); call model.eval() and "
                          "predict, or load the float checkpoint to train or to take gradients")
    if x is not None and x.device.type != "cpu":
        raise UnsupportedError(f"int8 model: CPU only (input on {x.device})")


class _PackedCache(nn.Module):
    """Int8 buffers + their packed form, a cache dropped whenever the buffers may have changed."""

    def __init__(self) -> None:
        super().__init__()
        self._packed = None

    def _load_from_state_dict(self, *args, **kwargs):
        self._packed = None
        return super()._load_from_state_dict(*args, **kwargs)

    def _apply(self, fn, recurse: bool = True):
        self._packed = None
        return super()._apply(fn, recurse)

    def __getstate__(self):
        state = super().__getstate__().copy()
        state["_packed"] = None  # rebuilt on first use
        return state

    def dequantize(self) -> torch.Tensor:
        """The float32 weights the int8 ones stand for, (out, in) / (V, E)."""
        return dequantize_rows(self.weight_int8, self.weight_scale)

    def packed(self):
        """The packed int8 weights (with this module's own `bias`, if it has one), packed on first use."""
        if self._packed is None:
            self._packed = pack_linear(self.weight_int8, self.weight_scale, getattr(self, "bias", None))
        return self._packed


class Int8Linear(_PackedCache):
    """nn.Linear for inference with int8 weights (per output channel) and dynamically quantized activations:
    (..., in_features) -> (..., out_features) float32."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None) -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight_int8", torch.zeros(out_features, in_features, dtype=torch.int8, device=device))
        self.register_buffer("weight_scale", torch.ones(out_features, dtype=torch.float32, device=device))
        self.register_buffer("bias", torch.zeros(out_features, dtype=torch.float32, device=device) if bias else None)

    @classmethod
    def from_linear(cls, lin: nn.Linear) -> "Int8Linear":
        m = cls(lin.in_features, lin.out_features, lin.bias is not None, device=lin.weight.device)
        m.weight_int8, m.weight_scale = quantize_rows(lin.weight)
        if lin.bias is not None:
            m.bias = lin.bias.detach().float().clone()
        return m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        check_inference(self, x)
        if x.numel() == 0:
            return x.new_zeros(*x.shape[:-1], self.out_features, dtype=torch.float32)
        return int8_linear(x, self.packed())

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class Int8Embedding(_PackedCache):
    """nn.Embedding with int8 rows and one float32 scale per row: ids (...) -> (..., E) float32. `linear`
    multiplies with the same rows (the tied MLM decoder); `weight` is the dequantized matrix (computed on
    each access: for inspection, not for a forward)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: Optional[int] = None,
                 device=None) -> None:
        super().__init__()
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        self.register_buffer("weight_int8", torch.zeros(num_embeddings, embedding_dim, dtype=torch.int8,
                                                        device=device))
        self.register_buffer("weight_scale", torch.ones(num_embeddings, dtype=torch.float32, device=device))

    @classmethod
    def from_embedding(cls, emb: nn.Embedding) -> "Int8Embedding":
        m = cls(emb.num_embeddings, emb.embedding_dim, emb.padding_idx, device=emb.weight.device)
        m.weight_int8, m.weight_scale = quantize_rows(emb.weight)
        return m

    @property
    def weight(self) -> torch.Tensor:
        return self.dequantize()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_inference(self)
        flat = ids.reshape(-1)  # (n,)
        rows = self.weight_int8.index_select(0, flat).float().mul_(self.weight_scale.index_select(0, flat)[:, None])
        return rows.view(*ids.shape, self.embedding_dim)  # (..., E)

    def linear(self, h: torch.Tensor, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
        """h (..., E) -> (..., V) = h @ rows^T (+ bias), in int8 (the bias is added apart, so the packed rows
        do not depend on a tensor another module owns)."""
        check_inference(self, h)
        if h.numel() == 0:
            y = h.new_zeros(*h.shape[:-1], self.num_embeddings, dtype=torch.float32)
        else:
            y = int8_linear(h, self.packed())
        return y.add_(bias) if bias is not None else y

    def extra_repr(self) -> str:
        return f"{self.num_embeddings}, {self.embedding_dim}" + (
            f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class Int8MLMPredictor(MLMPredictor):
    """MLMPredictor whose tied decoder runs in int8 on the Int8Embedding's rows (same weights, same names)."""

    float_class = MLMPredictor  # what dequantize_int8 swaps it back to

    def decode(self, h: torch.Tensor) -> torch.Tensor:
        return self.word[0].linear(h, self.bias)  # (..., V)
