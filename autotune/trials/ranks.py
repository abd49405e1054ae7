"""Several ranks at once: measure a config the way one node of a DDP job runs it.

Inside the trial's child process, one loader per rank is built, each on its own shard (``shard_id=r,
num_shards=N``: a ``DistributedSampler`` for torch, the reader's shard for DALI) and, on GPUs, its own device
(``cuda:r``); on CPU every rank delivers to the CPU. All ranks start together and consume windows at the
same time, each in its own thread (the heavy work runs in the loaders' worker processes or DALI's threads;
a thread only moves batches). A rank that has its windows keeps loading until every rank is done, so the
slower ones never get the CPUs to themselves.

DDP waits for the slowest rank at every step, so the score is ``min(rank rates) * N``. The CPU share of each
rank is the search space's business: ``cores`` in a space resolves to ``usable cores // N``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.trials.measure import Measurement
    from autotune.trials.spec import TrialSpec

logger = logging.getLogger(__name__)

#: seconds to wait for every rank to reach the start line
START_TIMEOUT_S = 600.0


def rank_device(device: str, rank: int) -> str:
    """The device rank ``rank`` delivers to: ``cuda:<rank>`` on GPUs (one GPU per rank), else ``device``."""
    return f"cuda:{rank}" if device.startswith("cuda") else device


def combine(measurements: list[Measurement]) -> dict[str, Any]:
    """The node's score from per-rank measurements: the slowest rank's rate times the rank count.

    Args:
        measurements: one per rank, in rank order.

    Returns:
        The trial payload: ``samples_per_s``, ``spread`` and ``windows`` of the slowest rank scaled by N,
        ``per_rank_samples_per_s``, ``slowest_rank``, ``ranks`` and the start-up times.
    """
    n = len(measurements)
    if n == 0:
        raise ValueError("no rank measurements to combine")
    rates = [m.samples_per_s for m in measurements]
    slowest = min(range(n), key=lambda r: rates[r])
    s = measurements[slowest]
    return {
        "samples_per_s": rates[slowest] * n,
        "spread": [s.spread[0] * n, s.spread[1] * n],
        "windows": [w * n for w in s.windows],
        "steady_from": s.steady_from,
        "startup_s": max(m.startup_s for m in measurements),
        "warmup_s": max(m.warmup_s for m in measurements),
        "per_rank_samples_per_s": [round(r, 1) for r in rates],
        "per_rank_spread": [[round(m.spread[0], 1), round(m.spread[1], 1)] for m in measurements],
        "slowest_rank": slowest,
        "ranks": n,
        "sum_samples_per_s": round(sum(rates), 1),
    }


class _Windows:
    """Relays the node's running score to the pruner once every rank has finished window k."""

    def __init__(self, n: int, on_window: Callable[[int, float], bool]) -> None:
        self.n = n
        self.on_window = on_window
        self.lock = threading.Lock()
        self.medians: list[list[float]] = [[] for _ in range(n)]
        self.done = [False] * n
        self.reported = 0
        self.stop = threading.Event()

    def _flush(self) -> None:
        while not self.stop.is_set():
            k = self.reported
            if not all(len(m) > k or (d and m) for m, d in zip(self.medians, self.done)):
                return
            if all(d for d in self.done) and all(len(m) <= k for m in self.medians):
                return
            value = min(m[min(k, len(m) - 1)] for m in self.medians) * self.n
            self.reported += 1
            if self.on_window(k, value):
                self.stop.set()

    def window(self, rank: int, index: int, median: float) -> bool:
        with self.lock:
            self.medians[rank].append(median)
            self._flush()
            return self.stop.is_set()

    def finish(self, rank: int) -> None:
        with self.lock:
            self.done[rank] = True
            self._flush()


def measure_ranks(spec: TrialSpec, on_window: Callable[[int, float], bool]) -> dict[str, Any]:
    """Measure ``spec.loader`` on ``spec.ranks`` ranks at once; returns the trial payload (see :func:`combine`).

    Raises the first rank's exception (so the trial runner classifies it like a single-rank failure).
    """
    import torch

    from autotune.loaders.backends import get_backend
    from autotune.loaders.presets import get_preset
    from autotune.trials.measure import measure

    n = int(spec.ranks)
    if n < 1:
        raise ValueError(f"ranks must be at least 1, but got {n}")
    cuda = spec.device.startswith("cuda")
    if cuda and torch.cuda.device_count() < n:
        raise RuntimeError(f"{n} ranks need {n} GPUs, but torch sees {torch.cuda.device_count()}")
    backend = get_backend(spec.loader.backend.value)
    preset = get_preset(spec.pipeline)
    loaders = []
    t0 = time.perf_counter()
    try:
        for r in range(n):
            if cuda:
                torch.cuda.set_device(r)
            loaders.append(backend.build(spec.dataset, preset, spec.loader, rank_device(spec.device, r), shard_id=r, num_shards=n, seed=spec.seed))
        build_s = time.perf_counter() - t0

        relay = _Windows(n, on_window)
        start = threading.Barrier(n, timeout=START_TIMEOUT_S)
        all_done = threading.Event()
        results: list[Measurement | None] = [None] * n
        errors: list[BaseException | None] = [None] * n

        def work(r: int) -> None:
            dev = rank_device(spec.device, r)
            try:
                if cuda:
                    torch.cuda.set_device(r)
                start.wait()
                results[r] = measure(
                    loaders[r], dev, warmup_batches=spec.warmup_batches, window_s=spec.window_s, windows=spec.windows,
                    on_window=lambda i, v: relay.window(r, i, v),
                )
            except BaseException as e:  # noqa: BLE001 - handed to the main thread
                errors[r] = e
                relay.stop.set()
                start.abort()
            finally:
                relay.finish(r)
            _keep_busy(loaders[r], dev, relay, all_done, results)

        threads = [threading.Thread(target=work, args=(r,), name=f"rank{r}", daemon=True) for r in range(n)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads):
            if all(res is not None or err is not None for res, err in zip(results, errors)):
                all_done.set()
            time.sleep(0.01)
        first = next((e for e in errors if e is not None and not isinstance(e, threading.BrokenBarrierError)), None)
        first = first or next((e for e in errors if e is not None), None)
        if first is not None:
            raise first
        payload = combine([m for m in results if m is not None])
        payload["startup_s"] = build_s + payload["startup_s"]
        if cuda:
            payload["peak_gpu_mib"] = max(torch.cuda.max_memory_reserved(r) for r in range(n)) / 2**20
        logger.debug("ranks %d: per-rank %s samples/s, score %.1f", n, payload["per_rank_samples_per_s"], payload["samples_per_s"])
        return payload
    finally:
        for loader in loaders:
            try:
                loader.close()
            except Exception as e:  # noqa: BLE001 - closing must not hide the result
                logger.debug("closing a rank's loader failed: %s", e)


def _keep_busy(loader: Any, device: str, relay: _Windows, all_done: threading.Event, results: list) -> None:
    """After its windows, a rank keeps loading (untimed) until every rank is done."""
    if relay.stop.is_set():
        return
    try:
        while not all_done.is_set() and not relay.stop.is_set():
            for _ in loader:
                if all_done.is_set() or relay.stop.is_set():
                    return
    except Exception as e:  # noqa: BLE001 - the measurement is already taken
        logger.debug("rank loader failed after its windows: %s", e)
