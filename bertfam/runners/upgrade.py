"""`bertfam upgrade`: files that older versions wrote, rewritten into the current format, so that the
loaders read one format only (an older file is a ConfigError saying `run: bertfam upgrade DIR`).

What is older, and what it becomes:
- a checkpoint's config.json with `head.extra` (before the typed task settings): its MRC keys (span heads)
  go to `head.mrc`, a fine-tuning record (it has a "task") to `head.finetune`, the rest (provenance, demo
  bookkeeping) to training_info.json beside it (what that file holds already wins);
- a run directory's pretrain_config.json in the flat layout (the trainer's fields beside the run's) or with
  a retired field (`runners.pretrain.RETIRED_FIELDS`): the nested layout the run writes, without it;
- a run file (--config RUN.json / .yaml) with a retired field: the same file without it;
- a multimodal run config in the nested layout (`to_dict()`: the run's fields + "train") with `seed` beside
  its train section (`runners.multimodal.MOVED_TO_TRAIN`): the seed moved to train.seed, the one seed of the
  run (a flat run file's `seed` is the `--seed` option, train.seed already).

A directory is searched recursively (checkpoints under RUN/checkpoints and RUN/best included) for
config.json and pretrain_config.json; a run file of another name is upgraded when named itself. Every file
is rewritten atomically (a temporary file renamed over it, with the umask's mode); one that is current is
left untouched, so upgrading twice changes nothing the second time.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from ..config import (TRAINING_INFO_FILE, FinetuneSettings, ModelConfig, MRCSettings, read_json, read_run_file,
                      read_training_info)
from ..errors import ConfigError
from ..utils import atomic_write_text
from .multimodal import MOVED_TO_TRAIN
from .pretrain import RETIRED_FIELDS, RUN_CONFIG_FILE, PretrainConfig, old_run_config, write_run_config

MODEL_CONFIG_FILE = "config.json"
UP_TO_DATE = "up to date"
_MRC_KEYS = tuple(f.name for f in dataclasses.fields(MRCSettings))
_FINETUNE_KEYS = ("task", "kind", "max_length", "kg", "custom")


@dataclass
class UpgradeConfig:
    """The model or run directories (searched recursively) and run files to upgrade."""

    paths: Sequence[str]


def run_upgrade(cfg: UpgradeConfig) -> list[tuple[str, str]]:
    """Upgrade every file of `cfg.paths`; returns (file, what was rewritten, or UP_TO_DATE) per file, in order.
    Every path is checked before any file is rewritten (ConfigError: a path that is not there, a directory
    without a model or run file)."""
    files = [f for p in cfg.paths for f in _files(p)]
    return [(path, _upgrade(path) or UP_TO_DATE) for path in files]


def _files(path: str) -> list[str]:
    if os.path.isfile(path):
        return [path]
    if not os.path.isdir(path):
        raise ConfigError(f"{path}: not found")
    found = []
    for d, subdirs, names in os.walk(path):
        subdirs.sort()
        found += [os.path.join(d, n) for n in sorted(names) if n in (MODEL_CONFIG_FILE, RUN_CONFIG_FILE)]
    if not found:
        raise ConfigError(f"{path}: no {MODEL_CONFIG_FILE} or {RUN_CONFIG_FILE} under it (not a model or run "
                          "directory)")
    return found


def _upgrade(path: str) -> Optional[str]:
    name = os.path.basename(path)
    if name == MODEL_CONFIG_FILE:
        return upgrade_model_config(path)
    if name == RUN_CONFIG_FILE:
        return upgrade_saved_run_config(path)
    return upgrade_run_file(path)


# ---------------------------------------------------------------- checkpoints
def upgrade_model_config(path: str) -> Optional[str]:
    """Rewrite a config.json whose head holds the old `extra`; None when there is nothing to do (a current
    or a Hugging Face config.json)."""
    d = read_json(path)
    head = d.get("head")
    if not (isinstance(head, dict) and "extra" in head):
        return None
    head = dict(head)
    fields = typed_head_fields(head.get("task"), head.pop("extra"), f"{path}: head")
    info = fields.pop("info", {})
    head.update({k: dataclasses.asdict(v) for k, v in fields.items()})
    cfg = ModelConfig.from_dict({**d, "head": head}, source=path)  # what is written must load
    model_dir = os.path.dirname(os.path.abspath(path))
    kept = read_training_info(model_dir)
    merged = {**info, **kept}
    # training_info.json first: a run stopped between the two files leaves head.extra to upgrade again
    if merged != kept:
        atomic_write_text(os.path.join(model_dir, TRAINING_INFO_FILE),
                          json.dumps(merged, indent=2, ensure_ascii=False, default=str) + "\n")
    atomic_write_text(path, json.dumps(cfg.to_dict(), indent=2, ensure_ascii=False) + "\n")
    moved = [f"head.{k}" for k in fields] + ([TRAINING_INFO_FILE] if info else [])
    return f"head.extra moved to {', '.join(moved) or 'nothing (it was empty)'}"


def typed_head_fields(task: Optional[str], extra: Any, where: str = "head") -> dict:
    """HeadConfig fields of an old `head.extra` mapping: the MRC keys of a span head -> `mrc` (MRCSettings),
    the fine-tuning record (it has a "task") -> `finetune` (FinetuneSettings), the rest -> `info`."""
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise ConfigError(f"{where}: extra must be a mapping, got {extra!r}")
    rest = dict(extra)
    out: dict = {}
    try:
        if task == "span":
            mrc = {k: rest.pop(k) for k in _MRC_KEYS if k in rest}
            if mrc:
                out["mrc"] = MRCSettings.from_dict(mrc)
        if rest.get("task"):
            ft = {k: rest.pop(k) for k in _FINETUNE_KEYS if k in rest}
            if not ft.get("custom"):
                ft["custom"] = None  # an old token-kind custom task recorded {}
            out["finetune"] = FinetuneSettings.from_dict(ft)
    except ConfigError as e:
        raise ConfigError(f"{where.split(': ')[0]}: {e} (read from the old head.extra)") from None
    if rest:
        out["info"] = rest
    return out


# ---------------------------------------------------------------- run configs
def upgrade_saved_run_config(path: str) -> Optional[str]:
    """Rewrite a run directory's pretrain_config.json of an older layout as the run writes it now."""
    d = read_json(path)
    old = old_run_config(d)
    if old is None:
        return None
    write_run_config(PretrainConfig.from_dict(_without_retired(d), source=path), path)
    done = [f"removed retired field(s) {', '.join(retired)}"] if (retired := _retired(d)) else []
    if not isinstance(d.get("train"), dict):
        done.append("nested the trainer's fields in a train section")
    return "; ".join(done)


def upgrade_run_file(path: str) -> Optional[str]:
    """Rewrite a run file (JSON or YAML) holding a retired field without it, or one holding a field beside its
    train section that the train section holds now with that field moved (a YAML file is written by PyYAML:
    its comments are not kept)."""
    d = read_run_file(path)
    retired, moved = _retired(d), _moved(d)
    if not retired and not moved:
        return None
    new = _moved_into_train(_without_retired(d), moved)
    if path.endswith((".yaml", ".yml")):
        import yaml

        atomic_write_text(path, yaml.safe_dump(new, sort_keys=False, allow_unicode=True))
    else:
        atomic_write_text(path, json.dumps(new, indent=2, ensure_ascii=False) + "\n")
    done = [f"removed retired field(s) {', '.join(retired)}"] if retired else []
    return "; ".join(done + [f"moved {k} into train.{k}" for k in moved])


def _moved(d: dict) -> list[str]:
    """The fields of MOVED_TO_TRAIN beside a train section (a flat run file has none: its `seed` is the
    option that sets train.seed)."""
    return [k for k in MOVED_TO_TRAIN if k in d and isinstance(d.get("train"), dict)]


def _moved_into_train(d: dict, moved: list[str]) -> dict:
    """d with each of `moved` in its train section; its value wins over the section's, as it did when a run
    was started (`--seed` set the trainer's seed too)."""
    d = dict(d)
    if moved:
        d["train"] = {**d["train"], **{k: d.pop(k) for k in moved}}
    return d


def _retired(d: dict) -> list[str]:
    train = d.get("train") if isinstance(d.get("train"), dict) else {}
    return [k for k in RETIRED_FIELDS if k in d or k in train]


def _without_retired(d: dict) -> dict:
    d = {k: v for k, v in d.items() if k not in RETIRED_FIELDS}
    if isinstance(d.get("train"), dict):
        d["train"] = {k: v for k, v in d["train"].items() if k not in RETIRED_FIELDS}
    return d
