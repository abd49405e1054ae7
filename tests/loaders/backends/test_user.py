"""The user's own Dataset as a kind of loader: its DataLoader, batches of any structure on the device, its YAML
section, and ``autotune.build_loader(dataset, cfg)`` over a Dataset object."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import autotune
from autotune.config.schema import Config, LoaderConfig, TorchOptions
from autotune.config.sections import UserOptions
from autotune.dataset.user import UserDataset, as_spec, is_target
from autotune.errors import ConfigError, DatasetError, UserError
from autotune.loaders.backends import get_backend
from autotune.loaders.backends._user import batch_length, to_device
from autotune.loaders.presets import get_preset


class Squares(Dataset):
    def __len__(self) -> int:
        return 20

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((2,), float(i)), i


class Stream(IterableDataset):
    def __iter__(self):
        return iter(range(3))


def _user_config(**options) -> Config:
    return Config(loader=LoaderConfig("user", 4, section=UserOptions(**options)), pipeline="imagenet-eval")


def test_build_loader_over_a_dataset_object_applies_the_tuned_worker_knobs() -> None:
    cfg = _user_config(num_workers=2, prefetch_factor=3, persistent_workers=True, multiprocessing_context="fork")
    loader = autotune.build_loader(Squares(), cfg)
    assert isinstance(loader, DataLoader)
    assert (loader.batch_size, loader.num_workers, loader.prefetch_factor, loader.persistent_workers) == (4, 2, 3, True)
    assert loader.multiprocessing_context.get_start_method() == "fork"
    seen = torch.cat([y for _, y in loader])
    assert sorted(seen.tolist()) == list(range(20))  # every sample once


def test_build_loader_applies_a_folder_configs_torch_knobs_to_a_dataset() -> None:
    cfg = Config(loader=LoaderConfig("torch", 5, torch=TorchOptions(num_workers=1, prefetch_factor=2)))
    loader = autotune.build_loader(autotune.DatasetSpec(Squares()), cfg)
    assert isinstance(loader, DataLoader) and (loader.batch_size, loader.num_workers) == (5, 1)
    assert sum(len(y) for _, y in loader) == 20


def test_the_user_section_round_trips_and_is_checked() -> None:
    cfg = _user_config(num_workers=3, pin_memory=True, multiprocessing_context="spawn", in_order=False)
    again = Config.from_dict(cfg.to_dict())
    assert again.loader == cfg.loader and again.loader.options.multiprocessing_context == "spawn"
    assert cfg.dataloader_kwargs()["multiprocessing_context"] == "spawn"
    with pytest.raises(ConfigError, match="loader.user.multiprocessing_context"):
        UserOptions(num_workers=1, multiprocessing_context="thread")
    with pytest.raises(ConfigError, match="loader.user.num_workers"):
        UserOptions(num_workers=-1)


def test_the_backend_builds_over_the_function_and_counts_each_batch(tmp_path: Path) -> None:
    (tmp_path / "squares_mod.py").write_text("from tests.loaders.backends.test_user import Squares\n\n\ndef make():\n    return Squares()\n")
    target = f"{tmp_path / 'squares_mod.py'}:make"
    assert is_target(target) and not is_target(str(tmp_path))
    ds = UserDataset(root=target, classes=(), files=(), labels=(), total_bytes=0, samples=20)
    loader = get_backend("user").build(ds, get_preset("imagenet-eval"), _user_config().loader, "cpu", indices=[3, 1, 2, 0, 7])
    try:
        batches = list(loader)
        assert len(loader) == 2 and [b[-1].shape[0] for b in batches] == [4, 1]  # the count the measurement reads
        assert batches[0][0][1].tolist() == [3, 1, 2, 0]
    finally:
        loader.close()
    with pytest.raises(UserError, match="closed"):
        next(iter(loader))


def test_batches_of_any_structure_go_to_the_device() -> None:
    batch = {"x": torch.zeros(3, 2), "meta": [torch.ones(3), "name"], "pair": (torch.zeros(3),)}
    moved = to_device(batch, "cpu", False)
    assert moved["meta"][1] == "name" and isinstance(moved["pair"], tuple)
    assert batch_length(batch) == 3 and batch_length([["a"], torch.zeros(5)]) == 5


def test_an_iterable_dataset_is_refused_for_now() -> None:
    with pytest.raises(DatasetError, match="not supported yet"):
        as_spec(Stream(), "make")
