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
    Config,
    DaliOptions,
    LoaderConfig,
    RankConfig,
    TorchOptions,
)


def __getattr__(name: str) -> object:
    if name == "PARAM_NAMES":  # every registered kind's parameters: read when asked, after the kinds register
        from autotune.config import schema

        return schema.param_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
