"""data/splits.py: dev_split, the one seeded train / dev splitter (finetune's carved dev, MRC's by-passage
split, the multimodal evaluation split, the GLUE and family recipes)."""
import random
from collections import namedtuple

import pytest

from bertfam.data.splits import dev_split


def test_dev_split_is_seeded_lossless_and_in_order():
    items = list(range(40))
    train, dev = dev_split(items, 0.25, seed=3)
    assert (train, dev) == dev_split(items, 0.25, seed=3)
    assert dev_split(items, 0.25, seed=4) != (train, dev)
    assert len(dev) == 10 and sorted(train + dev) == items
    assert train == sorted(train) and dev == sorted(dev)  # the items' order
    assert len(dev_split(items, 0.001, seed=3, min_dev=1)[1]) == 1
    assert len(dev_split(items, 0.5, seed=3, n_dev=7)[1]) == 7
    tr, dv = dev_split(items, 0.25, seed=3, shuffled=True)
    assert sorted(dv) == dev and sorted(tr) == train  # the same draw, in the drawn order


def test_dev_split_matches_the_finetune_rule():
    """runners.finetune.split_train_dev (and recipes/glue_split.py) before it used dev_split: shuffle the
    indices with random.Random(seed), the first max(1, round(n x ratio)) are dev."""
    from bertfam.runners.finetune import split_train_dev

    items = [f"line {i}" for i in range(57)]
    idx = list(range(len(items)))
    random.Random(42).shuffle(idx)
    n_dev = max(1, round(len(items) * 0.1))
    expected = [items[i] for i in sorted(idx[n_dev:])], [items[i] for i in sorted(idx[:n_dev])]
    assert split_train_dev(items, 0.1, 42) == expected == dev_split(items, 0.1, 42, min_dev=1)


Q = namedtuple("Q", "source context qid")


def _questions(n=60, seed=0):
    r = random.Random(seed)
    return [Q(r.choice("ab"), f"passage {r.randrange(12)}", i) for i in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dev_split_never_puts_one_group_in_both_parts(seed):
    qs = _questions(seed=seed)
    train, dev = dev_split(qs, 0.3, seed, group=lambda q: q.context)
    assert sorted(train + dev) == sorted(qs) and dev
    assert not {q.context for q in train} & {q.context for q in dev}
    assert (train, dev) == dev_split(qs, 0.3, seed, group=lambda q: q.context)
    n_groups = len({q.context for q in qs})
    assert len({q.context for q in dev}) == round(n_groups * 0.3)


def test_dev_split_stratified_by_passage_is_the_mrc_split():
    """data.mrc.split_examples: passages of each source (in sorted source order, one random stream) shuffled,
    the first round(fraction x passages) dev; both parts in the shuffled order."""
    from bertfam.data.mrc import split_examples

    qs = _questions(seed=5)
    rng = random.Random(7)
    expected = [], []
    for src in sorted({q.source for q in qs}):
        groups = {}
        for q in qs:
            if q.source == src:
                groups.setdefault(q.context, []).append(q)
        groups = list(groups.values())
        rng.shuffle(groups)
        for i, g in enumerate(groups):
            expected[i >= round(len(groups) * 0.3)].extend(g)
    expected = expected[1], expected[0]  # (train, dev)
    got = dev_split(qs, 0.3, 7, group=lambda q: q.context, stratify=lambda q: q.source, shuffled=True)
    assert got == expected
    assert split_examples(qs, 0.3, seed=7) == expected
    for part in got:
        assert {q.source for q in part} == {"a", "b"}  # every source in both parts
