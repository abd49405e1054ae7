"""What the fault and stop tests share: fast settings, a small config, a tuner on the cpu space, and the trial
processes left behind."""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from autotune.dataset.scan import scan
from autotune.study.evidence import trial_attrs
from autotune.study.space import load_space
from autotune.study.tuner import Tuner, TuneSettings

FAST = {"window_s": 0.2, "windows": 2, "warmup_batches": 1, "confirm_top": 0, "baselines": False, "cache": "none", "pruner": "none"}
SMALL = {"backend": "torch", "batch_size": 16, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": False}


def runners(tuner_pid: int | None = None) -> list[psutil.Process]:
    """Trial processes and their workers (``python -m autotune.trials FD TUNER_PID``): of this test process, or
    of ``tuner_pid`` wherever they are now (a killed tuner's orphans belong to init)."""
    if tuner_pid is None:
        procs = psutil.Process().children(recursive=True)
    else:
        procs = list(psutil.process_iter())
    out = []
    for p in procs:
        try:
            cmd = p.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if "autotune.trials" in cmd and (tuner_pid is None or cmd[-1] == str(tuner_pid)):
            out.append(p)
    return out


def wait_no_runners(tuner_pid: int | None = None, timeout: float = 10.0) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    while (left := runners(tuner_pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def fault_tuner(dataset: Path, workdir: Path, name: str, **settings) -> Tuner:
    s = TuneSettings(**{**FAST, **settings})
    return Tuner(scan(dataset), load_space("cpu", cores=2), s, storage=f"sqlite:///{workdir}/faults.db", study_name=name)


def outcomes(tuner: Tuner) -> dict[int, str]:
    return {t.number: trial_attrs(t).get("outcome") for t in tuner.study.get_trials(deepcopy=False)}
