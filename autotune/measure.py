"""Measure a loader's steady-state throughput: samples per second delivered on the device.

Start-up (building the iterator, the first batch) and warm-up batches are timed apart. Then the loop runs
timed windows; each window's rate is samples / seconds, where the clock stops only after the batch is on the
device (``torch.cuda.synchronize`` on CUDA). Leading windows that are still speeding up (workers filling
their queues, page cache, cudnn/nvjpeg warm-up) are detected and left out; the score is the median of the
steady windows and the spread is their minimum and maximum.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any

#: a window within this fraction of the median of the windows after it counts as steady
STEADY_TOL = 0.10


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

    @property
    def rel_spread(self) -> float:
        lo, hi = self.spread
        return (hi - lo) / self.samples_per_s if self.samples_per_s else 0.0

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
        return lambda: torch.cuda.synchronize(dev)
    return lambda: None


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
    on_window: Callable[[int, float], bool] | None = None,
    consume: Callable[[Any], None] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Measurement:
    """Measure ``loader``'s throughput.

    Args:
        loader: re-iterable; each ``iter()`` is an epoch (a new epoch starts when one ends, inside the clock).
        device: where batches arrive; on CUDA each batch is synchronised before the clock reads.
        warmup_batches: batches after the first one that are not timed.
        window_s: length of a timed window (at least one batch).
        windows: steady windows wanted; up to ``max_windows`` (default ``2 * windows``) are run while the
            leading ones are still speeding up.
        on_window: called after each window with (index, median rate so far); returning True stops early.
        consume: work done on each batch inside the clock (a training step), default none.

    Returns:
        The :class:`Measurement`.
    """
    if windows < 1:
        raise ValueError(f"windows must be at least 1, but got {windows}")
    max_windows = max(windows, max_windows if max_windows is not None else 2 * windows)
    sync = _sync_fn(device)
    epochs = 1
    it = iter(loader)

    def next_batch():
        nonlocal it, epochs
        try:
            return next(it)
        except StopIteration:
            epochs += 1
            it = iter(loader)
            try:
                return next(it)
            except StopIteration:
                raise RuntimeError("the loader yields no batch in an epoch (dataset smaller than one batch?); use a smaller batch size") from None

    t0 = clock()
    batch = next_batch()
    if consume is not None:
        consume(batch)
    sync()
    startup = clock() - t0
    t1 = clock()
    for _ in range(warmup_batches):
        batch = next_batch()
        if consume is not None:
            consume(batch)
    sync()
    warmup = clock() - t1

    rates: list[float] = []
    batches = samples = 0
    steady = 0
    while True:
        start = clock()
        n = 0
        while True:
            batch = next_batch()
            if consume is not None:
                consume(batch)
            sync()
            n += _batch_size(batch)
            batches += 1
            now = clock()
            if now - start >= window_s:
                break
        samples += n
        rates.append(n / (now - start))
        steady = steady_start(rates, min_windows=min(windows, len(rates)))
        if on_window is not None and on_window(len(rates) - 1, robust_rate(rates[steady:])[0]):
            break
        if len(rates) - steady >= windows or len(rates) >= max_windows:
            break
    median, spread = robust_rate(rates[steady:])
    return Measurement(median, spread, rates, steady, startup, warmup, batches, samples, epochs)
