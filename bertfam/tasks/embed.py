"""Contextual token and sentence vectors (Google BERT's extract_features, and the ELMo contrast).

`embed_texts` returns, per chosen layer (0 = embedding output, -1 = last layer), the [CLS] vector and
the mask-aware mean of the token vectors; `embed_file` writes them to .npy (N, n_layers, H) and,
optionally, every token's vectors to JSON lines, one row per input line (N = the file's line count). `word_vectors` gives the contextual vector of a
word inside a sentence and its static input-embedding vector, for polysemy checks.
"""
from __future__ import annotations

import json
import logging
import os
from typing import Sequence

import numpy as np
import torch

from ..config import fit_max_length
from ..errors import ConfigError, DataError
from ..modeling.optimize import optimize_for_inference
from ..modeling.pooling import mean_pool
from ..utils import atomic_path

log = logging.getLogger("bertfam")


def _load(model_or_dir):
    if isinstance(model_or_dir, str):
        from ..checkpoint import from_pretrained

        return from_pretrained(model_or_dir)
    return model_or_dir


def _check_layers(layers: Sequence[int], n_hidden: int) -> list[int]:
    """n_hidden = L + 1 hidden-state tensors (embeddings first)."""
    if not layers:
        raise ConfigError("give at least one layer")
    out = []
    for l in layers:
        if not -n_hidden <= l < n_hidden:
            raise ConfigError(f"layer {l} out of range: the model has {n_hidden - 1} layers (0 = embeddings)")
        out.append(l % n_hidden)
    return out


@torch.no_grad()
def _encode_batch(model, texts: Sequence, max_length: int):
    tok = model.tokenizer
    a = [t[0] if isinstance(t, tuple) else t for t in texts]
    b = [t[1] for t in texts] if isinstance(texts[0], tuple) else None
    enc = tok(a, b, max_length=max_length, truncation=True, padding="longest")
    out = model.backbone(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], output_hidden_states=True)
    return enc, out.hidden_states  # L+1 x (B, T, H)


def embed_texts(model_or_dir, texts: Sequence, layers: Sequence[int] = (-1,), pooling: Sequence[str] = ("cls", "mean"),
                max_length: int = 128, batch_size: int = 32, tokens: bool = False, int8: bool = False) -> dict:
    """{"cls": (N, n_layers, H), "mean": (N, n_layers, H), "tokens": [per text: list of (token, (n_layers, H))]}.
    A text may be a (a, b) tuple for a pair. int8: quantize the model (in place) first (modeling/int8.py)."""
    model = optimize_for_inference(_load(model_or_dir).eval(), int8=int8)
    if model.tokenizer is None:
        raise DataError("the model directory has no tokenizer")
    for p in pooling:
        if p not in ("cls", "mean"):
            raise ConfigError(f"pooling {p!r} not in cls, mean")
    if not texts:
        raise DataError("no input text")
    idx = _check_layers(layers, model.config.num_hidden_layers + 1)
    max_length = fit_max_length(model.config, max_length)  # clamped with a warning
    res: dict = {p: [] for p in pooling}
    if tokens:
        res["tokens"] = []
    for s in range(0, len(texts), batch_size):
        enc, hs = _encode_batch(model, texts[s:s + batch_size], max_length)
        h = torch.stack([hs[i] for i in idx], dim=1)  # (B, n_layers, T, H)
        if "cls" in res:
            res["cls"].append(h[:, :, 0].numpy())
        if "mean" in res:
            res["mean"].append(mean_pool(h, enc["attention_mask"], dim=2).numpy())  # (B, n_layers, H)
        if tokens:
            for i in range(h.shape[0]):
                n = int(enc["attention_mask"][i].sum())
                toks = model.tokenizer.convert_ids_to_tokens(enc["input_ids"][i, :n].tolist())
                res["tokens"].append(list(zip(toks, h[i, :, :n].permute(1, 0, 2).numpy())))
    for p in pooling:
        res[p] = np.concatenate(res[p], axis=0).astype(np.float32)
    return res


def read_inputs(path: str) -> list:
    """One entry per line of the file, so output rows stay aligned with input lines: a text, or an
    (a, b) pair for `a ||| b` (the extract_features convention); a blank line is the empty text ("" or
    ("", "")); a line that is not UTF-8 is None, reported as `file:line`."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: input file not found")
    with open(path, "rb") as f:
        lines = _split_lines(f.read())
    if not lines:
        raise DataError(f"{path}: no input line")
    items, bad = [], []
    for n, raw in enumerate(lines, 1):
        try:
            items.append(_parse_line(raw.decode("utf-8")))
        except UnicodeDecodeError as e:
            bad.append(n)
            if len(bad) <= _MAX_REPORTED:
                log.warning("%s:%d: not UTF-8 (%s at byte %d); written as a row of NaN", path, n, e.reason, e.start)
            items.append(None)
    if len(bad) == len(items):
        raise DataError(f"{path}: no UTF-8 line ({len(bad)} lines)")
    if len(bad) > 1:
        log.warning("%s: %d of %d lines not UTF-8 (rows of NaN): lines %s", path, len(bad), len(items),
                    ", ".join(map(str, bad[:_MAX_REPORTED])) + (", ..." if len(bad) > _MAX_REPORTED else ""))
    return _one_kind(items, path)


_MAX_REPORTED = 10  # lines named one by one; the summary counts them all


def _split_lines(raw: bytes) -> list[bytes]:
    """Lines as `wc -l` and editors count them: split at \\n only (a \\r before it dropped; a final newline
    ends the last line). str.splitlines would also split at \\x0b, \\x1c, U+2028 ... and shift the rows after."""
    if raw.startswith(b"\xef\xbb\xbf"):  # UTF-8 byte-order mark
        raw = raw[3:]
    lines = raw.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return [l[:-1] if l.endswith(b"\r") else l for l in lines]


def _parse_line(line: str):
    if " ||| " in line:
        a, b = line.split(" ||| ", 1)
        return a.strip(), b.strip()
    return line.strip()


def _one_kind(items: list, path: str) -> list:
    """All single texts or all pairs; blank lines take the file's kind (("", "") in a file of pairs)."""
    kinds = {isinstance(x, tuple) for x in items if x}
    if len(kinds) > 1:
        raise DataError(f"{path}: mix of single texts and 'a ||| b' pairs; use one kind per file")
    if kinds == {True}:
        return [("", "") if x == "" else x for x in items]
    return items


def embed_file(model_dir: str, input_path: str, out_prefix: str, layers: Sequence[int] = (-1,),
               pooling: Sequence[str] = ("cls", "mean"), tokens: bool = False, max_length: int = 128,
               batch_size: int = 32, int8: bool = False) -> list[str]:
    """Row i of every output is line i of the input (blank: the empty text's vectors; not UTF-8: NaN)."""
    items = read_inputs(input_path)
    ok = [i for i, x in enumerate(items) if x is not None]
    pooling = pooling or ("cls", "mean")
    res = embed_texts(model_dir, [items[i] for i in ok], layers, pooling, max_length, batch_size, tokens, int8)
    written = []
    for p in pooling:
        rows = np.full((len(items),) + res[p].shape[1:], np.nan, dtype=np.float32)  # (N lines, n_layers, H)
        rows[ok] = res[p]
        path = f"{out_prefix}.{p}.npy"
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                np.save(f, rows)
        written.append(path)
    if tokens:
        path = out_prefix + ".jsonl"
        per_line = dict(zip(ok, res["tokens"]))
        with atomic_path(path) as tmp:
            with open(tmp, "w", encoding="utf-8") as f:
                for i in range(len(items)):
                    f.write(json.dumps(_token_record(i, per_line.get(i), layers), ensure_ascii=False) + "\n")
        written.append(path)
    return written


def _token_record(i: int, toks, layers: Sequence[int]) -> dict:
    if toks is None:  # a line that is not UTF-8: its record stays, so record i is still line i
        return {"line_index": i, "features": [], "error": "not UTF-8"}
    feats = [{"token": t, "layers": [{"index": int(l), "values": [round(float(x), 6) for x in v[k]]}
                                     for k, l in enumerate(layers)]} for t, v in toks]
    return {"line_index": i, "features": feats}


@torch.no_grad()
def word_vectors(model, sentence: str, word: str, layer: int = -1, occurrence: int = 0) -> dict:
    """The `occurrence`-th appearance of `word` in `sentence`: its contextual vector (mean of its
    tokens at `layer`) and its static vector (mean of the same tokens' input-embedding rows)."""
    tok = model.tokenizer
    start = -1
    for _ in range(occurrence + 1):
        start = sentence.find(word, start + 1)
        if start < 0:
            raise DataError(f"{word!r} does not occur {occurrence + 1} time(s) in {sentence!r}")
    end = start + len(word)
    enc = tok(sentence, return_offsets_mapping=True)
    offs = enc["offset_mapping"][0].tolist()
    pos = [i for i, (s, e) in enumerate(offs) if e > s and s < end and e > start]
    if not pos:
        raise DataError(f"{word!r} has no token in {sentence!r}")
    out = model.backbone(enc["input_ids"], enc["attention_mask"], enc["token_type_ids"], output_hidden_states=True)
    ctx = out.hidden_states[layer][0, pos].mean(0)  # (H,)
    static = model.backbone.embeddings.word.weight[enc["input_ids"][0, pos]].mean(0)  # (E,)
    return {"contextual": ctx.numpy(), "static": static.numpy(),
            "tokens": tok.convert_ids_to_tokens(enc["input_ids"][0, pos].tolist())}


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))
