"""The torch backend: an ``ImageFolder``-style dataset, the preset's torchvision transforms, a ``DataLoader``."""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

import torch
from torch.utils.data import DataLoader, DistributedSampler
from torchvision import transforms

from autotune.errors import UserError
from autotune.loaders.backends._base import BatchLoader, LoaderBackend

if TYPE_CHECKING:
    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.presets import Preset


def build_transform(preset: Preset) -> transforms.Compose:
    """torchvision transforms for a preset (the DALI backend builds the same pipeline)."""
    if preset.train:
        ops = [transforms.RandomResizedCrop(preset.crop, scale=preset.scale, ratio=preset.ratio), transforms.RandomHorizontalFlip()]
    else:
        ops = [transforms.Resize(preset.resize), transforms.CenterCrop(preset.crop)]
    return transforms.Compose([*ops, transforms.ToTensor(), transforms.Normalize(preset.mean, preset.std)])


class FileListDataset(torch.utils.data.Dataset):
    """``ImageFolder`` over an already scanned file list (same classes, same order, same RGB loader)."""

    def __init__(self, files: tuple[str, ...], labels: tuple[int, ...], classes: tuple[str, ...], transform) -> None:
        self.samples = list(zip(files, labels))
        self.targets = list(labels)
        self.classes = list(classes)
        self.class_to_idx = {c: i for i, c in enumerate(classes)}
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        from autotune.dataset.imaging import open_rgb

        img = open_rgb(path)
        return self.transform(img), target


def _seed_worker(base_seed: int, worker_id: int) -> None:
    import random

    import numpy as np

    s = (base_seed + worker_id) % 2**32
    random.seed(s)
    np.random.seed(s)


class TorchLoader(BatchLoader):
    def __init__(self, loader: DataLoader, device: str) -> None:
        self.loader = loader
        self.device = device
        self._to_device = torch.device(device).type != "cpu"
        self._non_blocking = bool(loader.pin_memory)
        self._epoch = 0
        self._closed = False

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:  # as the DALI loader says: persistent workers would be started again, and never shut down
            raise UserError("this torch loader was closed; build a new one with autotune.build_loader")
        sampler = self.loader.sampler
        if isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self._epoch)  # a new shuffle each epoch, the same on every rank
        self._epoch += 1
        if not self._to_device:
            yield from self.loader
            return
        for images, labels in self.loader:
            yield images.to(self.device, non_blocking=self._non_blocking), labels.to(self.device, non_blocking=self._non_blocking)

    def close(self) -> None:
        self._closed = True
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.loader._iterator = None


class TorchBackend(LoaderBackend):
    name = "torch"

    def build(
        self,
        dataset: Dataset,
        preset: Preset,
        loader: LoaderConfig,
        device: str,
        *,
        shard_id: int = 0,
        num_shards: int = 1,
        seed: int | None = None,
        indices: Sequence[int] | None = None,
    ) -> TorchLoader:
        opts = loader.torch
        assert opts is not None
        ds = FileListDataset(dataset.files, dataset.labels, dataset.classes, build_transform(preset))
        sampler = None
        shuffle = preset.train
        if indices is not None:
            sampler = list(indices)  # these positions, in this order (a DataLoader takes any iterable of indices)
            shuffle = False
        elif num_shards > 1:
            sampler = DistributedSampler(ds, num_replicas=num_shards, rank=shard_id, shuffle=preset.train, seed=seed or 0, drop_last=preset.train)
            shuffle = False
        generator = torch.Generator().manual_seed(seed) if seed is not None else None
        kwargs: dict = {
            "batch_size": loader.batch_size,
            "num_workers": opts.num_workers,
            "pin_memory": opts.pin_memory and torch.device(device).type == "cuda",
            "shuffle": shuffle,
            "sampler": sampler,
            "drop_last": preset.train,
            "generator": generator,
        }
        if opts.num_workers > 0:
            kwargs["prefetch_factor"] = opts.prefetch_factor or 2
            kwargs["persistent_workers"] = opts.persistent_workers
            if seed is not None:
                kwargs["worker_init_fn"] = functools.partial(_seed_worker, seed)
        return TorchLoader(DataLoader(ds, **kwargs), device)
