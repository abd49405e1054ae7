"""The loader layer: presets (the transforms of each pipeline), backends (torch DataLoader, DALI; one module
each), and :func:`build_loader`, which turns a config into the loader the study measured."""

from autotune.config.fingerprint import register_fit_check
from autotune.config.schema import register_loader_factory
from autotune.loaders.factory import build_loader
from autotune.loaders.memory import fit_difference

register_loader_factory(build_loader)  # lets a RankConfig (config layer, below) build its loader
register_fit_check(fit_difference)  # lets check, load_config and --if-stale (config layer) see a config too big for here

__all__ = ["build_loader"]
