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
from collections.abc import Callable
from typing import Any

from autotune.errors import UserError


class OutputLost(UserError):
    """Standard output could not be written (a full disk, a closed descriptor)."""


class _Proxy:
    """A text stream that behaves like ``inner`` except when a write fails."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.inner = inner  # the stream it stands for (a logging handler on it is a console handler too)

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
        if isinstance(e, BlockingIOError):  # a terminal another program left non-blocking: this line is lost, not the rest
            return
        self.lost = True
        self._inner = _Null()

    def write(self, text: str) -> int:
        return len(text) if self.lost else super().write(text)


class Stdout(_Proxy):
    """Stdout whose write failures other than a gone reader are one line (:class:`OutputLost`); so is a result
    written to a standard output the shell closed (``>&-``: it was put on /dev/null, and the result lost in silence)."""

    def write(self, text: str) -> int:
        if text and 1 in CLOSED_AT_START and not isinstance(self._inner, _Null):
            self._inner = _Null()
            raise OutputLost("standard output is closed (>&-), so the result cannot be written; send it to a file, or to /dev/null to drop it")
        return super().write(text)

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


#: the standard descriptors that were closed when the command started (put on /dev/null since)
CLOSED_AT_START: set[int] = set()


def open_standard_descriptors() -> None:
    """Descriptors 0 to 2 open (on /dev/null where closed, ``2>&-``), so that no file the command opens (a SQLite
    database) becomes descriptor 2 and receives another process's error output; ``sys.stderr`` and
    ``sys.stdout`` streams over them where Python had none."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            CLOSED_AT_START.add(fd)
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)  # noqa: SIM115 - the process's own stream, for its lifetime
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)  # noqa: SIM115 - the process's own stream, for its lifetime


def guarded() -> Callable[[], None]:
    """Install the proxies on ``sys.stdout``/``sys.stderr`` (where there is a stream); returns what puts them back.

    Text the stream's encoding cannot hold (a path with an 'é' under ``PYTHONIOENCODING=ascii``) is written as
    ``\\xNN`` escapes rather than failing as a stream that cannot be written.
    """
    saved_out, saved_err = sys.stdout, sys.stderr
    errors = getattr(saved_out, "errors", None)
    escaped = False
    if errors == "strict" and hasattr(saved_out, "reconfigure"):
        try:
            saved_out.reconfigure(errors="backslashreplace")
            escaped = True
        except (ValueError, OSError):  # pragma: no cover - a stream that cannot change now
            pass
    if saved_out is not None:
        sys.stdout = Stdout(saved_out)
    if saved_err is not None:
        sys.stderr = Stderr(saved_err)

    def restore() -> None:
        sys.stdout, sys.stderr = saved_out, saved_err
        if escaped:
            try:
                saved_out.reconfigure(errors=errors)  # type: ignore[union-attr]  # a TextIOWrapper: escaped only where it has reconfigure
            except (ValueError, OSError):  # pragma: no cover
                pass

    return restore
