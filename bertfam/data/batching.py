"""Length-sorted batching for prediction: the one place that groups examples of similar length.

Sorting by length before batching keeps padding (and, in the padded path, wasted attention) small; the
caller puts the results back in its own order. Training batches are `training.sampling`'s (shuffled,
length-grouped within mega-batches); this is the deterministic order of evaluation and prediction.
"""
from __future__ import annotations

from typing import Optional, Sequence


def length_batches(lengths: Sequence[int], batch_size: int, *, longest_first: bool = True,
                   max_tokens: Optional[int] = None) -> list[list[int]]:
    """Indices 0..len(lengths)-1, each once, in batches of at most batch_size, sorted by length: longest
    first (a batch too big for memory fails early) or, longest_first=False, shortest first. Equal lengths
    keep their index order (a stable sort).

    max_tokens caps batch size x its longest length, so batches of short inputs can hold more of them (a
    single input longer than max_tokens still gets its own batch)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    order = sorted(range(len(lengths)), key=(lambda i: -lengths[i]) if longest_first else lengths.__getitem__)
    batches: list[list[int]] = []
    cur: list[int] = []
    longest = 0
    for i in order:
        if cur and (len(cur) >= batch_size or
                    (max_tokens and (len(cur) + 1) * max(longest, lengths[i]) > max_tokens)):
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, lengths[i])
    if cur:
        batches.append(cur)
    return batches
