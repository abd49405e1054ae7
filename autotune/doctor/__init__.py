"""``autotune doctor``: checks of this machine (and a dataset) for what would make tuning fail or mislead.

Each check is one small function returning a :class:`Check` (``ok`` / ``warn`` / ``fail``, the measured value,
and for every warn or fail one line with the fix). :func:`run_checks` runs them all; :func:`preflight` runs the
cheap ones at the start of ``autotune run`` and stops the run only on a fail that would make every trial fail.

- :mod:`~autotune.doctor._probes`: what the checks measure, each through a small function (``nvml_error``,
  ``torch_probe``, ``dali_importable``, ...) so that tests can fake each condition;
- :mod:`~autotune.doctor._checks`: the checks;
- :mod:`~autotune.doctor._smoke`: the smoke tests, one batch from each kind of loader;
- :mod:`~autotune.doctor._run`: :func:`run_checks` and :func:`preflight`.

Anything that may hang (torch's CUDA initialisation on a broken driver, the smoke tests) runs in a child process
with a timeout.
"""

from autotune.doctor._checks import (
    DECODE_SAMPLE,
    Check,
    Status,
    check_container,
    check_cpus,
    check_cuda,
    check_dali,
    check_dataset,
    check_driver_dali,
    check_driver_torch,
    check_gpus,
    check_memlock,
    check_python,
    check_shm,
    check_torch,
    dali_install_command,
    exit_code,
    shm_needed,
)
from autotune.doctor._probes import PROBE_TIMEOUT_S, start_probe
from autotune.doctor._run import check_model_name, preflight, run_checks
from autotune.doctor._smoke import SMOKE_TIMEOUT_S

__all__ = [
    "DECODE_SAMPLE",
    "PROBE_TIMEOUT_S",
    "SMOKE_TIMEOUT_S",
    "Check",
    "Status",
    "check_container",
    "check_cpus",
    "check_cuda",
    "check_dali",
    "check_dataset",
    "check_driver_dali",
    "check_driver_torch",
    "check_gpus",
    "check_memlock",
    "check_model_name",
    "check_python",
    "check_shm",
    "check_torch",
    "dali_install_command",
    "exit_code",
    "preflight",
    "run_checks",
    "shm_needed",
    "start_probe",
]
