"""The process-tree monitor: the parent samples a running trial against its memory budgets.

:class:`Monitor` samples the child's whole process tree several times a second (host memory close to PSS at the
cost of RSS, :class:`TreeMemory`; the child's GPU memory through NVML; ``/dev/shm`` use) and says when to stop
the child, before it crosses a budget. The parent never imports torch or initialises CUDA.
"""

from __future__ import annotations

import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

import psutil

from autotune.loaders.memory import MiB
from autotune.outcomes import Outcome
from autotune.trials.guard._budgets import SHM_PATH, Budgets, _gpu_index

if TYPE_CHECKING:
    from collections.abc import Callable

logger = logging.getLogger(__name__)


def shm_used_mib(path: str = SHM_PATH) -> float | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize / MiB


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def read_pss_mib(pid: int) -> float | None:
    """Proportional set size from ``/proc/PID/smaps_rollup`` (shared pages split among their users)."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
            for line in f:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class TreeMemory:
    """Host memory of a process tree, close to the sum of PSS at about the cost of reading RSS.

    Reading PSS costs ~10 ms a process (the kernel walks its page tables), and 25-30 ms for a process holding a
    CUDA context and DALI's buffers, while it holds that process's memory-map lock: read ten times a second, it
    took a fifth off a DALI GPU loader's rate (``benchmarks/trial_vs_plain.py``). RSS costs microseconds but counts
    the pages a forked worker shares with its parent (torch's libraries, copy-on-write heap) once per process.

    So each process is read exactly when first seen, then again (the longest waiting first, a few a sample) once
    the time since its last exact read is ``1 / EXACT_SHARE`` times what that read cost (a 25 ms read once in 1.25 s),
    but at least every ``MAX_GAP_S``. Between exact reads its figure is ``PSS + growth of RSS since``: new pages
    count in full, but pages a worker stops sharing with its parent (copy-on-write) show only at its next exact
    read, so the figure can read low for up to ``MAX_GAP_S``. When a process leaves the tree, the pages it shared
    fall to the others: every survivor is read again at once. ``exact=True`` (a budget about to be crossed) reads
    every process exactly, except one read within ``cost / CONFIRM_SHARE`` (a 25 ms read in the last 0.25 s) whose
    RSS has not grown since by more than ``GROWTH_SLACK_MIB`` (growth may be shared pages, which the estimate counts in
    full): a trial that sits near its budget is confirmed a few times a second, not read in full at every sample,
    and never stopped on an over-count.
    """

    #: the share of the time a process spends with its page tables being read
    EXACT_SHARE = 0.02
    #: the longest wait between two exact reads of a process
    MAX_GAP_S = 1.0
    #: near a budget, the share of the time a process may spend being read
    CONFIRM_SHARE = 0.1
    #: near a budget, RSS growth since a recent exact read up to which that read stands
    GROWTH_SLACK_MIB = 4.0

    def __init__(self, exact_per_sample: int = 2, clock: Callable[[], float] = time.monotonic) -> None:
        self.exact_per_sample = exact_per_sample
        self.clock = clock
        self._last: dict[psutil.Process, tuple[float, float]] = {}  # process -> (pss, rss at that read)
        self._read: dict[psutil.Process, tuple[float, float]] = {}  # process -> (when last read exactly, its cost)

    def _due(self, p: psutil.Process) -> float:
        """When the next exact read of ``p`` is due (between samples; near a budget see ``CONFIRM_SHARE``)."""
        when, cost = self._read[p]
        return when + min(cost / self.EXACT_SHARE, self.MAX_GAP_S)

    def total_mib(self, procs: list[psutil.Process], exact: bool = False) -> float:
        now = self.clock()
        alive = set(procs)
        gone = [p for p in self._last if p not in alive]
        for p in gone:
            del self._last[p]
            self._read.pop(p, None)
        if gone:  # what the leavers shared is now the survivors' alone: every read is due
            self._read = {p: (-math.inf, cost) for p, (_, cost) in self._read.items()}
        refresh = {p for p in procs if p not in self._last}
        if exact:
            for p in procs:
                if p in self._read and now - self._read[p][0] >= self._read[p][1] / self.CONFIRM_SHARE:
                    refresh.add(p)
        else:
            due = sorted((p for p in procs if p in self._read and self._due(p) <= now), key=self._due)
            refresh.update(due[: self.exact_per_sample])
        total = 0.0
        for p in procs:
            try:
                rss = p.memory_info().rss / MiB
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if exact and p in self._last and rss - self._last[p][1] > self.GROWTH_SLACK_MIB:
                refresh.add(p)  # grown since its read: the growth may be shared pages, counted in full until read
            if p in refresh:
                t0 = time.perf_counter()
                pss = read_pss_mib(p.pid)
                cost = time.perf_counter() - t0
                self._last[p] = (pss if pss is not None else rss, rss)
                self._read[p] = (now, cost)
            if p in self._last:
                pss, rss0 = self._last[p]
                total += pss + max(0.0, rss - rss0)
        return total


class _Nvml:
    """The trial's GPU memory from NVML: its processes' usage, or the device's growth where PIDs do not match."""

    def __init__(self, index: int) -> None:
        self.nvml: Any = None
        self.handle: Any = None
        self.baseline = 0.0
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            self.baseline = pynvml.nvmlDeviceGetMemoryInfo(self.handle).used / MiB
        except Exception:  # noqa: BLE001 - no GPU, no driver
            self.handle = None

    def used_mib(self, pids: set[int]) -> float | None:
        if self.handle is None:
            return None
        try:
            procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(self.handle)
        except Exception:  # noqa: BLE001 - NVML cannot list them: the device's growth below
            procs = []
        ours = [p.usedGpuMemory or 0 for p in procs if p.pid in pids]
        if ours:
            return sum(ours) / MiB
        try:  # a PID namespace (containers) hides our PIDs from NVML: the device's growth since the start
            return max(0.0, self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used / MiB - self.baseline)
        except Exception:  # noqa: BLE001 - NVML failing: no GPU reading this time
            return None

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001 - shutting NVML down is best effort
                pass


class Monitor:
    """Samples a running trial; :meth:`sample` returns the outcome to stop it with, or None.

    A trial is stopped when a sample is over a budget or the growth since the last sample would take the
    next one over it: the child is stopped before it crosses the budget, not after the kernel's
    out-of-memory killer has picked a victim. Every process ever seen in the tree is kept in ``seen``, so
    that none is left behind when the trial ends. The tree holds every rank's process (forked by the trial's
    child) with its workers; with several ranks, each rank's GPU is watched and the GPU budget holds for each.
    """

    def __init__(self, budgets: Budgets, device: str = "cpu", ranks: int = 1) -> None:
        self.budgets = budgets
        self.peak_host_mib = 0.0
        self.peak_gpu_mib: float | None = None
        self.peak_shm_mib: float | None = None
        self.reason = ""
        self.over: str | None = None
        self.seen: set[psutil.Process] = set()
        self._host = TreeMemory()
        self._prev: dict[str, float] = {}
        # one GPU per rank (``cuda:r``, as the ranks bind them); the GPU budget holds for each
        gpus = [device] if ranks <= 1 else [f"cuda:{r}" for r in range(ranks)]
        self._nvml = [_Nvml(_gpu_index(d)) for d in gpus] if device.startswith("cuda") else []
        self._shm0 = shm_used_mib() if budgets.shm_mib is not None else None

    def _projected(self, kind: str, value: float) -> float:
        """``value`` plus its growth since the last sample: where the next sample would be."""
        prev = self._prev.get(kind, value)
        self._prev[kind] = value
        return value + max(0.0, value - prev)

    def _stop(self, kind: str, value: float, budget: float, what: str) -> None:
        self.over = kind
        self.reason = f"stopped at {value:,.0f} MiB of {what}, about to cross the {budget:,.0f} MiB budget"
        logger.info("trial %s", self.reason)

    def sample(self, pid: int) -> Outcome | None:
        procs = process_tree(pid)
        if not procs:
            return None
        self.seen.update(procs)
        b = self.budgets
        prev = self._prev.get("host")
        host = self._host.total_mib(procs)
        if b.host_mib is not None and self._projected("host", host) > b.host_mib:
            host = self._host.total_mib(procs, exact=True)  # confirm with exact figures before stopping
            self._prev["host"] = host
            if host + max(0.0, host - (prev if prev is not None else host)) > b.host_mib:
                self.peak_host_mib = max(self.peak_host_mib, host)
                self._stop("host", host, b.host_mib, "host memory")
                return Outcome.OOM_HOST
        self.peak_host_mib = max(self.peak_host_mib, host)
        if self._shm0 is not None:
            used = shm_used_mib()
            if used is not None:
                shm = max(0.0, used - self._shm0)
                self.peak_shm_mib = max(self.peak_shm_mib or 0.0, shm)
                if b.shm_mib is not None and self._projected("shm", shm) > b.shm_mib:
                    self._stop("shm", shm, b.shm_mib, "/dev/shm")
                    return Outcome.SHM
        if self._nvml:
            pids = {p.pid for p in procs}
            per_gpu = [u for u in (nv.used_mib(pids) for nv in self._nvml) if u is not None]
            gpu = max(per_gpu) if per_gpu else None
            if gpu is not None:
                self.peak_gpu_mib = max(self.peak_gpu_mib or 0.0, gpu)
                if b.gpu_mib is not None and self._projected("gpu", gpu) > b.gpu_mib:
                    self._stop("gpu", gpu, b.gpu_mib, "GPU memory")
                    return Outcome.OOM_GPU
        return None

    def close(self) -> None:
        for nv in self._nvml:
            nv.close()
