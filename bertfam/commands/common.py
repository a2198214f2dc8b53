"""Argument helpers shared by the command modules: range-checked option types and shared option groups
(the trainer's, as `Flag` tables of TrainConfig fields for the commands whose options `flags.Flags` makes).

A value out of range fails while argparse parses, so the user sees the usage and one `error:` line that
names the option (exit code 2) instead of a traceback from deep inside torch, or a run that silently does
nothing. Checks that need two options raise ConfigError, which the CLI prints as one line (exit code 2).
"""
from __future__ import annotations

import argparse
import math
from typing import Optional

from .flags import Flag


class NumberRange:
    """Parse an int or float and accept it only within [lo, hi] (an end may be open or absent)."""

    def __init__(self, kind: type, lo: Optional[float] = None, hi: Optional[float] = None, *,
                 lo_open: bool = False, hi_open: bool = False):
        self.kind, self.lo, self.hi, self.lo_open, self.hi_open = kind, lo, hi, lo_open, hi_open
        self.__name__ = kind.__name__  # argparse names the type by it in some messages

    def __call__(self, s: str):
        try:
            v = self.kind(s)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {s!r}") from None
        if not self.contains(v):
            raise argparse.ArgumentTypeError(f"must be {self.describe()}, got {s}")
        return v

    def contains(self, v) -> bool:
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            return False
        return self.hi is None or (v < self.hi if self.hi_open else v <= self.hi)

    def describe(self) -> str:
        what = "an integer" if self.kind is int else "a number"
        lo, hi = _fmt(self.lo), _fmt(self.hi)
        if self.lo is not None and self.hi is not None:
            return f"{what} in {'(' if self.lo_open else '['}{lo}, {hi}{')' if self.hi_open else ']'}"
        if self.lo is not None:
            return f"{what} {'>' if self.lo_open else '>='} {lo}"
        if self.hi is not None:
            return f"{what} {'<' if self.hi_open else '<='} {hi}"
        return what

    def __repr__(self) -> str:
        return f"NumberRange({self.describe()})"


def _fmt(v) -> str:
    """1 rather than 1.0, and 4294967295 rather than 4.29497e+09."""
    return str(int(v)) if v is not None and float(v).is_integer() else str(v)


def int_range(lo: Optional[int] = None, hi: Optional[int] = None) -> NumberRange:
    return NumberRange(int, lo, hi)


def float_range(lo: Optional[float] = None, hi: Optional[float] = None, *, lo_open: bool = False,
                hi_open: bool = False) -> NumberRange:
    return NumberRange(float, lo, hi, lo_open=lo_open, hi_open=hi_open)


positive_int = int_range(1)  # steps, epochs' counts, batch sizes, lengths, sizes, threads
non_negative_int = int_range(0)  # strides, "every N" options where 0 means never / end only
positive_float = float_range(0, lo_open=True)  # learning rates, epochs, temperatures, timeouts
non_negative_float = float_range(0)  # weight decay, tolerances, waits
probability = float_range(0, 1)  # warm-up ratio, replacement and mismatch probabilities
open_fraction = float_range(0, 1, lo_open=True, hi_open=True)  # mask rates, dev ratios: neither none nor all
seed = int_range(0, 2 ** 32 - 1)  # numpy's generators reject negative seeds
tcp_port = int_range(1, 65535)


def require_smaller(args, small: str, large: str, why: str = "") -> None:
    """ConfigError unless args.<small> < args.<large>; options left unset (None) are not compared."""
    from ..errors import ConfigError

    a, b = getattr(args, small, None), getattr(args, large, None)
    if a is not None and b is not None and not a < b:
        raise ConfigError(f"{_flag(small)} {a} must be smaller than {_flag(large)} {b}"
                          + (f" ({why})" if why else ""))


def check_window(args, length: str = "max_length", stride: str = "doc_stride") -> None:
    """Overlapping windows: each window must advance, so the overlap must be shorter than the window."""
    require_smaller(args, stride, length, "consecutive windows overlap by the stride")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


PRECISIONS = ("auto", "fp32", "bf16", "fp16")
GRAD_ACCUM_HELP = "batches per optimizer step (effective batch: N x --batch-size)"

# the optimization options of a run config with a nested `train: TrainConfig` (defaults: the run's own)
OPTIMIZATION_FLAGS = {
    "train.epochs": Flag(positive_float),
    "train.max_steps": Flag(positive_int, "optimizer steps (overrides --epochs)"),
    "train.batch_size": Flag(positive_int),
    "train.lr": Flag(positive_float),
    "train.warmup_ratio": Flag(probability),
    "train.seed": Flag(seed),
    "train.save_every": Flag(non_negative_int, "optimizer steps between checkpoints (0: end only)"),
    "train.grad_accum": Flag(positive_int, GRAD_ACCUM_HELP, metavar="N"),
}

KEEP_LAST_HELP = "checkpoints kept under OUT/checkpoints, oldest removed first (0: all; default {})"
LEAN_HELP = "checkpoints hold the weights only (a third of the size); they cannot be resumed"
FINAL_ONLY_HELP = "write no OUT/checkpoints, only the final model (and OUT/best when dev selects one)"
# what a run's checkpoints keep, for an argument group "checkpoints": a checkpoint with optimizer state is three
# times the model's size (AdamW keeps two moments per weight), so a short fine-tune can leave several times its
# model on disk; these trade resuming for space
CHECKPOINT_FLAGS = {
    "train.keep_last": Flag(non_negative_int, KEEP_LAST_HELP.format("%(default)s"), metavar="N"),
    "train.save_optimizer_state": Flag(help=LEAN_HELP, name="--no-optimizer-state"),
    "train.checkpoints": Flag(help=FINAL_ONLY_HELP, name="--final-only"),
}


def check_checkpoints(args) -> None:
    """--final-only with --save-every, refused in the options' words (TrainConfig.validate names its fields)."""
    from ..errors import ConfigError

    if getattr(args, "checkpoints", None) is False and getattr(args, "save_every", None):
        raise ConfigError("--final-only writes no checkpoints: drop --save-every")


def train_config(args, base=None, **fixed):
    """The run's TrainConfig: `base` (default TrainConfig()) with every option whose destination is a
    TrainConfig field (--lr -> lr, --no-progress -> progress, --final-only -> checkpoints ...; an option
    left unset or None keeps base's value), then `fixed` (what the command decides itself)."""
    import dataclasses

    from ..runners.options import TrainConfig  # the trainer's config type, as the runners nest it

    check_checkpoints(args)
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return dataclasses.replace(base if base is not None else TrainConfig(), **{**given, **fixed})


def add_threads_arg(p) -> None:
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's own)")


def set_threads(args) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)
