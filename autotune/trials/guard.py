"""The memory guard: budgets, an estimate before each trial, and sampling of the trial while it runs.

- :func:`default_budgets`: GPU memory (a fraction of what is free when the study starts, minus the room the
  training model needs), host memory (a fraction of what is available) and ``/dev/shm`` (a fraction of its
  free space); each can be set on the command line instead.
- :func:`check_estimate`: the bytes a config needs (:func:`autotune.loaders.memory.estimate`: batches in flight,
  decode buffers, pinned copies, worker processes, shared memory); a config predicted to exceed a budget is not run.
- :class:`Monitor`: the parent samples the child's whole process tree several times a second (host memory
  close to PSS at the cost of RSS, the child's GPU memory through NVML, ``/dev/shm`` use) and says when to
  stop the child, before it crosses a budget.

The parent never imports torch or initialises CUDA: GPU numbers come from NVML only.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from typing import TYPE_CHECKING, Any

import psutil

from autotune.config.fingerprint import nvml_index
from autotune.loaders.memory import MiB, estimate
from autotune.outcomes import Outcome

if TYPE_CHECKING:
    from collections.abc import Callable

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.trials.model import ModelSpec
    from autotune.trials.spec import TrialResult

logger = logging.getLogger(__name__)


#: Default budgets, as fractions of what is free when the study starts.
HOST_FRACTION = 0.8
GPU_FRACTION = 0.9
SHM_FRACTION = 0.8
SHM_PATH = "/dev/shm"

# --------------------------------------------------------------------------------------------- budgets
@dataclasses.dataclass(frozen=True)
class Budgets:
    """Memory a trial may use, in MiB; None means unlimited. ``gpu_mib`` applies to each GPU."""

    host_mib: float | None = None
    gpu_mib: float | None = None
    shm_mib: float | None = None
    reserve_gpu_mib: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {k: (round(v) if v is not None else None) for k, v in dataclasses.asdict(self).items()}


def _gpu_index(device: str) -> int:
    """NVML index of ``cuda[:N]``, through ``CUDA_VISIBLE_DEVICES`` (indices or GPU UUIDs)."""
    return nvml_index(int(device.split(":", 1)[1]) if ":" in device else 0)


def gpu_free_mib(index: int = 0) -> float | None:
    """Free memory of GPU ``index`` from NVML, or None without a driver (no CUDA context is created)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(index)).free / MiB
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no GPU, no driver, no nvidia-ml-py
        return None


def shm_free_mib(path: str = SHM_PATH) -> float | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize / MiB


def shm_used_mib(path: str = SHM_PATH) -> float | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize / MiB


def default_budgets(host_mib: float | None = None, gpu_mib: float | None = None, reserve_gpu_mib: float = 0.0, shm_mib: float | None = None, device: str = "cpu") -> Budgets:
    """The budgets of a study: the values given, the rest from what is free now.

    Args:
        host_mib: host memory a trial's process tree may use; default ``HOST_FRACTION`` of available memory.
        gpu_mib: GPU memory a trial may use on each GPU; default ``GPU_FRACTION`` of the GPU's free memory
            minus ``reserve_gpu_mib``. Ignored on a CPU device.
        reserve_gpu_mib: GPU memory to leave for the training model.
        shm_mib: ``/dev/shm`` a trial may use; default ``SHM_FRACTION`` of its free space.
        device: ``cpu`` or ``cuda[:N]``.

    Returns:
        The :class:`Budgets`.

    Raises:
        UserError: when the reserve leaves no GPU memory for the loader.
    """
    from autotune.errors import UserError

    reserve = float(reserve_gpu_mib or 0.0)
    if reserve < 0:
        raise UserError(f"--reserve-gpu-mem must be >= 0 MiB, but got {reserve:g}")
    if host_mib is None:
        host_mib = HOST_FRACTION * psutil.virtual_memory().available / MiB
    if shm_mib is None:
        free = shm_free_mib()
        shm_mib = SHM_FRACTION * free if free is not None else None
    gpu: float | None = None
    if device.startswith("cuda"):
        free = gpu_free_mib(_gpu_index(device))
        if gpu_mib is not None:
            gpu = float(gpu_mib)
            if reserve and free is not None:
                gpu = min(gpu, free - reserve)
        elif free is not None:
            gpu = GPU_FRACTION * free - reserve
        if gpu is not None and gpu <= 0:
            raise UserError(
                f"--reserve-gpu-mem {reserve:.0f} MiB leaves no GPU memory for the loader ({free:.0f} MiB free now); "
                "lower the reserve or free the GPU"
            )
    return Budgets(host_mib=float(host_mib), gpu_mib=gpu, shm_mib=float(shm_mib) if shm_mib is not None else None, reserve_gpu_mib=reserve)


# -------------------------------------------------------------------------------------------- estimate
def check_estimate(
    loader: LoaderConfig,
    dataset: Dataset,
    budgets: Budgets,
    *,
    pipeline: str = "imagenet-train",
    device: str = "cpu",
    ranks: int = 1,
    model: ModelSpec | None = None,
) -> TrialResult | None:
    """None when ``loader`` is expected to fit ``budgets``; else the result to record instead of running it.

    ``/dev/shm`` over its budget gives ``shm``; host or GPU memory over theirs gives ``predicted-oom``. The
    estimate is kept in ``extra["estimate"]``.
    """
    from autotune.trials.spec import TrialResult

    est = estimate(loader, dataset, pipeline, device, ranks)
    if model is not None and est["gpu_mib"] is not None:
        from autotune.trials.model import estimate_gpu_mib

        model_mib = estimate_gpu_mib(model, loader.batch_size)  # the training model shares the GPU
        if model_mib:
            est["parts"]["gpu_model"] = model_mib
            est["gpu_mib"] += model_mib
    bud = budgets
    checks = (
        ("shm", est["shm_mib"], bud.shm_mib, Outcome.SHM, "/dev/shm"),
        ("host", est["host_mib"], bud.host_mib, Outcome.PREDICTED_OOM, "host memory"),
        ("gpu", est["gpu_mib"], bud.gpu_mib, Outcome.PREDICTED_OOM, "GPU memory"),
    )
    for kind, need, budget, outcome, what in checks:
        if need is None or budget is None or need <= budget:
            continue
        top = sorted(((v, k) for k, v in est["parts"].items() if k.startswith("gpu_") == (kind == "gpu")), reverse=True)[:3]
        detail = ", ".join(f"{k.removeprefix('gpu_')} {v:,.0f}" for v, k in top)
        msg = f"not run: predicted to need {need:,.0f} MiB of {what} ({detail} ...), over the {budget:,.0f} MiB budget"
        logger.info("%s: %s", loader.describe(), msg)
        return TrialResult(outcome, message=msg, extra={"estimate": est, "over": kind, "predicted": True})
    return None


def violation(result: TrialResult, budgets: Budgets) -> float:
    """How far a memory outcome went over its budget, as a fraction (> 0): the constraint the sampler sees."""
    est = result.extra.get("estimate") or {}
    kind = result.extra.get("over")
    need = {"host": est.get("host_mib"), "gpu": est.get("gpu_mib"), "shm": est.get("shm_mib")}.get(kind or "")
    budget = {"host": budgets.host_mib, "gpu": budgets.gpu_mib, "shm": budgets.shm_mib}.get(kind or "")
    if need and budget:
        return max(0.01, need / budget - 1.0)
    return 1.0


# --------------------------------------------------------------------------------------------- sampling
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
        except Exception:  # noqa: BLE001
            procs = []
        ours = [p.usedGpuMemory or 0 for p in procs if p.pid in pids]
        if ours:
            return sum(ours) / MiB
        try:  # a PID namespace (containers) hides our PIDs from NVML: the device's growth since the start
            return max(0.0, self.nvml.nvmlDeviceGetMemoryInfo(self.handle).used / MiB - self.baseline)
        except Exception:  # noqa: BLE001
            return None

    def close(self) -> None:
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
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
            used = [u for u in (nv.used_mib(pids) for nv in self._nvml) if u is not None]
            gpu = max(used) if used else None
            if gpu is not None:
                self.peak_gpu_mib = max(self.peak_gpu_mib or 0.0, gpu)
                if b.gpu_mib is not None and self._projected("gpu", gpu) > b.gpu_mib:
                    self._stop("gpu", gpu, b.gpu_mib, "GPU memory")
                    return Outcome.OOM_GPU
        return None

    def close(self) -> None:
        for nv in self._nvml:
            nv.close()


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
