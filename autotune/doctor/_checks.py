"""The doctor's checks: each one small, returning a :class:`Check` (``ok`` / ``warn`` / ``fail``, the measured
value, and for every warn or fail one line with the fix)."""

from __future__ import annotations

import dataclasses
import enum
import math
import os
import sys
from typing import Any

from autotune.config import fingerprint
from autotune.dataset import pagecache
from autotune.doctor import _probes
from autotune.errors import DatasetError

MIN_PYTHON = (3, 10)
#: oldest driver (major version) for each CUDA major version
DRIVER_FOR_CUDA = {11: 450, 12: 525, 13: 580}
#: DALI wheel flavour -> the CUDA major version it is built for
DALI_FLAVOUR_CUDA = {"cuda110": 11, "cuda120": 12, "cuda130": 13}
#: what "a default config with workers" moves through /dev/shm: float32 crops, batch 256, prefetch 2 per worker
CROP, DEFAULT_BATCH, MIN_BATCH, PREFETCH = 224, 256, 64, 2
#: images decoded (evenly spread) to look for unreadable files
DECODE_SAMPLE = 128


class Status(str, enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"

    def __str__(self) -> str:
        return self.value


@dataclasses.dataclass(frozen=True)
class Check:
    """One line of the doctor's table; ``fix`` is set for every warn and fail."""

    name: str
    status: Status
    value: str
    fix: str | None = None
    files: tuple[str, ...] = ()  # the unreadable check: the dataset's files its decode sample could not decode

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "value": self.value, "fix": self.fix}


def _ok(name: str, value: str) -> Check:
    return Check(name, Status.OK, value)


def exit_code(checks: list[Check]) -> int:
    """0 when every check is ok, 1 when any warns, 2 when any fails.

    No GPU on a machine without an NVIDIA driver is ok (trials run on the CPU), so a CPU-only machine where
    nothing fails for CPU use exits 0.
    """
    statuses = {c.status for c in checks}
    return 2 if Status.FAIL in statuses else 1 if Status.WARN in statuses else 0


def _mib(n: float) -> str:
    if n < 2**20:
        return f"{n / 2**10:,.0f} KiB"
    return f"{n / 2**20:,.0f} MiB" if n < 2**30 else f"{n / 2**30:,.1f} GiB"


def shm_needed(workers: int, batch_size: int = DEFAULT_BATCH, prefetch_factor: int = PREFETCH) -> int:
    """Bytes of /dev/shm that ``workers`` DataLoader workers hold in flight, with the batch the training loop holds
    (float32 ``CROP`` x ``CROP`` batches: :mod:`autotune.loaders.memory` counts them alike)."""
    return (workers * prefetch_factor + 1) * batch_size * 3 * CROP * CROP * 4


# -- fixes ------------------------------------------------------------------------------------------------------------
def dali_install_command(cuda_major: int | None) -> str:
    """The command that installs the DALI wheel matching a CUDA major version (of the driver, else of torch)."""
    cu13 = cuda_major is not None and cuda_major >= 13
    if _probes.source_checkout():
        return 'pip install -e ".[dali-cu13]"' if cu13 else 'pip install -e ".[dali]"'
    return f"pip install nvidia-dali-cuda{'130' if cu13 else '120'}"


def _torch_install_command(driver_cuda: str | None) -> str:
    major, minor = (int(x) for x in (driver_cuda or "12.6").split(".")[:2])
    tag = "cu130" if major >= 13 else "cu128" if (major, minor) >= (12, 8) else "cu126" if major == 12 else "cu118"
    return f"pip install --force-reinstall torch torchvision --index-url https://download.pytorch.org/whl/{tag}"


def _shm_fix(need: int) -> str:
    gib = max(1, math.ceil(need * 1.25 / 2**30))
    if _probes.container():
        return f"restart the container with --shm-size={gib}g (Kubernetes: mount an emptyDir with medium: Memory at /dev/shm)"
    return f"sudo mount -o remount,size={gib}G /dev/shm"


def _cuda_major(version: str | None) -> int | None:
    return int(version.split(".")[0]) if version else None


def _driver_major(gpu: dict[str, Any]) -> int | None:
    return int(gpu["driver"].split(".")[0]) if gpu.get("driver") else None


# -- the checks -------------------------------------------------------------------------------------------------------
def check_python() -> Check:
    v = ".".join(str(x) for x in sys.version_info[:3])
    if sys.version_info[:2] < MIN_PYTHON:
        return Check("python", Status.FAIL, v, f"use Python {'.'.join(map(str, MIN_PYTHON))} or newer")
    return _ok("python", v)


def check_torch(probe: dict[str, Any]) -> Check:
    if probe.get("hung"):  # slow is not broken: a busy machine can take that long; the trials will tell
        return Check("torch", Status.WARN, f"not checked ({probe['error']})", "run 'autotune doctor' again when the machine is less busy")
    if probe.get("error"):
        return Check("torch", Status.FAIL, f"cannot import torch ({probe['error']})", "pip install torch torchvision")
    value = f"{probe['torch']}, torchvision {probe.get('torchvision')}, CUDA build {probe.get('cuda') or 'none (CPU-only)'}"
    if probe.get("torchvision_error"):  # installed, but built for another torch
        return Check("torch", Status.FAIL, f"{probe['torch']}, but torchvision does not import ({probe['torchvision_error']})",
                     f"install the torchvision built for torch {probe['torch']} (pip install --force-reinstall torch torchvision, from one index)")
    if not probe.get("torchvision"):
        return Check("torch", Status.FAIL, value, "pip install torchvision (the version that matches torch)")
    return _ok("torch", value)


def _no_driver_fix() -> str:
    """What gives a GPU to a machine or container where no NVIDIA driver is visible."""
    if _probes.container():
        return "start the container with --gpus all (Kubernetes: request nvidia.com/gpu)"
    return "install the NVIDIA driver (nvidia-smi must list the GPU)"


def check_gpus(gpu: dict[str, Any], nvml_error: str | None) -> Check:
    if nvml_error is not None:
        # a CPU-only machine: nothing to fix for CPU use (run --device cuda says what gives it a GPU)
        where = " (a container without --gpus all?)" if _probes.container() else ""
        return _ok("gpus", f"none: no NVIDIA driver visible{where}; trials run on the CPU")
    if not gpu.get("gpus"):
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        return Check(
            "gpus", Status.WARN, f"driver {gpu.get('driver')} sees no GPU (CUDA_VISIBLE_DEVICES={visible!r})",
            "unset CUDA_VISIBLE_DEVICES or set it to GPU indices that exist (nvidia-smi -L lists them)",
        )
    return _ok("gpus", f"{gpu['gpus']} x {gpu['gpu']}, {gpu['gpu_mib']} MiB, driver {gpu['driver']} (CUDA {gpu.get('cuda')})")


def check_cuda(probe: dict[str, Any], gpu: dict[str, Any]) -> Check:
    if probe.get("error"):
        return _ok("cuda", "skipped (torch not importable)")
    if probe.get("available"):
        return _ok("cuda", f"yes, {probe.get('devices')} device(s)")
    if gpu.get("gpus"):
        return Check("cuda", Status.FAIL, f"torch {probe.get('torch')} cannot use the {gpu.get('gpu')} that the driver sees",
                     _torch_install_command(gpu.get("cuda")))
    return _ok("cuda", "no (no GPU visible; trials run on the CPU)")


def check_driver_torch(probe: dict[str, Any], gpu: dict[str, Any]) -> Check:
    name = "driver-torch"
    if not gpu.get("gpus"):
        return _ok(name, "skipped (no GPU)")
    if probe.get("error"):
        return _ok(name, "skipped (torch not importable)")
    torch_cuda = probe.get("cuda")
    if not torch_cuda:
        return Check(name, Status.FAIL, f"torch {probe.get('torch')} is a CPU-only build", _torch_install_command(gpu.get("cuda")))
    t_major, d_major = _cuda_major(torch_cuda), _cuda_major(gpu.get("cuda"))
    if d_major is not None and t_major is not None and t_major > d_major:
        need = DRIVER_FOR_CUDA.get(t_major, "a newer")
        return Check(
            name, Status.FAIL, f"torch is built for CUDA {torch_cuda}, driver {gpu.get('driver')} supports CUDA {gpu.get('cuda')}",
            f"upgrade the NVIDIA driver to >= {need}, or: {_torch_install_command(gpu.get('cuda'))}",
        )
    return _ok(name, f"torch CUDA {torch_cuda}, driver CUDA {gpu.get('cuda')}")


def check_driver_dali(gpu: dict[str, Any], dali_version: str | None, flavour: str | None) -> Check:
    name = "driver-dali"
    if not dali_version:
        return _ok(name, "skipped (DALI not installed)")
    if not gpu.get("gpus"):
        return _ok(name, "skipped (no GPU)")
    need_cuda = DALI_FLAVOUR_CUDA.get(flavour or "")
    driver = _driver_major(gpu)
    if need_cuda is None or driver is None:
        return _ok(name, f"flavour {flavour} not checked")
    need = DRIVER_FOR_CUDA[need_cuda]
    if driver < need:
        d_cuda = _cuda_major(gpu.get("cuda"))
        if driver < DRIVER_FOR_CUDA[12]:
            fix = f"upgrade the NVIDIA driver to >= {DRIVER_FOR_CUDA[12]} (DALI for CUDA 12) or >= {DRIVER_FOR_CUDA[13]} (CUDA 13)"
        else:
            fix = f"pip uninstall -y nvidia-dali-{flavour} && {dali_install_command(d_cuda)}"
        return Check(name, Status.FAIL, f"nvidia-dali-{flavour} needs driver >= {need}, found {gpu.get('driver')}", fix)
    return _ok(name, f"driver {gpu.get('driver')} >= {need} for nvidia-dali-{flavour}")


def check_dali(dali_version: str | None, flavour: str | None, importable: bool, cuda_major: int | None) -> Check:
    if not importable and not dali_version:
        return Check("dali", Status.WARN, "not installed: only the torch backend can be tuned", dali_install_command(cuda_major))
    if not importable:
        return Check(
            "dali", Status.FAIL, f"nvidia-dali-{flavour} {dali_version} is installed but nvidia.dali cannot be imported",
            f"pip install --force-reinstall nvidia-dali-{flavour}",
        )
    return _ok("dali", f"{dali_version} ({flavour})" if dali_version else "installed (version unknown)")


def check_cpus() -> Check:
    usable, online, affinity = fingerprint.usable_cpus(), _probes.cpu_count(), _probes.affinity_cpus()
    quota = fingerprint.cgroup_cpu_limit()
    value = f"{usable} usable of {online} (affinity {affinity}, cgroup quota {f'{quota:g} CPUs' if quota is not None else 'none'})"
    if usable >= online:
        return _ok("cpus", value)
    if quota is not None and int(quota) < affinity:
        fix = (f"tuning sizes workers for {usable} cores; to use all {online}, raise the CPU limit "
               f"(docker run --cpus {online}; Kubernetes: resources.limits.cpu)")
    else:
        fix = f"this process is pinned to {affinity} cores (taskset, numactl or --cpuset-cpus); run it unpinned to use all {online}"
    return Check("cpus", Status.WARN, value, fix)


def check_shm() -> Check:
    shm = fingerprint.shm_bytes()
    workers = fingerprint.usable_cpus()
    need = shm_needed(workers)
    if shm is None:
        return Check("shm", Status.WARN, "cannot measure /dev/shm", f"DataLoader workers pass batches through /dev/shm: {_shm_fix(need)}")
    from autotune.loaders.memory import SHM_FRACTION  # the share of /dev/shm a loader may use

    need_one = shm_needed(1, 1) / SHM_FRACTION  # a worker handing over one sample at a time (worker_batch), joined into batches
    if shm < need_one:
        return Check("shm", Status.FAIL, f"/dev/shm {_mib(shm)} < {_mib(need_one)} that 1 worker handing over 1 sample at a time needs",
                     _shm_fix(need))
    need_min = shm_needed(1, MIN_BATCH)
    if shm < need_min:  # runs: workers hand over smaller batches, joined in the training process, at some cost
        return Check("shm", Status.WARN, f"/dev/shm {_mib(shm)} < {_mib(need_min)} that 1 worker at batch {MIN_BATCH} needs; workers hand over "
                     "smaller batches, joined in the training process", _shm_fix(need))
    value = f"/dev/shm {_mib(shm)} {'<' if shm < need else '>='} {_mib(need)} that {workers} workers x prefetch {PREFETCH} x batch {DEFAULT_BATCH} need"
    return Check("shm", Status.WARN, value, _shm_fix(need)) if shm < need else _ok("shm", value)


def check_memlock(gpu: dict[str, Any]) -> Check:
    limit = _probes.memlock_bytes()
    if limit is None:
        return _ok("memlock", "unlimited")
    if not gpu.get("gpus"):
        return _ok("memlock", f"{_mib(limit)} (pinned memory is not used without a GPU)")
    need = PREFETCH * DEFAULT_BATCH * 3 * CROP * CROP * 4
    if limit < need:
        return Check(
            "memlock", Status.WARN, f"ulimit -l {_mib(limit)} < {_mib(need)} of pinned batches",
            "raise the locked-memory limit: docker run --ulimit memlock=-1 (shell: ulimit -l unlimited; systemd: LimitMEMLOCK=infinity)",
        )
    return _ok("memlock", _mib(limit))


def check_container() -> Check:
    runtime = _probes.container()
    return _ok("container", f"yes ({runtime})" if runtime else "no")


def check_dataset(path: str | os.PathLike[str], scanned: Any = None) -> list[Check]:
    """Image count, formats, mean size, unreadable files (scan + a decoded sample), and page-cache fit.

    ``scanned``: the :class:`~autotune.dataset.scan.Dataset` of ``path`` when the caller has scanned it already."""
    from PIL import Image

    from autotune.dataset.imaging import BadImageError, open_rgb
    from autotune.dataset.scan import scan

    try:
        ds = scanned if scanned is not None else scan(path, warn=False)  # the unusable files are this check's value; `autotune run` has named them already
    except DatasetError as e:
        value, _, fix = str(e).partition("; ")
        return [Check("dataset", Status.FAIL, value, fix or "pass a folder with one sub-folder per class")]
    sample = ds.files[:: max(1, len(ds) // DECODE_SAMPLE)][:DECODE_SAMPLE]
    formats: dict[str, int] = {}
    bad = list(ds.skipped)
    undecodable = []
    for f in sample:
        try:
            open_rgb(f)
            with Image.open(f) as im:
                formats[im.format or "?"] = formats.get(im.format or "?", 0) + 1
        except (BadImageError, OSError) as e:
            bad.append((f, str(e).removeprefix(f"{f}: ")))
            undecodable.append(f)
    seen = ", ".join(f"{k} {v}" for k, v in sorted(formats.items(), key=lambda kv: -kv[1])) or "none decodable"
    where = "" if len(sample) == len(ds) else f" (a sample of {len(sample)} decoded)"
    formats_seen = seen if not where else f"{seen} in a decoded sample of {len(sample)}"
    out = [_ok("dataset", f"{len(ds)} images, {len(ds.classes)} classes, {formats_seen}, mean {ds.mean_bytes / 1024:,.1f} KiB")]
    if not bad:
        out.append(_ok("unreadable", f"none (all {len(ds)} opened, {len(sample)} decoded)"))
    else:
        first, why = bad[0]
        status = Status.FAIL if not formats else Status.WARN
        out.append(Check(
            "unreadable", status, f"{len(bad)} unreadable{where}, first {first}: {why}",
            f"remove or re-encode them (first: {first}); trials that read one fail as bad-data", files=tuple(undecodable),
        ))
    avail = _probes.memory_available()
    if pagecache.fits_in_ram(ds):  # the rule autotune run uses to warm the cache or measure as is
        out.append(_ok("page-cache", f"fits: {_mib(ds.total_bytes)} of {_mib(avail)} available, so measurements are warm (page cache)"))
    else:
        out.append(_ok("page-cache", f"does not fit: {_mib(ds.total_bytes)} vs {_mib(avail)} available, so measurements are cold (storage-bound)"))
    return out
