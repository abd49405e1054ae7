"""`autotune run` reads a torch probe that passed on this installation before, instead of importing torch a second
time at start-up (seconds on two cores); anything the answer depends on changing runs the probe again."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from autotune.doctor import _probes

CPU = {"torch": "2.14.1+cpu", "torchvision": "0.29.1", "torchvision_error": None, "cuda": None, "available": False, "devices": 0, "models": []}
FP = {"torch": "2.14.1", "torchvision": "0.29.1", "driver": None, "gpu": None, "gpus": 0, "cuda": None}


@pytest.fixture
def probes(tmp_path, monkeypatch):
    """A fake probe that answers ``answer[0]``, counting its runs; the cache under a temporary folder."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    runs = []
    answer = [dict(CPU)]

    def popen():
        runs.append(1)
        return subprocess.Popen([sys.executable, "-c", f"print({json.dumps(json.dumps(answer[0]))})"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    monkeypatch.setattr(_probes, "probe_popen", popen)
    monkeypatch.setattr(_probes, "_remembered", None)
    monkeypatch.setattr(_probes, "_remember_at", None)
    _probes.torch_probe.cache_clear()
    yield runs, answer
    _probes.torch_probe.cache_clear()


def _run_start(fp):
    """What `autotune run` does: start the probe, then collect it (a new run: the in-process answer forgotten)."""
    _probes.torch_probe.cache_clear()
    _probes.start_probe(remember=fp)
    return _probes.torch_probe()


def test_a_passed_probe_is_read_by_the_next_run_not_run_again(probes):
    runs, _ = probes
    assert _run_start(FP) == CPU and len(runs) == 1
    assert _probes.probe_file(FP).exists()
    assert _run_start(FP) == CPU and len(runs) == 1  # read, not run


def test_another_torch_driver_host_or_visible_gpus_runs_the_probe_again(probes, monkeypatch):
    runs, _ = probes
    _run_start(FP)
    _run_start({**FP, "torch": "2.15.0"})
    _run_start({**FP, "driver": "580.1", "gpus": 1, "gpu": "NVIDIA H200"})
    monkeypatch.setenv("NVIDIA_VISIBLE_DEVICES", "none")  # a container started without the GPUs
    _run_start(FP)
    monkeypatch.setattr("socket.gethostname", lambda: "another-node")  # a home folder shared by several nodes
    _run_start(FP)
    assert len(runs) == 5


def test_a_failed_probe_or_a_gpu_torch_cannot_see_is_not_remembered(probes):
    runs, answer = probes
    answer[0] = {"error": "ModuleNotFoundError: No module named 'torch'"}
    _run_start(FP)
    _run_start(FP)
    assert len(runs) == 2
    answer[0] = dict(CPU)  # NVML counts a GPU, torch sees none: asked again each time
    gpu = {**FP, "driver": "580.1", "gpus": 1, "gpu": "NVIDIA H200"}
    _run_start(gpu)
    _run_start(gpu)
    assert len(runs) == 4
    answer[0] = {**CPU, "available": True, "devices": 1, "cuda": "13.0"}
    _run_start(gpu)
    assert _run_start(gpu)["available"] and len(runs) == 5


def test_doctor_always_probes(probes):
    runs, _ = probes
    _run_start(FP)
    _probes.torch_probe.cache_clear()
    _probes.start_probe()  # doctor's start: no fingerprint given
    _probes.torch_probe()
    assert len(runs) == 2


def test_a_damaged_file_is_probed_again_and_rewritten(probes):
    runs, _ = probes
    _run_start(FP)
    _probes.probe_file(FP).write_text("{not json")
    assert _run_start(FP) == CPU and len(runs) == 2
    assert json.loads(_probes.probe_file(FP).read_text()) == CPU
