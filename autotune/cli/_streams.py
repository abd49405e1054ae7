"""Standard output and error as a command uses them, when they cannot be written.

Progress, warnings and the last line go to stderr. When it cannot take them (``2>&1 | head -3`` once ``head`` has
gone, a log on a full disk, ``2>&-``), they are dropped and the command carries on: ``autotune run`` still writes
its YAML, and the trials already measured are not left for lost. Standard output carries the result (a table, the
JSON summary); when it cannot be written the command says so on stderr in one line and exits with 2, and a reader
that went away (``studies --json | head``) stays a broken pipe, which ``main`` answers with 141.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from autotune.errors import UserError


class OutputLost(UserError):
    """Standard output could not be written (a full disk, a closed descriptor)."""


class _Proxy:
    """A text stream that behaves like ``inner`` except when a write fails."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, buffer: the stream's own
        return getattr(self._inner, name)

    def _failed(self, e: Exception) -> None:  # pragma: no cover - each kind says what a failure means
        raise NotImplementedError

    def write(self, text: str) -> int:
        try:
            return self._inner.write(text)
        except (OSError, ValueError) as e:
            self._failed(e)
            return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        try:
            self._inner.flush()
        except (OSError, ValueError) as e:
            self._failed(e)


class Stderr(_Proxy):
    """Stderr that drops what it cannot write, from the first failure on."""

    lost = False

    def _failed(self, e: Exception) -> None:
        self.lost = True
        self._inner = _Null()

    def write(self, text: str) -> int:
        return len(text) if self.lost else super().write(text)


class Stdout(_Proxy):
    """Stdout whose write failures other than a gone reader are one line (:class:`OutputLost`)."""

    def _failed(self, e: Exception) -> None:
        if isinstance(e, BrokenPipeError):
            raise e
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        _park(1)
        self._inner = _Null()
        raise OutputLost(f"standard output could not be written ({why}); free space where it goes, or send it elsewhere") from None


class _Null:
    """Where a lost stream's text goes."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    encoding = "utf-8"


def _park(fd: int) -> None:
    """Point ``fd`` at /dev/null: what the interpreter flushes at exit must not fail again."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except OSError:
        pass


def open_standard_descriptors() -> None:
    """Descriptors 0 to 2 open (on /dev/null where closed, ``2>&-``), so that no file the command opens (a SQLite
    database) becomes descriptor 2 and receives another process's error output; ``sys.stderr`` and
    ``sys.stdout`` streams over them where Python had none."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stream, for its lifetime
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115


def guarded() -> tuple[Stdout, Stderr, Any, Any]:
    """Install the proxies on ``sys.stdout``/``sys.stderr``; returns them and the streams they replace."""
    saved_out, saved_err = sys.stdout, sys.stderr
    out, err = Stdout(saved_out), Stderr(saved_err)
    sys.stdout, sys.stderr = out, err
    return out, err, saved_out, saved_err
