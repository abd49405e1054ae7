"""The user's own Dataset as a kind of loader: its DataLoader, batches of any structure on the device, its YAML
section, and ``autotune.build_loader(dataset, cfg)`` over a Dataset object."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

import autotune
from autotune.config.schema import Config, LoaderConfig, TorchOptions
from autotune.config.sections import UserOptions
from autotune.dataset.user import UserDataset, as_spec, check_split, is_target
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


class Split(IterableDataset):
    """A stream of 0..n-1 that each DataLoader worker reads its own part of."""

    def __init__(self, n: int = 40) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return (torch.tensor([i]) for i in range(start, self.n, step))


class Unsplit(Split):
    """The common mistake: every worker yields the whole stream."""

    def __iter__(self):
        return (torch.tensor([i]) for i in range(self.n))


class Opaque(IterableDataset):
    """Items whose == answers neither True nor False."""

    class Item:
        def __eq__(self, other):
            return self

        __hash__ = None

    def __iter__(self):
        return (self.Item() for _ in range(3))


def test_an_iterable_dataset_is_taken_and_built_without_a_sampler() -> None:
    assert as_spec(Stream(), "make").dataset.__class__ is Stream
    cfg = _user_config(num_workers=2, prefetch_factor=2)
    loader = autotune.build_loader(Split(40), dataclasses.replace(cfg, pipeline="imagenet-train"))
    got = sorted(int(x) for batch in loader for x in batch.flatten())
    assert got == list(range(40))  # every item once, across two workers, though the config is a train one (no shuffle)


def test_an_iterable_dataset_that_does_not_split_by_worker_is_one_line() -> None:
    check_split(as_spec(Split()), "make")  # split: nothing said
    with pytest.raises(DatasetError, match="torch.utils.data.get_worker_info") as e:
        check_split(as_spec(Unsplit()), "make")
    assert len(str(e.value).splitlines()) == 1 and str(e.value).startswith("make returned an IterableDataset (Unsplit)")


def test_an_iterable_dataset_whose_items_cannot_be_compared_is_let_through(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="autotune.dataset.user"):
        check_split(as_spec(Opaque()), "make")
    assert "could not be compared" in caplog.text



def test_the_worker_per_core_start_starts_workers_as_a_training_script_does() -> None:
    """Left to the study, the start's worker start method was drawn at random: spawn with a worker per core spent its
    whole trial starting workers on a 16-core machine, and the run ended with no trial."""
    import multiprocessing

    from autotune.study.space import load_space

    backend = get_backend("user")
    space = backend.fit_space(load_space("user", cores=16), "cpu")
    starts = backend.starting_points(space, batch_sizes=(32,), cores=16, cuda=False)
    heuristic = starts["heuristic"]
    assert heuristic["num_workers"] == 16
    assert heuristic["multiprocessing_context"] == (multiprocessing.get_start_method(allow_none=True)
                                                    or multiprocessing.get_all_start_methods()[0])
    if "in_order" in space:
        assert heuristic["in_order"] is True
    assert all(space[name].contains(value) for name, value in heuristic.items() if name in space and name != "batch_size")
