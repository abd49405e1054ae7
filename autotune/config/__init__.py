"""The config layer: the YAML schema (one frozen dataclass per section), reading and writing it, the
machine fingerprint, and the staleness check. Below the loaders: it describes loaders, it never builds one."""

from autotune.config.files import (
    atomic_write_text,
    dump_yaml,
    load_config,
    read_yaml,
    save_config,
)
from autotune.config.schema import (
    PARAM_NAMES,
    Config,
    DaliOptions,
    LoaderConfig,
    RankConfig,
    TorchOptions,
)

__all__ = [
    "PARAM_NAMES",
    "Config",
    "DaliOptions",
    "LoaderConfig",
    "RankConfig",
    "TorchOptions",
    "atomic_write_text",
    "dump_yaml",
    "load_config",
    "read_yaml",
    "save_config",
]
