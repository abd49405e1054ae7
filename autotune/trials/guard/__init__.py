"""The guard: what keeps a trial inside its memory budgets, and what says when other jobs moved the figures.

- :mod:`~autotune.trials.guard._budgets`: the budgets (:func:`default_budgets`) and the estimate checked against
  them before a trial runs (:func:`check_estimate`); a config predicted to exceed one is not run.
- :mod:`~autotune.trials.guard._monitor`: :class:`Monitor` samples the running trial's process tree (host memory,
  GPU memory through NVML, ``/dev/shm``) and says when to stop it, before it crosses a budget.
- :mod:`~autotune.trials.guard._other_load`: :class:`OtherLoad` reads how many cores other jobs kept busy; a busy
  machine moves every figure (:func:`too_busy`).

The parent never imports torch or initialises CUDA: GPU numbers come from NVML only.
"""

from autotune.trials.guard._budgets import (
    GPU_FRACTION,
    HOST_FRACTION,
    SHM_FRACTION,
    SHM_PATH,
    Budgets,
    check_estimate,
    default_budgets,
    gpu_free_mib,
    shm_free_mib,
    violation,
)
from autotune.trials.guard._monitor import Monitor, TreeMemory, process_tree, read_pss_mib, shm_used_mib
from autotune.trials.guard._other_load import BUSY_SHARE, OtherLoad, cores_taken, count_orphaned_cpu, cpu_s, too_busy

__all__ = [
    "BUSY_SHARE",
    "GPU_FRACTION",
    "HOST_FRACTION",
    "SHM_FRACTION",
    "SHM_PATH",
    "Budgets",
    "Monitor",
    "OtherLoad",
    "TreeMemory",
    "check_estimate",
    "cores_taken",
    "count_orphaned_cpu",
    "cpu_s",
    "default_budgets",
    "gpu_free_mib",
    "process_tree",
    "read_pss_mib",
    "shm_free_mib",
    "shm_used_mib",
    "too_busy",
    "violation",
]
