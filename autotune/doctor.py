"""``autotune doctor``: checks of this machine (and a dataset) for what would make tuning fail or mislead.

Each check is one small function returning a :class:`Check` (``ok`` / ``warn`` / ``fail``, the measured value,
and for every warn or fail one line with the fix). :func:`run_checks` runs them all; :func:`preflight` runs the
cheap ones at the start of ``autotune run`` and stops the run only on a fail that would make every trial fail.

Everything a check measures goes through a small function (``fingerprint.shm_bytes``, ``_nvml_error``,
``_torch_probe``, ``_dali_importable``, ...) so that tests can fake each condition. Anything that may hang
(torch's CUDA initialisation on a broken driver, the smoke tests) runs in a child process with a timeout.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import json
import logging
import math
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from autotune import _imports
from autotune.config import fingerprint
from autotune.dataset import pagecache
from autotune.errors import DatasetError, UserError

logger = logging.getLogger(__name__)

MIN_PYTHON = (3, 10)
#: oldest driver (major version) for each CUDA major version
DRIVER_FOR_CUDA = {11: 450, 12: 525, 13: 580}
#: DALI wheel flavour -> the CUDA major version it is built for
DALI_FLAVOUR_CUDA = {"cuda110": 11, "cuda120": 12, "cuda130": 13}
#: what "a default config with workers" moves through /dev/shm: float32 crops, batch 256, prefetch 2 per worker
CROP, DEFAULT_BATCH, MIN_BATCH, PREFETCH = 224, 256, 64, 2
#: images decoded (evenly spread) to look for unreadable files
DECODE_SAMPLE = 128
PROBE_TIMEOUT_S = 60.0
SMOKE_TIMEOUT_S = 60.0


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
    """Bytes of /dev/shm that ``workers`` DataLoader workers hold in flight (float32 ``CROP`` x ``CROP`` batches)."""
    return workers * prefetch_factor * batch_size * 3 * CROP * CROP * 4


# -- what the checks measure (each one small, so tests can fake it) --------------------------------------------------
def _nvml_error() -> str | None:
    """Why NVML cannot start (no driver library, no permission), or None when it can."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - any failure means no usable driver
        return str(e) or type(e).__name__
    try:
        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001
        pass
    return None


_PROBE = (
    "import json, torch\n"
    "tv_error = None\n"
    "try:\n    import torchvision; tv = torchvision.__version__\nexcept ModuleNotFoundError:\n    tv = None\n"
    "except Exception as e:\n    tv = None; tv_error = (type(e).__name__ + ': ' + str(e)).splitlines()[0][:200]\n"
    "models = None\n"
    "if tv:\n    try:\n        models = torchvision.models.list_models(module=torchvision.models)\n    except Exception:\n        pass\n"
    "ok = torch.cuda.is_available()\n"
    "print(json.dumps({'torch': torch.__version__, 'torchvision': tv, 'torchvision_error': tv_error, 'cuda': torch.version.cuda,"
    " 'available': ok, 'devices': torch.cuda.device_count() if ok else 0, 'models': models}))\n"
)


_probe_proc: subprocess.Popen | None = None


def _probe_popen() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env())


def start_probe() -> None:
    """Start the torch probe now, so that it runs while other work does (``autotune run`` scans the dataset
    meanwhile); :func:`_torch_probe` collects its answer."""
    global _probe_proc
    if _probe_proc is None and not _torch_probe.cache_info().currsize:
        try:
            _probe_proc = _probe_popen()
        except OSError:
            _probe_proc = None


@functools.lru_cache(maxsize=1)
def _torch_probe() -> dict[str, Any]:
    """torch's version, its CUDA build and whether it can use a GPU, asked in a child process.

    A child, because initialising CUDA on a broken driver can hang, and because the study's parent process
    must not hold a CUDA context. ``error`` is set when torch cannot be imported or the probe fails.
    """
    global _probe_proc
    proc, _probe_proc = _probe_proc, None
    try:
        proc = proc or _probe_popen()
        stdout, stderr = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"importing torch and initialising CUDA hung for {PROBE_TIMEOUT_S:g} s", "hung": True}
    except OSError as e:
        return {"error": str(e)}
    if proc.returncode != 0:
        return {"error": _last_line(stderr) or f"exit code {proc.returncode}"}
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"unexpected probe output {stdout[-200:]!r}"}


def check_model_name(name: str) -> None:
    """Raise a one-line error when ``name`` is not a torchvision classification model (asked of the torch probe,
    which ``autotune run`` started already: the parent imports no torch). Unknown models pass when the probe could
    not list them; the ceiling's trial then says so."""
    known = _torch_probe().get("models")
    if not known or name in known:
        return
    import difflib

    close = difflib.get_close_matches(name, known, n=3)
    raise UserError(f"--model {name!r} is not a torchvision classification model; pass one such as "
                    + ", ".join(close or ["resnet18", "resnet50", "vit_b_16"]))


def _cuda_available() -> bool:
    return bool(_torch_probe().get("available"))


def _dali_importable() -> bool:
    return _imports.is_available("dali")


def _source_checkout() -> bool:
    """Whether autotune runs from a source checkout (so the pip extras of its pyproject.toml apply)."""
    return (Path(__file__).resolve().parent.parent / "pyproject.toml").is_file()


def _cpu_count() -> int:
    return os.cpu_count() or 1


def _affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return _cpu_count()


def _memlock_bytes() -> int | None:
    """The soft locked-memory limit (``ulimit -l``) in bytes, or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def _container() -> str | None:
    """The container runtime this process runs in ("docker", "podman", "kubernetes", ...), or None."""
    if os.environ.get("KUBERNETES_SERVICE_HOST"):
        return "kubernetes"
    if Path("/run/.containerenv").exists():
        return "podman"
    if Path("/.dockerenv").exists():
        return "docker"
    try:
        text = Path("/proc/1/cgroup").read_text()
    except OSError:
        text = ""
    for name in ("kubepods", "docker", "containerd", "lxc"):
        if name in text:
            return "kubernetes" if name == "kubepods" else name
    return os.environ.get("container") or None


def _memory_available() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


# -- fixes ------------------------------------------------------------------------------------------------------------
def dali_install_command(cuda_major: int | None) -> str:
    """The command that installs the DALI wheel matching a CUDA major version (of the driver, else of torch)."""
    cu13 = cuda_major is not None and cuda_major >= 13
    if _source_checkout():
        return 'pip install -e ".[dali-cu13]"' if cu13 else 'pip install -e ".[dali]"'
    return f"pip install nvidia-dali-cuda{'130' if cu13 else '120'}"


def _torch_install_command(driver_cuda: str | None) -> str:
    major, minor = (int(x) for x in (driver_cuda or "12.6").split(".")[:2])
    tag = "cu130" if major >= 13 else "cu128" if (major, minor) >= (12, 8) else "cu126" if major == 12 else "cu118"
    return f"pip install --force-reinstall torch torchvision --index-url https://download.pytorch.org/whl/{tag}"


def _shm_fix(need: int) -> str:
    gib = max(1, math.ceil(need * 1.25 / 2**30))
    if _container():
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
    if _container():
        return "start the container with --gpus all (Kubernetes: request nvidia.com/gpu)"
    return "install the NVIDIA driver (nvidia-smi must list the GPU)"


def check_gpus(gpu: dict[str, Any], nvml_error: str | None) -> Check:
    if nvml_error is not None:
        # a CPU-only machine: nothing to fix for CPU use (run --device cuda says what gives it a GPU)
        where = " (a container without --gpus all?)" if _container() else ""
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
        return Check("cuda", Status.FAIL, f"torch {probe.get('torch')} cannot use the {gpu.get('gpu')} that the driver sees", _torch_install_command(gpu.get("cuda")))
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
    usable, online, affinity = fingerprint.usable_cpus(), _cpu_count(), _affinity_cpus()
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
    need_min = shm_needed(1, MIN_BATCH)
    if shm < need_min:
        return Check("shm", Status.FAIL, f"/dev/shm {_mib(shm)} < {_mib(need_min)} that 1 worker at batch {MIN_BATCH} needs", _shm_fix(need))
    value = f"/dev/shm {_mib(shm)} {'<' if shm < need else '>='} {_mib(need)} that {workers} workers x prefetch {PREFETCH} x batch {DEFAULT_BATCH} need"
    return Check("shm", Status.WARN, value, _shm_fix(need)) if shm < need else _ok("shm", value)


def check_memlock(gpu: dict[str, Any]) -> Check:
    limit = _memlock_bytes()
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
    runtime = _container()
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
    out = [_ok("dataset", f"{len(ds)} images, {len(ds.classes)} classes, {seen if not where else f'{seen} in a decoded sample of {len(sample)}'}, mean {ds.mean_bytes / 1024:,.1f} KiB")]
    if not bad:
        out.append(_ok("unreadable", f"none (all {len(ds)} opened, {len(sample)} decoded)"))
    else:
        first, why = bad[0]
        status = Status.FAIL if not formats else Status.WARN
        out.append(Check(
            "unreadable", status, f"{len(bad)} unreadable{where}, first {first}: {why}",
            f"remove or re-encode them (first: {first}); trials that read one fail as bad-data", files=tuple(undecodable),
        ))
    avail = _memory_available()
    if pagecache.fits_in_ram(ds):  # the rule autotune run uses to warm the cache or measure as is
        out.append(_ok("page-cache", f"fits: {_mib(ds.total_bytes)} of {_mib(avail)} available, so measurements are warm (page cache)"))
    else:
        out.append(_ok("page-cache", f"does not fit: {_mib(ds.total_bytes)} vs {_mib(avail)} available, so measurements are cold (storage-bound)"))
    return out


# -- smoke tests: one batch each, in a child process with a timeout ---------------------------------------------------
def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


def _smoke_child(kind: str, root: str) -> None:
    """Child process: build one loader (``torch``, ``dali-cpu``, ``dali-gpu``) on ``root`` and read one batch."""
    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import scan
    from autotune.loaders.backends import BACKENDS
    from autotune.loaders.presets import get_preset

    backend = next(b for b in BACKENDS.values() if kind in b.smoke_checks)
    params, device = backend.smoke_checks[kind]
    cfg = LoaderConfig.from_params({"backend": backend.name, "batch_size": 4, **params})
    backend.preload()  # imports torch (and DALI): not part of the time
    t0 = time.perf_counter()
    ds = scan(root)
    loader = backend.build(ds, get_preset("imagenet-train"), cfg, device, seed=0)
    try:
        images, _ = next(iter(loader))
    finally:
        loader.close()
    print(json.dumps({"value": f"batch {tuple(images.shape)} {str(images.dtype).removeprefix('torch.')} on {images.device} in {time.perf_counter() - t0:.1f} s"}))


def _start_smoke(kind: str, root: str) -> subprocess.Popen:
    code = f"from autotune.doctor import _smoke_child; _smoke_child({kind!r}, {root!r})"
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_child_env(), start_new_session=True
    )


def _finish_smoke(name: str, proc: subprocess.Popen, deadline: float, fix: str) -> Check:
    try:
        out, err = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the child's own session: it and its loader workers
        except OSError:
            proc.kill()
        proc.communicate()
        return Check(name, Status.FAIL, f"hung: no batch within {SMOKE_TIMEOUT_S:g} s (killed)", fix)
    if err.strip():
        logger.info("%s stderr:\n%s", name, err.rstrip())
    if proc.returncode == 0:
        try:
            return _ok(name, json.loads(out.strip().splitlines()[-1])["value"])
        except (ValueError, IndexError, KeyError):
            pass
    why = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else _last_line(err) or f"exit code {proc.returncode}"
    low = (err or "").lower()
    if name == "smoke-torch" and ("shared memory" in low or "bus error" in low or proc.returncode == -signal.SIGBUS):
        fix = f"/dev/shm is too small for the workers: {_shm_fix(shm_needed(fingerprint.usable_cpus()))}"
    return Check(name, Status.FAIL, why, fix)


def _start_smokes(gpus: int, dali: bool) -> tuple[str, dict[str, subprocess.Popen]]:
    """Write 4 tiny JPEGs to a temporary folder and start one child per smoke test on them."""
    import shutil

    from autotune.dataset.synth import synthesize

    tmp = tempfile.mkdtemp(prefix="autotune-doctor-")
    try:
        root = str(synthesize(Path(tmp) / "data", images=4, classes=2, min_side=32, max_side=48, workers=1))
        kinds = ["torch"] + (["dali-cpu"] if dali else []) + (["dali-gpu"] if dali and gpus else [])
        return tmp, {k: _start_smoke(k, root) for k in kinds}
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _abort_smokes(tmp: str, procs: dict[str, subprocess.Popen]) -> None:
    import shutil

    for proc in procs.values():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
    shutil.rmtree(tmp, ignore_errors=True)


def _finish_smokes(tmp: str, procs: dict[str, subprocess.Popen], started: float, dali: bool, dali_fix: str) -> list[Check]:
    import shutil

    deadline = started + SMOKE_TIMEOUT_S
    more = "; `autotune doctor -v` shows the child's full error"
    try:
        out = [_finish_smoke("smoke-torch", procs["torch"], deadline, "check that torch and torchvision import and match" + more)]
        for kind in ("dali-cpu", "dali-gpu"):
            name = f"smoke-{kind}"
            if kind in procs:
                out.append(_finish_smoke(name, procs[kind], deadline, f"reinstall the DALI wheel for this machine: {dali_fix}{more}"))
            else:
                out.append(_ok(name, "skipped (no GPU)" if dali else "skipped (DALI not installed)"))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


# -- entry points -----------------------------------------------------------------------------------------------------
def run_checks(dataset: str | os.PathLike[str] | None = None, *, smoke: bool = True, scanned: Any = None) -> list[Check]:
    """Run every check; with ``dataset`` also the dataset checks; with ``smoke`` the one-batch loader tests.

    Returns:
        The checks in table order.
    """
    nvml_error = _nvml_error()
    gpu = fingerprint.gpu_info() if nvml_error is None else {"gpus": 0}
    dali_version, flavour = fingerprint.dali_install()
    importable = _dali_importable()
    gpus = int(gpu.get("gpus") or 0)
    if smoke:  # the children run while the checks below do
        started = time.monotonic()
        tmp, procs = _start_smokes(gpus, importable)
    try:
        probe = _torch_probe()
        # the driver decides which DALI wheel runs; without one (no GPU) DALI runs on the CPU from the default wheel,
        # whatever CUDA the torch wheel was built for
        cuda_major = _cuda_major(gpu.get("cuda")) if gpus else None
        dali_fix = dali_install_command(cuda_major)
        if flavour and dali_version:
            dali_fix = f"pip uninstall -y nvidia-dali-{flavour} && {dali_fix}"
        checks = [
            check_python(),
            check_torch(probe),
            check_cuda(probe, gpu),
            check_gpus(gpu, nvml_error),
            check_driver_torch(probe, gpu),
            check_driver_dali(gpu, dali_version, flavour),
            check_dali(dali_version, flavour, importable, cuda_major),
            check_cpus(),
            check_shm(),
            check_memlock(gpu),
            check_container(),
        ]
        if dataset is not None:
            checks += check_dataset(dataset, scanned)
    except BaseException:
        if smoke:
            _abort_smokes(tmp, procs)
        raise
    if smoke:
        checks += _finish_smokes(tmp, procs, started, importable, dali_fix)
    return checks


#: checks whose fail makes every trial fail, whatever the device
_BLOCKING = ("python", "torch", "dataset", "unreadable")


def preflight(dataset_path: str | os.PathLike[str] | None, device: str, *, workers: bool = True, scanned: Any = None) -> list[Check]:
    """The doctor's checks, quietly, at the start of ``autotune run`` (no smoke tests).

    Stops the run only on a fail that would make every trial fail:

    - python too old, torch or torchvision not importable;
    - the dataset has no readable image (the scan fails, or every decoded image fails);
    - ``device`` is ``cuda[:N]`` but torch cannot use a GPU (the message carries the GPU/driver check's fix);
    - ``workers`` (the search space has torch trials) and /dev/shm is below what one worker at batch 64 needs.

    Args:
        dataset_path: the dataset folder, or None to skip the dataset checks.
        device: where batches go, ``cpu`` or ``cuda[:N]``.
        workers: whether the search space has DataLoader workers (False for a DALI-only space).
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
    if str(device).startswith("cuda") and not _cuda_available():
        if _nvml_error() is not None:  # no driver: fine for the CPU, a failure for this device
            raise UserError(f"device {device} needs a GPU torch can use; gpus check failed: no NVIDIA driver visible; fix: {_no_driver_fix()}")
        for name in ("gpus", "driver-torch", "cuda"):
            if by_name[name].status is not Status.OK:
                stop(by_name[name], f"device {device} needs a GPU torch can use; ")
        raise UserError(f"device {device} needs a GPU, but torch sees none; use --device cpu")
    if workers and by_name["shm"].status is Status.FAIL:
        stop(by_name["shm"], "DataLoader workers need /dev/shm; ")
    return checks
