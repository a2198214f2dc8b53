"""SentencePiece's compiled normaliser ("precompiled charsmap") for a per-codepoint map: a darts-clone
double-array trie over the UTF-8 keys, as `tokenizers`' Precompiled normaliser reads it."""
from __future__ import annotations

import struct

import numpy as np


def precompiled_charsmap(norm_map: dict[int, list[int]]) -> bytes:
    """u32 trie size in bytes, the double-array trie whose leaf values are offsets into a pool of
    NUL-terminated replacement strings, then the pool."""
    pool, values = bytearray(), {}
    for cp, out in sorted(norm_map.items()):
        values[chr(cp).encode("utf-8")] = len(pool)
        pool += "".join(chr(o) for o in out).encode("utf-8") + b"\0"
    units = double_array(values)
    return struct.pack("<I", 4 * len(units)) + np.asarray(units, "<u4").tobytes() + bytes(pool)


def double_array(keys: dict[bytes, int]) -> list[int]:
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
