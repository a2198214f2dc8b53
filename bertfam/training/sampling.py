"""Deterministic batch plans: shuffled or length-grouped, sharded across DDP ranks.

A plan depends only on (seed, epoch, rank, world), so a resumed run can skip exactly the batches
it has already consumed without touching any random state.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..data.batching import length_batches


def length_grouped_batches(lengths: Sequence[int], batch_size: int, generator: Optional[torch.Generator] = None,
                           mega: int = 50, shuffle: bool = True) -> list[list[int]]:
    """Batches of similar length (little padding), in random order.

    Indices are shuffled, cut into mega-batches of `mega * batch_size`, each cut into length-sorted batches
    (`data.batching.length_batches`, longest first); then the batch order is shuffled. Without shuffle: the
    length-sorted batches of all indices.
    """
    n = len(lengths)
    if not shuffle:
        return length_batches(lengths, batch_size)
    perm = torch.randperm(n, generator=generator).tolist()
    batches = []
    step = mega * batch_size
    for s in range(0, n, step):
        chunk = perm[s:s + step]
        batches += [[chunk[j] for j in b] for b in length_batches([lengths[i] for i in chunk], batch_size)]
    order = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in order]


@dataclass
class BatchPlan:
    n: int
    batch_size: int
    seed: int = 42
    shuffle: bool = True
    lengths: Optional[Sequence[int]] = None  # set: length-grouped batches
    rank: int = 0
    world: int = 1

    def batches(self, epoch: int) -> list[list[int]]:
        g = torch.Generator().manual_seed(self.seed * 1000003 + epoch)
        if self.lengths is not None:
            all_batches = length_grouped_batches(self.lengths, self.batch_size, g, shuffle=self.shuffle)
        else:
            order = torch.randperm(self.n, generator=g).tolist() if self.shuffle else list(range(self.n))
            all_batches = [order[i:i + self.batch_size] for i in range(0, self.n, self.batch_size)]
        if self.world > 1:  # every rank gets the same number of batches (DDP steps in lockstep)
            per_rank = len(all_batches) // self.world
            all_batches = all_batches[self.rank::self.world][:per_rank]
        return all_batches

    def __len__(self) -> int:
        n_batches = -(-self.n // self.batch_size)
        return n_batches // self.world if self.world > 1 else n_batches
