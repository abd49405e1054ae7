"""What several test modules share: the repository's root, a fake clock, odd file names and image headers, and the
launchers of fresh processes (``python -m autotune``, two ranks of a script).

Fixtures live in ``tests/conftest.py``; these are plain functions and classes, imported as ``from tests.helpers import ...``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root: README.md, docs/, benchmarks/ and pyproject.toml are here."""


class FakeClock:
    """A ``time.monotonic`` stand-in that moves only when a test sets ``now``."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def png_header(width: int, height: int) -> bytes:
    """A PNG that claims ``width`` x ``height`` pixels in its header and holds almost no data."""
    from autotune.dataset.synth import png_bomb

    return png_bomb(width, height)


def fs_name(folder: Path, name: bytes) -> str:
    """The path of ``name`` (bytes, maybe not UTF-8) in ``folder``, as ``os`` functions take it."""
    return os.fsdecode(os.path.join(os.fsencode(folder), name))


def sigint_as_in_a_terminal() -> None:
    """SIGINT back to its default, for a child's ``preexec_fn``. A shell that starts the suite in the background
    (``nohup python -m pytest ... &``) ignores SIGINT, and a child inherits an ignored signal: a test that sends it
    SIGINT would then see nothing happen."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_autotune(args: Sequence[str], cwd: Path, **popen: Any) -> subprocess.Popen:
    """``python -m autotune ARGS`` in a fresh process that Ctrl-C (SIGINT) stops as in a terminal; output in pipes,
    as text, unless ``popen`` says otherwise."""
    kw: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, **popen}
    return subprocess.Popen([sys.executable, "-m", "autotune", *args], cwd=cwd, preexec_fn=sigint_as_in_a_terminal, **kw)


def run_autotune(args: Sequence[str], cwd: Path, timeout: float = 300, **run: Any) -> subprocess.CompletedProcess:
    """``python -m autotune ARGS`` to its end; output captured as text unless ``run`` says otherwise."""
    kw: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True, "check": False, **run}
    return subprocess.run([sys.executable, "-m", "autotune", *args], cwd=cwd, timeout=timeout, **kw)


def run_ranks(commands: Sequence[Sequence[str]], cwd: Path, timeout: float, merge_stderr: bool = False) -> list[tuple[int, str, str]]:
    """Run ``commands`` at the same time (the ranks of one job, one thread each, this checkout on their path) and
    return each one's exit code, stdout and stderr (empty with ``merge_stderr``, which sends it to stdout). A rank
    still running after ``timeout`` is killed."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    stderr = subprocess.STDOUT if merge_stderr else subprocess.PIPE
    procs = [subprocess.Popen(list(cmd), env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=stderr, text=True) for cmd in commands]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return [(p.returncode, out, err or "") for p, (out, err) in zip(procs, outs, strict=True)]
