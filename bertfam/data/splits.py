"""Dev splits: the one seeded train / dev splitter of the package.

Fine-tuning's carved dev set (`runners.finetune.split_train_dev`, `--dev-ratio`; recipes/glue_split.py uses
the same rule), MRC's by-passage split (`data.mrc.split_examples`, `mrc train --dev-fraction`), the multimodal
runs' evaluation split (`multimodal.runs.split_eval`, `--eval-fraction`) and recipes/family_compare.py's TNEWS
dev set are `dev_split` with their own counts and keys. The last two were drawn with other random streams
before they came here (numpy's permutation, `random.sample`), and measured results were split with them, so
`dev_split` keeps those draws as `draw="permutation"` and `draw="sample"`: the same seed gives the same split.
"""
from __future__ import annotations

import random
from typing import Callable, Hashable, Optional, Sequence, TypeVar

T = TypeVar("T")
DRAWS = ("shuffle", "permutation", "sample")


def dev_split(items: Sequence[T], fraction: float = 0.0, seed: int = 0, *, n_dev: Optional[int] = None,
              min_dev: int = 0, group: Optional[Callable[[T], Hashable]] = None,
              stratify: Optional[Callable[[T], Hashable]] = None,
              shuffled: bool = False, draw: str = "shuffle") -> tuple[list[T], list[T]]:
    """(train, dev): a seeded random part of `items` held out as dev, the rest for training.

    The units drawn are the items, or with `group` the groups of items with one key (first-appearance
    order; a group is never in both parts: MRC questions on one passage). The dev part is k =
    max(min_dev, round(fraction x units)) units (n_dev: that number instead), drawn by `draw`:
    "shuffle", the first k of a random.Random(seed) shuffle of the units; "permutation", the first k of
    numpy.random.default_rng(seed).permutation of them; "sample", random.Random(seed).sample(units, k)
    (the rest then follow in their order). With `stratify`, each stratum (in sorted key order, one random
    stream) is split by itself, the count per stratum. Both parts keep the items' order, or with
    shuffled=True the drawn order of the units."""
    if draw not in DRAWS:
        raise ValueError(f"draw must be one of {', '.join(DRAWS)}, got {draw!r}")
    strata: dict = {}
    for i, it in enumerate(items):
        strata.setdefault(stratify(it) if stratify is not None else None, []).append(i)
    rng = _stream(draw, seed)
    train: list[int] = []
    dev: list[int] = []
    for key in (sorted(strata) if stratify is not None else strata):
        units: dict = {}
        for i in strata[key]:
            units.setdefault(group(items[i]) if group is not None else i, []).append(i)
        members = list(units.values())
        k = n_dev if n_dev is not None else max(min_dev, int(round(len(members) * fraction)))
        for u, j in enumerate(_order(draw, rng, len(members), k)):
            (dev if u < k else train).extend(members[j])
    if not shuffled:
        train.sort()
        dev.sort()
    return [items[i] for i in train], [items[i] for i in dev]


def _stream(draw: str, seed: int):
    if draw == "permutation":
        import numpy as np

        return np.random.default_rng(seed)
    return random.Random(seed)


def _order(draw: str, rng, n: int, k: int) -> list[int]:
    """Indices 0..n-1 in drawn order, the dev units first (k of them)."""
    if draw == "permutation":
        return rng.permutation(n).tolist()
    if draw == "sample":
        chosen = rng.sample(range(n), min(k, n))
        picked = set(chosen)
        return chosen + [i for i in range(n) if i not in picked]
    order = list(range(n))
    rng.shuffle(order)  # the swaps depend on n alone: the same draw as shuffling the units themselves
    return order
