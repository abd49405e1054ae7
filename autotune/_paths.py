"""Turning user-given names into safe file and folder names."""

from __future__ import annotations

import re

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, *, max_len: int = 120) -> str:
    """A folder name made from ``name`` that cannot leave its parent folder.

    Path separators, ``..``, leading dots and odd characters become ``_``; the empty result becomes ``study``.
    """
    s = _UNSAFE.sub("_", name).strip("._")
    s = s.replace("..", "_")
    return (s or "study")[:max_len]
