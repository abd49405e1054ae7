"""Native threads in DataLoader workers: each worker's share of the usable cores, not the whole machine.

torch already runs its own ops single-threaded in a worker, but OpenCV (which Albumentations and many users' own
transforms call) starts as many threads as it sees cores, in every worker. Sixteen workers then run up to 256
threads on 16 cores, and under a CPU quota it is worse: OpenCV reads the quota of the cgroup it sits at the root of, not
a job's own (a ``cpu.max`` of 4 CPUs on a 16-core host left each worker 16 OpenCV threads). On the 2-core machine,
Albumentations through 2 workers read 686-919 images/s with 16 OpenCV threads a worker, against 942-981 with one
(benchmarks/cpu-logs/2026-12-06-cv2-threads).

So each worker of a loader built here (:func:`autotune.loaders.backends._user.dataloader`: the user's own Dataset,
measured and trained alike) caps OpenCV at ``usable cores // workers`` threads (at least 1) before the user's own
``worker_init_fn`` runs, which may set it otherwise. OpenCV is not imported for it: a worker that has not imported it
gets ``OPENCV_FOR_THREADS_NUM`` (read when OpenCV loads), unless that is set already.
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
    affinity and cgroup quota counted), at least 1."""
    if cores is None:
        from autotune.config.fingerprint import usable_cpus

        cores = usable_cpus()
    return max(1, cores // max(1, num_workers))


def cap_native_threads(threads: int) -> None:
    """Cap this process's OpenCV threads at ``threads``: now if OpenCV is loaded, else as it loads."""
    cv2 = sys.modules.get("cv2")
    set_threads = getattr(cv2, "setNumThreads", None)
    if callable(set_threads):
        set_threads(threads)
    else:
        os.environ.setdefault(OPENCV_THREADS_ENV, str(threads))


def _init_worker(threads: int, inner: Callable[[int], Any] | None, worker_id: int) -> None:
    cap_native_threads(threads)
    if inner is not None:
        inner(worker_id)


def capped_worker_init(num_workers: int, inner: Callable[[int], Any] | None = None) -> Callable[[int], None]:
    """A DataLoader ``worker_init_fn`` that caps the worker's native threads at its share of the usable cores, then
    calls ``inner`` (the user's, or the seeding one); it pickles where ``inner`` does (forkserver and spawn)."""
    return functools.partial(_init_worker, worker_threads(num_workers), inner)


__all__ = ["OPENCV_THREADS_ENV", "cap_native_threads", "capped_worker_init", "worker_threads"]
