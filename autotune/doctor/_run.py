"""The doctor's entry points: every check (:func:`run_checks`), and the cheap ones at the start of
``autotune run`` (:func:`preflight`), which stop the run only on a fail that would make every trial fail."""

from __future__ import annotations

import os
import time
from typing import Any

from autotune.config import fingerprint
from autotune.doctor import _checks, _probes, _smoke
from autotune.doctor._checks import Check, Status
from autotune.errors import UserError


def check_model_name(name: str) -> None:
    """Raise a one-line error when ``name`` is not a torchvision classification model (asked of the torch probe,
    which ``autotune run`` started already: the parent imports no torch). Unknown models pass when the probe could
    not list them; the ceiling's trial then says so."""
    known = _probes.torch_probe().get("models")
    if not known or name in known:
        return
    import difflib

    close = difflib.get_close_matches(name, known, n=3)
    raise UserError(f"--model {name!r} is not a torchvision classification model; pass one such as "
                    + ", ".join(close or ["resnet18", "resnet50", "vit_b_16"]))


def run_checks(dataset: str | os.PathLike[str] | None = None, *, smoke: bool = True, scanned: Any = None) -> list[Check]:
    """Run every check; with ``dataset`` also the dataset checks; with ``smoke`` the one-batch loader tests.

    Returns:
        The checks in table order.
    """
    nvml_error = _probes.nvml_error()
    gpu: dict[str, Any] = fingerprint.gpu_info() if nvml_error is None else {"gpus": 0}
    dali_version, flavour = fingerprint.dali_install()
    importable = _probes.dali_importable()
    gpus = int(gpu.get("gpus") or 0)
    if smoke:  # the children run while the checks below do
        started = time.monotonic()
        tmp, procs = _smoke.start_smokes(gpus, importable)
    try:
        probe = _probes.torch_probe()
        # the driver decides which DALI wheel runs; without one (no GPU) DALI runs on the CPU from the default wheel,
        # whatever CUDA the torch wheel was built for
        cuda_major = _checks._cuda_major(gpu.get("cuda")) if gpus else None
        dali_fix = _checks.dali_install_command(cuda_major)
        if flavour and dali_version:
            dali_fix = f"pip uninstall -y nvidia-dali-{flavour} && {dali_fix}"
        checks = [
            _checks.check_python(),
            _checks.check_torch(probe),
            _checks.check_cuda(probe, gpu),
            _checks.check_gpus(gpu, nvml_error),
            _checks.check_driver_torch(probe, gpu),
            _checks.check_driver_dali(gpu, dali_version, flavour),
            _checks.check_dali(dali_version, flavour, importable, cuda_major),
            _checks.check_cpus(),
            _checks.check_shm(),
            _checks.check_memlock(gpu),
            _checks.check_container(),
        ]
        if dataset is not None:
            checks += _checks.check_dataset(dataset, scanned)
    except BaseException:
        if smoke:
            _smoke.abort_smokes(tmp, procs)
        raise
    if smoke:
        checks += _smoke.finish_smokes(tmp, procs, started, importable, dali_fix)
    return checks


#: checks whose fail makes every trial fail, whatever the device
_BLOCKING = ("python", "torch", "dataset", "unreadable")


def preflight(dataset_path: str | os.PathLike[str] | None, device: str, *, workers: bool = True, scanned: Any = None) -> list[Check]:
    """The doctor's checks, quietly, at the start of ``autotune run`` (no smoke tests).

    Stops the run only on a fail that would make every trial fail:

    - python too old, torch or torchvision not importable;
    - the dataset has no readable image (the scan fails, or every decoded image fails);
    - ``device`` is ``cuda[:N]`` but torch cannot use a GPU (the message carries the GPU/driver check's fix);
    - ``workers`` (every config of the search space starts DataLoader workers) and /dev/shm is below what one worker
      handing over one sample at a time needs (smaller batches than the workers' whole ones are joined, at a cost).

    Args:
        dataset_path: the dataset folder, or None to skip the dataset checks.
        device: where batches go, ``cpu`` or ``cuda[:N]``.
        workers: whether every config of the search space starts DataLoader workers (False where some start none,
            or use DALI: the memory guard leaves out those /dev/shm cannot hold).
        scanned: the dataset's scan, when the caller has made it (it is not scanned again).

    Returns:
        Every check, for the caller to log the warnings.

    Raises:
        UserError: one line naming the check, its value and the fix.
    """
    checks = run_checks(dataset_path, smoke=False, scanned=scanned)
    by_name = {c.name: c for c in checks}

    def stop(c: Check, prefix: str = "") -> None:
        raise UserError(f"{prefix}{c.name} check failed: {c.value}; fix: {c.fix}")

    for c in checks:
        if c.name in _BLOCKING and c.status is Status.FAIL:
            stop(c)
    if str(device).startswith("cuda") and not _probes.cuda_available():
        if _probes.nvml_error() is not None:  # no driver: fine for the CPU, a failure for this device
            raise UserError(f"device {device} needs a GPU torch can use; gpus check failed: no NVIDIA driver visible; fix: {_checks._no_driver_fix()}")
        for name in ("gpus", "driver-torch", "cuda"):
            if by_name[name].status is not Status.OK:
                stop(by_name[name], f"device {device} needs a GPU torch can use; ")
        raise UserError(f"device {device} needs a GPU, but torch sees none; use --device cpu")
    if workers and by_name["shm"].status is Status.FAIL:
        stop(by_name["shm"], "DataLoader workers need /dev/shm; ")
    return checks
