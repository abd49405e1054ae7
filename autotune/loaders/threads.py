"""Native threads in DataLoader workers: each worker's share of the usable cores, not the whole machine.

torch already runs its own ops single-threaded in a worker, but OpenCV (which Albumentations and many users' own
transforms call) starts as many threads as it sees cores, in every worker. Sixteen workers then run up to 256
threads on 16 cores, and under a CPU quota it is worse: OpenCV reads the quota of the cgroup it sits at the root of, not
a job's own (a ``cpu.max`` of 4 CPUs on a 16-core host left each worker 16 OpenCV threads). On the 2-core machine,
Albumentations through 2 workers read 686-919 images/s with 16 OpenCV threads a worker, against 942-981 with one
(benchmarks/cpu-logs/2026-12-06-cv2-threads).

So each worker of a loader built here (:func:`autotune.loaders.backends._user.dataloader`: the user's own Dataset,
measured and trained alike) lowers OpenCV's threads to its share, ``usable cores // (workers x the node's ranks)``
(the ranks not counted where a launcher pinned each rank to its cores), at least 1, before the user's own
``worker_init_fn`` runs (which may set it otherwise). It never raises them: a user who set fewer keeps them.

- OpenCV not loaded yet: ``OPENCV_FOR_THREADS_NUM`` (read when it loads), unless that is set already.
- Loaded, in a worker started by spawn or forkserver (it has run nothing yet): ``cv2.setNumThreads(share)``.
- Loaded before a fork (the parent's thread pool comes along): lowering it to any count but 0 hangs the worker for
  good once the parent's pool has run and gone idle (OpenCV 5.1 here: ``setNumThreads(1)`` in the child never
  returned). So a forked worker whose share is one thread gets ``setNumThreads(0)`` (OpenCV's own threads off, the
  same work on the worker's thread); a larger share leaves OpenCV as it was.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any

#: the environment variable OpenCV reads, as it loads, for its threads
OPENCV_THREADS_ENV = "OPENCV_FOR_THREADS_NUM"


def worker_threads(num_workers: int, cores: int | None = None) -> int:
    """Native threads each of ``num_workers`` workers may run: its share of ``cores`` (default: the usable cores,
    affinity and cgroup quota counted, shared by the node's ranks unless a launcher pinned each to its own), at least 1."""
    if cores is None:
        from autotune.config import fingerprint

        cores = fingerprint.usable_cpus()
        ranks = fingerprint.local_ranks()
        if ranks > 1 and len(os.sched_getaffinity(0)) >= (os.cpu_count() or 1):
            cores = max(1, cores // ranks)
    return max(1, cores // max(1, num_workers))


def cap_native_threads(threads: int, forked: bool = False) -> None:
    """Lower this worker's OpenCV threads to ``threads``: now if OpenCV is loaded, else as it loads (never raised).
    ``forked``: the worker was forked, and an OpenCV loaded now came from its parent (module docstring)."""
    cv2 = sys.modules.get("cv2")
    get_threads, set_threads = getattr(cv2, "getNumThreads", None), getattr(cv2, "setNumThreads", None)
    if not (callable(get_threads) and callable(set_threads)):
        os.environ.setdefault(OPENCV_THREADS_ENV, str(threads))
        return
    if get_threads() <= threads:
        return
    if not forked:
        set_threads(threads)
    elif threads == 1:
        set_threads(0)  # the one lower setting a forked worker can make without hanging


def _init_worker(threads: int, forked: bool, inner: Callable[[int], Any] | None, worker_id: int) -> None:
    cap_native_threads(threads, forked)
    if inner is not None:
        inner(worker_id)


def capped_worker_init(num_workers: int, start_method: str, inner: Callable[[int], Any] | None = None) -> Callable[[int], None]:
    """A DataLoader ``worker_init_fn`` that lowers the worker's native threads to its share of the usable cores, then
    calls ``inner`` (the user's, or the seeding one); ``start_method``: how the workers start (fork, forkserver,
    spawn). It pickles where ``inner`` does (forkserver and spawn)."""
    return functools.partial(_init_worker, worker_threads(num_workers), start_method == "fork", inner)


__all__ = ["OPENCV_THREADS_ENV", "cap_native_threads", "capped_worker_init", "worker_threads"]
