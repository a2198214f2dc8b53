"""fp32 projection kernels for inference: the encoder layers' linears on prepacked weights (issue #26).

`optimize_for_inference(model, linear=...)` (optimize.py) picks the GEMM kernel of every encoder layer's four
projections (attn.qkv, attn.out, ffn_in, ffn_out):
- "aten":   torch's own linear (addmm / mm; with buffer reuse written into the scratch buffers with out=).
            The projections stay the plain nn.Linear modules.
- "mkl":    MKL's packed-B sgemm (`torch.ops.mkl._mkl_reorder_linear_weight` once, `torch.ops.mkl._mkl_linear`
            per call), the kernel inductor's freezing pass uses for fp32 linears with static shapes.
- "mkldnn": oneDNN's matmul on a weight reordered once into oneDNN's blocked layout
            (`torch.ops.mkldnn._reorder_linear_weight`, `torch.ops.mkldnn._linear_pointwise`), the kernel
            inductor's freezing pass uses when the batch size is dynamic.
- "auto":   per weight shape, the fastest of those on this machine, measured by a short probe
            (linear_probe.py) at a few row counts and cached on disk per CPU, torch version and thread
            count; the choice may hold a packed kernel for some row counts only (`rows`, below).
Why: torch's default fp32 linear repacks the weight matrix on every call; inductor with freezing and OpenVINO
pack it once. Which kernel wins depends on the CPU (AVX2 vs AVX-512) and the row count, hence a probe. On an
AMD EPYC Zen 3 with AVX2 only, oneDNN's packed kernel beats addmm by 10-25 % at 64 rows and loses by 12-20 %
at 1,024 (a full batch of 8 x 128 tokens; docs/benchmarks.md): one kernel per shape cannot be right for both.

A shape's choice is a kernel name (every row count) or {"kernel": k, "rows": [[lo, hi], ...]}: k runs on a
call of M rows when lo <= M < hi for one of the ranges (hi null: no upper end), addmm otherwise; the
dispatch is one comparison per call (`PackedLinear.rows`).

The swap replaces each projection by a `PackedLinear` (an nn.Linear subclass, built by swap.rebuilt_as from
the nn.Linear: the very same `weight` and `bias` Parameters, so state-dict names and values, save_pretrained
and optimizer references are unchanged). The packed weight is a cache beside them, not in the state dict:
rebuilt when the weight or bias changes (their `_version` counters: load_state_dict, an optimizer step or any
in-place write bumps them), on a device / dtype change, and after unpickling / deepcopy.

Memory: the float Parameters stay (save_pretrained writes them, training and the plain path use them), so
the packed copy is extra. `packed_bytes(model)` counts it by tensor size. oneDNN's blocked copy: the
weight's size (1.00x; its storage is opaque, so the logical size is counted). MKL's: the op allocates
numel x 4 bytes = 2.26x the projection weights of a bert-base layer (768x768: 4x; it sizes a float tensor by
cblas_sgemm_pack_get_size()), but writes, hence makes resident, only about 1.05x (RSS growth measured: 9.5 MB
per 3072x768 weight of 9.4 MB, for either kernel). So bert-base's 85M projection floats (340 MB) cost
about 340-360 MB more resident memory with either packed kernel (mkl reserves ~770 MB of address space).

MKL's packed weight is only valid for the row count it was packed for (`_mkl_linear` silently falls back to
at::linear otherwise, repacking per call), and here the row count is B*T or the number of real tokens,
different in every batch. So the rows run in chunks of MKL_CHUNK rows on one weight packed for MKL_CHUNK;
the last M % MKL_CHUNK rows run through addmm.

Inference only, as the buffer reuse: the packed kernels have no autograd, so training, autograd, autocast,
tracing, a non-float32 input or a non-CPU tensor run the plain nn.Linear forward (bit for bit the
unswapped model; the weights are the same objects).
"""
from __future__ import annotations

import threading
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .layout import tracing

KERNELS = ("aten", "mkl", "mkldnn")
LINEAR = ("auto", *KERNELS)
# rows per packed MKL call (see above); the probe times 64, 256 and 1,024 rows; benchmarks/linear_kernels.py
# compares sizes
MKL_CHUNK = 256
# the encoder layers' projections, as (owner attribute or None for the layer itself, linear attribute)
PROJECTIONS = {"attn.qkv": ("attn", "qkv"), "attn.out": ("attn", "out"), "ffn_in": (None, "ffn_in"),
               "ffn_out": (None, "ffn_out")}
_PACK_LOCK = threading.Lock()  # concurrent first forwards (serving threads) pack once


def check_linear(linear: Optional[str]) -> Optional[str]:
    """`linear` if None or one of LINEAR, else one ConfigError line naming the values."""
    if linear is not None and linear not in LINEAR:
        raise ConfigError(f"linear {linear!r} not in {', '.join(LINEAR)}")
    return linear


def kernel_ops_present(kernel: str) -> bool:
    """The ops `kernel` needs are in this torch build (they may still fail on this CPU: linear_probe.py runs
    them before choosing)."""
    if kernel == "aten":
        return True
    try:
        if kernel == "mkl":
            return bool(torch._C.has_mkl) and hasattr(torch.ops.mkl, "_mkl_linear") \
                and hasattr(torch.ops.mkl, "_mkl_reorder_linear_weight")
        if kernel == "mkldnn":
            return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise") \
                and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")
    except (AttributeError, RuntimeError):  # torch.ops raises for an unknown namespace / op in some builds
        return False
    return False


# ---------------------------------------------------------------- the kernels on a packed weight
def pack(kernel: str, weight: torch.Tensor) -> torch.Tensor:
    """The (out, in) float32 weight in `kernel`'s prepacked form (an opaque mkldnn-layout tensor)."""
    w = weight.detach()
    if kernel == "mkl":
        return torch.ops.mkl._mkl_reorder_linear_weight(w, MKL_CHUNK)
    if kernel == "mkldnn":
        return torch.ops.mkldnn._reorder_linear_weight(w, None)  # any batch size
    raise ValueError(f"no packed form for kernel {kernel!r}")


def packed_linear(kernel: str, x: torch.Tensor, packed: torch.Tensor, weight: torch.Tensor,
                  bias: Optional[torch.Tensor], out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """x (M, K) float32 contiguous -> (M, N) = x @ weight.T + bias through `packed` (pack(kernel, weight)).
    The result is `out` where given and the kernel can write there (mkl: chunk by chunk, copied; the
    remainder rows straight through addmm), else a new tensor (mkldnn: no out= form); use the return value."""
    M, N = x.shape[0], weight.shape[0]
    if kernel == "mkldnn":
        return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")
    if kernel != "mkl":
        raise ValueError(f"no packed form for kernel {kernel!r}")
    y = torch.empty(M, N, dtype=x.dtype, device=x.device) if out is None else out
    P = MKL_CHUNK
    full = M - M % P
    w, b = weight.detach(), None if bias is None else bias.detach()
    for i in range(0, full, P):  # rows i..i+P: the packed path (M == the packed batch size)
        y[i:i + P].copy_(torch.ops.mkl._mkl_linear(x[i:i + P], packed, w, b, P))
    if full < M:  # the remainder: the plain kernel, written in place
        if b is None:
            torch.mm(x[full:], w.t(), out=y[full:])
        else:
            torch.addmm(b, x[full:], w.t(), out=y[full:])
    return y


def packed_nbytes(kernel: str, packed: torch.Tensor, weight: torch.Tensor) -> int:
    """Bytes the packed copy holds, by tensor size. mkl: numel x 4, what the op allocates (about half of it is
    written and resident: module docstring); mkldnn: its storage is opaque (no nbytes), so the logical size,
    which oneDNN's blocked layout matches up to padding to its block."""
    if kernel == "mkl":
        return packed.numel() * packed.element_size()
    return weight.numel() * weight.element_size()


def _version(t: torch.Tensor) -> int:
    """t's in-place write counter; an inference tensor (made under inference_mode) has none: -1, so a weight
    loaded that way and then written in place inside inference_mode is not noticed (reswap to repack)."""
    return -1 if t.is_inference() else t._version


# ---------------------------------------------------------------- the swapped module
class PackedLinear(nn.Linear):
    """nn.Linear whose inference forward runs `kernel` on a packed copy of the weight (module docstring).
    Made by swapping (`swap_projections`), never constructed directly: it holds the nn.Linear's own Parameters.
    `rows`: None (the packed kernel at every row count) or ((lo, hi), ...): only calls of lo <= M < hi rows
    (hi None: unbounded) run packed, the rest addmm."""

    kernel: str = "aten"
    rows: Optional[tuple] = None

    def packed(self) -> Optional[torch.Tensor]:
        """The packed weight, (re)packed when the weight or bias changed since; None where it cannot run
        (weight not float32 on the CPU)."""
        w, b = self.weight, self.bias
        if w.dtype != torch.float32 or w.device.type != "cpu":
            return None
        # MKL_CHUNK too: the mkl weight is packed for that row count, and packed_linear reads it per call
        key = (_version(w), w.data_ptr(), None if b is None else (_version(b), b.data_ptr()),
               MKL_CHUNK if self.kernel == "mkl" else None)
        cache = self.__dict__.get("_packed")
        if cache is not None and cache[0] == key:
            return cache[1]
        with _PACK_LOCK:
            cache = self.__dict__.get("_packed")
            if cache is None or cache[0] != key:
                with torch.no_grad():
                    self.__dict__["_packed"] = cache = (key, pack(self.kernel, w))
        return cache[1]

    def packed_allowed(self, x: torch.Tensor) -> bool:
        """The packed kernel may run on x: eval mode, nothing differentiated, traced or autocast, fp32 CPU."""
        autocast = torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")
        return (not self.training and not torch.is_grad_enabled() and not tracing() and not autocast
                and x.dtype == torch.float32 and x.device.type == "cpu" and x.numel() > 0
                and (self.rows is None or in_ranges(x.numel() // x.shape[-1], self.rows)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.packed() if self.packed_allowed(x) else None
        if p is None:
            return F.linear(x, self.weight, self.bias)
        x2 = x.reshape(-1, x.shape[-1]).contiguous()  # (M, K)
        y = packed_linear(self.kernel, x2, p, self.weight, self.bias)
        return y.view(*x.shape[:-1], y.shape[-1])

    def into(self, x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        """self(x) for x (M, K), written into out (M, N) where the kernel can (use the return value)."""
        p = self.packed() if self.packed_allowed(x) else None
        if p is None:
            if self.bias is None:
                return torch.mm(x, self.weight.t(), out=out)
            return torch.addmm(self.bias, x, self.weight.t(), out=out)
        return packed_linear(self.kernel, x.contiguous(), p, self.weight, self.bias, out)

    def _apply(self, fn, recurse: bool = True):
        self.__dict__.pop("_packed", None)  # .to(), .float(), ...: the Parameters may be new tensors
        return super()._apply(fn, recurse)

    def __getstate__(self):
        state = super().__getstate__().copy()
        state.pop("_packed", None)  # opaque mkldnn tensors do not pickle / deepcopy; repacked on first use
        return state

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, kernel={label(self.kernel, self.rows)}"


class MklLinear(PackedLinear):
    kernel = "mkl"


class MkldnnLinear(PackedLinear):
    kernel = "mkldnn"


CLASSES = {"mkl": MklLinear, "mkldnn": MkldnnLinear}


def projections(model: nn.Module) -> list:
    """(owner, attribute, module) of every encoder layer projection in `model`."""
    from .encoder import Encoder

    out = []
    for enc in [m for m in model.modules() if isinstance(m, Encoder)]:
        for layer in enc.layers:
            for parent, attr in PROJECTIONS.values():
                owner = getattr(layer, parent) if parent else layer
                out.append((owner, attr, getattr(owner, attr)))
    return out


def shape_class(lin: nn.Module) -> str:
    """The probe's unit of choice: 'in x out', e.g. '768x3072'."""
    return f"{lin.in_features}x{lin.out_features}"


def parse_spec(spec) -> tuple[str, Optional[tuple]]:
    """(kernel, rows) of one shape's choice: a kernel name, or {"kernel": k, "rows": [[lo, hi or None], ...]}
    (module docstring). ValueError for anything else (the probe's cache is checked with it)."""
    if isinstance(spec, str) and spec in KERNELS:
        return spec, None
    if isinstance(spec, dict) and set(spec) == {"kernel", "rows"} and spec["kernel"] in KERNELS \
            and isinstance(spec["rows"], list) and spec["rows"]:
        rows = []
        for r in spec["rows"]:
            ok = isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], int) and r[0] >= 0 \
                and (r[1] is None or (isinstance(r[1], int) and r[1] > r[0]))
            if not ok:
                raise ValueError(f"bad row range {r!r}")
            rows.append((r[0], r[1]))
        return spec["kernel"], tuple(rows)
    raise ValueError(f"not a kernel choice: {spec!r}")


def in_ranges(m: int, rows: tuple) -> bool:
    """Whether m rows fall in one of the (lo, hi) ranges (hi None: unbounded)."""
    return any(lo <= m and (hi is None or m < hi) for lo, hi in rows)


def label(kernel: str, rows: Optional[tuple]) -> str:
    """"mkldnn", or "mkldnn at 0-127 rows, aten above" style: what a projection runs, for reports."""
    if rows is None or kernel == "aten":
        return kernel
    spans = ", ".join(f"{lo}-{hi - 1}" if hi is not None else f"{lo}+" for lo, hi in rows)
    return f"{kernel} at {spans} rows, else aten"


def swap_projections(model: nn.Module, choice) -> nn.Module:
    """Set each encoder layer projection's kernel: `choice` a kernel of KERNELS, or a dict shape_class ->
    spec (the probe's: a kernel name or a kernel with row ranges, parse_spec; shapes not in it stay aten). A
    plain nn.Linear or a PackedLinear becomes the PackedLinear of its kernel, or back to nn.Linear for "aten",
    by swap.rebuilt_as (same Parameters); anything else (an Int8Linear) is left alone. Packs the weights now,
    so the cost is paid at load, not in the first batch. In place; returns model."""
    from .swap import rebuilt_as

    for owner, attr, lin in projections(model):
        if type(lin) not in (nn.Linear, MklLinear, MkldnnLinear):
            continue
        kernel, rows = parse_spec(choice.get(shape_class(lin), "aten") if isinstance(choice, dict) else choice)
        cls = CLASSES.get(kernel, nn.Linear)
        if type(lin) is not cls:
            new = rebuilt_as(lin, cls, drop=("_packed",))
            setattr(owner, attr, new)
            lin = new
        if isinstance(lin, PackedLinear):
            if rows is None:
                lin.__dict__.pop("rows", None)  # the class default: every row count
            else:
                lin.rows = rows
            lin.packed()
    return model


def kernels_in_use(model: nn.Module) -> dict:
    """shape_class -> sorted kernels of the encoder projections of that shape (int8 for Int8Linear; a packed
    kernel for some row counts only as label() writes it)."""
    out: dict = {}
    for _, _, lin in projections(model):
        k = label(lin.kernel, lin.rows) if isinstance(lin, PackedLinear) else \
            "aten" if type(lin) is nn.Linear else "int8"
        out.setdefault(shape_class(lin), set()).add(k)
    return {s: sorted(v) for s, v in out.items()}


def packed_bytes(model: nn.Module) -> int:
    """Bytes held by the packed weight copies (beside the float Parameters, which stay)."""
    total = 0
    for _, _, lin in projections(model):
        if isinstance(lin, PackedLinear):
            p = lin.packed()
            if p is not None:
                total += packed_nbytes(lin.kernel, p, lin.weight)
    return total
