"""A trial's ranks: measure a config the way one node of a DDP job runs it, one process per rank.

With N ranks (:func:`measure_ranks`), the trial's child forks N rank processes, as ``torchrun`` starts one
process per GPU: each measures what a single-rank trial measures (:func:`autotune.trials.one_rank.measure_rank`)
with its own interpreter lock, its own loader on its own shard (``shard_id=r,
num_shards=N``: a ``DistributedSampler`` for torch, the reader's shard for DALI) and, on GPUs, its own device
(``cuda:r``, bound before anything touches CUDA; the trial's child never does, so every rank makes its own CUDA
context). On CPU every rank delivers to the CPU. The ranks are forked from the child, which has imported torch
already (it is itself forked from the zygote), so a rank starts in milliseconds; they stay in the child's
process tree, which the runner's memory guard samples, and die with it.

The ranks wait for each other after building and warming up their loaders, then time their windows together;
a rank that has its windows keeps loading (untimed) until every rank is done, so the slower ones never get the
CPUs to themselves. The child relays the node's running score to the pruner. A rank that fails (an exception,
a signal, a GPU out of memory) ends the trial: the others are killed with their workers and the failing rank's
outcome is the trial's. A rank that hangs is caught by the trial's timeout, which kills the whole tree.

DDP waits for the slowest rank at every step, so the score is ``min(rank rates) * N``. The CPU share of each
rank is the search space's business: ``cores`` in a space resolves to ``usable cores // N``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import psutil

from autotune.outcomes import Outcome, died_of
from autotune.trials.measure import Measurement, OnWindow
from autotune.trials.one_rank import measure_rank

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from autotune.trials.spec import TrialSpec

logger = logging.getLogger(__name__)

#: seconds to wait for every rank to reach the start line
START_TIMEOUT_S = 600.0
#: seconds the ranks get to close their loaders and exit once the measurement is in
EXIT_GRACE_S = 10.0


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

    def __init__(self, n: int, on_window: OnWindow) -> None:
        self.n = n
        self.on_window = on_window
        self.lock = threading.Lock()
        self.medians: list[list[tuple[float, tuple[float, float]]]] = [[] for _ in range(n)]  # (median, spread) a window
        self.done = [False] * n
        self.reported = 0
        self.stop = threading.Event()

    def _flush(self) -> None:
        while not self.stop.is_set():
            k = self.reported
            if not all(len(m) > k or (d and m) for m, d in zip(self.medians, self.done, strict=False)):
                return
            if all(d for d in self.done) and all(len(m) <= k for m in self.medians):
                return
            value, (lo, hi) = min((m[min(k, len(m) - 1)] for m in self.medians), key=lambda ms: ms[0])  # the slowest rank's
            self.reported += 1
            if self.on_window(k, value * self.n, (lo * self.n, hi * self.n)):
                self.stop.set()

    def window(self, rank: int, index: int, median: float, spread: tuple[float, float]) -> bool:
        with self.lock:
            self.medians[rank].append((median, spread))
            self._flush()
            return self.stop.is_set()

    def finish(self, rank: int) -> None:
        with self.lock:
            self.done[rank] = True
            self._flush()


class RankFailed(Exception):
    """One rank of a trial failed; ``outcome`` is how (classified in the rank), ``bad_file`` for ``bad-data``."""

    def __init__(self, rank: int, outcome: Outcome, message: str, bad_file: str | None = None) -> None:
        super().__init__(f"rank {rank}: {message}")
        self.rank = rank
        self.outcome = outcome
        self.bad_file = bad_file


class _Stopped(Exception):
    """The trial's child told a rank to stop before its windows."""


def measure_ranks(
    spec: TrialSpec,
    on_window: OnWindow,
    *,
    classify: Callable[[BaseException], tuple[Outcome, str | None]] | None = None,
    inject: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Measure ``spec.loader`` on ``spec.ranks`` rank processes at once; returns the trial payload (see :func:`combine`).

    Call it before this process touches CUDA: the ranks are forked from it.

    Args:
        spec: the trial; ``spec.ranks`` processes are forked.
        on_window: called with (window index, the node's score so far, its spread so far) once every rank has
            that window; returning True stops every rank.
        classify: maps an exception raised in a rank to its outcome and bad file (default: ``crash``).
        inject: the test-suite's fault injection (:mod:`autotune.trials._faults`): ``spec.inject`` ``rank<R>-<fault>`` runs ``inject(fault)``
            in rank R.

    Raises:
        RankFailed: a rank raised, or died; every rank process is gone by then.
    """
    from multiprocessing.connection import Pipe

    n = int(spec.ranks)
    if n < 1:
        raise ValueError(f"ranks must be at least 1, but got {n}")
    _preload(spec)
    ranks: list[_Rank] = []
    ok = False
    try:
        for r in range(n):
            ours, theirs = Pipe()
            pid = os.fork()
            if pid == 0:  # the rank: never returns
                code = 1
                try:
                    ours.close()
                    for other in ranks:
                        other.conn.close()
                    code = _rank_main(r, n, spec, theirs, classify, inject)
                finally:
                    os._exit(code)
            theirs.close()
            ranks.append(_Rank(r, pid, ours))
        payload = _conduct(ranks, on_window)
        ok = True
        return payload
    finally:
        _end(ranks, grace=EXIT_GRACE_S if ok else 0.0)


def _preload(spec: TrialSpec) -> None:
    """Import what every rank needs once, before forking (the zygote has most of it already).

    DALI is left to the ranks: its import sets up its allocators, and nothing CUDA may come before the fork.
    """
    import importlib

    for name in ("torch", "torchvision", "autotune.loaders.backends", "autotune.loaders.presets", "autotune.trials.measure"):
        importlib.import_module(name)
    from autotune.loaders.backends import get_backend

    backend = get_backend(spec.loader.backend)
    if backend.preload_before_fork:
        backend.preload()
    if spec.model is not None:
        importlib.import_module("autotune.trials.model")


class _Rank:
    def __init__(self, rank: int, pid: int, conn: Connection) -> None:
        self.rank = rank
        self.pid = pid
        self.conn = conn
        self.exitcode: int | None = None

    def send(self, msg: str) -> None:
        try:
            self.conn.send(msg)
        except OSError:  # it is gone: its end of the pipe says so
            pass

    def reap(self, timeout: float) -> int | None:
        """Its exit code (negative: the signal), waiting up to ``timeout`` s; None while it runs."""
        deadline = time.monotonic() + timeout
        while self.exitcode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.exitcode = -signal.SIGKILL
                break
            if pid:
                self.exitcode = os.waitstatus_to_exitcode(status)
                break
            if time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        return self.exitcode


def _conduct(ranks: list[_Rank], on_window: OnWindow) -> dict[str, Any]:
    """The trial child's side: start the ranks together, relay windows, collect results or the first failure."""
    from multiprocessing.connection import wait

    n = len(ranks)
    relay = _Windows(n, on_window)
    waiting = {rk.rank for rk in ranks}
    results: dict[int, dict[str, Any]] = {}
    live = {rk.conn: rk for rk in ranks}
    started = time.monotonic()
    stop_sent = False
    while len(results) < n:
        if waiting and time.monotonic() - started > START_TIMEOUT_S:
            raise RankFailed(min(waiting), Outcome.TIMEOUT, f"not ready within {START_TIMEOUT_S:.0f} s")
        for conn in cast("list[Connection]", wait(list(live), timeout=1.0)):  # wait returns those of the connections given that are ready
            rk = live[conn]
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                del live[conn]
                if rk.rank in results:  # its loader failed after its windows: the measurement stands
                    continue
                raise _died(rk) from None
            if msg[0] == "ready":
                waiting.discard(rk.rank)
                if not waiting:  # the barrier: every rank is built and warmed up
                    for other in ranks:
                        other.send("go")
            elif msg[0] == "window":
                relay.window(rk.rank, msg[1], msg[2], msg[3])
            elif msg[0] == "result":
                results[rk.rank] = msg[1]
                relay.finish(rk.rank)
            elif msg[0] == "error":
                raise RankFailed(rk.rank, Outcome(msg[1]), msg[2], msg[3])
            if relay.stop.is_set() and not stop_sent:  # pruned: every rank ends its windows now
                stop_sent = True
                for other in ranks:
                    other.send("stop")
    for rk in ranks:
        rk.send("done")
    payload = combine([_measurement(results[r]) for r in range(n)])
    first = results[0]
    payload["startup_s"] = max(results[r]["startup_s"] for r in range(n))
    peaks = [results[r]["peak_gpu_mib"] for r in range(n) if results[r].get("peak_gpu_mib") is not None]
    if peaks:
        payload["peak_gpu_mib"] = max(peaks)
    known = set(payload) | set(Measurement.__dataclass_fields__) | {"peak_gpu_mib"}
    payload.update({k: v for k, v in first.items() if k not in known})  # the model's attributes, say
    logger.debug("ranks %d: per-rank %s samples/s, score %.1f", n, payload["per_rank_samples_per_s"], payload["samples_per_s"])
    return payload


def _measurement(d: dict[str, Any]) -> Measurement:
    return Measurement(d["samples_per_s"], tuple(d["spread"]), d["windows"], d["steady_from"], d["startup_s"], d["warmup_s"], 0, 0)


def _died(rk: _Rank) -> RankFailed:
    outcome, message = died_of(rk.reap(2.0), "rank process")
    return RankFailed(rk.rank, outcome, message)


def _end(ranks: list[_Rank], grace: float) -> None:
    """Every rank and its workers gone: ``grace`` s to exit by themselves, then SIGTERM, then SIGKILL.

    The trees are listed first: a worker whose rank has exited is no longer anyone's descendant here.
    """
    procs: list[psutil.Process] = []
    for rk in ranks:
        if rk.exitcode is None:
            try:
                p = psutil.Process(rk.pid)
                procs += [p, *p.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
    deadline = time.monotonic() + grace
    for rk in ranks:
        rk.reap(max(0.0, deadline - time.monotonic()))
    procs = [p for p in procs if p.is_running()]  # psutil checks the start time: a reused PID is not hit
    for p in procs:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=2.0)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=2.0)
    for rk in ranks:
        rk.reap(2.0)
        rk.conn.close()


def _rank_main(
    r: int,
    n: int,
    spec: TrialSpec,
    conn: Connection,
    classify: Callable[[BaseException], tuple[Outcome, str | None]] | None,
    inject: Callable[[str], None] | None,
) -> int:
    """One rank process: measure shard ``r`` of ``n`` on its device; talk to the trial's child on ``conn``."""
    stopped = False
    sent = False

    def ready() -> None:
        conn.send(("ready",))
        if conn.recv() != "go":
            raise _Stopped

    def window(k: int, value: float, spread: tuple[float, float]) -> bool:
        nonlocal stopped
        conn.send(("window", k, value, spread))
        while conn.poll():
            stopped = stopped or conn.recv() in ("stop", "done")
        return stopped

    def keep_loading(payload: dict[str, Any]) -> bool:
        nonlocal stopped, sent
        if not sent:
            conn.send(("result", payload))
            sent = True
        if not stopped and conn.poll():
            conn.recv()  # "done" (every rank has its windows) or "stop"
            stopped = True
        return not stopped

    try:
        prefix = f"rank{r}-"
        if inject is not None and spec.inject and spec.inject.startswith(prefix):
            inject(spec.inject.removeprefix(prefix))
        import torch

        # each rank its share of the intra-op threads, as ``torchrun`` sets OMP_NUM_THREADS per rank: N
        # processes with a pool of every core each spin against each other (many times slower on CPU)
        torch.set_num_threads(max(1, torch.get_num_threads() // n))
        device = rank_device(spec.device, r)
        if device.startswith("cuda"):
            if torch.cuda.device_count() <= r:
                raise RuntimeError(f"{n} ranks need {n} GPUs, but torch sees {torch.cuda.device_count()}")
        payload = measure_rank(spec, device, window, shard_id=r, num_shards=n, after_warmup=ready, keep_loading=keep_loading)
        if not sent:
            conn.send(("result", payload))
        return 0
    except _Stopped:
        return 0
    except BaseException as e:  # everything is reported to the trial's child
        if sent:  # after its windows, while keeping the others company: the measurement stands
            logger.debug("rank %d's loader failed after its windows: %s", r, e)
            return 0
        outcome, bad = classify(e) if classify is not None else (Outcome.CRASH, None)
        logger.debug("rank %d failed", r, exc_info=True)
        try:
            conn.send(("error", outcome.value, f"{type(e).__name__}: {e}".strip()[:2000], bad))
        except OSError:
            pass
        return 1
