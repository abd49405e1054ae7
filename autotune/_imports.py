"""One place for optional dependencies, so the readable ImportError is raised where a feature is used."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from autotune.errors import UserError

#: Optional feature -> (module, pip extra that installs it).
_EXTRAS = {
    "dali": ("nvidia.dali", 'pip install -e ".[dali]"  (CUDA 13 drivers: ".[dali-cu13]")'),
    "plot": ("matplotlib", 'pip install matplotlib (in the project\'s folder: pip install -e ".[plot]")'),
    "postgres": ("psycopg2", 'pip install -e ".[fleet]"'),
}


def is_available(feature: str) -> bool:
    """Whether an optional feature's module can be imported, without importing it."""
    module = _EXTRAS[feature][0]
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def try_import(feature: str) -> ModuleType:
    """Import an optional feature's module or raise a one-line :class:`UserError` naming the extra."""
    module, hint = _EXTRAS[feature]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UserError(f"{feature} support needs the '{module}' package, which is not installed ({e}); install it with: {hint}") from e
