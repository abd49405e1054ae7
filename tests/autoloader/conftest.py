"""Fixtures of the AutoLoader tests over the user's own Dataset."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture()
def in_tmp_then_no_mp_helpers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run in a temporary folder; afterwards stop multiprocessing's forkserver and resource tracker. A candidate may
    start workers by forkserver or spawn: both helpers then live as long as this process, and later tests count
    this process's children."""
    monkeypatch.chdir(tmp_path)
    yield
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    multiprocessing.forkserver._forkserver._stop()
    multiprocessing.resource_tracker._resource_tracker._stop()
