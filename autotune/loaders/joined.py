"""Batches joined in the main process from smaller ones that the DataLoader's workers hand over.

A worker hands each finished batch to the main process through ``/dev/shm``, and holds ``prefetch_factor`` of them:
``workers x prefetch x batch`` must fit there. In a container with Docker's default 64 MiB, one float32 batch of
256 crops of 224 (154 MB) does not, and every config with workers dies ("unable to allocate shared memory").
With ``worker_batch`` set, the workers hand over batches of that many samples, and the main process joins them,
in order, into batches of the batch size: over a map-style dataset, the same samples in the same batches as the plain
DataLoader gives over the same sampler, with ``worker_batch / batch`` of its ``/dev/shm``. An iterable dataset's
stream is cut at every batch size across the workers' parts (the plain DataLoader fills each batch from one worker),
every item once.

A batch it joins is one whose every tensor and array has the batch's samples along its first dimension (what
``default_collate`` makes of tensors, numbers, strings, tuples and dicts); another (a detection collate's tuples of
per-image tensors, padded sequences of different lengths) is refused in one line, naming the fix.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from torch.utils.data import DataLoader

from autotune.errors import UserError


def _values(batch: Any) -> bool:
    """Whether ``batch`` is a list of per-sample values (strings, as default_collate leaves them), not of fields."""
    return isinstance(batch, list | tuple) and not hasattr(batch, "_fields") and bool(batch) and \
        all(not isinstance(v, list | tuple | dict) and getattr(v, "shape", None) is None for v in batch)


def _leading(batch: Any) -> set[int]:
    """The first dimensions of every tensor and array in ``batch``, and the length of each list of values."""
    if getattr(batch, "shape", None) is not None:
        return {int(batch.shape[0])} if len(batch.shape) else {-1}
    if _values(batch):
        return {len(batch)}
    fields = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else None
    if fields is None:
        return {-1}
    return set().union(*(_leading(v) for v in fields)) if len(fields) else {-1}


def counted(part: Any) -> int:
    """The samples in a worker's batch, checked: every tensor, array and list of values in it holds that many.

    Raises:
        UserError: a batch without them (its samples could not be joined or cut without mixing them up)."""
    sizes = _leading(part)
    if len(sizes) != 1 or min(sizes) < 1:
        raise UserError(f"worker_batch cannot join this collate_fn's batches ({type(part).__name__} whose parts have "
                        f"{', '.join(str(n) for n in sorted(sizes) if n >= 0) or 'no'} leading sizes, not one for the samples): "
                        "return tensors, arrays, lists, tuples or dicts with the samples along the first dimension, or give /dev/shm "
                        "room for whole batches (docker run --shm-size=8g) so that none is joined")
    return sizes.pop()


def join(parts: list[Any], pin: bool = False) -> Any:
    """One batch from ``parts`` (each the collate output of consecutive samples, all of one structure): tensors and
    arrays concatenated along the first dimension (tensors into pinned memory with ``pin``: one copy from the
    workers' /dev/shm, where the DataLoader's pinning thread would copy each part first), lists of values chained,
    tuples, namedtuples and dicts joined field by field."""
    first = parts[0]
    import torch

    if isinstance(first, torch.Tensor):
        if len(parts) == 1 and not pin:
            return first
        if any(p.shape[1:] != first.shape[1:] for p in parts):  # padded to each part's own longest
            raise UserError(f"worker_batch cannot join tensors of shapes {tuple(first.shape)} and "
                            f"{next(tuple(p.shape) for p in parts if p.shape[1:] != first.shape[1:])}: give /dev/shm room for whole batches "
                            "(docker run --shm-size=8g) so that none is joined, or pad to one length in the Dataset")
        shape = (sum(int(p.shape[0]) for p in parts), *first.shape[1:])
        out = torch.empty(shape, dtype=first.dtype, device=first.device, pin_memory=pin and first.device.type == "cpu")
        return torch.cat(parts, out=out)
    if len(parts) == 1 and not pin:
        return first
    if type(first).__module__ == "numpy" and hasattr(first, "shape"):
        import numpy as np

        return np.concatenate(parts)
    if isinstance(first, dict):
        return type(first)({k: join([p[k] for p in parts], pin) for k in first})
    if isinstance(first, tuple) and hasattr(first, "_fields"):
        return type(first)(*(join([p[i] for p in parts], pin) for i in range(len(first))))
    if _values(first):
        return type(first)(v for p in parts for v in p)
    if isinstance(first, list | tuple):
        return type(first)(join([p[i] for p in parts], pin) for i in range(len(first)))
    raise UserError(f"worker_batch cannot join batches of {type(first).__name__}: return tensors, arrays, lists, tuples or dicts from "
                    "collate_fn, or give /dev/shm room for whole batches (docker run --shm-size=8g) so that none is joined")


def split(batch: Any, n: int) -> tuple[Any, Any]:
    """``batch``'s first ``n`` samples and the rest, of the same structure."""
    if getattr(batch, "shape", None) is not None:
        return batch[:n], batch[n:]
    if isinstance(batch, dict):
        pairs = {k: split(v, n) for k, v in batch.items()}
        return type(batch)({k: a for k, (a, _) in pairs.items()}), type(batch)({k: b for k, (_, b) in pairs.items()})
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        halves = [split(v, n) for v in batch]
        return type(batch)(*(a for a, _ in halves)), type(batch)(*(b for _, b in halves))
    if _values(batch):
        return type(batch)(batch[:n]), type(batch)(batch[n:])
    if isinstance(batch, list | tuple):
        halves = [split(v, n) for v in batch]
        return type(batch)(a for a, _ in halves), type(batch)(b for _, b in halves)
    return batch, batch


class JoinedLoader(DataLoader):
    """A DataLoader whose workers collate ``worker_batch`` samples at a time, joined here into batches of
    ``joined_batch_size`` (the last one shorter unless ``drop_last``). Everything else is the DataLoader's own:
    Lightning, accelerate and ``isinstance`` checks see a DataLoader; its ``batch_size`` attribute is the workers', and
    ``pin_joined`` says whether batches are pinned (``pin_memory``: the joined batch is, the parts are not)."""

    def __init__(self, dataset: Any, *, joined_batch_size: int, drop_last: bool = False, pin_memory: bool = False, **kwargs: Any) -> None:
        super().__init__(dataset, drop_last=False, pin_memory=False, **kwargs)  # pinned as they are joined: one copy
        self.joined_batch_size = int(joined_batch_size)
        self.drop_joined_last = bool(drop_last)
        self.pin_joined = bool(pin_memory)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]  # DataLoader.__iter__ is typed as returning its own iterator class
        size = self.joined_batch_size
        parts: list[Any] = []
        have = 0
        for part in super().__iter__():
            parts.append(part)
            have += counted(part)
            while have >= size:
                batch, rest = split(join(parts, self.pin_joined), size) if have > size else (join(parts, self.pin_joined), None)
                have -= size
                parts = [rest] if have else []  # before the yield: the parts' /dev/shm is freed while the batch is used
                yield batch
        if parts and have and not self.drop_joined_last:
            yield join(parts, self.pin_joined)

    def __len__(self) -> int:
        from torch.utils.data import IterableDataset

        stream = isinstance(self.dataset, IterableDataset)  # its len() is the dataset's own (a TypeError without one)
        samples = len(self.dataset) if stream else len(self.sampler)  # type: ignore[arg-type]  # map-style: a sampler with len(); a stream: its own
        return samples // self.joined_batch_size if self.drop_joined_last else math.ceil(samples / self.joined_batch_size)


__all__ = ["JoinedLoader", "counted", "join", "split"]
