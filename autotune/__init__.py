"""autotune: find the fastest data-loader configuration for PyTorch image training on this machine.

```python
import autotune
cfg = autotune.load_config("autotune.yaml")
loader = autotune.build_loader("/data/train", cfg)      # torch DataLoader or DALI iterator
# or: DataLoader(my_dataset, **cfg.dataloader_kwargs())
```
"""

from __future__ import annotations

from autotune.config.files import load_config
from autotune.config.schema import Config, DaliOptions, LoaderConfig, TorchOptions
from autotune.errors import (
    ConfigError,
    DatasetError,
    SpaceError,
    StaleConfigError,
    UserError,
)
from autotune.loaders.factory import build_loader
from autotune.outcomes import Backend, Outcome

__version__ = "0.1.0"

__all__ = [
    "Backend",
    "Config",
    "ConfigError",
    "DaliOptions",
    "DatasetError",
    "LoaderConfig",
    "Outcome",
    "SpaceError",
    "StaleConfigError",
    "TorchOptions",
    "UserError",
    "build_loader",
    "load_config",
]
