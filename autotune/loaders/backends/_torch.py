"""The torch backend: an ``ImageFolder``-style dataset, the preset's torchvision transforms, a ``DataLoader``.

torch and torchvision are imported where a loader is built or read, so that the study reads this kind's
parameters, starting points and memory without them.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.config.sections import KNOB_BOUNDS, TorchOptions
from autotune.errors import UserError
from autotune.loaders.backends._base import CUDA_CONTEXT_MIB, BatchLoader, LoaderBackend, MemoryParts, MemorySizes

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader
    from torchvision import transforms

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.presets import Preset


#: a forked DataLoader worker's own pages, in MiB (measured on torch 2.x, rounded up)
WORKER_BASE_MIB = 60


def build_transform(preset: Preset) -> transforms.Compose:
    """torchvision transforms for a preset (the DALI backend builds the same pipeline)."""
    from torchvision import transforms

    if preset.train:
        ops = [transforms.RandomResizedCrop(preset.crop, scale=preset.scale, ratio=preset.ratio), transforms.RandomHorizontalFlip()]
    else:
        ops = [transforms.Resize(preset.resize), transforms.CenterCrop(preset.crop)]
    return transforms.Compose([*ops, transforms.ToTensor(), transforms.Normalize(preset.mean, preset.std)])


class FileListDataset:
    """``ImageFolder`` over an already scanned file list (same classes, same order, same RGB loader): a map-style
    dataset, which is all a ``DataLoader`` asks of one."""

    def __init__(self, files: tuple[str, ...], labels: tuple[int, ...], classes: tuple[str, ...], transform) -> None:
        self.samples = list(zip(files, labels, strict=True))
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
        import torch

        self.loader = loader
        self.device = device
        self._to_device = torch.device(device).type != "cpu"
        self._non_blocking = bool(getattr(loader, "pin_joined", loader.pin_memory))  # a JoinedLoader pins as it joins
        self._epoch = 0
        self._closed = False

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        if self._closed:  # as the DALI loader says: persistent workers would be started again, and never shut down
            raise UserError("this torch loader was closed; build a new one with autotune.build_loader")
        from torch.utils.data import DistributedSampler

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


def worker_batch_word(loader: LoaderConfig) -> str:
    """`` worker-batch=N`` where the workers hand over N samples at a time, joined into batches; else nothing."""
    wb = loader.options.joined_from(loader.batch_size)
    return f" worker-batch={wb}" if wb else ""


class TorchBackend(LoaderBackend):
    name = "torch"
    options = TorchOptions
    params = {name: name for name in ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "worker_batch")}
    space_rules = {
        "num_workers": ("int", *KNOB_BOUNDS["num_workers"]),
        "prefetch_factor": ("int", 1, 64),  # a YAML may hold more (KNOB_BOUNDS), tuned by hand
        "pin_memory": ("bool", None, None),
        "persistent_workers": ("bool", None, None),
    }
    label = "torch"
    reference = True
    smoke_checks = {"torch": ({"num_workers": 2, "prefetch_factor": 2}, "cpu")}
    preload_before_fork = True

    def describe(self, loader: LoaderConfig) -> str:
        return self.knobs(loader) + worker_batch_word(loader)

    @staticmethod
    def knobs(loader: LoaderConfig) -> str:
        """``describe`` without the worker batch (the user kind says its own knobs before it)."""
        t = loader.options
        s = f"torch b={loader.batch_size} workers={t.num_workers}"
        if t.pin_memory:
            s += " pin"
        if t.prefetch_factor:
            s += f" prefetch={t.prefetch_factor}"
        if t.persistent_workers:
            s += " persistent"
        return s

    def section(self, options: Any) -> dict[str, Any]:
        # every DataLoader keyword, unset ones as null; worker_batch (no keyword) where the workers' batches are joined
        return {k: getattr(options, k) for k in self.params if k != "worker_batch" or options.worker_batch is not None}

    def dataloader_kwargs(self, loader: LoaderConfig) -> dict[str, Any]:
        t = loader.torch
        assert t is not None
        kwargs: dict[str, Any] = {"batch_size": loader.batch_size, "num_workers": t.num_workers, "pin_memory": t.pin_memory}
        if t.num_workers > 0:
            if t.prefetch_factor is not None:
                kwargs["prefetch_factor"] = t.prefetch_factor
            kwargs["persistent_workers"] = t.persistent_workers
        return kwargs

    def fit_space(self, space: Any, device: str) -> Any:
        if not device.startswith("cuda") and "pin_memory" in space and space["pin_memory"].kind == "choices" and False in space["pin_memory"].choices:
            return space.restrict("pin_memory", (False,))  # pinned memory is for copies to a GPU
        return space

    def starting_points(self, space: Any, *, batch_sizes: tuple[int, ...], cores: int, cuda: bool) -> dict[str, dict[str, Any]]:
        """The DataLoader's defaults and the common heuristic (a worker per core), at the space's usual batch size."""
        batch = 64 if 64 in batch_sizes else batch_sizes[0]
        return {
            "defaults": {"backend": "torch", "batch_size": batch, "num_workers": 0, "pin_memory": False},
            "heuristic": {"backend": "torch", "batch_size": batch, "num_workers": cores, "pin_memory": cuda, "prefetch_factor": 2, "persistent_workers": True},
        }

    decodes_with_open_rgb = True

    def starts_once(self, loader: LoaderConfig) -> bool:
        return loader.torch is not None and loader.torch.persistent_workers

    def restarts_each_epoch(self, loader: LoaderConfig) -> bool:
        return loader.torch is not None and loader.torch.num_workers > 0 and not loader.torch.persistent_workers

    def threads(self, params: Mapping[str, Any]) -> int:
        return int(params.get("num_workers", 0))

    def decode_threads(self, params: Mapping[str, Any]) -> int | None:
        return max(1, self.threads(params))  # no workers: the loop's own process decodes

    def buffered_batches(self, loader: LoaderConfig) -> int:
        """Workers x prefetch factor (2 batches a worker by default)."""
        t = loader.torch
        assert t is not None
        return t.num_workers * (t.prefetch_factor or 2) if t.num_workers > 0 else 0

    def memory(self, loader: LoaderConfig, sizes: MemorySizes) -> MemoryParts:
        t = loader.torch
        assert t is not None
        out, decoded = sizes.out_batch_mib, sizes.decoded_mib
        parts = MemoryParts()
        wb = t.joined_from(loader.batch_size)
        if t.num_workers > 0:
            in_flight = t.num_workers * (t.prefetch_factor or 2)
            parts.host["workers"] = t.num_workers * (WORKER_BASE_MIB + 2 * decoded + 2 * out)  # PIL decode + convert, per-sample tensors + collate
            parts.shm = (in_flight + 1) * out  # each worker's batches wait in /dev/shm, and the one the loop holds is there too
            if wb:  # the workers' smaller batches, joined here: each worker's prefetched ones and the one it collates into
                # shared memory (which also covers the one part the main process copies into the batch: it holds no other)
                parts.shm = t.num_workers * ((t.prefetch_factor or 2) + 1) * out * wb / loader.batch_size
                parts.host["joined"] = out
            parts.host["batches_in_flight"] = parts.shm
        else:
            in_flight = 1
            parts.host["decode"] = 2 * decoded + 2 * out
        parts.host["consumer"] = out
        if t.pin_memory and sizes.cuda:  # the pinning thread's copy of each batch in flight; joined, the batch being joined and the loop's
            parts.host["pinned"] = (2 if wb else in_flight) * out
        if sizes.cuda:
            parts.gpu.update(cuda_context=CUDA_CONTEXT_MIB, batches_on_gpu=2 * out)
        return parts

    def memory_fix(self, loader: LoaderConfig) -> str:
        t = loader.torch
        assert t is not None
        if t.num_workers == 0:  # no batches in flight: the batch itself is what does not fit
            return "no workers); lower the batch size"
        return (f"num_workers {t.num_workers} x prefetch_factor {t.prefetch_factor or 2}); lower loader.torch.prefetch_factor (2 is torch's default) "
                "or num_workers")

    def preload(self) -> None:
        import torch.utils.data  # noqa: F401 - imported ahead of the measured build
        import torchvision.transforms  # noqa: F401 - the same

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
        import torch
        from torch.utils.data import DataLoader, DistributedSampler

        opts = loader.torch
        assert opts is not None
        ds: Any = FileListDataset(dataset.files, dataset.labels, dataset.classes, build_transform(preset))
        sampler: Any = None
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
            wb = opts.joined_from(loader.batch_size)
            if wb:  # a /dev/shm too small for whole batches: the workers' smaller ones, joined here
                from autotune.loaders.joined import JoinedLoader

                return TorchLoader(JoinedLoader(ds, joined_batch_size=loader.batch_size, **{**kwargs, "batch_size": wb}), device)
        return TorchLoader(DataLoader(ds, **kwargs), device)
