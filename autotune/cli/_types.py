"""Argument types with one-line errors that state the rule and the value."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def _parse(s: str, cast: Callable[[str], float], what: str) -> float:
    try:
        return cast(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be {what}, but got {s!r}") from None


def given(s: str) -> str:
    """A value that is not empty: ``--if-stale "$CONFIG"`` with the variable unset fell back to the default (another
    file, the latest study, the working folder) without a word."""
    if not s.strip():
        raise argparse.ArgumentTypeError(f"is empty ({s!r}); give a value, or leave it out for the default")
    return s


def positive_int(s: str) -> int:
    v = int(_parse(s, int, "a positive integer"))
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, but got {v}")
    return v


def positive_float(s: str) -> float:
    v = _parse(s, float, "a number")
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, but got {s!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, but got {v}")
    return v


def nonneg_float(s: str) -> float:
    v = _parse(s, float, "a number")
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, but got {s!r}")
    return v


def seed_int(s: str) -> int:
    v = int(_parse(s, int, "an integer"))
    if not 0 <= v < 2**32:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**32 - 1, but got {v}")
    return v


def int_in(low: int, high: int) -> Callable[[str], int]:
    """An integer from ``low`` to ``high``, both included."""

    def parse(s: str) -> int:
        v = int(_parse(s, int, "an integer"))
        if not low <= v <= high:
            raise argparse.ArgumentTypeError(f"must be from {low} to {high}, but got {v}")
        return v

    return parse


def nonneg_int(s: str) -> int:
    v = int(_parse(s, int, "an integer >= 0"))
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, but got {v}")
    return v
