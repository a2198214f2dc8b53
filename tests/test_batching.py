"""data/batching.py: length_batches, the one length-sorted batching of prediction (task evaluation, the MRC
predictor and verifier)."""
import pytest

from bertfam.data.batching import length_batches

LENGTHS = [5, 50, 7, 49, 6, 51, 8, 7]


# ---------------------------------------------------------------- length_batches
@pytest.mark.parametrize("longest_first", [True, False])
@pytest.mark.parametrize("batch_size", [1, 3, 100])
def test_length_batches_cover_every_index_once_sorted_by_length(longest_first, batch_size):
    batches = length_batches(LENGTHS, batch_size, longest_first=longest_first)
    flat = [i for b in batches for i in b]
    assert sorted(flat) == list(range(len(LENGTHS)))
    assert all(1 <= len(b) <= batch_size for b in batches)
    seq = [LENGTHS[i] for i in flat]
    assert seq == sorted(LENGTHS, reverse=longest_first)
    ties = [i for i in flat if LENGTHS[i] == 7]
    assert ties == [2, 7]  # equal lengths keep their index order, in either direction


def test_length_batches_orders_the_callers_rely_on():
    assert [[LENGTHS[i] for i in b] for b in length_batches(LENGTHS, 3)] == [[51, 50, 49], [8, 7, 7], [6, 5]]
    assert [[LENGTHS[i] for i in b] for b in length_batches(LENGTHS, 3, longest_first=False)] == \
        [[5, 6, 7], [7, 8, 49], [50, 51]]
    assert length_batches([], 4) == []
    with pytest.raises(ValueError):
        length_batches(LENGTHS, 0)


@pytest.mark.parametrize("longest_first", [True, False])
def test_length_batches_max_tokens_caps_size_times_longest(longest_first):
    capped = length_batches(LENGTHS, 3, longest_first=longest_first, max_tokens=100)  # 2 x 51 fits, 3 x 51 not
    assert sorted(i for b in capped for i in b) == list(range(len(LENGTHS)))
    assert max(len(b) * max(LENGTHS[i] for i in b) for b in capped) <= 100
    assert length_batches([200, 3], 4, max_tokens=100) == [[0], [1]]  # one too-long input: its own batch


# ---------------------------------------------------------------- training.sampling on length_batches
def _former_length_grouped_batches(lengths, batch_size, generator=None, mega=50, shuffle=True):
    """training.sampling.length_grouped_batches as it was before it used length_batches (its own sorts)."""
    import torch

    n = len(lengths)
    if not shuffle:
        order = sorted(range(n), key=lambda i: -lengths[i])
        return [order[i:i + batch_size] for i in range(0, n, batch_size)]
    perm = torch.randperm(n, generator=generator).tolist()
    batches = []
    step = mega * batch_size
    for s in range(0, n, step):
        chunk = sorted(perm[s:s + step], key=lambda i: -lengths[i])
        batches += [chunk[i:i + batch_size] for i in range(0, len(chunk), batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_length_grouped_training_batches_are_the_same_as_before(shuffle, seed):
    """The training plan's length-grouped batches (many equal lengths: ties decide the order) are the very
    batches of the former code, so a resumed run skips the same batches it consumed before."""
    import random

    import torch

    from bertfam.training.sampling import length_grouped_batches

    lengths = [random.Random(seed).randint(3, 12) for _ in range(230)]
    got = length_grouped_batches(lengths, 4, torch.Generator().manual_seed(seed), mega=5, shuffle=shuffle)
    want = _former_length_grouped_batches(lengths, 4, torch.Generator().manual_seed(seed), mega=5, shuffle=shuffle)
    assert got == want and sorted(i for b in got for i in b) == list(range(230))
