"""Errors meant for users: one line with the rule, the value and the fix."""

from __future__ import annotations

import numbers
import signal


class UserError(Exception):
    """Bad input or environment. The CLI prints ``autotune: error: <message>`` and exits with :attr:`exit_code`."""

    exit_code = 2

    def __init__(self, message: str, *, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class DatasetError(UserError):
    """The dataset folder cannot be used."""


class SpaceError(UserError):
    """A search-space file is invalid."""


class ConfigError(UserError):
    """An autotune YAML file is invalid."""


class StaleConfigError(UserError):
    """``load_config(strict=True)`` on a machine whose fingerprint differs in a way that matters."""

    exit_code = 1


class Terminated(KeyboardInterrupt):
    """SIGTERM (``docker stop``, systemd, Slurm), raised in the main thread the way Ctrl-C raises
    ``KeyboardInterrupt``, so that the same clean-up runs: the running trial is marked, the best config so far
    is written. ``autotune run`` then exits with :attr:`exit_code` (128 + 15, the shell's code for SIGTERM)."""

    exit_code = 143
    said = "terminated (SIGTERM)"


#: the signals that stop a run as Ctrl-C does (held alike while a clean-up runs: autotune.trials.runner.deferred_signals)
STOP_SIGNALS: tuple[int, ...] = tuple(getattr(signal, n) for n in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, n))


class HungUp(Terminated):
    """SIGHUP (the terminal or the ssh session closed): handled as SIGTERM, with the shell's code for it (128 + 1)."""

    exit_code = 129
    said = "hung up (SIGHUP)"


#: the stop a signal handler raised (``autotune run``'s handler), kept until the run ends. Where the exception never
#: reached the run (swallowed in a finaliser, or by a library's broad ``except``), the next measurement raises it.
_stops: list[KeyboardInterrupt] = []


def stop_requested(e: KeyboardInterrupt | None) -> None:
    """Keep ``e`` as the run's stop (None: none, as the run ends)."""
    _stops[:] = [e] if e is not None else []


def raise_if_stopped() -> None:
    """Raise the stop a signal asked for, if any: before each measurement, so that a stop lost on its way ends the run
    at the next trial or re-measurement instead of never."""
    if _stops:
        raise _stops[0]


def with_detail(e: KeyboardInterrupt, detail: str) -> KeyboardInterrupt:
    """``e`` carrying what the stop left behind, for the CLI's last line (``autotune: interrupted: DETAIL``)."""
    e.autotune_detail = detail  # type: ignore[attr-defined]  # set on this one exception; interrupt_detail() reads it back
    return e


def interrupt_detail(e: KeyboardInterrupt) -> str:
    return str(getattr(e, "autotune_detail", ""))


def interrupt_exit_code(e: KeyboardInterrupt) -> int:
    """130 for Ctrl-C (128 + SIGINT), 143 for SIGTERM (:class:`Terminated`), 129 for SIGHUP (:class:`HungUp`)."""
    return e.exit_code if isinstance(e, Terminated) else 130


def interrupt_said(e: KeyboardInterrupt) -> str:
    """How the stop reads in the last line: ``interrupted``, ``terminated (SIGTERM)`` or ``hung up (SIGHUP)``."""
    return e.said if isinstance(e, Terminated) else "interrupted"


def expect(value: object, name: str, kinds: type | tuple[type, ...], what: str) -> None:
    """One line when an API argument has the wrong type (``budget_s='x'``), instead of a TypeError deep inside.

    ``what`` says what is wanted, in words (``"a number of seconds"``); ``bool`` never passes for a number.

    Raises:
        UserError: ``NAME must be WHAT, but got TYPE VALUE``.
    """
    kinds = kinds if isinstance(kinds, tuple) else (kinds,)
    numeric = any(k in (int, float, numbers.Real, numbers.Integral) for k in kinds)
    if isinstance(value, kinds) and not (numeric and isinstance(value, bool) and bool not in kinds):
        return
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:40] + f"... ({len(shown)} characters)"
    raise UserError(f"{name} must be {what}, but got {type(value).__name__} {shown}")


def interrupt_behind(e: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C or SIGTERM that an exception was raised while handling, if any."""
    seen: set[int] = set()
    c = e.__context__
    while c is not None and id(c) not in seen:
        if isinstance(c, KeyboardInterrupt):
            return c
        seen.add(id(c))
        c = c.__context__
    return None
