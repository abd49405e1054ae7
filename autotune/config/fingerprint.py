"""The hardware and software fingerprint a config was measured on, and how another machine differs from it.

One module computes it; the YAML stores it under ``hardware`` (this machine) and ``dataset`` (what was read).

Fields that *matter* (a change can make the tuned config slow or unsafe): GPU model, count and memory,
driver major version, CUDA, usable CPU cores (affinity and cgroup quota), Python, torch, torchvision and
DALI versions, and the dataset (sample count, mean file size, content signature). Fields recorded for the
record only: hostname, full driver version, RAM, /dev/shm size, online CPUs. Free memory and the time are
not part of the fingerprint at all: they change from one minute to the next.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import platform
import shutil
import socket
from collections.abc import Callable, Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from autotune.config.schema import Config

logger = logging.getLogger(__name__)

#: fingerprint keys whose change invalidates a tuned config
MATTERS = ("gpu", "gpus", "gpu_mib", "driver_major", "cuda", "cpus", "python", "torch", "torchvision", "dali", "dali_flavour")
#: recorded for the record only
INFO = ("hostname", "driver", "ram_gib", "shm_mib", "cpus_online")
#: keys every config's hardware section has: one without any of them describes no machine
RECORDED = ("cpus", "python", "torch")
#: the ``was`` of the difference a config without a hardware record gets (it cannot be shown to match)
NOT_RECORDED = "(not recorded)"
#: dataset summary keys whose change invalidates a tuned config (``path`` alone does not)
DATASET_MATTERS = ("samples", "classes", "mean_bytes", "signature")
#: the share by which the image count, the class count or the mean file size may change before the tuned config is
#: stale: a dataset that grows by a few images a day is not re-tuned every day (the loader's speed does not move)
DATASET_TOLERANCE = 0.10


def cgroup_cpu_limit(root: str | os.PathLike[str] = "/sys/fs/cgroup", own: str | os.PathLike[str] = "/proc/self/cgroup") -> float | None:
    """CPUs allowed by the cgroup quota, or None when unlimited: cgroup v2's ``cpu.max`` of this process's own cgroup
    and of each one above it (the smallest holds: a job's cgroup inside a container's, a systemd slice), else v1's
    ``cfs_quota_us``."""
    limits = []
    for folder in _own_cgroups(Path(root), Path(own)):
        try:
            quota, period = (folder / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            continue
        if quota != "max" and int(period) > 0:
            limits.append(int(quota) / int(period))
    if limits:
        return min(limits)
    try:
        quota_us = int((Path(root) / "cpu/cpu.cfs_quota_us").read_text())
        period_us = int((Path(root) / "cpu/cpu.cfs_period_us").read_text())
        if quota_us > 0 and period_us > 0:
            return quota_us / period_us
    except (OSError, ValueError):
        pass
    return None


def _own_cgroups(root: Path, own: Path) -> list[Path]:
    """This process's cgroup v2 folder and each one above it up to ``root`` (``0::/PATH`` in /proc/self/cgroup;
    ``/`` inside a container with its own cgroup namespace)."""
    try:
        line = next((x for x in own.read_text().splitlines() if x.startswith("0::")), "0::/")
    except OSError:
        line = "0::/"
    folder = root / line[3:].strip().lstrip("/")
    out = [folder, *folder.parents]
    return [f for f in out if f == root or root in f.parents]


def usable_cpus() -> int:
    """CPU cores this process may really use: affinity mask, capped by the cgroup quota (not ``os.cpu_count()``)."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    if limit is not None:
        n = min(n, max(1, int(limit)))
    return max(1, n)


def local_ranks() -> int:
    """The loaders this node runs at once: ``LOCAL_WORLD_SIZE`` under torchrun, else one."""
    local = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(local) if local.isdigit() and 1 <= int(local) <= 1024 else 1


def shm_bytes() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").total
    except OSError:
        return None


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def dali_install() -> tuple[str | None, str | None]:
    """(version, flavour) of the installed DALI wheel, e.g. ("2.4.0", "cuda120"); (None, None) when absent."""
    for flavour in ("cuda130", "cuda120", "cuda110"):
        v = _version(f"nvidia-dali-{flavour}")
        if v:
            return v, flavour
    return None, None


def visible_gpus(visible: str | None, count: int, uuid: Callable[[int], str]) -> list[int]:
    """The NVML indices of the GPUs that CUDA shows a process under ``CUDA_VISIBLE_DEVICES=visible``.

    Read as CUDA (and torch) read it: either indices or (leading parts of) ``GPU-`` UUIDs, in order; the first
    entry that names no GPU here ends the list (``-1`` hides every GPU, ``1,9,2`` with 8 GPUs shows GPU 1 alone),
    and a GPU named twice hides them all. An index entry counts by its leading digits (``1gpu`` is 1).
    ``uuid(i)`` is GPU i's UUID. MIG instances (``MIG-``) are not GPUs that NVML counts here: such a list is taken
    as every GPU.
    """
    if visible is None or visible.startswith("MIG-"):
        return list(range(count))
    out: list[int] = []
    for entry in visible.split(","):
        entry = entry.strip()
        if visible.startswith("GPU-"):
            found = [j for j in range(count) if entry.startswith("GPU-") and uuid(j).startswith(entry)]
            i = found[0] if len(found) == 1 else -1
        else:
            digits = entry[: len(entry) - len(entry.lstrip("0123456789"))]
            i = int(digits) if digits and int(digits) < count else -1
        if i < 0:
            break
        if i in out:
            return []
        out.append(i)
    return out


def _visible_nvml(pynvml: Any) -> list[int]:
    """:func:`visible_gpus` of this process, NVML initialised."""

    def uuid(i: int) -> str:
        u = pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i))
        return u.decode() if isinstance(u, bytes) else u

    return visible_gpus(os.environ.get("CUDA_VISIBLE_DEVICES"), pynvml.nvmlDeviceGetCount(), uuid)


def nvml_index(ordinal: int) -> int:
    """The NVML index of this process's CUDA device ``ordinal`` (``cuda:ordinal``), through ``CUDA_VISIBLE_DEVICES``
    (indices or UUIDs); ``ordinal`` itself when that is unset or NVML cannot say."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is None:
        return ordinal
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no driver, no library
        return ordinal
    try:
        indices = _visible_nvml(pynvml)
        return indices[ordinal] if ordinal < len(indices) else ordinal
    except Exception:  # noqa: BLE001 - NVML cannot say: the ordinal as given
        return ordinal
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting NVML down is best effort
            pass


def gpu_info() -> dict[str, Any]:
    """GPU model, count, memory and driver from NVML; empty values when there is no GPU or no driver."""
    out: dict[str, Any] = {"gpu": None, "gpus": 0, "gpu_mib": None, "driver": None, "cuda": None}
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - no driver, no library: no GPU
        logger.debug("NVML unavailable: %s", e)
        return out
    try:
        indices = _visible_nvml(pynvml)
        out["gpus"] = len(indices)
        if indices:
            h = pynvml.nvmlDeviceGetHandleByIndex(indices[0])
            name = pynvml.nvmlDeviceGetName(h)
            out["gpu"] = name.decode() if isinstance(name, bytes) else name
            out["gpu_mib"] = int(pynvml.nvmlDeviceGetMemoryInfo(h).total // 2**20)
        drv = pynvml.nvmlSystemGetDriverVersion()
        out["driver"] = drv.decode() if isinstance(drv, bytes) else drv
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        out["cuda"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    except Exception as e:  # noqa: BLE001 - NVML failing part-way: what it answered before stands
        logger.debug("NVML query failed: %s", e)
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting NVML down is best effort
            pass
    return out


def collect() -> dict[str, Any]:
    """This machine's fingerprint (cheap: no CUDA context, no torch import)."""
    fp = gpu_info()
    fp["driver_major"] = int(fp["driver"].split(".")[0]) if fp.get("driver") else None
    fp["cpus"] = usable_cpus()
    fp["cpus_online"] = os.cpu_count()
    fp["ram_gib"] = round(psutil.virtual_memory().total / 2**30, 1)
    shm = shm_bytes()
    fp["shm_mib"] = shm // 2**20 if shm else None
    fp["python"] = platform.python_version()
    fp["torch"] = _version("torch")
    fp["torchvision"] = _version("torchvision")
    fp["dali"], fp["dali_flavour"] = dali_install()
    fp["hostname"] = socket.gethostname()
    return fp


def key(fp: dict[str, Any], dataset_signature: str | None = None) -> str:
    """A short stable hash of what matters; studies for one kind of node share it."""
    payload = {k: fp.get(k) for k in MATTERS}
    if dataset_signature:
        payload["dataset"] = dataset_signature
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:10]


@dataclasses.dataclass(frozen=True)
class Difference:
    field: str
    was: Any
    now: Any
    matters: bool
    note: str | None = None  # a difference that is no change of a recorded value says what it is instead

    def __str__(self) -> str:
        return f"{self.field}: {self.note}" if self.note else f"{self.field}: {self.was!r} -> {self.now!r}"

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "was": self.was, "now": self.now, "matters": self.matters, **({"note": self.note} if self.note else {})}


def diff(old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    out = []
    for k in (*MATTERS, *INFO):
        if k in old and old.get(k) != new.get(k):
            out.append(Difference(k, old.get(k), new.get(k), k in MATTERS))
    return out


def dataset_summary(path: str | os.PathLike[str], exclude: Iterable[str] = ()) -> dict[str, Any]:
    """The dataset part of the fingerprint: path, sample count, classes, mean file size, content signature (for a
    pipeline function, ``FILE.py:FUNC``: its path and its source file's sha256).

    The signature hashes every file's relative path and size (a ``stat`` per file, no reads), so a re-sized,
    added or removed image changes it while a copy of the folder elsewhere keeps it. ``exclude`` names files
    (relative to ``path``) to leave out: the ones a study found undecodable (``dataset.excluded`` in the YAML),
    so that removing them, or not, changes nothing.
    """
    from autotune.dataset import user
    from autotune.dataset.scan import scan

    if user.is_target(str(path)):  # a pipeline function: its source file's hash, without running it
        return user.summary_of(str(path))
    return scan(path).without(exclude).summary()


def dataset_here(path: str | os.PathLike[str]) -> bool:
    """Whether the dataset recorded as ``path`` is on this machine: the folder, or a pipeline function's source file."""
    from autotune.dataset import user

    return user.present(str(path)) if user.is_target(str(path)) else Path(path).is_dir()


def _within(was: Any, now: Any) -> bool:
    numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (was, now))
    return numbers and was > 0 and abs(now - was) <= DATASET_TOLERANCE * was


def diff_dataset(old: dict[str, Any], new: dict[str, Any]) -> list[Difference]:
    """Differences between two dataset summaries. A new path with the same content does not matter; nor does a
    change of at most ``DATASET_TOLERANCE`` in the image count, the class count or the mean file size of the same
    folder. The content signature (every file's path and size) matters in another folder, or where the record has
    none of those counts to judge by."""
    out = []
    judged = False
    for k in DATASET_MATTERS:
        if k == "signature":
            continue
        judged = judged or old.get(k) is not None
        if old.get(k) is not None and old.get(k) != new.get(k):
            out.append(Difference(f"dataset.{k}", old.get(k), new.get(k), not _within(old.get(k), new.get(k))))
    moved = old.get("path") is not None and new.get("path") is not None and str(old["path"]) != str(new["path"])
    if old.get("signature") is not None and old.get("signature") != new.get("signature"):
        # another folder with other files matters even where its counts look alike; the same folder grown a little does not
        source = (old.get("function") or {}).get("source") if isinstance(old.get("function"), dict) else None
        note = f"{source} changed since it was tuned (sha256 {str(old['signature'])[:12]} -> {str(new.get('signature'))[:12]})" if source else None
        out.append(Difference("dataset.signature", old.get("signature"), new.get("signature"), not judged or moved, note=note))
    if moved:
        out.append(Difference("dataset.path", old["path"], new["path"], False))
    return out


#: checks that a config can run on this machine at all, registered by layers above (``autotune.loaders``: the
#: memory its batches in flight need): ``check(cfg, current)`` returns a :class:`Difference` that matters, or None
_fit_checks: list[Callable[[Config, dict[str, Any]], Difference | None]] = []


def register_fit_check(check: Callable[[Config, dict[str, Any]], Difference | None]) -> None:
    """Called once by :mod:`autotune.loaders`: :func:`compare` then reports what ``check`` finds."""
    if check not in _fit_checks:
        _fit_checks.append(check)


def compare(
    cfg: Config,
    current: dict[str, Any] | None = None,
    *,
    dataset_signature: str | None = None,
    dataset: dict[str, Any] | None = None,
) -> list[Difference]:
    """How this machine (and optionally the dataset) differs from the one ``cfg`` was tuned on.

    Args:
        cfg: the loaded config.
        current: this machine's fingerprint (default: :func:`collect`).
        dataset_signature: compare only the dataset's content signature.
        dataset: compare a whole dataset summary (:func:`dataset_summary`).

    Returns:
        Every difference, those that matter flagged ``matters=True``.
    """
    current = collect() if current is None else current
    out = diff(cfg.hardware, current)
    if not any(k in (cfg.hardware or {}) for k in RECORDED):  # nothing to compare with: it cannot be shown to match
        out.append(Difference("hardware", NOT_RECORDED, f"{current.get('cpus')} cpus, torch {current.get('torch')}", True))
    needs = needs_gpu(cfg)
    # recorded without a GPU (a GPU machine's record differs in `gpus` already): edited by hand to need one
    if needs and not (cfg.hardware or {}).get("gpus") and not current.get("gpus") and not cuda_usable(current):
        out.append(Difference(needs, "a CUDA GPU", "no GPU on this machine", True))
    for check in _fit_checks:  # a hand-edited queue of 1,024 batches fits no machine of this size
        found = check(cfg, current)
        if found is not None:
            out.append(found)
    if dataset is not None:
        out.extend(diff_dataset(cfg.dataset, dataset))
    elif dataset_signature is not None and cfg.dataset.get("signature") not in (None, dataset_signature):
        out.append(Difference("dataset.signature", cfg.dataset.get("signature"), dataset_signature, True))
    return out


def needs_gpu(cfg: Config) -> str | None:
    """The config key that needs a CUDA GPU (``device`` or ``loader.dali.device``), or None when it runs on a CPU."""
    if str(cfg.device).startswith("cuda"):
        return "device"
    dali = cfg.loader.dali
    if dali is not None and cfg.loader.backend.value == "dali" and dali.device == "gpu":
        return "loader.dali.device"
    return None


def cuda_usable(current: dict[str, Any]) -> bool:
    """Whether torch can use a CUDA GPU here (``current["cuda_usable"]`` when given): NVML, which counts ``gpus``,
    is missing on some CUDA machines (Jetson), where a config that needs a GPU still runs."""
    if "cuda_usable" in current:
        return bool(current["cuda_usable"])
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, or a broken CUDA install: no GPU to run on
        return False


def gpu_text(hardware: dict[str, Any]) -> str:
    """The GPUs of a fingerprint's hardware section for a person: ``2 x NVIDIA H200``, or ``no GPU``."""
    gpu, n = hardware.get("gpu"), hardware.get("gpus") or 0
    if not gpu or not n:
        return "no GPU"
    return f"{n} x {gpu}" if n != 1 else str(gpu)
