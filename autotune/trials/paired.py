"""Paired re-measurement: the contenders built side by side in one process and timed in alternating windows.

Fresh processes of one DALI config read 14.7k to 28.0k samples/s within an hour on the H200, and one process's own
windows drifted by as much over a few seconds. One fresh re-measurement each then told two configs 10 % apart from
each other no better than a coin. Here the contenders are built in one process and timed in turn, one window
each (A B C, A B C, ...): each round's windows see the same machine and the same process within a second or two, so
the drift cancels in a round's ratios, and the process's start-up is paid once for all of them.

At each switch, the loader about to be timed first hands over, untimed, what it prefetched while the others ran (its
workers' or DALI's queue), and goes on untimed while the loader before it refills its own queue (:data:`REFILL_FACTOR`
times its queue's batches at its last window's rate, at most :data:`MAX_SETTLE_WINDOWS` windows); then it is timed for
one window. The order turns each round (A B C, B C A, C A B, ...), so that no config always follows the same one.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from autotune.trials.measure import _batch_size, _labels_last, _Stream, _sync_fn, steady_start

if TYPE_CHECKING:
    from autotune.trials.measure import OnWindow
    from autotune.trials.spec import TrialSpec

logger = logging.getLogger(__name__)

#: called after each round with (round index, each loader's rate in it); True ends the rounds
OnRound = Callable[[int, list[float]], bool]
#: the loader timed before refills its queue while the next one runs, sharing the cores with it: it is given this many
#: times its queue's batches at its own last rate (on 2 cores, 1x left a DALI queue of 4 refilling into the next
#: window: a queue of 2 read 20-40 % below one of 4 in every round, in either order, against equal fresh processes)
REFILL_FACTOR = 3.0
#: the untimed seconds at a switch are at most this many windows
MAX_SETTLE_WINDOWS = 2.0


@dataclasses.dataclass
class PairedMeasurement:
    """Each round's rates (``rounds[r][i]``: loader i's window in round r), the first steady round, and each loader's
    start-up (its first batch) and warm-up seconds."""

    rounds: list[list[float]]
    steady_from: int
    startup_s: list[float]
    warmup_s: list[float]

    def rates(self, i: int) -> list[float]:
        """Loader ``i``'s steady windows, one a round."""
        return [r[i] for r in self.rounds[self.steady_from:]]


def measure_paired(
    loaders: Sequence[Any],
    device: str = "cpu",
    *,
    buffered: Sequence[int],
    window_s: float = 0.5,
    warmup_batches: int = 2,
    max_rounds: int = 6,
    deadline: float | None = None,
    on_round: OnRound | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> PairedMeasurement:
    """Time ``loaders`` (each re-iterable, each ``iter()`` an epoch) in alternating windows, round by round.

    Args:
        loaders: the loaders, built; each is started and warmed up in turn before the first round.
        device: where batches arrive (CUDA: the stream is synchronised before each clock read).
        buffered: each loader's batches it can hold ready (workers x prefetch factor, DALI's queue depth).
        window_s: each loader's timed window in a round.
        warmup_batches: batches each loader yields untimed after its first.
        max_rounds: rounds at most.
        deadline: on ``clock``, no round is begun that would end after it (priced at the longest round so far; the
            first at one window and the most a switch keeps untimed, for each loader), and none is finished that
            would: a loader's switch and window are begun only where both still end before it (a round left part-way
            is not counted).
        on_round: called after each round with its index and rates; True ends the rounds.
    """
    if len(loaders) != len(buffered):
        raise ValueError(f"{len(loaders)} loaders but {len(buffered)} buffer sizes")
    sync = _sync_fn(device)
    cap = MAX_SETTLE_WINDOWS * window_s
    streams = [_Stream(ld) for ld in loaders]
    startup: list[float] = []
    warmup: list[float] = []
    labels: list[int | None] = []
    refill: list[float] = []  # each loader's seconds to fill its queue again, at its last known rate
    for s, queue in zip(streams, buffered, strict=True):
        t0 = clock()
        first = s.next_batch()
        sync()
        t1 = clock()
        for _ in range(warmup_batches):
            s.next_batch()
        sync()
        t2 = clock()
        startup.append(t1 - t0)
        warmup.append(t2 - t1)
        labels.append(len(first) - 1 if _labels_last(first) else None)
        refill.append(min(cap, REFILL_FACTOR * queue * (t2 - t1) / warmup_batches) if warmup_batches else cap)
    rounds: list[list[float]] = []
    k = len(streams)
    round_s = k * (window_s + cap)
    before = k - 1  # the loader timed last: the first round begins while it refills

    def fits(seconds: float) -> bool:
        return deadline is None or clock() + seconds <= deadline

    while len(rounds) < max_rounds and fits(round_s):
        t_round = clock()
        rates: list[float | None] = [None] * k
        for i in [(len(rounds) + j) % k for j in range(k)]:  # the order turns each round
            if not fits(window_s + cap):
                break
            s = streams[i]
            _untimed(s, buffered[i], settle_s=refill[before], max_s=cap, clock=clock)
            n, got, seconds = s.window(window_s, sync, clock, _batch_size, labels[i])
            rates[i] = n / seconds
            refill[i] = min(cap, REFILL_FACTOR * buffered[i] * seconds / max(1, got))
            before = i
        whole = [r for r in rates if r is not None]
        if len(whole) < k:  # the deadline came part-way: a round like no other, not counted
            break
        rounds.append(whole)
        round_s = max(round_s if len(rounds) > 1 else 0.0, clock() - t_round)
        if on_round is not None and on_round(len(rounds) - 1, whole):
            break
    return PairedMeasurement(rounds, _first_steady(rounds), startup, warmup)


def _untimed(s: _Stream, batches: int, *, settle_s: float, max_s: float, clock: Callable[[], float]) -> None:
    """Take what ``s`` prefetched (up to ``batches``, for at most ``max_s``), then go on until ``settle_s`` has passed."""
    t0 = clock()
    for _ in range(batches):
        s.next_batch()
        if clock() - t0 >= max_s:
            return
    while clock() - t0 < settle_s:
        s.next_batch()


def _first_steady(rounds: list[list[float]]) -> int:
    """The first steady round: the second, when any loader's first window was still speeding up and two rounds are
    left after it; else the first."""
    if len(rounds) < 3:
        return 0
    slow = any(steady_start([r[i] for r in rounds], min_windows=2) >= 1 for i in range(len(rounds[0])))
    return 1 if slow else 0


def measure_paired_spec(spec: TrialSpec, on_window: OnWindow) -> dict[str, Any]:
    """Build ``spec.loader`` and ``spec.paired`` on the spec's device, measure them paired, and return the payload: the
    first loader's figures as a trial's (its steady windows' median and spread), and ``paired`` with every round.

    The rounds end by ``spec.paired_s`` seconds after the tuner sent the spec (``spec.sent_at``, wall clock: a process
    spawned rather than forked takes a second or two to read it). A loader whose workers start again every epoch has
    its rates counted over whole epochs, each paying its start once, as a trial's are
    (:func:`~autotune.trials.one_rank.per_epoch_rate`)."""
    from autotune.loaders.backends import get_backend
    from autotune.loaders.presets import get_preset
    from autotune.trials.one_rank import _epoch_samples, buffered_batches, per_epoch_rate, start_device

    start_device(spec.device)
    configs = (spec.loader, *spec.paired)
    built: list[Any] = []
    build_s: list[float] = []
    try:
        for cfg in configs:
            t0 = time.perf_counter()
            backend = get_backend(cfg.backend.value)
            built.append(backend.build(spec.dataset, get_preset(spec.pipeline), cfg, spec.device, seed=spec.seed))
            build_s.append(round(time.perf_counter() - t0, 3))
        logger.info("built %d loaders in %.2f s: %s", len(built), sum(build_s), "; ".join(c.describe() for c in configs))

        def on_round(k: int, rates: list[float]) -> bool:
            logger.info("round %d: %s", k + 1, ", ".join(f"{r:,.0f}" for r in rates))
            return on_window(k, rates[0], (rates[0], rates[0]))

        deadline = None
        if spec.paired_s is not None:
            late = max(0.0, time.time() - spec.sent_at) if spec.sent_at is not None else 0.0  # on the way here
            deadline = time.perf_counter() + spec.paired_s - late
        m = measure_paired(built, spec.device, buffered=[buffered_batches(c) for c in configs], window_s=spec.window_s,
                           warmup_batches=spec.warmup_batches, max_rounds=max(1, spec.max_rounds), on_round=on_round, deadline=deadline)
        whole = [_epoch_samples(ld, c.batch_size) if get_backend(c.backend.value).restarts_each_epoch(c) else None
                 for ld, c in zip(built, configs, strict=True)]
    finally:
        for ld in built:
            try:
                ld.close()
            except Exception:  # noqa: BLE001 - the others are closed still; the process ends after this trial
                logger.exception("closing a loader failed")
    for r in m.rounds:  # workers that do not persist: over whole epochs, each paying the start its first batch took
        for i, epoch in enumerate(whole):
            if epoch:
                r[i] = per_epoch_rate(r[i], m.startup_s[i], epoch)
    first = m.rates(0)
    out: dict[str, Any] = {
        "samples_per_s": statistics.median(first) if first else None,
        "spread": [min(first), max(first)] if first else None,
        "windows": [r[0] for r in m.rounds],
        "steady_from": m.steady_from,
        "startup_s": build_s[0] + m.startup_s[0],
        "warmup_s": m.warmup_s[0],
        "paired": {"rounds": [[round(x, 1) for x in r] for r in m.rounds], "steady_from": m.steady_from, "build_s": build_s,
                   "startup_s": [round(x, 3) for x in m.startup_s], "window_s": spec.window_s},
    }
    return out
