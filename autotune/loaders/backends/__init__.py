"""Kinds of loader: ``torch`` (DataLoader), ``dali`` (NVIDIA DALI), ``user`` (a DataLoader over the user's own
Dataset) and ``dali_user`` (the user's own DALI pipeline function), one private module each.

A kind is a :class:`LoaderBackend` subclass: what the study, the guard and the YAML ask of it, and how it builds.
Its module imports its framework only inside :meth:`LoaderBackend.build`, so the study reads :data:`BACKENDS`
without importing torch or DALI.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from autotune.config.schema import backend_of, register_kinds
from autotune.errors import UserError
from autotune.loaders.backends._base import CUDA_CONTEXT_MIB, BatchLoader, LoaderBackend, MemoryParts, MemorySizes
from autotune.loaders.backends._dali import DaliBackend
from autotune.loaders.backends._dali_user import DaliUserBackend
from autotune.loaders.backends._torch import TorchBackend
from autotune.loaders.backends._user import UserBackend
from autotune.outcomes import Backend

__all__ = [
    "BACKENDS",
    "CUDA_CONTEXT_MIB",
    "BatchLoader",
    "LoaderBackend",
    "MemoryParts",
    "MemorySizes",
    "backend_for",
    "get_backend",
    "register_backend",
]

#: the kinds of loader by name, in the order the study measures their starting points
BACKENDS: dict[str, LoaderBackend] = {}


def register_backend(backend: LoaderBackend) -> LoaderBackend:
    """Add a kind of loader: its name is a :class:`~autotune.outcomes.Backend` and a ``loader.backend`` from then on."""
    Backend.add(backend.name)
    BACKENDS[backend.name] = backend
    return backend


register_backend(TorchBackend())
register_backend(DaliBackend())
register_backend(UserBackend())
register_backend(DaliUserBackend())
register_kinds(BACKENDS)  # the schema (config layer, below) reads and writes each kind's YAML section through it


def get_backend(name: Any) -> LoaderBackend:
    """The kind of loader called ``name`` (a :class:`~autotune.outcomes.Backend` or its value)."""
    try:
        return BACKENDS[name.value if isinstance(name, Backend) else str(name)]
    except KeyError:
        raise UserError(f"unknown backend {name!r}; use one of: {', '.join(BACKENDS)}") from None


def backend_for(params: Mapping[str, Any]) -> LoaderBackend:
    """The kind of loader of a trial's flat parameters (torch when they name none)."""
    return get_backend(backend_of(params))


#: the kinds of loader over the user's own pipeline (``--dataset FILE.py:FUNC``), not over an image folder
OWN_KINDS = (UserBackend.name, DaliUserBackend.name)


def own_kind(dataset: Any) -> str:
    """The kind of loader over the user's own pipeline: a DALI pipeline function's, or a Dataset's."""
    return DaliUserBackend.name if getattr(dataset, "dali", False) else UserBackend.name


def other_kind_of_space(backends: tuple[str, ...], flag: str, own: str | None) -> str | None:
    """Why a space of ``backends`` (``--space flag``) cannot tune the dataset given, or None: the user's pipeline of the
    kind ``own``, or an image folder (None). Each trial would fail alike, naming no fix."""
    if own is None:
        theirs = [b for b in backends if b in OWN_KINDS]
        return (f"--space {flag} tunes your own pipeline's loaders ({', '.join(theirs)}), not an image folder's; pass --dataset FILE.py:FUNC "
                "with it, or leave --space out for the folder") if theirs else None
    if backends == (own,):
        return None
    what = "DALI pipeline function" if own == DaliUserBackend.name else "Dataset"
    named: dict[tuple[str, ...], str] = {(UserBackend.name,): "your own Dataset's", (DaliUserBackend.name,): "your own DALI pipeline function's"}
    tunes = named.get(backends, "an image folder's")
    return (f"--space {flag} tunes {tunes} loaders, not your own {what}'s; leave --space out "
            f"(your {what} takes the space {own!r}), or pass a space file whose backend is {own}")
