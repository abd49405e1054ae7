"""The memory guard: budgets, and sampling of a trial's process tree while it runs.

Before a trial the study can compare an estimate of the config's needs against the budgets
(``estimate``); while it runs, the parent samples the child's whole process tree (psutil: RSS, and the
child's GPU memory through NVML) several times a second and stops the child before it crosses a budget.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import psutil

from autotune.outcomes import Outcome

logger = logging.getLogger(__name__)

MiB = 2**20


@dataclasses.dataclass(frozen=True)
class Budgets:
    """Memory a trial may use, in MiB; None means unlimited."""

    host_mib: float | None = None
    gpu_mib: float | None = None
    shm_mib: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v) if v is not None else None) for k, v in dataclasses.asdict(self).items()}


def process_tree(pid: int) -> list[psutil.Process]:
    try:
        p = psutil.Process(pid)
        return [p, *p.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def tree_rss_mib(procs: list[psutil.Process]) -> float:
    """Resident memory of a process tree, counting shared pages once per process (USS when cheap is not)."""
    total = 0
    for p in procs:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total / MiB


class _Nvml:
    """Per-process GPU memory from NVML, or nothing when there is no driver."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        except Exception:  # noqa: BLE001 - no GPU, no driver
            self.nvml = None

    def used_mib(self, pids: set[int]) -> float | None:
        if not self.handles:
            return None
        total = 0
        for h in self.handles:
            try:
                procs = self.nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:  # noqa: BLE001
                continue
            for proc in procs:
                if proc.pid in pids and proc.usedGpuMemory:
                    total += proc.usedGpuMemory
        return total / MiB

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


class Monitor:
    """Samples a running trial; :meth:`sample` returns the outcome to stop it with, or None."""

    def __init__(self, budgets: Budgets) -> None:
        self.budgets = budgets
        self.peak_host_mib = 0.0
        self.peak_gpu_mib: float | None = None
        self._nvml = _Nvml() if budgets.gpu_mib is not None or True else None

    def sample(self, pid: int) -> Outcome | None:
        procs = process_tree(pid)
        if not procs:
            return None
        host = tree_rss_mib(procs)
        self.peak_host_mib = max(self.peak_host_mib, host)
        if self.budgets.host_mib is not None and host > self.budgets.host_mib:
            logger.info("trial process tree uses %.0f MiB of host memory, over the %.0f MiB budget", host, self.budgets.host_mib)
            return Outcome.OOM_HOST
        if self._nvml is not None:
            gpu = self._nvml.used_mib({p.pid for p in procs})
            if gpu is not None:
                self.peak_gpu_mib = max(self.peak_gpu_mib or 0.0, gpu)
                if self.budgets.gpu_mib is not None and gpu > self.budgets.gpu_mib:
                    logger.info("trial uses %.0f MiB of GPU memory, over the %.0f MiB budget", gpu, self.budgets.gpu_mib)
                    return Outcome.OOM_GPU
        return None

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.close()
