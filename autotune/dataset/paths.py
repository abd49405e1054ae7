"""Turning user-given names (study names) into safe file and folder names, and paths into printable text and back."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from autotune.errors import UserError

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def safe_name(name: str, *, max_len: int = 120) -> str:
    """A folder name made from ``name`` that cannot leave its parent folder.

    Path separators, ``..``, leading dots and odd characters (spaces, non-ASCII, bytes that are not UTF-8)
    become ``_``; the empty result becomes ``study``. A name that had to change, or be shortened, gets
    ``-`` and 8 hex digits of its hash, so two different names never share a folder (``a/b`` and ``a_b``).

    Examples: ``run-1`` -> ``run-1``; ``../../etc`` -> ``etc-<hash>``; ``/abs/x`` -> ``abs_x-<hash>``.
    """
    s = _UNSAFE.sub("_", name)
    while ".." in s:
        s = s.replace("..", "_")
    s = s.strip("._-") or "study"
    if s == name and len(s) <= max_len:
        return s
    digest = hashlib.sha1(name.encode("utf-8", "surrogateescape")).hexdigest()[:8]
    return f"{s[: max(1, max_len - 9)]}-{digest}"


def printable(path: str | os.PathLike[str]) -> str:
    """``path`` for messages: bytes that are not UTF-8 (surrogate escapes) shown as ``\\xNN``, so any stream can print it."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


_ESCAPED = re.compile(r"\\x([89a-fA-F][0-9a-fA-F])")  # what printable() makes of a byte that is not UTF-8


def recorded_path(text: str) -> str:
    """A folder as the YAML records it (:func:`printable`'s text), as this machine names it.

    A name that is not UTF-8 is recorded with ``\\xNN`` escapes; when the text names nothing here but the name
    with those bytes does, that name (a surrogate-escaped ``str``, as ``os.listdir`` gives it). Else the text.
    """
    if os.path.lexists(text) or not _ESCAPED.search(text):
        return text
    raw = _ESCAPED.sub(lambda m: chr(0xDC00 + int(m.group(1), 16)), text)
    return raw if os.path.lexists(raw) else text


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def display(text: object) -> str:
    """``text`` safe to print in a terminal or a table: control characters (escape sequences, newlines,
    carriage returns) shown as ``\\xNN`` and bytes that are not UTF-8 as ``\\xNN``; one line, nothing hidden."""
    s = str(text).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", s)


def child_path(parent: str | os.PathLike[str], name: str) -> Path:
    """``parent / safe_name(name)``, checked to resolve inside ``parent`` (symlinks included).

    Raises:
        UserError: the folder for ``name`` exists as a symlink that leads out of ``parent``.
    """
    base = Path(parent)
    p = base / safe_name(name)
    real_base = base.resolve()
    real = p.resolve()
    if real != real_base and real_base not in real.parents:
        raise UserError(f"{str(p)!r} leads outside {str(base)!r} (a symlink to {str(real)!r}); remove the link or pass another folder")
    return p
