"""Run directories: whether a training command may write into one, and what it left there.

A second run into the directory of a first would retrain from scratch over it and append to its
metrics.jsonl (two curves in one file): a non-empty run directory is refused unless the run continues it
(`resume`) or replaces it (`overwrite`, transformers' `--overwrite-output-dir`), which first removes the
files a run writes (and only those: --out may name a directory that also holds other things).

Disk: the best model is kept by reference, not copied. Weights files under the run directory that hold
the same bytes as the final model (best/, the final checkpoint when the best step is the last one) become
hard links to it (`link_duplicate_weights`), and `describe_run_dir` says what was written and its size,
each file counted once.
"""
from __future__ import annotations

import filecmp
import json
import logging
import struct
import os
import shutil
from typing import Optional, Union

from ..errors import ConfigError

log = logging.getLogger("bertfam")
# what a training run writes into its directory (the final model's files are replaced by the new run's)
RUN_FILES = ("metrics.jsonl", "checkpoints", "best", "tensorboard", "eval_results.json", "training_info.json",
             "pretrain_config.json", "dev_predictions.tsv", "dev_predictions.jsonl", "model.safetensors",
             "config.json", "mrc_train_summary.json", "dev_heldout.json")
WEIGHTS = "model.safetensors"
SHARED_FILES = (WEIGHTS, "tokenizer.json", "vocab.txt", "tokenizer_config.json")  # what best/ and checkpoints repeat


def prepare_run_dir(out: str, resume: Union[bool, str, None] = None, overwrite: bool = False,
                    source: Optional[str] = None) -> None:
    """Refuse (ConfigError, one line) what would mix two runs in `out`: a non-empty `out` without
    resume/overwrite, a resume of a directory that does not exist. overwrite: remove the run files first
    (never those of `source`, the model the run starts from)."""
    if resume:
        path = out if resume is True else resume
        if not os.path.isdir(path):
            raise ConfigError(f"--resume: {path}: not found (no run directory to continue; drop --resume to "
                              "start a new run)")
        return
    if os.path.exists(out) and not os.path.isdir(out):
        raise ConfigError(f"--out {out}: exists and is not a directory")
    held = sorted(n for n in os.listdir(out)) if os.path.isdir(out) else []
    if not held:
        return
    if not overwrite:
        shown = ", ".join(held[:4]) + (", ..." if len(held) > 4 else "")
        raise ConfigError(f"--out {out}: not empty ({shown}); give --resume to continue its run, "
                          "--overwrite-output-dir to replace it, or another --out")
    if source and os.path.isdir(source) and os.path.samefile(source, out):
        raise ConfigError(f"--out {out} is the model it starts from (--model/--init); write the run elsewhere")
    for name in RUN_FILES:
        p = os.path.join(out, name)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
    log.info("%s: the earlier run's files removed (--overwrite-output-dir)", out)


def link_duplicate_weights(out: str) -> list[str]:
    """Make every weights or tokenizer file under out (best/, checkpoints/step-N/) that holds the same
    content as out's own a hard link to it; returns the files linked. Where the filesystem has no hard
    links the copy stays (same content either way)."""
    dirs = [os.path.join(out, "best")]
    ck = os.path.join(out, "checkpoints")
    if os.path.isdir(ck):
        dirs += [os.path.join(ck, d) for d in sorted(os.listdir(ck))]
    linked = []
    for d in dirs:
        for name in SHARED_FILES:
            c, final = os.path.join(d, name), os.path.join(out, name)
            if not (os.path.isfile(c) and os.path.isfile(final)) or os.path.samefile(c, final):
                continue
            same = same_weights(c, final) if name == WEIGHTS else filecmp.cmp(c, final, shallow=False)
            if same and _link(final, c):
                linked.append(c)
    return linked


def _link(src: str, dst: str) -> bool:
    tmp = dst + ".link.tmp"
    try:
        os.link(src, tmp)
        os.replace(tmp, dst)  # dst is whole throughout: the copy, then the link
        return True
    except OSError:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        return False


def same_weights(a: str, b: str, chunk: int = 1 << 22) -> bool:
    """Two safetensors files hold the same tensors: the same header (as JSON: its metadata's key order may
    differ between writes) and the same data bytes."""
    if os.path.getsize(a) != os.path.getsize(b):
        return False
    with open(a, "rb") as fa, open(b, "rb") as fb:
        heads = []
        for f in (fa, fb):
            n = struct.unpack("<Q", f.read(8))[0]
            try:
                heads.append(json.loads(f.read(n)))
            except ValueError:
                return False
        if heads[0] != heads[1]:
            return False
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def disk_usage(path: str, seen: Optional[set] = None) -> int:
    """Bytes under path, each file (inode) counted once: hard links are not counted twice, nor files in
    `seen` (inodes counted already; updated)."""
    seen = set() if seen is None else seen
    total = 0
    for d, _, files in os.walk(path):
        for f in files:
            st = os.lstat(os.path.join(d, f))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def describe_run_dir(out: str) -> str:
    """One line: what the run wrote and its size, each file counted once (best/ and checkpoints/ count
    only what they do not share with the model), e.g. `wrote runs/x (52.1 MB in all): model 12.7 MB;
    best/ = the model (linked, no copy); checkpoints/ step-2, step-4 39.0 MB more`."""
    seen: set = set()
    for f in os.listdir(out):
        p = os.path.join(out, f)
        if os.path.isfile(p):
            st = os.lstat(p)
            seen.add((st.st_dev, st.st_ino))
    parts = []
    final = os.path.join(out, WEIGHTS)
    if os.path.isfile(final):
        parts.append(f"model {_size(os.path.getsize(final))}")
    best = os.path.join(out, "best")
    if os.path.isfile(os.path.join(best, WEIGHTS)):
        linked = os.path.isfile(final) and os.path.samefile(os.path.join(best, WEIGHTS), final)
        more = disk_usage(best, seen)
        parts.append("best/ = the model (linked, no copy)" if linked else f"best/ {_size(more)}")
    ck = os.path.join(out, "checkpoints")
    if os.path.isdir(ck) and os.listdir(ck):
        steps = sorted((d for d in os.listdir(ck) if d.startswith("step-")),
                       key=lambda d: int(d[5:]) if d[5:].isdigit() else -1)
        parts.append(f"checkpoints/ {', '.join(steps)} {_size(disk_usage(ck, seen))} more")
    return f"wrote {out} ({_size(disk_usage(out))} in all): " + "; ".join(parts)
