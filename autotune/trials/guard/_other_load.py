"""Other load: how busy other jobs kept the cores this run may use, and whether that moved its figures."""

from __future__ import annotations

import os
import time
from typing import Any

import psutil


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity masks on this platform: every core
        return list(range(psutil.cpu_count() or 1))


def _busy_cpu_s(cpus: list[int]) -> float:
    """CPU seconds the cores ``cpus`` have spent running processes (steal too: another guest took them; not the
    kernel's interrupt handling, which no job here would cause or could stop)."""
    per = psutil.cpu_times(percpu=True)
    return sum(getattr(per[i], f, 0.0) for i in cpus if i < len(per) for f in ("user", "nice", "system", "steal"))


def cpu_s(p: psutil.Process) -> float:
    """CPU seconds of one process: its own and its reaped children's (0 when it is gone)."""
    try:
        t = p.cpu_times()
    except psutil.Error:
        return 0.0
    return t.user + t.system + t.children_user + t.children_system


_orphaned_cpu_s = 0.0


def count_orphaned_cpu(seconds: float) -> None:
    """CPU seconds of this run's processes killed with a trial and so never reaped here (see :class:`OtherLoad`)."""
    global _orphaned_cpu_s
    _orphaned_cpu_s += max(0.0, float(seconds))


def _tree_cpu_s(root: psutil.Process) -> float:
    """CPU seconds of ``root`` and its process tree: each live process's own and its reaped children's, and those
    of the processes killed with a trial (init reaps them: their time leaves the tree)."""
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        procs = [root]
    return sum(cpu_s(p) for p in procs) + _orphaned_cpu_s


class OtherLoad:
    """How many cores processes outside this one's tree kept busy since it was made: other jobs on the machine.

    The trials compete with them for the CPU, so on a busy machine every figure (the torch defaults' above all:
    one process decodes) moves with the other jobs, and a speedup can read several times what it is. Measured
    on the cores this process may run on (its affinity mask): other jobs' work elsewhere does not compete.
    """

    def __init__(self, usable: int | None = None) -> None:
        self._me = psutil.Process()
        self.cpus = _affinity()
        self.usable = usable or len(self.cpus)  # what the run may use: the cgroup quota can be below the mask
        self._t0 = time.monotonic()
        self._busy0 = _busy_cpu_s(self.cpus)
        self._ours0 = _tree_cpu_s(self._me)

    def cores(self) -> float | None:
        """Cores (of :attr:`cpus`) busy with other processes on average so far; None before a second has passed."""
        dt = time.monotonic() - self._t0
        if dt < 1.0:
            return None
        other = (_busy_cpu_s(self.cpus) - self._busy0) - (_tree_cpu_s(self._me) - self._ours0)
        return min(float(len(self.cpus)), max(0.0, other / dt))

    def to_dict(self) -> dict[str, Any] | None:
        """The study attr ``other_load``: ``{cores, cpus, usable_cores}`` (other jobs' cores, of the ``cpus`` this
        process may run on, of which the run may use ``usable_cores``), or None before a second has passed."""
        busy = self.cores()
        return None if busy is None else {"cores": round(busy, 2), "cpus": len(self.cpus), "usable_cores": self.usable}


#: other jobs taking more than this share of the cores the run may use (and half a core) make its figures unreliable
BUSY_SHARE = 0.25


def cores_taken(load: dict[str, Any] | None) -> float:
    """Of the cores the run may use, how many other jobs took: all their load when the run may use every core of
    its mask; under a CPU quota below the mask, only what the mask's free cores no longer cover."""
    if not load or load.get("cores") is None or not load.get("usable_cores"):
        return 0.0
    usable, other = float(load["usable_cores"]), float(load["cores"])
    free = float(load.get("cpus") or usable) - other
    return max(0.0, usable - max(0.0, free))


def too_busy(load: dict[str, Any] | None) -> bool:
    """Whether a study's ``other_load`` says other jobs moved its figures."""
    if not load or not load.get("usable_cores"):
        return False
    return cores_taken(load) >= max(0.5, BUSY_SHARE * float(load["usable_cores"]))
