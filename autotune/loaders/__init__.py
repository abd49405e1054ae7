"""The loader layer: presets (the transforms of each pipeline), backends (torch DataLoader, DALI; one module
each), and :func:`build_loader`, which turns a config into the loader the study measured."""

from autotune.config.schema import register_loader_factory
from autotune.loaders.factory import build_loader

register_loader_factory(build_loader)  # lets a RankConfig (config layer, below) build its loader

__all__ = ["build_loader"]
