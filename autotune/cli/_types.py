"""Argument types with one-line errors that state the rule and the value."""

from __future__ import annotations

import argparse


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
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, but got {v}")
    return v


def nonneg_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, but got {s!r}") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, but got {v}")
    return v
