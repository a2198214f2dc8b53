"""Dev splits: the one seeded train / dev splitter of the package.

Fine-tuning's carved dev set (`runners.finetune.split_train_dev`, `--dev-ratio`; recipes/glue_split.py uses
the same rule) and MRC's by-passage split (`data.mrc.split_examples`, `mrc train --dev-fraction`) are
`dev_split` with their own counts and keys. Two draws stay their own because measured results were split
with them and must reproduce: the multimodal runs' evaluation split (`multimodal.runs.split_eval`, numpy)
and recipes/family_compare.py's TNEWS dev set (`random.sample`).
"""
from __future__ import annotations

import random
from typing import Callable, Hashable, Optional, Sequence, TypeVar

T = TypeVar("T")


def dev_split(items: Sequence[T], fraction: float = 0.0, seed: int = 0, *, n_dev: Optional[int] = None,
              min_dev: int = 0, group: Optional[Callable[[T], Hashable]] = None,
              stratify: Optional[Callable[[T], Hashable]] = None,
              shuffled: bool = False) -> tuple[list[T], list[T]]:
    """(train, dev): a seeded random part of `items` held out as dev, the rest for training.

    The units drawn are the items, or with `group` the groups of items with one key (first-appearance
    order; a group is never in both parts: MRC questions on one passage). The dev part is the first
    max(min_dev, round(fraction x units)) units of a random.Random(seed) shuffle of them (n_dev: that
    number instead). With `stratify`, each stratum (in sorted key order, one random stream) is split by
    itself, the count per stratum. Both parts keep the items' order, or with shuffled=True the shuffled
    order of the units."""
    strata: dict = {}
    for i, it in enumerate(items):
        strata.setdefault(stratify(it) if stratify is not None else None, []).append(i)
    rng = random.Random(seed)
    train: list[int] = []
    dev: list[int] = []
    for key in (sorted(strata) if stratify is not None else strata):
        units: dict = {}
        for i in strata[key]:
            units.setdefault(group(items[i]) if group is not None else i, []).append(i)
        members = list(units.values())
        rng.shuffle(members)
        k = n_dev if n_dev is not None else max(min_dev, int(round(len(members) * fraction)))
        for u, m in enumerate(members):
            (dev if u < k else train).extend(m)
    if not shuffled:
        train.sort()
        dev.sort()
    return [items[i] for i in train], [items[i] for i in dev]
