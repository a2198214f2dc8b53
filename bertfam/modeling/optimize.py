"""Inference optimisations as an explicit swap: `optimize_for_inference(model)`.

The plain `Layer` / `Encoder` forward (encoder.py) is the model. This module replaces, in place, each
encoder (and its layers) by a subclass instance that runs faster where no gradient is needed, or
torch.compiles the layers' token-wise blocks. Module replacement, as torch's quantization swaps modules
(swap.py): the new module holds the old one's children, parameters and buffers, the very objects, so
weights, state-dict names and optimizer references are unchanged; it is set in the parent (`setattr`, a
layer by its ModuleList index) and the old object keeps its class (no `__class__` assignment).

Called explicitly at prediction entry points only, never on a model in training: the pipelines
(tasks/pipelines.py, hence `serve`), MRCPredictor (optimize=True; train_mrc passes False), the verifier,
embed_texts, runners' evaluate / predict / demos, the distillation teacher and the MLM augmenter. Training's
own evaluations (tasks/inputs.py `InputBuilder.predict`, the MRC dev evaluation) run the model as is.

Buffer reuse (the default). BERT-base at 8 x 128 tokens allocates a 12.6 MB FFN activation, a 9.4 MB
fused QKV output and a few 3 MB tensors in every layer. glibc serves blocks that large with fresh mmap'd
(or freshly trimmed heap) pages, so each layer pays page faults that zero memory in the kernel: measured
here about 58,000 faults and 0.22 s of system time per forward (transformers pays as much), 0-6,000 and
0.02-0.06 s with these buffers. `ReusingEncoder` makes two buffers per forward that every
`ReusingLayer` writes into (`torch.addmm(..., out=)`, in-place activation and residual add): "wide",
M x 4H, holds QKV + the attention context and then, both dead by then, the FFN activation; "proj", M x H,
the attention output projection and then the FFN output. The kernels and the order of operations are the
plain path's, so outputs are bit-for-bit the same (tested).

Only without autograd, in eval mode, outside autocast and tracing (`buffers_allowed`): training keeps every
activation for the backward pass, so there is nothing to reuse; autocast picks each matmul's dtype, which
out= buffers would override; export / compile need the plain graph. Anything else runs the plain forward,
so a swapped model can still be trained. The buffers of one forward live in a context variable, so
concurrent forwards (serving threads) never share them.
A bare Encoder given as `model` cannot replace itself: the replacement is returned (use the return value).

Int8 (`int8=True`): modeling/int8.py's swap first (the encoder layers' four projections and the word
embeddings become int8 modules; inference only, not bit-identical: about 1-2 % relative error per
projection), then the buffer reuse as above around them: `_linear_into` hands an Int8Linear its input and
uses the tensor it returns (the quantized kernel has no out= form), the rest of the layer still reuses
buffers.

fp32 projection kernel (`linear=`, modeling/linear.py, issue #26): the encoder layers' four projections run
on a weight prepacked once, with MKL ("mkl") or oneDNN ("mkldnn"), or stay torch's addmm ("aten"); "auto"
picks per weight shape from a short measured probe, cached per machine (linear_probe.py). The projections
become `PackedLinear` modules holding the same Parameters plus the packed copy (extra memory: linear.py).
They compose with buffer reuse through `_linear_into`: the mkl kernel writes into the scratch buffer chunk
by chunk, the oneDNN one has no out= form and returns its own tensor (as Int8Linear does). "auto" is the
default for a float32 CPU model without compile or int8: on an AMD EPYC with AVX-512 (docs/benchmarks.md)
torch's addmm runs MKL's AVX2 path at ~185 GFLOP/s while oneDNN's prepacked kernel reaches ~440, the whole
bert-base encoder twice as fast; where no kernel beats addmm by 3 % the probe keeps aten.
"""
from __future__ import annotations

import contextvars
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from . import varlen
from .attention import SelfAttention
from .attention_core import attend
from .encoder import Encoder, Layer
from ..errors import ConfigError
from . import fused_attention as fused_kernel
from . import linear as linear_kernels
from .int8 import Int8Linear, is_int8, quantize_int8
from .layout import tracing
from .swap import swap_modules
from .varlen import Packed

_COMPILED = ("attn_residual", "ffn_block")  # Layer methods replaced by compiled instance attributes
_SCRATCH: contextvars.ContextVar[Optional["Scratch"]] = contextvars.ContextVar("bertfam_scratch", default=None)


def optimize_for_inference(model: nn.Module, reuse_buffers: Optional[bool] = None, compile: bool = False,
                           int8: bool = False, linear: Optional[str] = None,
                           fused_attention: Optional[bool] = None, **compile_kwargs) -> nn.Module:
    """Speed up prediction with `model` (a TaskModel, BertfamModel or anything holding encoders), in place,
    by module replacement; returns it (the replacement where `model` is itself an encoder). Outputs stay
    those of the plain forward (bit for bit with buffer reuse), except with int8.

    reuse_buffers (default: on unless compile): the buffer-reusing layers described above.
    compile: torch.compile each layer's token-wise blocks (residual + LayerNorm, FFN; attention stays
    eager), dynamic shapes, `compile_kwargs` passed on. Off by default: the first call costs minutes on
    CPU (docs/benchmarks.md). The buffer path would bypass the compiled blocks, so compile excludes it.
    int8: quantize first (modeling/int8.py: int8 weights, dynamic int8 activations; CPU, inference only,
    outputs close to the float ones, not equal). int8=False never undoes an int8 model's quantization
    (an int8 checkpoint stays int8). Excludes compile. A static int8 model (int8_static.py) keeps its
    projections' weights only in their packed form (int8_static.release_weights: one copy, not two; they
    come back from it for state_dict and saving).
    linear: the fp32 kernel of the encoder layers' projections (modeling/linear.py): "aten" (torch's addmm,
    the plain modules), "mkl" or "mkldnn" (weights prepacked once; about 2x / 1x the projection weights in
    extra memory), or "auto" (per weight shape and row count, the fastest here by a ~2.5 s probe for
    bert-base, cached on disk:
    linear_probe.py). Outputs equal the plain ones within fp32 rounding (about 1e-6 relative), not bit for
    bit. None (default): "auto" for a float32 model on the CPU without compile or int8, else the projections'
    kernel stays as it is. An explicit kernel excludes compile and int8 (both replace the projections' kernel
    their own way).
    fused_attention: softmax(q kᵀ) v of unpadded and packed batches by the fused CPU kernel
    (fused_attention.py: float32 with AVX-512 or AVX2, bfloat16 with AVX512_BF16, heads of 32 or 64; outputs equal
    SDPA's within float rounding, not bit for bit). None (default): where this CPU and the model's heads allow it
    (built on first use) and a probe of a fraction of a second finds it faster than torch's attention here;
    True: wherever it runs, a ConfigError where it cannot; False: torch's cores
    (with linear="aten" the outputs are then the plain forward's bit for bit).
    Idempotent; a compiled model stays compiled."""
    linear_kernels.check_linear(linear)
    if linear not in (None, "aten") and (compile or int8 or _int8_projections(model)):
        raise ConfigError(f"linear={linear!r} excludes compile and int8 (they replace the projections' kernel "
                          "their own way)")
    if compile and reuse_buffers:
        raise ValueError("reuse_buffers and compile exclude each other: the buffer path bypasses the compiled blocks")
    if compile and (int8 or is_int8(model)):
        raise ValueError("int8 and compile exclude each other: torch.compile does not trace the quantized kernels")
    if int8:
        model = quantize_int8(model)
    if not compile:  # static int8: one copy of its weights, the packed one (before the swap takes references)
        from .int8_static import release_weights

        release_weights(model)
    # int8 word embeddings alone (the shipped MRC reader) leave float projections to speed up
    if linear is None and not compile and uses_fp32_kernels(model):
        linear = "auto"
    if linear is not None:
        choice = linear
        if linear == "auto":
            from .linear_probe import choose

            choice = choose(linear_kernels.shape_class(lin) for _, _, lin in linear_kernels.projections(model))
        linear_kernels.swap_projections(model, choice)
    reuse = (not compile) if reuse_buffers is None else reuse_buffers
    _check_compile_kwargs(compile, compile_kwargs)
    kw = {"dynamic": True, **compile_kwargs}  # dynamic shapes unless the caller says otherwise
    if compile:
        model = _swap(model, plain=True)
        for enc in _encoders(model):
            for layer in enc.layers:
                for name in _COMPILED:
                    if name not in layer.__dict__:
                        setattr(layer, name, torch.compile(getattr(layer, name), **kw))
    elif reuse:
        model = _swap(model, plain=False)
    set_fused_attention(model, fused_attention)
    return model


def set_fused_attention(model: nn.Module, on: Optional[bool] = None) -> int:
    """Switch the fused attention kernel on (None: where it runs here and a probe finds it faster than torch's
    attention, fused_attention.faster_here; True: wherever it runs, a ConfigError where it cannot) or off for
    every attention module of `model`; returns how many use it."""
    attns = [m for m in model.modules() if isinstance(m, SelfAttention)]
    dims = {a.head_dim for a in attns}
    runs = bool(attns) and all(d in fused_kernel.HEAD_DIMS for d in dims) and fused_kernel.available(torch.float32)
    if on and attns and not runs:
        why = fused_kernel.why_unavailable() or (
            "neither AVX-512 nor AVX2 + FMA on this CPU" if not fused_kernel.cpu_supports(torch.float32)
            else f"heads of {sorted(dims)} (it takes {', '.join(map(str, fused_kernel.HEAD_DIMS))})")
        raise ConfigError(f"fused_attention=True: the fused attention kernel cannot run here: {why}")
    # None: only where the probe finds it faster than torch's attention here (the AVX2 build is unmeasured on
    # its own CPUs); True: wherever it runs
    use = runs and (on or (on is None and all(fused_kernel.faster_here(h, d)
                                              for h, d in {(a.heads, a.head_dim) for a in attns})))
    for a in attns:
        a.fused_attention = use
    return len(attns) if use else 0


def uses_fp32_kernels(model: nn.Module) -> bool:
    """Whether the fp32 projection kernel choice (linear=, "auto" by default) applies to `model`: its encoder
    projections are float32 on the CPU, none of them int8."""
    return not _int8_projections(model) and _float32_cpu(model)


def _int8_projections(model: nn.Module) -> bool:
    """Whether any encoder projection is an Int8Linear (int8 embeddings alone do not count)."""
    return any(isinstance(lin, Int8Linear) for _, _, lin in linear_kernels.projections(model))


def _float32_cpu(model: nn.Module) -> bool:
    """Whether the encoder projections are float32 on the CPU (the packed kernels' only case)."""
    lins = [lin for _, _, lin in linear_kernels.projections(model)]
    return bool(lins) and all(lin.weight.dtype == torch.float32 and lin.weight.device.type == "cpu" for lin in lins)


def _check_compile_kwargs(compile: bool, kwargs: dict) -> None:
    """Keyword arguments are torch.compile's, and only with compile=True: a misspelt option (int_8=True)
    would otherwise be swallowed and change nothing."""
    if not kwargs:
        return
    if not compile:
        raise TypeError(f"optimize_for_inference: {', '.join(sorted(kwargs))} given without compile=True (keyword "
                        "arguments other than reuse_buffers, compile, int8 and linear are torch.compile's)")
    import inspect

    known = set(inspect.signature(torch.compile).parameters) - {"model"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"optimize_for_inference: unknown torch.compile option(s) {', '.join(unknown)}; known: "
                        f"{', '.join(sorted(known))}")


def is_compiled(enc: Encoder) -> bool:
    return any(name in layer.__dict__ for layer in enc.layers for name in _COMPILED)


def reuses_buffers(model: nn.Module) -> bool:
    """Every encoder of `model` is swapped for the buffer-reusing one."""
    encs = _encoders(model)
    return bool(encs) and all(isinstance(e, ReusingEncoder) for e in encs)


def _encoders(model: nn.Module) -> list:
    return [m for m in model.modules() if isinstance(m, Encoder)]


def _swap(model: nn.Module, plain: bool) -> nn.Module:
    """Replace each plain encoder and layer (plain=False) by a buffer-reusing one holding the same children,
    or back (plain=True): new modules set in their parents (swap.py), the same parameters, buffers,
    state-dict names and optimizer references; the old objects keep their class. A subclass of someone
    else's is left alone, and so is a compiled encoder (its compiled blocks are bound to its layers)."""
    def kind(m: nn.Module) -> Optional[type]:
        if type(m) in (Layer, ReusingLayer) and not any(n in m.__dict__ for n in _COMPILED):
            return Layer if plain else ReusingLayer
        if type(m) in (Encoder, ReusingEncoder) and (plain or not is_compiled(m)):
            return Encoder if plain else ReusingEncoder
        return None

    return swap_modules(model, kind)


def buffers_allowed() -> bool:
    """No autograd graph being recorded, nothing traced, no autocast."""
    autocast = torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")
    return not torch.is_grad_enabled() and not tracing() and not autocast


# ---------------------------------------------------------------- the swapped classes
class ReusingEncoder(Encoder):
    """Encoder that hands its layers one set of scratch buffers per no-grad eval forward."""

    def forward(self, x, mask, output_hidden_states: bool = False, output_attentions: bool = False):
        if self.training or output_attentions or not buffers_allowed():
            return super().forward(x, mask, output_hidden_states, output_attentions)
        token = _SCRATCH.set(Scratch())
        try:
            return super().forward(x, mask, output_hidden_states, output_attentions)
        finally:
            _SCRATCH.reset(token)


class ReusingLayer(Layer):
    """Layer that writes its big intermediates into the enclosing ReusingEncoder's buffers, when it has any."""

    def forward(self, x: torch.Tensor, mask, need_scores: bool = False):
        scratch = _SCRATCH.get()
        if scratch is None or need_scores or self.training:
            return super().forward(x, mask, need_scores)
        return self._forward_reusing(x, mask, scratch), None

    def _forward_reusing(self, x: torch.Tensor, mask, scratch: "Scratch") -> torch.Tensor:
        """attn_residual then ffn_block in eval mode (dropout is the identity), same kernels and order."""
        H, I = x.shape[-1], self.ffn_in.out_features
        x2 = x.reshape(-1, H)  # (M, H), M = B * T or N
        M = x2.shape[0]
        wide = scratch.get("wide", (M * max(4 * H, I),), x2)
        proj = scratch.get("proj", (M, H), x2)
        a = _attention_into(self.attn, x, mask, wide[:3 * M * H].view(M, 3 * H),
                            wide[3 * M * H:4 * M * H].view(M, H), proj)  # (M, H) in proj
        x1 = self.attn_norm(a.add_(x2))  # x + a (addition commutes bit for bit)
        f = _activate_(self.act, _linear_into(self.ffn_in, x1, wide[:M * I].view(M, I)))  # (M, I)
        g = _linear_into(self.ffn_out, f, proj)  # (M, H)
        return self.ffn_norm(g.add_(x1)).view(x.shape)


def _attention_into(attn, x: torch.Tensor, mask, qkv_buf: torch.Tensor, ctx_buf: torch.Tensor,
                    out: torch.Tensor) -> torch.Tensor:
    """SelfAttention in eval mode writing the QKV projection (M, 3H), the context (M, H) and the output
    projection (M, H) into the given buffers; M = B * T, or N packed tokens."""
    H = x.shape[-1]
    M = qkv_buf.shape[0]
    qkv = _linear_into(attn.qkv, x.reshape(M, H), qkv_buf)  # (M, 3H)
    packed = qkv.view(M, 3, attn.heads, attn.head_dim)  # (M, 3, h, d)
    if isinstance(mask, Packed):
        ctx = varlen.attention(packed, mask, 0.0, out=ctx_buf.view(M, attn.heads, attn.head_dim),
                               matmul_up_to=attn.matmul_up_to, fused=attn.fused_attention)  # (N, H)
    elif mask is None and attn.fused_attention and fused_kernel.usable(packed):  # unpadded: sequences every T rows
        ctx = fused_kernel.varlen_attention(packed, fused_kernel.uniform_bounds(*x.shape[:2]),
                                            out=ctx_buf.view(M, attn.heads, attn.head_dim)).view(M, H)
    else:
        B, T, _ = x.shape
        q, k, v = qkv.view(B, T, 3, attn.heads, attn.head_dim).permute(2, 0, 3, 1, 4)  # (B, h, T, d)
        c = attend(q, k, v, mask, 0.0, attn.matmul_up_to)  # (B, h, T, d)
        ctx = ctx_buf.view(B, T, attn.heads, attn.head_dim).copy_(c.transpose(1, 2)).view(M, H)
    return _linear_into(attn.out, ctx, out)


# ---------------------------------------------------------------- buffers and in-place kernels
class Scratch:
    """Named flat buffers, grown on demand, handed out as views of the asked shape."""

    def __init__(self) -> None:
        self._flat: dict[str, torch.Tensor] = {}

    def get(self, name: str, shape: tuple, like: torch.Tensor) -> torch.Tensor:
        n = 1
        for s in shape:
            n *= s
        buf = self._flat.get(name)
        if buf is None or buf.numel() < n or buf.dtype != like.dtype or buf.device != like.device:
            buf = torch.empty(n, dtype=like.dtype, device=like.device)
            self._flat[name] = buf
        return buf[:n].view(shape)


def _linear_into(lin: nn.Module, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """lin(x) written into `out` (the same addmm kernel F.linear uses for 2-D input). x: (M, K), out: (M, N).
    An Int8Linear has no out= kernel: its own (M, N) result comes back instead (callers use the return value);
    a PackedLinear writes into `out` where its kernel can (linear.py), else returns its own result too."""
    if isinstance(lin, Int8Linear):
        return lin(x)
    if isinstance(lin, linear_kernels.PackedLinear):
        return lin.into(x, out)
    if lin.bias is None:
        return torch.mm(x, lin.weight.t(), out=out)
    return torch.addmm(lin.bias, x, lin.weight.t(), out=out)


# activations that can overwrite their input; the rest fall back to an out-of-place call
_INPLACE = {
    F.gelu: lambda x: torch.ops.aten.gelu_(x),
    F.relu: torch.relu_,
    F.silu: lambda x: F.silu(x, inplace=True),
    torch.tanh: torch.tanh_,
}


def _activate_(act, x: torch.Tensor) -> torch.Tensor:
    """act(x), overwriting x when the activation has an in-place form."""
    f = _INPLACE.get(act)
    return f(x) if f is not None else act(x)
