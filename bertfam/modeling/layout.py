"""Padded or packed: the batch layout, decided once per forward, and the encoder output that knows it.

A batch runs padded ((B, T, H), attention masked) or packed ((N, H), its N real tokens; see varlen.py).
One setting says which, `packing` (PACKING): per model (`BertfamModel.packing`, "auto" unless set) or per
call (`packing=`, the same values, for that call only):
- "auto":    packed wherever that gives the padded numbers, with the attention kernel chosen for the
             device (varlen.default_kernel);
- a kernel (varlen.ATTENTION_KERNELS: "loop", "njt", "pad", "block"): as "auto", with that kernel (to
             measure or compare kernels; benchmarks/varlen_kernels.py);
- "padded":  always padded (the reference path, e.g. to compare against or to match an exported graph).
`choose_layout` is the one place that decides; `EncoderOutput` carries the final hidden states with their
packing plan and gives heads what they need (per-token states, the first token, rows at chosen positions,
a re-padded copy), so no head branches on the layout.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..errors import ConfigError
from .pooling import mean_pool
from .varlen import ATTENTION_KERNELS, Packed, default_kernel, pack_info, repad, unpad

PACKING = ("auto", "padded", *ATTENTION_KERNELS)


def check_packing(packing: str) -> str:
    """`packing` if it is one of PACKING, else a ConfigError naming the setting and its values."""
    if packing not in PACKING:
        raise ConfigError(f"packing {packing!r} not in {', '.join(PACKING)}")
    return packing


class NotASetting:
    """A class attribute that refuses to be set, naming the setting to use: `model.packed = False` would
    otherwise make a plain attribute that nothing reads, and the model would stay packed silently. Reading it
    raises AttributeError too (nn.Module then reports the attribute as missing)."""

    def __init__(self, use: str):
        self.use = use

    def __set_name__(self, owner, name: str) -> None:
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        raise AttributeError(f"model.{self.name} is not a setting: {self.use}")

    def __set__(self, obj, value) -> None:
        raise AttributeError(f"model.{self.name} is not a setting: {self.use}")


PACKED_IS_NOT_A_SETTING = "set model.packing (" + ", ".join(PACKING) + ")"


def tracing() -> bool:
    """Export, compile or jit tracing: one static graph, so no data-dependent layout choice."""
    return (torch.compiler.is_compiling() or torch.compiler.is_exporting() or torch.jit.is_tracing()
            or torch.onnx.is_in_onnx_export())


def choose_layout(attention_mask: Optional[torch.Tensor], packing: str, all_layers: bool = False,
                  head_needs_padding: Optional[Callable[[torch.Tensor], bool]] = None
                  ) -> tuple[Optional[torch.Tensor], Optional[Packed]]:
    """(attention mask, plan): a `Packed` plan to run packed, or None to run padded with the returned mask
    (None where nothing is padded: unmasked attention gives the same numbers, faster).

    Packed only where it gives the padded numbers on real tokens: `packing` is not "padded", a (B, T) mask with
    padding whose first column is real (the pooler reads position 0), no per-layer outputs (`all_layers`:
    hidden states or attentions, exact at every position only padded), and no head target on padding
    (`head_needs_padding` gets the (B, T) bool padding mask)."""
    if tracing():
        return attention_mask, None
    if attention_mask is None or attention_mask.dim() != 2:  # none, or a (B, T, T) visibility matrix
        return attention_mask, None
    if bool(attention_mask.all()):
        return None, None
    if packing == "padded" or all_layers or not bool(attention_mask[:, 0].all()):
        return attention_mask, None
    if head_needs_padding is not None and head_needs_padding(~attention_mask.bool()):
        return attention_mask, None
    kernel = default_kernel(attention_mask.device) if packing == "auto" else packing
    return attention_mask, pack_info(attention_mask, kernel)


@dataclass
class EncoderOutput:
    """The encoder's final hidden states in the layout the batch ran in, plus what the backbone returns."""

    states: torch.Tensor  # (N, H) packed or (B, T, H) padded
    pooled: torch.Tensor  # (B, H) pooler output
    plan: Optional[Packed] = None  # None: padded
    hidden_states: Optional[list] = None  # L+1 tensors (B, T, H); only padded
    attentions: Optional[list] = None  # (B, heads, T, T) per layer; only padded
    embedding_output: Optional[torch.Tensor] = None  # (B, T, H); only padded
    mask: Optional[torch.Tensor] = None  # (B, T) real tokens of a padded batch; None: all are (or packed)

    @property
    def packed(self) -> bool:
        return self.plan is not None

    def tokens(self) -> torch.Tensor:
        """Per-token states in the layout's own shape, (N, H) or (B, T, H): apply a token-wise module to
        them, then `repad` its result and `align` the targets; both layouts then look alike."""
        return self.states

    def first(self) -> torch.Tensor:
        """(B, H) state of each sequence's first token ([CLS])."""
        return self.states.index_select(0, self.plan.first) if self.plan is not None else self.states[:, 0]

    def mean(self) -> torch.Tensor:
        """(B, H) mean of each sequence's real-token states (the sentence embedding of e5 and
        sentence-transformers), the same numbers in both layouts."""
        if self.plan is not None:
            lengths = torch.as_tensor(self.plan.lengths, device=self.states.device)  # (B,)
            seq = torch.repeat_interleave(torch.arange(self.plan.batch, device=self.states.device), lengths)  # (N,)
            total = self.states.new_zeros(self.plan.batch, self.states.shape[-1]).index_add_(0, seq, self.states)
            return total / lengths.clamp(min=1)[:, None].to(total.dtype)
        return mean_pool(self.states, self.mask)

    def at(self, positions: torch.Tensor) -> torch.Tensor:
        """(M, H) states where the (B, T) bool mask is True, in row-major order in both layouts."""
        return self.states[unpad(positions, self.plan)] if self.plan is not None else self.states[positions]

    def padded(self) -> torch.Tensor:
        """(B, T, H), zeros at padding positions when packed."""
        return self.repad(self.states)

    def repad(self, x: torch.Tensor) -> torch.Tensor:
        """A per-token result of `tokens()`, (N, ...) or (B, T, ...), as (B, T, ...)."""
        return repad(x, self.plan) if self.plan is not None else x

    def align(self, targets: torch.Tensor) -> torch.Tensor:
        """(B, T, ...) per-token targets in the layout of `tokens()`: (N, ...) or (B, T, ...)."""
        return unpad(targets, self.plan) if self.plan is not None else targets
