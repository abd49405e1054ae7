"""Batches joined in the main process from smaller ones that the DataLoader's workers hand over.

A worker hands each finished batch to the main process through ``/dev/shm``, and holds ``prefetch_factor`` of them:
``workers x prefetch`` batches, and the one the training loop holds, must fit there. In a container with Docker's default 64 MiB, one float32 batch of
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


def _copy(into: Any, part: Any) -> None:
    """``part`` copied into ``into`` in this thread: a CPU tensor through NumPy (torch's ``copy_`` splits a large copy
    over its intra-op threads, which then spin and take the cores the DataLoader's workers run on: 15 % fewer samples/s
    with two workers on two cores), anything else (a GPU tensor, a dtype NumPy lacks) by torch."""
    if part.device.type == "cpu" and into.device.type == "cpu" and not part.requires_grad:
        try:
            target, source = into.numpy(), part.numpy()
        except (TypeError, RuntimeError):  # bfloat16 and the like
            pass
        else:
            target[...] = source
            return
    into.copy_(part)


def _take(acc: Any, part: Any, at: int, size: int, pin: bool) -> Any:
    """``acc`` (None at a batch's first part) with ``part``'s samples put in at sample ``at`` of a batch of ``size``:
    each tensor copied into its place in the batch at once (into pinned memory with ``pin``: the one copy out of the
    workers' /dev/shm, where the DataLoader's pinning thread would copy each part first), so that the part, and its
    /dev/shm, can go before the next arrives; arrays and lists of values kept to be chained; tuples, namedtuples and
    dicts field by field. Each node says what it is: ``(kind, type, value)``."""
    import torch

    if isinstance(part, torch.Tensor):
        _same("t", acc, part)
        if acc is None:
            acc = ("t", None, _empty((size, *part.shape[1:]), part.dtype, part.device, pin))
        elif acc[2].shape[1:] != part.shape[1:]:  # padded to each part's own longest
            raise UserError(f"worker_batch cannot join tensors of shapes {tuple(acc[2].shape[1:])} and {tuple(part.shape[1:])} after the "
                            "samples: give /dev/shm room for whole batches (docker run --shm-size=8g) so that none is joined, or pad to "
                            "one length in the Dataset")
        elif acc[2].dtype != part.dtype:  # int labels in one part, floats in the next: the type that holds both, as one collate
            wider = _empty(tuple(acc[2].shape), torch.promote_types(acc[2].dtype, part.dtype), part.device, pin)
            wider[:at].copy_(acc[2][:at])
            acc = ("t", None, wider)
        _copy(acc[2][at:at + int(part.shape[0])], part)
        return acc
    if type(part).__module__ == "numpy" and hasattr(part, "shape"):
        _same("a", acc, part)
        return ("a", None, [*(acc[2] if acc else []), part])
    if isinstance(part, dict):
        _same("d", acc, part)
        return ("d", type(part), {k: _take(acc[2][k] if acc else None, v, at, size, pin) for k, v in part.items()})
    if _values(part):
        _same("v", acc, part)
        return ("v", type(part), [*(acc[2] if acc else []), *part])
    if isinstance(part, list | tuple):
        kind = "n" if isinstance(part, tuple) and hasattr(part, "_fields") else "s"
        _same(kind, acc, part)
        return (kind, type(part), [_take(acc[2][i] if acc else None, v, at, size, pin) for i, v in enumerate(part)])
    raise UserError(f"worker_batch cannot join batches of {type(part).__name__}: return tensors, arrays, lists, tuples or dicts from "
                    "collate_fn, or give /dev/shm room for whole batches (docker run --shm-size=8g) so that none is joined")


def _empty(shape: tuple[int, ...], dtype: Any, device: Any, pin: bool) -> Any:
    import torch

    return torch.empty(shape, dtype=dtype, device=device, pin_memory=pin and torch.device(device).type == "cpu")


def _same(kind: str, acc: Any, part: Any) -> None:
    """Raise unless ``part`` has the structure of the parts already in ``acc`` (the same kind of node, the same keys,
    the same number of fields): the workers' parts of one batch are joined field by field."""
    if acc is None:
        return
    fields = (lambda x: sorted(map(str, x))) if kind == "d" else len
    if acc[0] != kind or kind in ("d", "n", "s") and fields(acc[2]) != fields(part):
        raise UserError(f"worker_batch cannot join parts of different structures ({type(part).__name__} after a part that differs in its "
                        "fields or types): return the same structure from collate_fn for every batch, or give /dev/shm room for whole "
                        "batches (docker run --shm-size=8g) so that none is joined")


def _done(acc: Any, n: int) -> Any:
    """The batch of the first ``n`` samples that :func:`_take` put in ``acc``, of the parts' structure."""
    kind, kind_type, value = acc
    if kind == "t":
        return value if int(value.shape[0]) == n else value[:n]
    if kind == "a":
        import numpy as np

        return np.concatenate(value)
    if kind == "d":
        return kind_type({k: _done(v, n) for k, v in value.items()})
    if kind == "v":
        return kind_type(value)
    if kind == "n":
        return kind_type(*(_done(v, n) for v in value))
    return kind_type(_done(v, n) for v in value)


def join(parts: list[Any], pin: bool = False) -> Any:
    """One batch from ``parts`` (each the collate output of consecutive samples, all of one structure): tensors and
    arrays concatenated along the first dimension (tensors into pinned memory with ``pin``), lists of values chained,
    tuples, namedtuples and dicts joined field by field."""
    sizes = [counted(p) for p in parts]
    acc, at, size = None, 0, sum(sizes)
    for part, n in zip(parts, sizes, strict=True):
        acc = _take(acc, part, at, size, pin)
        at += n
    return _done(acc, at)


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
        acc: Any = None
        have = 0
        for part in super().__iter__():
            n = counted(part)
            while n:  # each part goes into the batch as it arrives: /dev/shm holds at most one part here
                take = min(n, size - have)
                head, part = split(part, take) if take < n else (part, None)
                acc = _take(acc, head, have, size, self.pin_joined)
                head = None  # the part's /dev/shm is freed once its rest, if any, is in the next batch
                have, n = have + take, n - take
                if have == size:
                    batch, acc, have = _done(acc, size), None, 0
                    yield batch
        if have and not self.drop_joined_last:
            yield _done(acc, have)

    def __len__(self) -> int:
        from torch.utils.data import IterableDataset

        stream = isinstance(self.dataset, IterableDataset)  # its len() is the dataset's own (a TypeError without one)
        samples = len(self.dataset) if stream else len(self.sampler)  # type: ignore[arg-type]  # map-style: a sampler with len(); a stream: its own
        return samples // self.joined_batch_size if self.drop_joined_last else math.ceil(samples / self.joined_batch_size)


__all__ = ["JoinedLoader", "counted", "join", "split"]
