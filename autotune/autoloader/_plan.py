"""The epoch plan: one permutation per epoch, each rank's part of it, and how much of it was delivered.

Every rank draws the same permutation (the seed and the epoch number fix it) and takes every ``world``-th
position from its rank on, trimmed so that all ranks hold the same number of samples (and so take the same
number of steps, as ``DistributedSampler(drop_last=True)`` does). A loader is built over
:meth:`EpochPlan.remaining`: the part of this rank's share not yet delivered. Delivering a batch advances the
position; a candidate that is dropped mid-epoch leaves the position where the last delivered batch left it, so
the next loader starts exactly there and every sample is delivered once per epoch.
"""

from __future__ import annotations

import dataclasses


def permutation(n: int, seed: int, epoch: int, shuffle: bool = True) -> list[int]:
    """The epoch's order of ``n`` dataset positions: the same on every rank for the same seed and epoch (without
    ``shuffle``, the dataset's own order)."""
    import torch

    if not shuffle:
        return list(range(n))
    g = torch.Generator().manual_seed((int(seed) * 1_000_003 + int(epoch)) % 2**63)
    return torch.randperm(n, generator=g).tolist()


def rank_share(order: list[int], rank: int, world: int) -> list[int]:
    """Rank ``rank``'s positions of ``order``: every ``world``-th from ``rank``, all ranks the same length."""
    per_rank = len(order) // world if world > 1 else len(order)
    return order[rank::world][:per_rank]


@dataclasses.dataclass
class EpochPlan:
    """One epoch of one rank: the positions it delivers in order, and how many it has delivered."""

    epoch: int
    indices: list[int]
    batch_size: int
    drop_last: bool
    position: int = 0
    batches: int = 0

    @classmethod
    def make(cls, n: int, *, seed: int, epoch: int, rank: int, world: int, batch_size: int, drop_last: bool, shuffle: bool = True) -> EpochPlan:
        return cls(epoch, rank_share(permutation(n, seed, epoch, shuffle), rank, world), batch_size, drop_last)

    def remaining(self) -> list[int]:
        """The positions not yet delivered, in the epoch's order."""
        return self.indices[self.position :]

    def left(self) -> int:
        return len(self.indices) - self.position

    def done(self, batch_size: int | None = None) -> bool:
        """Whether no further batch is due (train: less than a full batch is left, which is dropped)."""
        b = batch_size or self.batch_size
        return self.left() < b if self.drop_last else self.left() == 0

    def advance(self, samples: int) -> None:
        """Record a delivered batch of ``samples`` samples."""
        if samples > self.left():
            raise RuntimeError(f"a batch of {samples} samples was delivered with only {self.left()} left in the epoch")
        self.position += samples
        self.batches += 1

    def expected_batches(self, batch_size: int | None = None) -> int:
        """Batches in a whole epoch at ``batch_size``."""
        b = batch_size or self.batch_size
        n = len(self.indices)
        return n // b if self.drop_last else -(-n // b)
