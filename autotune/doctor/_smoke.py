"""The doctor's smoke tests: one batch from each kind of loader, each in a child process with a timeout."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autotune.config import fingerprint
from autotune.doctor import _probes
from autotune.doctor._checks import Check, Status, _ok, _shm_fix, shm_needed

logger = logging.getLogger(__name__)

SMOKE_TIMEOUT_S = 60.0


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
    batch = f"batch {tuple(images.shape)} {str(images.dtype).removeprefix('torch.')} on {images.device} in {time.perf_counter() - t0:.1f} s"
    print(json.dumps({"value": batch}))  # noqa: T201 - the child answers the parent on its stdout


def _start_smoke(kind: str, root: str) -> subprocess.Popen:
    code = f"from autotune.doctor._smoke import _smoke_child; _smoke_child({kind!r}, {root!r})"
    return subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_probes.child_env(), start_new_session=True
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
    why = f"killed by signal {-proc.returncode}" if proc.returncode < 0 else _probes.last_line(err) or f"exit code {proc.returncode}"
    low = (err or "").lower()
    if name == "smoke-torch" and ("shared memory" in low or "bus error" in low or proc.returncode == -signal.SIGBUS):
        fix = f"/dev/shm is too small for the workers: {_shm_fix(shm_needed(fingerprint.usable_cpus()))}"
    return Check(name, Status.FAIL, why, fix)


def start_smokes(gpus: int, dali: bool) -> tuple[str, dict[str, subprocess.Popen]]:
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


def abort_smokes(tmp: str, procs: dict[str, subprocess.Popen]) -> None:
    import shutil

    for proc in procs.values():
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        proc.communicate()
    shutil.rmtree(tmp, ignore_errors=True)


def finish_smokes(tmp: str, procs: dict[str, subprocess.Popen], started: float, dali: bool, dali_fix: str) -> list[Check]:
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
