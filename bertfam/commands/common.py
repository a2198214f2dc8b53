"""Argument helpers shared by the command modules: range-checked option types and shared option groups.

A value out of range fails while argparse parses, so the user sees the usage and one `error:` line that
names the option (exit code 2) instead of a traceback from deep inside torch, or a run that silently does
nothing. Checks that need two options raise ConfigError, which the CLI prints as one line (exit code 2).
"""
from __future__ import annotations

import argparse
import math
import os
from typing import Optional


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

    def outside(self) -> list[str]:
        """Values just outside the range (as typed on a command line): what tests feed the option."""
        bad = []
        if self.lo is not None:
            step = 0 if self.lo_open else (1 if self.kind is int else 0.5)
            bad += [_fmt(self.lo - step)] + (["-5"] if -5 < self.lo - step else [])
        if self.hi is not None:
            bad.append(_fmt(self.hi + (0 if self.hi_open else (1 if self.kind is int else 0.5))))
        return bad + (["inf", "nan"] if self.kind is float else ["1.5"])

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


def add_optimization_args(p, *, epochs: float, batch_size: int, lr: float) -> None:
    """--epochs --max-steps --batch-size --lr --warmup-ratio --seed --save-every --grad-accum (TrainConfig
    fields)."""
    p.add_argument("--epochs", type=positive_float, default=epochs)
    p.add_argument("--max-steps", type=positive_int, default=None, help="optimizer steps (overrides --epochs)")
    p.add_argument("--batch-size", type=positive_int, default=batch_size)
    p.add_argument("--lr", type=positive_float, default=lr)
    p.add_argument("--warmup-ratio", type=probability, default=0.1)
    p.add_argument("--seed", type=seed, default=42)
    p.add_argument("--save-every", type=non_negative_int, default=0,
                   help="optimizer steps between checkpoints (0: end only)")
    add_grad_accum_arg(p)


CHECKPOINT_FIELDS = ("keep_last", "save_optimizer_state", "checkpoints")


def add_checkpoint_args(p, *, keep_last: int = 2) -> None:
    """--keep-last --no-optimizer-state --final-only (TrainConfig fields of the same dest names).

    A checkpoint with optimizer state is three times the model's size (AdamW keeps two moments per
    weight), so a short fine-tune can leave several times its model on disk; these trade resuming for space."""
    g = p.add_argument_group("checkpoints")
    g.add_argument("--keep-last", type=non_negative_int, default=keep_last, metavar="N",
                   help=f"checkpoints kept under OUT/checkpoints, oldest removed first (0: all; default {keep_last})")
    g.add_argument("--no-optimizer-state", dest="save_optimizer_state", action="store_false",
                   help="checkpoints hold the weights only (a third of the size); they cannot be resumed")
    g.add_argument("--final-only", dest="checkpoints", action="store_false",
                   help="write no OUT/checkpoints, only the final model (and OUT/best when dev selects one)")


def checkpoint_options(args) -> dict:
    """The checkpoint options the command has, as TrainConfig keyword arguments."""
    from ..errors import ConfigError

    opts = {k: getattr(args, k) for k in CHECKPOINT_FIELDS if getattr(args, k, None) is not None}
    if opts.get("checkpoints") is False and getattr(args, "save_every", None):
        raise ConfigError("--final-only writes no checkpoints: drop --save-every")
    return opts


def train_config(args, base=None, **fixed):
    """The run's TrainConfig: `base` (default TrainConfig()) with every option whose destination is a
    TrainConfig field (--lr -> lr, --no-progress -> progress, --final-only -> checkpoints ...; an option
    left unset or None keeps base's value), then `fixed` (what the command decides itself)."""
    import dataclasses

    from ..runners.options import TrainConfig  # the trainer's config type, as the runners nest it

    checkpoint_options(args)  # refuses --final-only with --save-every in the options' words
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    given = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return dataclasses.replace(base if base is not None else TrainConfig(), **{**given, **fixed})


def add_threads_arg(p) -> None:
    p.add_argument("--threads", type=positive_int, default=None, help="torch CPU threads (default: torch's own)")


def add_grad_accum_arg(p) -> None:
    p.add_argument("--grad-accum", type=positive_int, default=1, metavar="N",
                   help="batches per optimizer step (effective batch: N x --batch-size)")


def set_threads(args) -> None:
    if getattr(args, "threads", None):
        import torch

        torch.set_num_threads(args.threads)


# ------------------------------------------------------------------------------------ run files (--config)
RUN_FILE_HELP = ("run file (JSON or YAML) of option values, keys = option names with underscores "
                 "(e.g. max_steps); options given on the command line override it")


def read_run_file(path: str) -> dict:
    """The mapping in a JSON or YAML run file (ConfigError naming the file otherwise)."""
    from ..config import read_json
    from ..errors import ConfigError

    if not path.endswith((".yaml", ".yml")):
        return read_json(path)
    try:
        import yaml
    except ImportError:
        raise ConfigError(f"{path}: YAML run files need PyYAML (pip install pyyaml)") from None
    if not os.path.isfile(path):
        raise ConfigError(f"{path}: file not found")
    with open(path, encoding="utf-8") as f:
        try:
            d = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{path}: expected a mapping")
    return d


def add_run_config(p, func, run_config: type = None):
    """Give command `p` a --config RUN.json option; returns the command function to set as its `func`.

    Call it after every other option of `p` is added. The options' defaults become argparse.SUPPRESS, so
    after parsing the namespace holds exactly what the command line gave; RunConfig then adds the file's
    values for the other options, then the real defaults. Options argparse would require may come from
    the file, so they are checked after the merge."""
    p.add_argument("--config", default=argparse.SUPPRESS, metavar="RUN.json", help=RUN_FILE_HELP)
    return (run_config or RunConfig)(p, func)


DEFAULT_ONLY = "\x00"  # the help of an option that has none: its default alone (argparse skips empty help)


class RunConfig:
    """The command function of a command with --config: merges command line > run file > defaults."""

    def __init__(self, parser, func):
        self.parser, self.func = parser, func
        self.actions = {a.dest: a for a in parser._actions
                        if a.option_strings and a.dest not in ("help", "config")}
        self.defaults = {dest: a.default for dest, a in self.actions.items()}  # what the options mean unset
        # a key is an option's name (no_optimizer_state: true) or its destination (save_optimizer_state: false,
        # as saved run configs hold it)
        self.keys = {**{_key(o): a for a in self.actions.values() for o in a.option_strings}, **self.actions}
        self.required = [a for a in self.actions.values() if a.required]
        self.groups = [(g, g.required) for g in parser._mutually_exclusive_groups]
        for a in self.actions.values():
            d = a.default
            if a.help == DEFAULT_ONLY:
                a.help = ""
            if a.help and "%(default)s" in a.help:  # the default is about to become SUPPRESS: write it in now
                a.help = a.help.replace("%(default)s", str(d).replace("%", "%%"))
            if (d is not None and d is not argparse.SUPPRESS and not isinstance(d, bool) and a.nargs != 0
                    and "default" not in (a.help or "").lower()):  # --help still shows the real default
                a.help = (a.help + " " if a.help else "") + f"(default: {str(d).replace('%', '%%')})"
            a.default = argparse.SUPPRESS
            if a.required:
                a.required = False
                a.help = (a.help + "; " if a.help else "") + "required (here or in --config)"
            a.help = a.help or DEFAULT_ONLY  # the formatter may still find a default (config_defaults)
        for g, _ in self.groups:
            g.required = False

    def __call__(self, args):
        self.merge(args)
        return self.func(args)

    def merge(self, args) -> None:
        given = {dest for dest in self.actions if hasattr(args, dest)}
        path = getattr(args, "config", None)
        values = self.read(path) if path else {}
        for g, _ in self.groups:  # an option of an exclusive group on the command line replaces the file's
            members = {a.dest for a in g._group_actions}
            if members & given:
                values = {k: v for k, v in values.items() if k not in members}
        for dest, v in values.items():
            if dest not in given:
                setattr(args, dest, v)
        for dest, d in self.defaults.items():
            if not hasattr(args, dest) and d is not argparse.SUPPRESS:
                setattr(args, dest, d)
        self.check_required(args, path)

    def load(self, path: str) -> dict:
        """The file's mapping (a subclass may rewrite it into option keys first)."""
        return read_run_file(path)

    def read(self, path: str) -> dict:
        """The file's values, converted and range-checked as the same options on the command line are."""
        from ..errors import ConfigError

        d = {str(k).replace("-", "_"): v for k, v in self.load(path).items()}
        unknown = sorted(k for k in d if k not in self.keys)
        if unknown:
            raise ConfigError(f"{path}: unknown field(s) {', '.join(unknown)} (keys are the options of "
                              f"`{self.parser.prog}` with underscores, e.g. max_steps)")
        out = {}
        for k, v in d.items():
            a = self.keys[k]
            try:
                v = _file_value(a, v)
            except (argparse.ArgumentTypeError, TypeError, ValueError) as e:
                raise ConfigError(f"{path}: {k}: {e}") from None
            if a.nargs == 0 and k != a.dest:  # a flag by its name: true gives it, false leaves it out
                v = a.const if v else None
            if v is not None:  # null: the option's default
                out[a.dest] = v
        return out

    def check_required(self, args, path) -> None:
        from ..errors import ConfigError

        missing = [a.option_strings[-1] for a in self.required if getattr(args, a.dest, None) is None]
        if missing:
            self.parser.error(f"the following arguments are required: {', '.join(missing)}")
        for g, required in self.groups:
            have = [a.option_strings[-1] for a in g._group_actions if getattr(args, a.dest, None) is not None]
            if len(have) > 1:  # only a run file can set two: argparse refuses them on one command line
                raise ConfigError(f"{path}: {' and '.join(have)} exclude each other")
            if required and not have:
                names = " ".join(a.option_strings[-1] for a in g._group_actions)
                self.parser.error(f"one of the arguments {names} is required")


def _key(option: str) -> str:
    return option.lstrip("-").replace("-", "_")


def _file_value(action, v):
    """A run-file value through the option's own type and choices (the file holds JSON values, not text)."""
    if v is None:
        return None
    if action.nargs == 0:  # a flag (store_true / store_false): the file gives its destination's value
        if not isinstance(v, bool):
            raise TypeError(f"expected true or false, got {v!r}")
        return v
    if action.nargs in ("+", "*") or isinstance(action.nargs, int):
        items = v if isinstance(v, list) else [v]
        if isinstance(action.nargs, int) and len(items) != action.nargs:
            raise ValueError(f"expected a list of {action.nargs} values, got {v!r}")
        if action.nargs == "+" and not items:
            raise ValueError("expected at least one value")
        return [_one_value(action, x) for x in items]
    return _one_value(action, v)


def _one_value(action, v):
    if isinstance(v, (bool, list, dict)):
        raise TypeError(f"expected a single value, got {v!r}")
    x = action.type(str(v)) if action.type is not None else str(v)
    if action.choices is not None and x not in action.choices:
        raise ValueError(f"{x!r} is not one of {', '.join(map(str, action.choices))}")
    return x
