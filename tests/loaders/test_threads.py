"""Each DataLoader worker of the user's own Dataset caps OpenCV's threads at its share of the usable cores."""

from __future__ import annotations

import os
import sys
import types

import pytest
from torch.utils.data import Dataset

import autotune
from autotune.config.schema import Config, LoaderConfig
from autotune.config.sections import UserOptions
from autotune.loaders.threads import OPENCV_THREADS_ENV, worker_threads


class FakeCv2(types.ModuleType):
    """What a worker's transforms see as OpenCV: the threads it was last told."""

    def __init__(self) -> None:
        super().__init__("cv2")
        self.threads = 0

    def setNumThreads(self, n: int) -> None:  # noqa: N802 - OpenCV's name
        self.threads = n


class WorkerThreads(Dataset):
    """Each item: the OpenCV threads of the worker that loaded it, and the environment variable OpenCV would read."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, i: int) -> tuple[int, str]:
        cv2 = sys.modules.get("cv2")
        return getattr(cv2, "threads", -1), os.environ.get(OPENCV_THREADS_ENV, "")


def _items(monkeypatch: pytest.MonkeyPatch, cores: int, workers: int, worker_init_fn=None) -> list[tuple[int, str]]:
    monkeypatch.setattr("autotune.config.fingerprint.usable_cpus", lambda: cores)
    cfg = Config(loader=LoaderConfig("user", 2, section=UserOptions(num_workers=workers, multiprocessing_context="fork")), pipeline="imagenet-eval")
    loader = autotune.build_loader(autotune.DatasetSpec(WorkerThreads(), worker_init_fn=worker_init_fn), cfg)
    out = []
    for threads, env in loader:
        out += list(zip(threads.tolist(), env, strict=True))
    return out


def test_each_worker_caps_opencv_at_its_share_of_the_usable_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", FakeCv2())
    items = _items(monkeypatch, cores=8, workers=2)
    assert len(items) == 8 and {t for t, _ in items} == {4}
    assert sys.modules["cv2"].threads == 0  # the workers', not this process's


def test_the_users_worker_init_fn_runs_after_the_cap_and_may_set_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cv2", FakeCv2())
    items = _items(monkeypatch, cores=8, workers=2, worker_init_fn=lambda worker_id: sys.modules["cv2"].setNumThreads(7 + worker_id))
    assert {t for t, _ in items} == {7, 8}


def test_a_worker_without_opencv_loaded_gets_the_cap_for_when_it_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delitem(sys.modules, "cv2", raising=False)
    monkeypatch.delenv(OPENCV_THREADS_ENV, raising=False)
    items = _items(monkeypatch, cores=6, workers=2)
    assert {env for _, env in items} == {"3"}
    assert OPENCV_THREADS_ENV not in os.environ  # set in the workers only


def test_the_share_is_at_least_one_thread() -> None:
    assert worker_threads(16, cores=4) == 1
    assert worker_threads(3, cores=16) == 5
    assert worker_threads(0, cores=2) == 2
