"""Memory budgets: what a trial may use, and the estimate checked against them before it runs.

- :func:`default_budgets`: GPU memory (a fraction of what is free when the study starts, minus the room the
  training model needs), host memory (a fraction of what is available) and ``/dev/shm`` (a fraction of its
  free space); each can be set on the command line instead.
- :func:`check_estimate`: the bytes a config needs (:func:`autotune.loaders.memory.estimate`: batches in flight,
  decode buffers, pinned copies, worker processes, shared memory); a config predicted to exceed a budget is not run.

GPU numbers come from NVML only: no torch, no CUDA context.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

import psutil

from autotune.config.fingerprint import nvml_index
from autotune.loaders.memory import SHM_FRACTION as SHM_FRACTION  # the default /dev/shm budget: its share of the free space
from autotune.loaders.memory import SHM_PATH as SHM_PATH  # the monitor reads /dev/shm there too
from autotune.loaders.memory import MiB, estimate
from autotune.loaders.memory import shm_free_mib as shm_free_mib  # read through this module, where tests replace it
from autotune.outcomes import Outcome

if TYPE_CHECKING:
    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.trials.model import ModelSpec
    from autotune.trials.spec import TrialResult

logger = logging.getLogger(__name__)


#: Default budgets, as fractions of what is free when the study starts.
HOST_FRACTION = 0.8
GPU_FRACTION = 0.9

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


def default_budgets(
    host_mib: float | None = None, gpu_mib: float | None = None, reserve_gpu_mib: float = 0.0, shm_mib: float | None = None, device: str = "cpu",
) -> Budgets:
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
        if kind == "shm":  # /dev/shm holds the workers' batches alone
            detail = " for the workers' batches in flight and the one the loop holds"
        else:
            top = sorted(((v, k) for k, v in est["parts"].items() if k.startswith("gpu_") == (kind == "gpu")), reverse=True)[:3]
            detail = " (" + ", ".join(f"{k.removeprefix('gpu_')} {v:,.0f}" for v, k in top) + " ...)"
        msg = f"not run: predicted to need {need:,.0f} MiB of {what}{detail}, over the {budget:,.0f} MiB budget"
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
