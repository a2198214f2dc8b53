"""A run's configuration: the run's own fields plus one nested `train: TrainConfig` (the trainer's fields).

Every run config (PretrainConfig, FinetuneRunConfig ...) mixes in `RunOptions`, so it reads the same mappings:
nested ones (`{..., "train": {...}}`, what `to_dict` writes, e.g. RUN/pretrain_config.json) and flat ones
(the trainer's fields at the top level: older run configs, keyword arguments, the commands' options).
"""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..errors import ConfigError
from ..training import TrainConfig

TRAIN_FIELDS = frozenset(f.name for f in dataclasses.fields(TrainConfig))


class RunOptions:
    """Mixin of a run-config dataclass whose field `train` is a TrainConfig.

    TRAIN_DEFAULTS: the run's trainer defaults where they differ from TrainConfig's (`default_train`).
    TRAIN_ALIASES: flat name -> TrainConfig field, where the run's options name a trainer field otherwise
    (pretrain's `out` is the trainer's `out_dir`)."""

    TRAIN_DEFAULTS: ClassVar[dict] = {}
    TRAIN_ALIASES: ClassVar[dict] = {}

    @classmethod
    def default_train(cls, **kw) -> TrainConfig:
        """A TrainConfig with this run's defaults, `kw` over them."""
        return TrainConfig(**{**cls.TRAIN_DEFAULTS, **kw})

    @classmethod
    def from_dict(cls, d: dict, source: str = "run config"):
        """The run config of a nested or a flat mapping (flat trainer fields win over the `train` section's;
        both over the run's defaults). ConfigError naming `source` for a key that is no field, or a field
        without a default that the mapping leaves out."""
        own = {f.name for f in dataclasses.fields(cls)} - {"train"}
        d = dict(d)
        nested = d.pop("train", None)
        if isinstance(nested, TrainConfig):
            nested = dataclasses.asdict(nested)
        if nested is not None and not isinstance(nested, dict):
            raise ConfigError(f"{source}: train must be a mapping of trainer fields, got {nested!r}")
        train, kw, unknown = dict(cls.TRAIN_DEFAULTS), {}, []
        for k, v in (nested or {}).items():
            if k in TRAIN_FIELDS:
                train[k] = v
            else:
                unknown.append(f"train.{k}")
        for k, v in d.items():
            if k in own:
                kw[k] = v
            elif k in cls.TRAIN_ALIASES or k in TRAIN_FIELDS:
                train[cls.TRAIN_ALIASES.get(k, k)] = v
            else:
                unknown.append(k)
        if unknown:
            raise ConfigError(f"{source}: unknown field(s) {', '.join(sorted(unknown))}")
        missing = [f.name for f in dataclasses.fields(cls) if f.name not in kw and f.name != "train"
                   and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
        if missing:  # the dataclass would raise a TypeError naming its __init__
            raise ConfigError(f"{source}: missing field(s) {', '.join(missing)}")
        return cls(**kw, train=TrainConfig(**train))

    def to_dict(self) -> dict:
        """The nested mapping (JSON values: sequences become lists), as `from_dict` reads it back."""
        return _json_values(dataclasses.asdict(self))

    @classmethod
    def flatten(cls, d: dict) -> dict:
        """A nested mapping with its `train` section moved to the top level under the run's flat names (the
        commands' option names); a key already at the top level wins."""
        d = dict(d)
        nested = d.pop("train") if isinstance(d.get("train"), dict) else {}
        flat_name = {field: name for name, field in cls.TRAIN_ALIASES.items()}
        for k, v in nested.items():
            d.setdefault(flat_name.get(k, k), v)
        return d


def _json_values(v):
    if isinstance(v, dict):
        return {k: _json_values(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_values(x) for x in v]
    return v
