"""What the doctor's checks measure: each one a small function, so that tests can fake each condition.

Anything that may hang (torch's CUDA initialisation on a broken driver) runs in a child process with a timeout.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

from autotune import _imports

PROBE_TIMEOUT_S = 60.0
#: the folder that holds the autotune package (a source checkout's root)
_ROOT = Path(__file__).resolve().parent.parent.parent


def nvml_error() -> str | None:
    """Why NVML cannot start (no driver library, no permission), or None when it can."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as e:  # noqa: BLE001 - any failure means no usable driver
        return str(e) or type(e).__name__
    try:
        pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - shutting NVML down is best effort
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


def probe_popen() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _PROBE], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=child_env())


#: the probe's answer taken from the file of a passed probe of the same installation (``autotune run`` only)
_remembered: dict[str, Any] | None = None
#: where :func:`torch_probe` writes a passed answer for the next run: set by ``start_probe(remember=...)``
_remember_at: Path | None = None
#: the GPUs NVML counted for each file to be written (an answer seeing none of them is not remembered)
_remember_gpus: dict[str, int] = {}


def probe_file(fp: dict[str, Any]) -> Path:
    """Where a passed probe is kept for the next ``autotune run`` on this installation: named by what its answer
    depends on (this interpreter, torch's and torchvision's versions and install times, the driver, the GPUs and the
    GPUs CUDA and the container runtime may see, this host and this boot). A change to any of them is another file,
    so the probe runs again."""
    import hashlib

    from autotune.dataset.synth import default_cache_dir

    stamps = []
    for name in ("torch", "torchvision"):
        try:
            import importlib.metadata as md

            files = md.distribution(name).files or []
            first = next((f for f in files if str(f).endswith("METADATA")), None)
            stamps.append(os.stat(str(first.locate())).st_mtime if first is not None else None)
        except (ImportError, OSError, ValueError):
            stamps.append(None)
    try:  # this boot of this host: a home folder shared by several nodes, or a reboot, asks again
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = None
    import socket

    env = sorted((k, v) for k, v in os.environ.items() if k == "CUDA_VISIBLE_DEVICES" or k.startswith("NVIDIA_"))
    what = [sys.executable, sys.version, *(fp.get(k) for k in ("torch", "torchvision", "driver", "gpu", "gpus", "cuda")), *stamps,
            socket.gethostname(), boot, env]
    return default_cache_dir() / "probes" / f"torch-{hashlib.sha256(json.dumps(what, default=str).encode()).hexdigest()[:16]}.json"


def start_probe(remember: dict[str, Any] | None = None) -> None:
    """Start the torch probe now, so that it runs while other work does (``autotune run`` scans the dataset
    meanwhile); :func:`torch_probe` collects its answer.

    ``remember`` (the machine's fingerprint): an answer that passed on this installation before is read from its
    file (:func:`probe_file`) instead, which saves ``autotune run`` the seconds of importing torch twice at start-up;
    a probe that runs writes its answer there when it passed. ``autotune doctor`` always probes.
    """
    global _probe_proc, _remembered, _remember_at
    _remembered = None  # doctor (no fingerprint) probes, whatever a run before it in this process read
    if remember is not None and not torch_probe.cache_info().currsize:
        path = probe_file(remember)
        try:
            answer = json.loads(path.read_text())
        except (OSError, ValueError):
            _remember_at = path
            _remember_gpus[str(path)] = int(remember.get("gpus") or 0)
        else:
            if isinstance(answer, dict) and not answer.get("error"):
                _remembered = answer
                return
    if _probe_proc is None and not torch_probe.cache_info().currsize:
        try:
            _probe_proc = probe_popen()
        except OSError:
            _probe_proc = None


@functools.lru_cache(maxsize=1)
def torch_probe() -> dict[str, Any]:
    """torch's version, its CUDA build and whether it can use a GPU, asked in a child process.

    A child, because initialising CUDA on a broken driver can hang, and because the study's parent process
    must not hold a CUDA context. ``error`` is set when torch cannot be imported or the probe fails.
    """
    global _probe_proc, _remembered, _remember_at
    if _remembered is not None:
        known, _remembered = _remembered, None
        return known
    proc, _probe_proc = _probe_proc, None
    at, _remember_at = _remember_at, None
    answer = _probe(proc)
    if at is not None and _passed(answer, at):
        with contextlib.suppress(OSError):  # a cache that cannot be written: the next run probes again
            at.parent.mkdir(parents=True, exist_ok=True)
            tmp = at.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(answer))
            tmp.replace(at)
    return answer


def _passed(answer: dict[str, Any], at: Path) -> bool:
    """Whether ``answer`` may stand for the next run's probe: no error, and a GPU wherever NVML counts one (torch
    not seeing a GPU that is there may pass, so it is asked again, not remembered)."""
    return not answer.get("error") and (bool(answer.get("available")) or not _remember_gpus.get(str(at)))


def _probe(proc: subprocess.Popen | None) -> dict[str, Any]:
    """The answer of the probe ``proc`` (started now when None)."""
    try:
        proc = proc or probe_popen()
    except OSError as e:
        return {"error": str(e)}
    try:
        stdout, stderr = proc.communicate(timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        return {"error": f"importing torch and initialising CUDA hung for {PROBE_TIMEOUT_S:g} s", "hung": True}
    except OSError as e:
        return {"error": str(e)}
    if proc.returncode != 0:
        return {"error": last_line(stderr) or f"exit code {proc.returncode}"}
    try:
        return json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"error": f"unexpected probe output {stdout[-200:]!r}"}


def cuda_available() -> bool:
    return bool(torch_probe().get("available"))


def dali_importable() -> bool:
    return _imports.is_available("dali")


def source_checkout() -> bool:
    """Whether autotune runs from a source checkout (so the pip extras of its pyproject.toml apply)."""
    return (_ROOT / "pyproject.toml").is_file()


def cpu_count() -> int:
    return os.cpu_count() or 1


def affinity_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - non-Linux
        return cpu_count()


def memlock_bytes() -> int | None:
    """The soft locked-memory limit (``ulimit -l``) in bytes, or None when unlimited."""
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    return None if soft == resource.RLIM_INFINITY else int(soft)


def container() -> str | None:
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


def memory_available() -> int:
    import psutil

    return int(psutil.virtual_memory().available)


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(_ROOT)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def last_line(text: str) -> str:
    lines = [ln.strip() for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""
