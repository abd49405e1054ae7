"""Trial logs: each trial process writes its output to a file of its own, never to the terminal.

Everything a trial process and its workers write to file descriptors 1 and 2 lands there: Python tracebacks,
DataLoader worker errors, torch's pin-memory thread, and lines that native libraries (DALI, nvJPEG, CUDA)
write straight to the descriptor. The parent opens the file and hands the descriptor over: a spawned trial
gets it as its stdout and stderr, a forked one (:mod:`autotune.trials.zygote`) receives it with its connection
and moves it onto 1 and 2 before doing anything else.

File names inside a study's log folder (``reports/<study>/trials/`` when run from the command line):
``<trial>.log`` for a trial, ``<trial>-remeasure-<k>.log`` for the k-th re-measurement of a trial's config,
``ceiling-<batch>.log`` for the model's ceiling and ``zygote.log`` for the process that trials are forked from.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import IO

logger = logging.getLogger(__name__)

#: The format of the log lines a trial process writes about itself.
CHILD_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def trial_log(folder: str | os.PathLike[str] | None, name: str | int) -> str | None:
    """The log file of ``name`` (a trial number, ``"ceiling"``, ...) in ``folder``; None without a folder."""
    if folder is None:
        return None
    return os.path.abspath(os.path.join(os.fspath(folder), f"{name}.log"))


def remeasure_log(folder: str | os.PathLike[str] | None, trial: int, k: int) -> str | None:
    """The log file of the ``k``-th (from 1) re-measurement of trial ``trial``'s config."""
    return trial_log(folder, f"{trial}-remeasure-{k}")


def open_log(path: str | None, append: bool = False) -> int | None:
    """Open (create, and truncate unless ``append``) a log file for a child's output; returns its descriptor, or None.

    The file gets the umask's permissions, like every file autotune writes. A log that cannot be opened
    (no folder rights, disk full) costs the log, not the trial: the child's output is then discarded.
    """
    if path is None:
        return None
    folder = os.path.dirname(path)
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | (0 if append else os.O_TRUNC), 0o666)
    except OSError as e:
        level = logging.INFO if folder in _warned else logging.WARNING  # once per folder, not once per trial
        _warned.add(folder)
        logger.log(level, "cannot write trial logs in %s (%s): trial output is discarded", folder, e.strerror or e)
        return None


_warned: set[str] = set()


def append_line(path: str, message: str, unless: str | None = None) -> None:
    """One line in ``path`` in the trial process's format, written by the parent (for a trial it stopped before the
    process wrote its own last line). ``unless``: not when the log's last line already holds that text (the process
    wrote its own just before it was stopped). A log that cannot be written costs that line."""
    record = logging.LogRecord(__name__, logging.INFO, __file__, 0, message, None, None)
    try:
        with open(path, "a+b") as f:
            if unless is not None and unless in _last_line(f):
                return
            f.write((logging.Formatter(CHILD_FORMAT).format(record) + "\n").encode("utf-8", "backslashreplace"))
    except OSError:
        logger.debug("cannot append to %s", path, exc_info=True)


def _last_line(f: IO[bytes], tail: int = 4096) -> str:
    """The last non-empty line of the file open in ``f`` (from its last ``tail`` bytes)."""
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - tail))
    lines = f.read().decode("utf-8", "replace").splitlines()
    f.seek(0, os.SEEK_END)
    return next((ln for ln in reversed(lines) if ln.strip()), "")


def null_output() -> int:
    """A descriptor on /dev/null: where a child's output goes when its log cannot be written."""
    return os.open(os.devnull, os.O_WRONLY | os.O_CLOEXEC)


def redirect_output(fd: int) -> None:
    """Make ``fd`` this process's stdout and stderr, at the descriptor level (native code writes there too)."""
    flush_output()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    if fd not in (1, 2):
        os.close(fd)


def log_to_stderr() -> None:
    """In a trial process whose stderr is its log: record INFO and up (libraries' warnings included) there."""
    logging.basicConfig(level=logging.INFO, format=CHILD_FORMAT, stream=sys.stderr, force=True)
    logging.captureWarnings(True)


def flush_output() -> None:
    """Write out what Python still buffers before a forked process ends with ``os._exit``."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
