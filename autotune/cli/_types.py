"""Argument types with one-line errors that state the rule and the value."""

from __future__ import annotations

import argparse
import math


def positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, but got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, but got {v}")
    return v


def positive_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, but got {s!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number, but got {s!r}")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, but got {v}")
    return v


def nonneg_float(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, but got {s!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, but got {s!r}")
    return v


def seed_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, but got {s!r}") from None
    if not 0 <= v < 2**32:
        raise argparse.ArgumentTypeError(f"must be between 0 and 2**32 - 1, but got {v}")
    return v


def nonneg_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, but got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, but got {v}")
    return v
