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
