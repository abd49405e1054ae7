"""Loader backends: ``torch`` (DataLoader) and ``dali`` (NVIDIA DALI)."""

from __future__ import annotations

from autotune.backends._base import BatchLoader, LoaderBackend
from autotune.errors import UserError

__all__ = ["BatchLoader", "LoaderBackend", "get_backend", "BACKENDS"]

#: backend name -> "module:class"; modules import lazily (DALI is optional).
BACKENDS = {
    "torch": "autotune.backends._torch:TorchBackend",
    "dali": "autotune.backends._dali:DaliBackend",
}


def get_backend(name: str) -> LoaderBackend:
    import importlib

    try:
        target = BACKENDS[str(name)]
    except KeyError:
        raise UserError(f"unknown backend {name!r}; use one of: {', '.join(BACKENDS)}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()
