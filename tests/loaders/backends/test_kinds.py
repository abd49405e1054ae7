"""A kind of loader is one module: a third kind, registered here only, gets a search space, starting points, a YAML
section that round-trips, ``describe()``, and the guard's and the selection's answers, without any other file."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from autotune.config.files import load_config, save_config
from autotune.config.schema import Config, LoaderConfig, param_names, unused_params
from autotune.errors import ConfigError, SpaceError
from autotune.loaders.backends import BACKENDS, LoaderBackend, get_backend, register_backend
from autotune.loaders.memory import estimate
from autotune.outcomes import Backend


@dataclasses.dataclass(frozen=True)
class ToyOptions:
    """The YAML section ``loader.toy``."""

    depth: int = 1
    shuffle_buffer: int | None = None


class ToyBackend(LoaderBackend):
    name = "toy"
    options = ToyOptions
    params = {"toy_depth": "depth", "toy_shuffle_buffer": "shuffle_buffer"}
    space_rules = {"toy_depth": ("int", 1, 8), "toy_shuffle_buffer": ("int", 0, 4096)}
    label = "toy"

    def starting_points(self, space: Any, *, batch_sizes: tuple[int, ...], cores: int, cuda: bool) -> dict[str, dict[str, Any]]:
        return {"toy-usual": {"backend": "toy", "batch_size": max(batch_sizes), "toy_depth": min(cores, 8)}}

    def threads(self, params: Mapping[str, Any]) -> int:
        return int(params.get("toy_depth", 1))

    def buffered_batches(self, loader: LoaderConfig) -> int:
        return loader.options.depth

    def build(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError


@pytest.fixture
def toy() -> Iterator[LoaderBackend]:
    backend = register_backend(ToyBackend())
    try:
        yield backend
    finally:
        BACKENDS.pop("toy")


SPACE = {
    "params": {
        "backend": {"choices": ["torch", "toy"]},
        "batch_size": {"choices": [32, 64]},
        "num_workers": {"int": [0, 2], "when": {"backend": "torch"}},
        "toy_depth": {"int": [1, 4], "when": {"backend": "toy"}},
    }
}


def test_a_new_kind_adds_its_parameters_to_a_search_space(toy: LoaderBackend) -> None:
    from autotune.study.space import parse_space

    assert "toy_depth" in param_names()
    space = parse_space(SPACE, cores=4)
    assert space.backends() == ("torch", "toy")
    assert space["toy_depth"].high == 4
    with pytest.raises(SpaceError, match=r"params\.toy_depth must be an integer from 1 to 8, but holds 0"):
        parse_space({"params": {**SPACE["params"], "toy_depth": {"int": [0, 4]}}})
    with pytest.raises(SpaceError, match=r"must be torch or dali or user or dali_user or toy, but got 'pytorch'"):
        parse_space({"params": {"backend": {"choices": ["pytorch"]}, "batch_size": {"choices": [8]}}})


def test_a_new_kind_has_its_starting_points_measured_when_the_space_offers_it(toy: LoaderBackend) -> None:
    from autotune.study.space import parse_space
    from autotune.study.tuner import TuneSettings, baseline_configs

    base = baseline_configs(parse_space(SPACE, cores=4), TuneSettings(device="cpu", cores=4))
    assert base["toy-usual"] == {"backend": "toy", "batch_size": 64, "toy_depth": 4}
    assert {"defaults", "heuristic"} <= set(base)  # the torch reference, always
    torch_only = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [32]}}})
    assert "toy-usual" not in baseline_configs(torch_only, TuneSettings(device="cpu", cores=4))


@pytest.mark.filterwarnings("ignore:.*records no machine")
def test_a_new_kind_round_trips_through_the_yaml(toy: LoaderBackend, tmp_path: Any) -> None:
    loader = LoaderConfig.from_params({"backend": "toy", "batch_size": 32, "toy_depth": 3})
    assert loader.backend is Backend("toy") and loader.options == ToyOptions(depth=3)
    assert loader.to_params() == {"backend": "toy", "batch_size": 32, "toy_depth": 3}
    assert loader.to_dict() == {"backend": "toy", "batch_size": 32, "toy": {"depth": 3}}
    path = tmp_path / "autotune.yaml"
    save_config(Config(loader=loader), path)
    assert "toy: {depth: 3}" in path.read_text()
    again = load_config(path)
    assert again.loader == loader and again.loader.describe() == "toy b=32 toy_depth=3"
    with pytest.raises(ConfigError, match=r"unknown key loader\.toy\.width; allowed keys are: depth, shuffle_buffer"):
        LoaderConfig.from_dict({"backend": "toy", "batch_size": 32, "toy": {"width": 2}})
    with pytest.raises(ConfigError, match=r"loader\.torch is given, but loader\.backend is toy"):
        LoaderConfig.from_dict({"backend": "toy", "batch_size": 32, "torch": {"num_workers": 2}})
    assert unused_params({"backend": "torch", "toy_depth": 2}) == ["toy_depth"]


def test_a_new_kind_answers_the_guard_and_the_selection(toy: LoaderBackend) -> None:
    from autotune.dataset.scan import Dataset
    from autotune.study.selection import loader_threads
    from autotune.trials.one_rank import buffered_batches

    loader = LoaderConfig.from_params({"backend": "toy", "batch_size": 32, "toy_depth": 3})
    assert loader_threads(loader.to_params()) == 3
    assert buffered_batches(loader) == 3
    images = Dataset(root="", classes=(), files=("",), labels=(0,), total_bytes=100_000)
    assert estimate(loader, images)["host_mib"] > 600  # the process, and the batch it delivers (the base's estimate)
    with pytest.raises(ConfigError, match="no DataLoader keywords"):
        Config(loader=loader).dataloader_kwargs()  # no DataLoader and no torch_fallback


def test_an_unknown_kind_is_one_line_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match=r"^loader\.backend must be one of torch, dali, user, dali_user, but got 'toy'$"):
        LoaderConfig("toy", 8)  # type: ignore[arg-type] - a name that is not registered
    with pytest.raises(Exception, match="unknown backend 'toy'; use one of: torch, dali"):
        get_backend("toy")


def test_the_study_reads_the_kinds_without_importing_torch_or_dali() -> None:
    code = "import autotune.study.tuner, autotune.study.space, sys; print('torch' in sys.modules, 'nvidia.dali' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
