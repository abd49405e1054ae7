"""Each DataLoader worker of the user's own Dataset lowers OpenCV's threads to its share of the usable cores, and
never in a way that hangs a forked worker."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types

import pytest
from torch.utils.data import Dataset

import autotune
from autotune.config.schema import Config, LoaderConfig
from autotune.config.sections import UserOptions
from autotune.loaders.threads import OPENCV_THREADS_ENV, cap_native_threads, worker_threads
from tests.helpers import ROOT


class FakeCv2(types.ModuleType):
    """What a worker's transforms see as OpenCV: the threads it was last told (OpenCV reads 0 as 1: its own off)."""

    def __init__(self, threads: int = 16) -> None:
        super().__init__("cv2")
        self.threads = threads
        self.told: list[int] = []

    def setNumThreads(self, n: int) -> None:  # noqa: N802 - OpenCV's name
        self.told.append(n)
        self.threads = n

    def getNumThreads(self) -> int:  # noqa: N802 - OpenCV's name
        return max(1, self.threads)


class WorkerThreads(Dataset):
    """Each item: what the worker that loaded it told OpenCV last (-1: nothing), and the environment variable OpenCV would read."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[int, str]:
        told = getattr(sys.modules.get("cv2"), "told", None)
        return told[-1] if told else -1, os.environ.get(OPENCV_THREADS_ENV, "")


def _items(monkeypatch: pytest.MonkeyPatch, cores: int, workers: int, worker_init_fn=None) -> list[tuple[int, str]]:
    monkeypatch.setattr("autotune.config.fingerprint.usable_cpus", lambda: cores)
    cfg = Config(loader=LoaderConfig("user", 2, section=UserOptions(num_workers=workers, multiprocessing_context="fork")), pipeline="imagenet-eval")
    loader = autotune.build_loader(autotune.DatasetSpec(WorkerThreads(), worker_init_fn=worker_init_fn), cfg)
    out = []
    for told, env in loader:
        out += list(zip(told.tolist(), env, strict=True))
    return out


def test_a_forked_worker_whose_share_is_one_thread_turns_opencvs_own_threads_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", FakeCv2(16))
    items = _items(monkeypatch, cores=2, workers=2)
    assert len(items) == 8 and {t for t, _ in items} == {0}
    assert sys.modules["cv2"].told == []  # the workers', not this process's


def test_a_forked_worker_with_a_larger_share_leaves_opencv_as_it_came(monkeypatch: pytest.MonkeyPatch) -> None:
    """Lowered to any count but 0, an OpenCV pool inherited through fork hangs the worker (test below)."""
    monkeypatch.setitem(sys.modules, "cv2", FakeCv2(16))
    assert {t for t, _ in _items(monkeypatch, cores=8, workers=2)} == {-1}


def test_the_users_worker_init_fn_runs_after_the_cap_and_may_set_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", FakeCv2(16))
    items = _items(monkeypatch, cores=2, workers=2, worker_init_fn=lambda worker_id: sys.modules["cv2"].setNumThreads(7 + worker_id))
    assert {t for t, _ in items} == {7, 8}


def test_a_worker_without_opencv_loaded_gets_the_cap_for_when_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cv2", raising=False)
    monkeypatch.delenv(OPENCV_THREADS_ENV, raising=False)
    items = _items(monkeypatch, cores=6, workers=2)
    assert {env for _, env in items} == {"3"}
    assert OPENCV_THREADS_ENV not in os.environ  # set in the workers only


def test_a_spawned_worker_gets_its_share_and_nobody_gets_more_than_they_had(monkeypatch: pytest.MonkeyPatch) -> None:
    cv2 = FakeCv2(16)
    monkeypatch.setitem(sys.modules, "cv2", cv2)
    cap_native_threads(4, forked=False)  # loaded in the worker itself (spawn, forkserver): nothing of its parent's
    assert cv2.told == [4]
    cap_native_threads(8, forked=False)
    cap_native_threads(8, forked=True)
    assert cv2.told == [4], "a user's lower setting is kept"


def test_the_share_is_at_least_one_thread_and_the_nodes_ranks_share_the_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    assert worker_threads(16, cores=4) == 1
    assert worker_threads(3, cores=16) == 5
    assert worker_threads(0, cores=2) == 2
    monkeypatch.setattr("autotune.config.fingerprint.usable_cpus", lambda: 64)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "8")
    assert worker_threads(8) == 1  # 8 ranks of 8 workers on 64 cores, not 8 threads each
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)))  # a launcher pinned this rank to 8 cores
    monkeypatch.setattr("autotune.config.fingerprint.usable_cpus", lambda: 8)
    assert worker_threads(4) == 2


@pytest.mark.slow
def test_a_real_opencv_pool_run_before_the_fork_does_not_hang_the_workers(tmp_path) -> None:
    """OpenCV's pool run in the training process, idle, then a fork loader of 2 workers whose share is one thread:
    setNumThreads(1) in the workers never returned (a loader of 0 workers, then one of 2, hung its first batch)."""
    pytest.importorskip("cv2")
    script = textwrap.dedent("""
        import time

        import cv2
        import numpy as np
        import torch

        import autotune
        from autotune.config.schema import Config, LoaderConfig
        from autotune.config.sections import UserOptions

        class Blurred(torch.utils.data.Dataset):
            def __len__(self):
                return 8

            def __getitem__(self, i):
                img = np.full((600, 600, 3), i, np.uint8)
                return torch.tensor(float(cv2.GaussianBlur(img, (31, 31), 0).mean())), cv2.getNumThreads()

        import autotune.config.fingerprint as fp
        fp.usable_cpus = lambda: 2
        cv2.setNumThreads(4)  # the parent's pool: more threads than a worker's share
        for workers in (0, 2):
            cfg = Config(loader=LoaderConfig("user", 4, section=UserOptions(num_workers=workers, multiprocessing_context="fork")),
                         pipeline="imagenet-eval")
            threads = [int(t) for _, ts in autotune.build_loader(Blurred(), cfg) for t in ts]
            time.sleep(0.5)  # the pool idles
        print("threads", sorted(set(threads)))
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "threads [1]"
