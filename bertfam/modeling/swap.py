"""Module replacement, as torch's own quantization swaps modules: a new module goes where the old one sat.

`rebuilt_as(old, cls)` makes a `cls` instance that holds `old`'s state: the same child modules, parameters
and buffers (the objects themselves), its hooks and plain attributes, in copies of `old`'s registries, so
the state-dict names, the weights and an optimizer's references carry over and `old` is left as it was
(its class included). `swap_modules(model, kind)` puts such a module in every parent that held the old one
(`setattr`; a ModuleList by its index name), bottom-up, and re-points the heads (modeling/heads.py: plain
objects that name their weight modules) at the new ones. optimize.py (buffer-reusing encoders and layers)
and int8.py (the int8 MLM predictor) swap with these.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional

from torch import nn

from .heads import Head


def rebuilt_as(old: nn.Module, cls: type, drop: Iterable[str] = ()) -> nn.Module:
    """A new `cls` module with `old`'s children, parameters, buffers, hooks and attributes (the same objects;
    the registries themselves copied, so changing one module later leaves the other alone). `drop`: instance
    attributes not to carry over (e.g. methods bound to `old`)."""
    new = cls.__new__(cls)
    skip = set(drop)
    for k, v in vars(old).items():
        if k not in skip:
            new.__dict__[k] = v.copy() if isinstance(v, (dict, set, list)) else v
    return new


def swap_modules(model: nn.Module, kind: Callable[[nn.Module], Optional[type]]) -> nn.Module:
    """Replace every submodule `m` of `model` for which `kind(m)` names a class by `rebuilt_as(m, kind(m))`,
    in every parent holding it (a shared module is rebuilt once). Children go before their parents, so a
    rebuilt parent holds the rebuilt children. Returns `model`, or its replacement when `model` itself is
    one (a module cannot replace itself in place)."""
    order = list(model.modules())[::-1]  # reversed pre-order: every module after its descendants
    new: dict = {}  # id(old) -> its replacement

    def replacement(m: nn.Module) -> nn.Module:
        if id(m) not in new:
            cls = kind(m)
            new[id(m)] = rebuilt_as(m, cls) if cls is not None and cls is not type(m) else m
        return new[id(m)]

    for parent in order:
        for name, child in list(parent._modules.items()):
            if child is not None and replacement(child) is not child:
                setattr(parent, name, replacement(child))
    for m in replacement(model).modules():
        for v in list(vars(m).values()):
            if isinstance(v, Head):
                _repoint(v, new)
    return replacement(model)


def _repoint(head: Head, new: dict) -> None:
    """A head's parts (and the attributes naming them) to their replacements."""
    for name, part in list(head.parts.items()):
        head.parts[name] = new.get(id(part), part)
    for k, v in list(vars(head).items()):
        if isinstance(v, nn.Module) and id(v) in new:
            setattr(head, k, new[id(v)])
