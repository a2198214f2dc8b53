"""Manifests and feature files.

A feature directory holds `manifest.jsonl` (JSON lines) and the files it names:

    {"id": "img-1", "text": "a dog on a sofa", "features": "img-1.npz"}
    {"id": "q-7", "passage": "...", "answer": {"text": "blue", "start": 12}, "audio": "q-7.wav"}

`features`: a `.npy` array (N, D) or a `.npz` archive with `features` (N, D), optional `boxes`
(N, 4|5) and optional `id` (must equal the manifest id). `audio`: a WAV file turned into log-mel frames.
Paths are relative to the manifest's folder. A record with a problem (bad JSON, missing field or file,
wrong dimension, NaN/Inf, id mismatch, duplicate id, empty audio) is reported with its line and id and
skipped; only a manifest with no usable record raises DataError.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import numpy as np

from ..errors import DataError

log = logging.getLogger("bertfam")
MANIFEST = "manifest.jsonl"
MAX_SHOWN = 20  # problems kept verbatim; all are counted


@dataclass
class Record:
    id: str
    line: int
    features: np.ndarray  # (N, D) float32
    boxes: Optional[np.ndarray] = None  # (N, 4|5) float32
    fields: dict = field(default_factory=dict)  # the manifest record (text, passage, answer, label ...)

    @property
    def text(self) -> str:
        return self.fields.get("text", "")


@dataclass
class LoadReport:
    source: str
    total: int = 0
    kept: int = 0
    problems: list = field(default_factory=list)  # (line, id, reason)
    notes: list = field(default_factory=list)  # kept records that were changed (resampled, cut)

    def skip(self, line: int, rid: Any, reason: str) -> None:
        self.problems.append((line, rid, reason))
        if len(self.problems) <= MAX_SHOWN:
            log.warning("%s:%d (id %s): %s -- record skipped", self.source, line, rid, reason)

    def note(self, line: int, rid: Any, what: str) -> None:
        self.notes.append((line, rid, what))

    @property
    def skipped(self) -> int:
        return len(self.problems)

    def summary(self) -> str:
        s = f"{self.source}: {self.kept} of {self.total} records kept, {self.skipped} skipped"
        if self.problems:
            shown = "; ".join(f"line {ln} (id {rid}): {r}" for ln, rid, r in self.problems[:3])
            s += f" ({shown}{'; ...' if self.skipped > 3 else ''})"
        if self.notes:
            s += f"; {len(self.notes)} changed (e.g. line {self.notes[0][0]}: {self.notes[0][2]})"
        return s

    def to_dict(self) -> dict:
        return {"source": self.source, "total": self.total, "kept": self.kept, "skipped": self.skipped,
                "problems": [{"line": ln, "id": rid, "reason": r} for ln, rid, r in self.problems],
                "notes": [{"line": ln, "id": rid, "what": w} for ln, rid, w in self.notes]}


def manifest_path(features_dir: str, manifest: Optional[str] = None) -> str:
    p = manifest or os.path.join(features_dir, MANIFEST)
    if os.path.isdir(p):
        p = os.path.join(p, MANIFEST)
    if not os.path.isfile(p):
        raise DataError(f"{p}: manifest not found (JSON lines with id, text and a features/audio path)")
    return p


def check_array(a: Any, what: str, dim: Optional[int] = None, cols: tuple = ()) -> np.ndarray:
    """A finite float32 (N, D) array, else ValueError naming the problem."""
    a = np.asarray(a)
    if a.dtype == object or not (np.issubdtype(a.dtype, np.number) or a.dtype == bool):
        raise ValueError(f"{what} is not numeric (dtype {a.dtype})")
    if a.ndim == 1:
        a = a[None, :]  # one vector (a clip / a global image feature)
    if a.ndim != 2:
        raise ValueError(f"{what} must be 2-D (N, D), got shape {a.shape}")
    if a.shape[0] == 0:
        raise ValueError(f"{what} is empty (0 vectors)")
    if dim is not None and a.shape[1] != dim:
        raise ValueError(f"{what} has dimension {a.shape[1]}, expected {dim}")
    if cols and a.shape[1] not in cols:
        raise ValueError(f"{what} must have {' or '.join(map(str, cols))} columns, got {a.shape[1]}")
    a = a.astype(np.float32)
    bad = ~np.isfinite(a)
    if bad.any():
        r, c = np.argwhere(bad)[0]
        raise ValueError(f"{what} holds {int(bad.sum())} NaN/Inf value(s) (first at row {r}, column {c})")
    return a


def read_feature_file(path: str, rid: str, dim: Optional[int]) -> tuple[np.ndarray, Optional[np.ndarray]]:
    """(features (N, D), boxes or None) of a .npy / .npz file; ValueError on any problem."""
    if not os.path.isfile(path):
        raise ValueError(f"feature file {path} not found")
    try:
        z = np.load(path, allow_pickle=False)
    except Exception as e:  # numpy raises ValueError / OSError / zipfile errors on bad files
        raise ValueError(f"cannot read {path} ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    boxes = None
    if isinstance(z, np.lib.npyio.NpzFile):
        with z:
            keys = list(z.keys())
            key = "features" if "features" in keys else (keys[0] if len(keys) == 1 else None)
            if key is None:
                raise ValueError(f"{path} has no 'features' array (arrays: {', '.join(keys) or 'none'})")
            if "id" in keys:
                fid = str(np.asarray(z["id"]).reshape(-1)[0]) if np.asarray(z["id"]).size else ""
                if fid != str(rid):
                    raise ValueError(f"id mismatch: manifest says {rid!r} but {os.path.basename(path)} holds {fid!r}")
            feats = z[key]
            if "boxes" in keys:
                boxes = z["boxes"]
    else:
        feats = z
    feats = check_array(feats, os.path.basename(path), dim)
    if boxes is not None:
        boxes = check_array(boxes, f"{os.path.basename(path)} boxes", cols=(4, 5))
        if boxes.shape[0] != feats.shape[0]:
            raise ValueError(f"{boxes.shape[0]} boxes for {feats.shape[0]} feature vectors")
    return feats, boxes


def read_manifest_lines(path: str, report: LoadReport):
    """(line number, record dict) for each well-formed JSON object with an id; the rest is reported."""
    seen: set = set()
    try:
        f = open(path, encoding="utf-8")
    except OSError as e:
        raise DataError(f"{path}: cannot open ({e.strerror})") from None
    with f:
        for ln, line in enumerate(f, 1):
            if not line.strip():
                continue
            report.total += 1
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                report.skip(ln, None, f"not valid JSON ({e.msg})")
                continue
            if not isinstance(rec, dict):
                report.skip(ln, None, "expected a JSON object")
                continue
            rid = rec.get("id")
            if rid is None or (isinstance(rid, str) and not rid.strip()):
                report.skip(ln, None, "no id")
                continue
            rid = str(rid)
            if rid in seen:
                report.skip(ln, rid, "duplicate id")
                continue
            seen.add(rid)
            yield ln, rid, rec


def load_records(features_dir: str, manifest: Optional[str] = None, feature_dim: Optional[int] = None,
                 require: tuple = (), audio=None, check: Optional[Callable[[dict], None]] = None
                 ) -> tuple[list[Record], LoadReport]:
    """Read a manifest and its feature files. feature_dim None: taken from the first good record.
    require: manifest fields every record must have (e.g. ("text",)). audio: an AudioConfig, to read
    records that give a WAV path under "audio" instead of a feature file. check(record): raises
    ValueError for a record the caller cannot use (it may also fix the record in place)."""
    mpath = manifest_path(features_dir, manifest)
    base = os.path.dirname(os.path.abspath(mpath))
    report = LoadReport(mpath)
    out: list[Record] = []
    cache: dict = {}  # audio path -> (features, notes): many records may share one recording
    for ln, rid, rec in read_manifest_lines(mpath, report):
        missing = [k for k in require if not isinstance(rec.get(k), str) or not rec.get(k).strip()]
        if missing:
            report.skip(ln, rid, f"missing field {missing[0]!r}")
            continue
        try:
            if check is not None:
                check(rec)
            feats, boxes = _features_of(rec, rid, base, feature_dim, audio, report, ln, cache)
        except ValueError as e:
            report.skip(ln, rid, str(e))
            continue
        if feature_dim is None:
            feature_dim = feats.shape[1]
        out.append(Record(rid, ln, feats, boxes, rec))
        report.kept += 1
    if not out:
        first = f": line {report.problems[0][0]}: {report.problems[0][2]}" if report.problems else ""
        raise DataError(f"{mpath}: no usable record ({report.skipped} skipped{first})")
    return out, report


def _features_of(rec: dict, rid: str, base: str, dim: Optional[int], audio, report: LoadReport, ln: int,
                 cache: dict):
    fpath = rec.get("features")
    if fpath is None and rec.get("audio") is not None:
        if audio is None:
            raise ValueError("has an audio path but no audio front end was configured (use --modality speech)")
        from .audio import wav_features

        path = os.path.join(base, str(rec["audio"]))
        if path not in cache:
            try:
                cache[path] = wav_features(path, audio)
            except ValueError as e:
                cache[path] = e
        if isinstance(cache[path], ValueError):
            raise cache[path]
        feats, notes = cache[path]
        for n in notes:
            report.note(ln, rid, n)
        return check_array(feats, os.path.basename(path), dim), None
    if fpath is None:
        for ext in (".npz", ".npy"):  # default: <id>.npz / <id>.npy beside the manifest
            if os.path.isfile(os.path.join(base, rid + ext)):
                fpath = rid + ext
                break
        else:
            raise ValueError(f"no 'features' (or 'audio') path and no {rid}.npz / {rid}.npy")
    if not isinstance(fpath, str):
        raise ValueError("'features' must be a path string")
    return read_feature_file(os.path.join(base, fpath), rid, dim)
