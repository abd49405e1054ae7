"""DDP agreement: rank 0 decides, every rank hears the same decision, and a score is the slowest rank's.

Without ``torch.distributed`` initialised (or with one process) every call is the identity, so the same code
runs a single process. Collectives happen only at the points every rank reaches after the same number of
batches (the explorer's check points), never per batch once the loader has settled.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger(__package__)  # autotune.autoloader, not its private modules


class Agreement:
    """The ranks of one job. ``rank``/``world`` come from ``torch.distributed`` when it is initialised."""

    def __init__(self, rank: int = 0, world: int = 1, *, distributed: bool = False) -> None:
        self.rank = rank
        self.world = world
        self.distributed = distributed and world > 1
        self._device: Any = None

    @classmethod
    def detect(cls) -> Agreement:
        """The current process group, or a single process."""
        try:
            import torch.distributed as dist
        except ImportError:  # pragma: no cover - torch without distributed
            return cls()
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size(), distributed=True)
        return cls()

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def slowest(self) -> str:
        """``", slowest rank"`` where a score is the slowest rank's, for the texts that state a score; empty for one process."""
        return ", slowest rank" if self.world > 1 else ""

    def _tensor_device(self) -> Any:
        """Where collective tensors live: the current CUDA device for NCCL, else the CPU."""
        if self._device is None:
            import torch
            import torch.distributed as dist

            self._device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")
        return self._device

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (picklable data)."""
        if not self.distributed:
            return obj
        import torch.distributed as dist

        box = [obj if self.leader else None]
        kw = {"device": self._tensor_device()} if self._tensor_device().type == "cuda" else {}
        dist.broadcast_object_list(box, src=0, **kw)
        return box[0]

    def maximum(self, values: list[float]) -> list[float]:
        """The element-wise maximum of ``values`` over all ranks."""
        if not self.distributed:
            return list(values)
        import torch
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64, device=self._tensor_device())
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return t.cpu().tolist()

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj`` (picklable data), in rank order, on every rank (with NCCL, through the current CUDA
        device, which ``torch.cuda.set_device`` made this rank's)."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        box: list[Any] = [None] * self.world
        dist.all_gather_object(box, obj)
        return box
