"""Measure a loader's steady-state throughput: samples per second delivered on the device.

Start-up (building the iterator, the first batch) and warm-up batches are timed apart. Then the loop runs
timed windows; each window's rate is samples / seconds, where the clock stops only after the batch is on the
device (``torch.cuda.synchronize`` before each clock read on CUDA; the clock is read after every batch, or every
few batches when a batch takes under :data:`CHUNK_S`). Leading windows that are still speeding up (workers filling
their queues, page cache, cudnn/nvjpeg warm-up) are detected and left out; the score is the median of the
steady windows and the spread is their minimum and maximum.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable
from itertools import islice
from typing import Any

#: a window within this fraction of the median of the windows after it counts as steady
STEADY_TOL = 0.10
#: a loader faster than one batch per CHUNK_S is timed in chunks of batches, so reading the clock costs
#: under 2 % of a bare loop (benchmarks/overhead.py); slower loaders are timed after every batch
CHUNK_S = 0.001
#: called after each window with (index, median rate so far, (lowest, highest) steady window so far); True stops
OnWindow = Callable[[int, float, tuple[float, float]], bool]


@dataclasses.dataclass
class Measurement:
    samples_per_s: float
    spread: tuple[float, float]
    windows: list[float]
    steady_from: int
    startup_s: float
    warmup_s: float
    batches: int
    samples: int
    epochs: int = 1

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["spread"] = list(self.spread)
        return d


def robust_rate(rates: list[float]) -> tuple[float, tuple[float, float]]:
    """Median and (min, max) of window rates; the median ignores a minority of outlier windows."""
    if not rates:
        raise ValueError("no windows to summarise")
    return float(statistics.median(rates)), (float(min(rates)), float(max(rates)))


def steady_start(rates: list[float], *, min_windows: int = 3, tol: float = STEADY_TOL) -> int:
    """Index of the first window of steady state.

    The first window whose rate is within ``tol`` of the median of itself and every later window; a slow
    start (rates climbing) is cut off, while a single slow window later on is left to the median. At least
    ``min_windows`` windows are kept.
    """
    last_start = max(0, len(rates) - min_windows)
    for i in range(last_start + 1):
        m = statistics.median(rates[i:])
        if m > 0 and abs(rates[i] - m) / m <= tol:
            return i
        if rates[i] > m:  # faster than what follows: not a slow start, keep it (the median copes)
            return i
    return last_start


def _sync_fn(device: str) -> Callable[[], None]:
    if device.startswith("cuda"):
        import torch

        dev = torch.device(device)
        # the stream the batch was delivered on, not the whole device: a device-wide sync would also wait
        # for work the loader queued ahead (DALI decodes the next batches on its own streams)
        return lambda: torch.cuda.current_stream(dev).synchronize()
    return lambda: None


def _labels_last(batch: Any) -> bool:
    """Whether a batch is ``(images, labels)`` with a shaped labels tensor: counted as ``batch[-1].shape[0]``."""
    return isinstance(batch, (tuple, list)) and bool(batch) and bool(getattr(batch[-1], "shape", None))


def _batch_size(batch: Any) -> int:
    if isinstance(batch, (tuple, list)):
        batch = batch[-1]  # labels
    shape = getattr(batch, "shape", None)
    return int(shape[0]) if shape else len(batch)


def measure(
    loader: Iterable,
    device: str = "cpu",
    *,
    warmup_batches: int = 2,
    window_s: float = 1.0,
    windows: int = 5,
    max_windows: int | None = None,
    on_window: OnWindow | None = None,
    consume: Callable[[Any], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    after_warmup: Callable[[], None] | None = None,
    keep_loading: Callable[[Measurement], bool] | None = None,
    drain_batches: int = 0,
    drain_s: float | None = None,
) -> Measurement:
    """Measure ``loader``'s throughput.

    Args:
        loader: re-iterable; each ``iter()`` is an epoch (a new epoch starts when one ends, inside the clock).
        device: where batches arrive; on CUDA the device is synchronised before each clock read.
        warmup_batches: batches after the first one that are not timed.
        window_s: length of a timed window (at least one batch).
        windows: steady windows wanted; up to ``max_windows`` (default ``2 * windows``) are run while the
            leading ones are still speeding up.
        on_window: called after each window with (index, median rate so far, (lowest, highest) steady window so
            far); returning True stops early.
        consume: work done on each batch inside the clock (a training step), default none.
        after_warmup: called once after the warm-up, before the first window (several ranks wait there for
            each other, so that their windows start together).
        keep_loading: called with the measurement once the windows are done; batches are still loaded
            (untimed, from the same iterator, so no epoch is left half-read) while it returns True: a rank
            that is done keeps loading until the slowest is done.
        drain_batches: after the warm-up, up to this many batches are taken without ``consume`` (the batches
            a loader can hold ready: workers x prefetch factor, DALI's queue), for at most ``drain_s`` seconds
            (default ``window_s``). While a slow step ran, the loader filled its buffer; timed as they are, the
            buffered batches would be counted as loading speed (a torch loader at batch 512 with 16 workers
            holds 16,384 samples: seconds of a ResNet-50's steps).

    Returns:
        The :class:`Measurement`.
    """
    if windows < 1:
        raise ValueError(f"windows must be at least 1, but got {windows}")
    max_windows = max(windows, max_windows if max_windows is not None else 2 * windows)
    sync = _sync_fn(device)
    stream = _Stream(loader)
    t0 = clock()
    batch = stream.next_batch()
    if consume is not None:
        consume(batch)
    sync()
    startup = clock() - t0
    t1 = clock()
    _warm_up(stream, consume, warmup_batches, drain_batches, window_s if drain_s is None else drain_s, clock)
    sync()
    warmup = clock() - t1
    if after_warmup is not None:
        after_warmup()

    take: Callable[[Any], int] = _batch_size
    if consume is not None:
        def take(b: Any) -> int:
            consume(b)
            return _batch_size(b)
    fast = consume is None and _labels_last(batch)
    li = len(batch) - 1 if fast else 0  # labels' index, non-negative: the fast path of tuple indexing
    rates: list[float] = []
    batches = samples = 0
    steady = 0
    while True:
        n, got, seconds = stream.window(window_s, sync, clock, take, li if fast else None)
        batches += got
        samples += n
        rates.append(n / seconds)
        # a slow start is cut as soon as two windows show it; then `windows` steady windows are collected
        steady = steady_start(rates, min_windows=min(2, windows, len(rates)))
        if on_window is not None and on_window(len(rates) - 1, *robust_rate(rates[steady:])):
            break
        if len(rates) - steady >= windows or len(rates) >= max_windows:
            break
    median, spread = robust_rate(rates[steady:])
    m = Measurement(median, spread, rates, steady, startup, warmup, batches, samples, stream.epochs)
    if keep_loading is not None:
        while keep_loading(m):
            b = stream.next_batch()
            if consume is not None:
                consume(b)
    return m


_EMPTY_EPOCH = "the loader yields no batch in an epoch (dataset smaller than one batch?); use a smaller batch size"


def _warm_up(stream: _Stream, consume: Callable[[Any], None] | None, warmup_batches: int, drain_batches: int, drain_s: float,
             clock: Callable[[], float]) -> None:
    """The warm-up batches (each consumed), then up to ``drain_batches`` taken without ``consume`` for at most
    ``drain_s`` seconds: the batches the loader filled its buffer with while a slow step ran."""
    for _ in range(warmup_batches):
        batch = stream.next_batch()
        if consume is not None:
            consume(batch)
    if drain_batches > 0:
        t2 = clock()
        for _ in range(drain_batches):
            stream.next_batch()
            if clock() - t2 >= drain_s:
                break


class _Stream:
    """A loader's batches across epochs (a new epoch starts when one ends), counted as they are taken."""

    def __init__(self, loader: Iterable) -> None:
        self.loader = loader
        self.it = iter(loader)
        self.epochs = 1
        self.in_epoch = 0  # batches of the current epoch so far (start-up and warm-up included)
        self.epoch_len = 0  # batches in the last epoch counted batch by batch (0: none yet)
        self.k = 1  # batches between clock reads: grows only while a chunk takes under CHUNK_S (an almost free loader)

    def next_batch(self) -> Any:
        try:
            b = next(self.it)
            self.in_epoch += 1
            return b
        except StopIteration:
            self.epochs += 1
            self.it = iter(self.loader)
            try:
                b = next(self.it)
            except StopIteration:
                raise RuntimeError(_EMPTY_EPOCH) from None
            self.in_epoch = 1
            return b

    def window(self, window_s: float, sync: Callable[[], None], clock: Callable[[], float], take: Callable[[Any], int],
               li: int | None) -> tuple[int, int, float]:
        """One timed window of at least ``window_s`` and one batch. ``li``: the labels' index when a batch is counted
        by its labels' length alone (no ``consume``), else None. Returns (samples, batches, seconds)."""
        start = prev = clock()
        n = got = 0
        k = self.k
        while True:
            if li is not None and self.in_epoch == 0 and 0 < self.epoch_len <= k:
                # a whole epoch takes under CHUNK_S: it runs as a bare ``for`` loop, the clock read once an epoch
                before = n
                for b in self.it:
                    n += b[li].shape[0]
                if n == before:
                    raise RuntimeError(_EMPTY_EPOCH)
                got += self.epoch_len  # counted from the last epoch timed in chunks
                self.epochs += 1
                self.it = iter(self.loader)
            else:
                # per chunk: the same per-batch work as a bare loop plus islice; the clock (and device sync) once
                if li is not None:
                    sizes = [b[li].shape[0] for b in islice(self.it, k)]
                else:
                    sizes = [take(b) for b in islice(self.it, k)]
                n += sum(sizes)
                got += len(sizes)
                self.in_epoch += len(sizes)
                if len(sizes) < k:  # the epoch ended: the next one starts inside the clock
                    if not self.in_epoch:
                        raise RuntimeError(_EMPTY_EPOCH)
                    self.epoch_len, self.in_epoch = self.in_epoch, 0
                    self.epochs += 1
                    self.it = iter(self.loader)
            sync()
            now = clock()
            if now - prev < CHUNK_S:
                k = min(k * 2, 1 << 16)
            elif k > 1 and now - prev > 4 * CHUNK_S:
                k = max(1, min(k, self.epoch_len or k) // 2)
            prev = now
            if got and now - start >= window_s:
                self.k = k
                return n, got, now - start
