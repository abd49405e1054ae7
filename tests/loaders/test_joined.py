"""Batches joined in the main process from the workers' smaller ones (``worker_batch``, for a /dev/shm too small for
whole batches): the same samples in the same batches as the plain DataLoader, any collate structure, and the
config fitted to /dev/shm only where its whole batches would not fit."""

from __future__ import annotations

import gc
import weakref
from collections import namedtuple
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, Dataset, IterableDataset

from autotune.config.schema import LoaderConfig
from autotune.errors import UserError
from autotune.loaders.joined import JoinedLoader, join, split


class Numbered(Dataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.full((3, 4, 4), float(i)), i


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.n = n

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in range(start, self.n, step):
            yield torch.full((2,), float(i)), i


def _ids(batches: list[Any]) -> list[list[int]]:
    return [b[1].tolist() for b in batches]


@pytest.mark.parametrize("drop_last", [False, True])
def test_joined_batches_are_the_plain_loaders_batches(drop_last: bool) -> None:
    kw: dict[str, Any] = {"shuffle": True, "num_workers": 2, "drop_last": drop_last}
    plain = DataLoader(Numbered(50), batch_size=8, generator=torch.Generator().manual_seed(7), **kw)
    joined = JoinedLoader(Numbered(50), joined_batch_size=8, batch_size=3, generator=torch.Generator().manual_seed(7), **kw)
    want, got = list(plain), list(joined)
    assert _ids(got) == _ids(want)  # worker batches of 3 joined and cut at 8: the same 8s, in the same order
    assert all(torch.equal(a[0], b[0]) for a, b in zip(got, want, strict=True))
    assert len(joined) == len(plain) == (6 if drop_last else 7)
    assert isinstance(joined, DataLoader) and joined.batch_size == 3  # Lightning and accelerate see a DataLoader


def test_a_stream_split_by_worker_is_joined_without_repeats_or_losses() -> None:
    joined = JoinedLoader(Stream(37), joined_batch_size=8, batch_size=3, num_workers=2)
    batches = list(joined)
    ids = sorted(i for b in batches for i in b[1].tolist())
    assert ids == list(range(37))
    assert [len(b[1]) for b in batches] == [8, 8, 8, 8, 5]


def test_any_collate_structure_joins_and_splits() -> None:
    Pair = namedtuple("Pair", "image label")
    parts = [{"x": torch.arange(3), "names": ["a", "b", "c"], "p": Pair(torch.ones(3, 2), torch.tensor([1, 2, 3]))},
             {"x": torch.arange(3, 5), "names": ["d", "e"], "p": Pair(torch.zeros(2, 2), torch.tensor([4, 5]))}]
    whole = join(parts)
    assert whole["x"].tolist() == [0, 1, 2, 3, 4] and whole["names"] == ["a", "b", "c", "d", "e"]
    assert isinstance(whole["p"], Pair) and whole["p"].label.tolist() == [1, 2, 3, 4, 5] and whole["p"].image.shape == (5, 2)
    head, rest = split(whole, 4)
    assert head["names"] == ["a", "b", "c", "d"] and rest["names"] == ["e"] and rest["p"].label.tolist() == [5]
    import numpy as np

    assert join([np.zeros((2, 3)), np.ones((1, 3))]).shape == (3, 3)
    labels = join([torch.tensor([1, 2]), torch.tensor([2.5])])  # default_collate: ints in one part, a float in the next
    assert labels.dtype == torch.float32 and labels.tolist() == [1.0, 2.0, 2.5]  # not cut to 2, as a copy into int64 would
    with pytest.raises(UserError, match="worker_batch cannot join parts of different structures"):
        join([{"x": torch.zeros(1), "y": torch.zeros(1)}, {"x": torch.zeros(1)}])
    with pytest.raises(UserError, match="worker_batch cannot join parts of different structures"):
        join([(torch.zeros(1), torch.zeros(1)), (torch.zeros(1), np.zeros(1))])
    bf16 = join([torch.ones(2, 3, dtype=torch.bfloat16), torch.zeros(1, 3, dtype=torch.bfloat16)])  # NumPy has no bfloat16: torch copies
    assert bf16.dtype == torch.bfloat16 and bf16.sum().item() == 6
    with pytest.raises(UserError, match="worker_batch cannot join this collate_fn's batches"):
        join([object(), object()])


def test_each_part_goes_into_the_batch_as_it_arrives() -> None:
    """Parts held until a batch is whole would keep a whole batch in /dev/shm (154 MB at 256 crops of 224, over
    Docker's 64 MiB however small the workers' batches): here, when the next part is made, at most one is alive."""
    alive: weakref.WeakSet[torch.Tensor] = weakref.WeakSet()
    most = 0

    def collate(samples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal most
        gc.collect()
        most = max(most, len(alive))
        images = torch.stack([s[0] for s in samples])
        alive.add(images)
        return images, torch.tensor([s[1] for s in samples])

    joined = JoinedLoader(Numbered(40), joined_batch_size=16, batch_size=3, collate_fn=collate)
    batches = list(joined)
    assert _ids(batches) == [list(range(16)), list(range(16, 32)), list(range(32, 40))]
    assert all(torch.equal(b[0][:, 0, 0, 0], b[1].float()) for b in batches)
    assert most == 0  # joined at the end, five or six parts of a batch were alive at once


def test_a_batch_it_cannot_count_or_join_is_refused_in_one_line() -> None:
    detection = [(tuple(torch.zeros(3, 4, 4) for _ in range(2)), tuple({"boxes": torch.zeros(k, 4)} for k in (1, 5)))] * 2
    joined = JoinedLoader(detection, joined_batch_size=4, batch_size=1, collate_fn=lambda b: b[0], num_workers=0)
    with pytest.raises(UserError, match="worker_batch cannot join this collate_fn's batches"):
        list(joined)
    padded = [torch.zeros(2, 5), torch.zeros(2, 7)]  # each part padded to its own longest
    with pytest.raises(UserError, match="worker_batch cannot join tensors of shapes"):
        list(JoinedLoader(padded, joined_batch_size=4, batch_size=1, collate_fn=lambda b: b[0]))
    with pytest.raises(UserError, match="leading sizes"):  # nothing with the samples along a first dimension
        list(JoinedLoader([object()] * 4, joined_batch_size=4, batch_size=2, collate_fn=lambda b: {"meta": object()}))


def test_a_streams_length_is_its_own_in_joined_batches() -> None:
    class Sized(Stream):
        def __len__(self) -> int:
            return self.n

    joined = JoinedLoader(Sized(10), joined_batch_size=5, batch_size=3)
    assert len(joined) == 2 == len(list(joined))


def _user(workers: int = 16, batch: int = 256, **kw: Any) -> LoaderConfig:
    return LoaderConfig.from_params({"backend": "user", "batch_size": batch, "num_workers": workers, "prefetch_factor": 2,
                                     "persistent_workers": True, **kw})


def test_a_config_is_fitted_to_a_small_shm_and_left_alone_where_it_fits(tiny_dataset) -> None:
    from autotune.dataset.scan import scan
    from autotune.loaders.memory import SHM_SHARE, estimate, fit_shm

    ds = scan(tiny_dataset)
    loader = _user()
    whole = estimate(loader, ds, "imagenet-train", "cuda")["shm_mib"]
    assert whole > 51.2  # 16 workers x 2 batches of 256 float32 crops: Docker's 64 MiB cannot hold them
    fitted = fit_shm(loader, ds, 51.2, "imagenet-train", "cuda")
    wb = fitted.options.worker_batch
    assert wb is not None and 1 <= wb < 256 and fitted.describe().endswith(f"worker-batch={wb}")
    assert estimate(fitted, ds, "imagenet-train", "cuda")["shm_mib"] <= SHM_SHARE * 51.2 + 1e-6
    assert fit_shm(loader, ds, 10 * whole, "imagenet-train", "cuda") == loader  # room for whole batches: as it was
    assert fit_shm(fitted, ds, 10 * whole, "imagenet-train", "cuda") == loader  # a warm start's worker_batch: fitted again here
    assert fit_shm(_user(worker_batch=200), ds, 51.2, "imagenet-train", "cuda") == fitted
    assert fit_shm(_user(workers=0), ds, 1.0) == _user(workers=0)  # no workers, nothing in /dev/shm
    torch_cfg = LoaderConfig.from_params({"backend": "torch", "batch_size": 256, "num_workers": 16, "prefetch_factor": 2})
    folder = fit_shm(torch_cfg, ds, 51.2, "imagenet-train", "cuda")  # the image-folder kind's workers join theirs as well
    assert folder.options.worker_batch == wb and folder.describe().endswith(f"worker-batch={wb}")
    assert estimate(folder, ds, "imagenet-train", "cuda")["shm_mib"] <= SHM_SHARE * 51.2 + 1e-6
    dali = LoaderConfig.from_params({"backend": "dali", "batch_size": 256, "dali_device": "cpu", "num_threads": 16})
    assert fit_shm(dali, ds, 1.0) == dali  # a kind that does not join batches is left to the memory guard


def test_dataloader_kwargs_cannot_say_worker_batch_and_build_loader_can(tiny_dataset) -> None:
    import autotune
    from autotune.config.schema import Config

    cfg = _user(workers=2, batch=8, worker_batch=3)
    config = Config(loader=cfg, device="cpu")
    with pytest.raises(UserError, match="autotune.build_loader"):
        config.dataloader_kwargs()
    dl = autotune.build_loader(Numbered(20), config)
    assert isinstance(dl, JoinedLoader) and dl.joined_batch_size == 8 and dl.batch_size == 3
    assert sorted(i for b in dl for i in b[1].tolist()) == list(range(20))
    assert LoaderConfig.from_dict(cfg.to_dict()) == cfg  # the YAML keeps it
    from autotune.cli._show import _config_rows

    assert dict(_config_rows(config))["DataLoader kwargs"].startswith("none: workers hand over 3 samples at a time")


def test_one_sample_at_a_time_where_only_that_fits_the_budget(tiny_dataset) -> None:
    """8 workers x 8 prefetched: one sample each needs 41 MiB, inside 51.2 though beyond the 75 % planned for."""
    from autotune.dataset.scan import scan
    from autotune.loaders.memory import estimate, fit_shm

    ds = scan(tiny_dataset)
    cfg = LoaderConfig.from_params({"backend": "torch", "batch_size": 64, "num_workers": 8, "prefetch_factor": 8})
    fitted = fit_shm(cfg, ds, 51.2)
    assert fitted.options.worker_batch == 1 and estimate(fitted, ds)["shm_mib"] <= 51.2
    assert fit_shm(cfg, ds, 30.0) == cfg  # not even one sample: left to the memory guard, or to AutoLoader's skip


def test_a_pinned_joined_config_counts_two_pinned_batches_not_the_workers(tiny_dataset) -> None:
    from autotune.dataset.scan import scan
    from autotune.loaders.memory import estimate

    ds = scan(tiny_dataset)
    whole = LoaderConfig.from_params({"backend": "torch", "batch_size": 256, "num_workers": 16, "prefetch_factor": 8, "pin_memory": True})
    joined = LoaderConfig.from_params({**whole.to_params(), "worker_batch": 8})
    batch = 256 * 3 * 224 * 224 * 4 / 2**20
    assert estimate(whole, ds, device="cuda")["parts"]["pinned"] == pytest.approx(16 * 8 * batch, rel=1e-3)
    assert estimate(joined, ds, device="cuda")["parts"]["pinned"] == pytest.approx(2 * batch, rel=1e-3)  # the workers' parts are not pinned


def test_build_loader_fits_a_yaml_tuned_with_more_shm_and_check_says_so(tiny_dataset, monkeypatch, workdir) -> None:
    """A YAML tuned where /dev/shm held whole batches, built in an 8 MiB one: its workers hand over smaller batches
    (with a warning) instead of crashing, every sample once; ``autotune check`` calls it stale, naming /dev/shm."""
    import autotune
    from autotune.config import fingerprint
    from autotune.config.schema import Config
    from autotune.dataset.scan import scan
    from autotune.loaders import memory

    ds = scan(tiny_dataset)
    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 1, "prefetch_factor": 4})  # 11.5 MiB of batches
    cfg = Config(loader=loader, device="cpu", pipeline="imagenet-eval", dataset={"mean_bytes": ds.mean_bytes, "samples": len(ds)})
    monkeypatch.setattr(memory, "shm_free_mib", lambda path=memory.SHM_PATH: 8.0)
    with pytest.warns(UserWarning, match=r"/dev/shm here \(8 MiB free\) cannot hold its workers' whole batches of 4: each worker hands over 1 sample at"):
        built = autotune.build_loader(str(tiny_dataset), cfg)
    assert isinstance(built.loader, JoinedLoader) and built.loader.batch_size == 1
    assert sum(len(y) for _, y in built) == len(ds)
    built.close()
    with pytest.warns(UserWarning, match="each worker hands over 1 sample"):
        own = autotune.build_loader(Numbered(10), cfg)
    assert isinstance(own, JoinedLoader) and sorted(i for _, y in own for i in y.tolist()) == list(range(10))
    monkeypatch.setattr(memory, "shm_free_mib", lambda path=memory.SHM_PATH: 8192.0)
    assert not isinstance(autotune.build_loader(Numbered(10), cfg), JoinedLoader)  # room for whole batches: as tuned
    here = {**fingerprint.collect(), "shm_mib": 8}
    stale = [d for d in fingerprint.compare(cfg, here) if d.field == "shm"]
    assert stale and stale[0].matters and "build_loader has each worker hand over 1 sample at a time" in str(stale[0]), stale
    assert not [d for d in fingerprint.compare(cfg, {**here, "shm_mib": 8192}) if d.field == "shm"]
