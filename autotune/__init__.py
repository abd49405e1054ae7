"""autotune: find the fastest data-loader configuration for PyTorch image training on this machine.

```python
import autotune
cfg = autotune.tune("/data/train", budget_s=60)         # what `autotune run` does; writes autotune.yaml
cfg = autotune.load_config("autotune.yaml")
loader = autotune.build_loader("/data/train", cfg)      # torch DataLoader or DALI iterator
# or: DataLoader(my_dataset, **cfg.dataloader_kwargs()), or autotune.build_loader(my_dataset, cfg)
# or, tuning inside the training loop itself:
loader = autotune.AutoLoader("/data/train", config="autotune.yaml")
```
"""

from __future__ import annotations

from autotune.config.files import load_config
from autotune.config.schema import Config, DaliOptions, LoaderConfig, TorchOptions
from autotune.dataset.user import DatasetSpec
from autotune.errors import (
    ConfigError,
    DatasetError,
    SpaceError,
    StaleConfigError,
    UserError,
)
from autotune.loaders.factory import build_loader
from autotune.outcomes import Backend, Outcome
from autotune.tuning import tune

__version__ = "0.1.0"

#: names imported on first use, so that ``import autotune`` stays light (no optuna, no torch)
_LAZY = {"AutoLoader": "autotune.autoloader", "Exploration": "autotune.autoloader"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))

__all__ = [
    "AutoLoader",
    "Backend",
    "Config",
    "ConfigError",
    "DaliOptions",
    "DatasetError",
    "DatasetSpec",
    "LoaderConfig",
    "Outcome",
    "SpaceError",
    "StaleConfigError",
    "TorchOptions",
    "UserError",
    "build_loader",
    "load_config",
    "tune",
]
