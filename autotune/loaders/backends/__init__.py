"""Loader backends: ``torch`` (DataLoader) and ``dali`` (NVIDIA DALI)."""

from __future__ import annotations

from autotune.errors import UserError
from autotune.loaders.backends._base import BatchLoader, LoaderBackend

__all__ = ["BatchLoader", "LoaderBackend", "get_backend", "BACKENDS"]

#: backend name -> "module:class"; modules import lazily (DALI is optional).
BACKENDS = {
    "torch": "autotune.loaders.backends._torch:TorchBackend",
    "dali": "autotune.loaders.backends._dali:DaliBackend",
}


def get_backend(name: str) -> LoaderBackend:
    import importlib

    try:
        target = BACKENDS[str(name)]
    except KeyError:
        raise UserError(f"unknown backend {name!r}; use one of: {', '.join(BACKENDS)}") from None
    module, cls = target.split(":")
    return getattr(importlib.import_module(module), cls)()
