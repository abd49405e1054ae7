"""The user's own Dataset (``--dataset FILE.py:FUNC``): a ``torch.utils.data.DataLoader`` over what ``FUNC()`` returns.

The DataLoader's worker knobs are tuned as the torch kind tunes them, and also how the workers start
(``multiprocessing_context``: fork, or forkserver and spawn where the dataset pickles) and ``in_order`` where the
installed torch has it. The batches are the user's collate output, any structure: the tensors in it go to the device.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune.config.sections import KNOB_BOUNDS, START_METHODS, TorchOptions, UserOptions
from autotune.errors import UserError
from autotune.loaders.backends._base import BatchLoader, LoaderBackend, MemoryParts, MemorySizes
from autotune.loaders.backends._torch import TorchBackend, _seed_worker, worker_batch_word
from autotune.loaders.threads import capped_worker_init

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.dataset.user import DatasetSpec
    from autotune.loaders.presets import Preset

#: the first torch whose DataLoader takes ``in_order``
IN_ORDER_SINCE = (2, 6)


def default_start_method() -> str:
    """How this interpreter starts worker processes when the DataLoader is not told (fork on Linux before Python 3.14)."""
    import multiprocessing

    return multiprocessing.get_start_method(allow_none=True) or multiprocessing.get_all_start_methods()[0]


def has_in_order() -> bool:
    """Whether the installed torch's DataLoader takes ``in_order`` (read from its version, without importing it)."""
    import importlib.metadata
    import re

    try:
        m = re.match(r"(\d+)\.(\d+)", importlib.metadata.version("torch"))
    except importlib.metadata.PackageNotFoundError:
        return False
    return m is not None and (int(m[1]), int(m[2])) >= IN_ORDER_SINCE


def to_device(batch: Any, device: Any, non_blocking: bool) -> Any:
    """``batch`` with every tensor in it (inside tuples, lists and dicts) on ``device``."""
    import torch

    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: to_device(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(to_device(v, device, non_blocking) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(to_device(v, device, non_blocking) for v in batch)
    return batch


def batch_length(batch: Any) -> int | None:
    """The samples in a batch: the first dimension of the first tensor (or array) found in it; None where it holds none."""
    shape = getattr(batch, "shape", None)
    if shape:
        return int(shape[0])
    values = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    found = None
    for v in values:
        n = batch_length(v)
        if n:
            return n
        found = n if found is None else found
    return found


class UserLoader(BatchLoader):
    """The DataLoader over the user's dataset, each batch moved to the device."""

    def __init__(self, loader: DataLoader, device: str, *, counted: bool = False) -> None:
        import torch

        self.loader = loader
        self.device = device
        self._to_device = torch.device(device).type != "cpu"
        self._non_blocking = bool(getattr(loader, "pin_joined", loader.pin_memory))  # a JoinedLoader pins as it joins
        self._counted = counted
        self._closed = False

    def __len__(self) -> int:
        return len(self.loader)

    def __iter__(self) -> Iterator[Any]:
        if self._closed:
            raise UserError("this loader was closed; build a new one with autotune.build_loader")
        import torch

        for batch in self.loader:
            if self._to_device:
                batch = to_device(batch, self.device, self._non_blocking)
            if self._counted:  # measured: the count as the last item, whatever the batch's structure
                n = batch_length(batch)
                if n is None:  # counted as no sample, the config read 0 samples/s and was written as the winner
                    raise RuntimeError(f"a batch holds no tensor to count its samples by (a {type(batch).__name__}); return tensors, "
                                       "arrays or numbers from __getitem__ (DataLoader's collate stacks them), or from your collate_fn")
                yield (batch, torch.empty(n, 0))
            else:
                yield batch

    def close(self) -> None:
        self._closed = True
        it = getattr(self.loader, "_iterator", None)
        if it is not None and hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        self.loader._iterator = None


def dataloader(spec: DatasetSpec, options: TorchOptions, batch_size: int, device: str, *, shuffle: bool, drop_last: bool,
               seed: int | None = None, sampler: Any = None) -> DataLoader:
    """The DataLoader over ``spec``'s dataset with ``options``' knobs (a torch section's, or a user section's)."""
    import torch
    from torch.utils.data import DataLoader, IterableDataset

    stream = isinstance(spec.dataset, IterableDataset)  # read as it yields: no sampler, no shuffle
    kwargs: dict[str, Any] = {
        "batch_size": batch_size, "num_workers": options.num_workers, "shuffle": shuffle and sampler is None and not stream,
        "sampler": None if stream else sampler,
        "drop_last": drop_last, "pin_memory": options.pin_memory and torch.device(device).type == "cuda",
        "collate_fn": spec.collate_fn, "worker_init_fn": spec.worker_init_fn,
        "generator": torch.Generator().manual_seed(seed) if seed is not None else None,
    }
    if options.num_workers > 0:
        kwargs["prefetch_factor"] = options.prefetch_factor or 2
        kwargs["persistent_workers"] = options.persistent_workers
        if isinstance(options, UserOptions):
            if options.multiprocessing_context is not None:
                kwargs["multiprocessing_context"] = options.multiprocessing_context
            if options.in_order is not None and has_in_order():
                kwargs["in_order"] = options.in_order
        if seed is not None and spec.worker_init_fn is None:
            kwargs["worker_init_fn"] = functools.partial(_seed_worker, seed)
        start = getattr(options, "multiprocessing_context", None) or default_start_method()
        kwargs["worker_init_fn"] = capped_worker_init(options.num_workers, start, kwargs["worker_init_fn"])  # OpenCV's: loaders.threads
        wb = options.joined_from(batch_size)
        if wb:  # a /dev/shm too small for whole batches: the workers' smaller ones, joined here
            from autotune.loaders.joined import JoinedLoader

            return JoinedLoader(spec.dataset, joined_batch_size=batch_size, **{**kwargs, "batch_size": wb})
    return DataLoader(spec.dataset, **kwargs)


def dataloader_for(dataset: Any, cfg: Any, *, seed: int | None = None, shard_id: int = 0, num_shards: int = 1,
                   fit: Callable[[Any], Any] | None = None) -> DataLoader:
    """``autotune.build_loader(dataset, cfg)`` for the user's own Dataset (a Dataset, a DatasetSpec or ``FILE.py:FUNC``):
    the DataLoader over it with ``cfg``'s DataLoader knobs, shuffled for a train config; ``fit``: what the chosen
    config becomes on this machine (its /dev/shm)."""
    from torch.utils.data import DistributedSampler

    from autotune.config.files import load_config
    from autotune.config.schema import Config, LoaderConfig
    from autotune.dataset import user

    if isinstance(cfg, (str, os.PathLike)):
        cfg = load_config(cfg)
    if not isinstance(cfg, (Config, LoaderConfig)):
        raise UserError(f"cfg must be a Config (autotune.load_config(path)), a LoaderConfig or a YAML's path, but got {type(cfg).__name__}")
    chosen = cfg.dataloader if isinstance(cfg, Config) else cfg
    if chosen is None or not isinstance(chosen.options, TorchOptions):
        raise UserError(f"{getattr(cfg, 'path', None) or 'this config'} holds no DataLoader knobs (its study measured no torch DataLoader); "
                        "tune one for this Dataset with autotune.tune(dataset, batch_size=N)")
    spec = user.dataset_spec(dataset) if isinstance(dataset, str) else user.as_spec(dataset)
    if not user.is_iterable(spec.dataset):  # torch's sampler would say "num_samples should be a positive integer value"
        user.given_length(spec.dataset)
    train = getattr(cfg, "pipeline", "imagenet-train") != "imagenet-eval"
    sampler: Any = None
    if num_shards > 1 and not user.is_iterable(spec.dataset):  # a stream splits itself by rank
        sampler = DistributedSampler(spec.dataset, num_replicas=num_shards, rank=shard_id, shuffle=train, seed=seed or 0, drop_last=train)
    if fit is not None:
        chosen = fit(chosen)
    if user.is_iterable(spec.dataset) and (chosen.options.num_workers or 0) > 1:  # tune() and AutoLoader catch it too
        user.check_split(spec, given=True)  # else each of N workers delivers the whole stream, N times the items, silently
    return dataloader(spec, chosen.options, chosen.batch_size, getattr(cfg, "device", "cpu"), shuffle=train, drop_last=False, seed=seed,
                      sampler=sampler)


class UserBackend(LoaderBackend):
    """A DataLoader over the user's own Dataset, map-style or iterable (``--dataset FILE.py:FUNC``)."""

    name = "user"
    options = UserOptions
    params = {name: name for name in ("num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "multiprocessing_context", "in_order",
                                      "worker_batch")}
    space_rules = {
        "num_workers": ("int", *KNOB_BOUNDS["num_workers"]),
        "prefetch_factor": ("int", 1, 64),
        "pin_memory": ("bool", None, None),
        "persistent_workers": ("bool", None, None),
        "in_order": ("bool", None, None),
    }
    label = "your Dataset"
    preload_before_fork = True
    _torch = TorchBackend()

    @staticmethod
    def as_torch(loader: LoaderConfig) -> LoaderConfig:
        """``loader`` as the torch kind's config with the same worker knobs (its memory and buffers are the same)."""
        from autotune.config.schema import LoaderConfig
        from autotune.outcomes import Backend

        opts = loader.options
        torch_opts = TorchOptions(**{f.name: getattr(opts, f.name) for f in dataclasses.fields(TorchOptions)})
        return LoaderConfig(Backend("torch"), loader.batch_size, torch=torch_opts)

    def describe(self, loader: LoaderConfig) -> str:
        o = loader.options
        s = "user " + self._torch.knobs(self.as_torch(loader)).removeprefix("torch ")
        if o.num_workers > 0 and o.multiprocessing_context:
            s += f" {o.multiprocessing_context}"
        if o.num_workers > 0 and o.in_order is False:
            s += " out-of-order"
        return s + worker_batch_word(loader)

    def section(self, options: Any) -> dict[str, Any]:
        return {k: getattr(options, k) for k in self.params}

    def dataloader_kwargs(self, loader: LoaderConfig) -> dict[str, Any]:
        o = loader.options
        kwargs = self._torch.dataloader_kwargs(self.as_torch(loader))  # worker_batch has no keyword: Config.dataloader_kwargs says so
        if o.num_workers > 0 and o.multiprocessing_context is not None:
            kwargs["multiprocessing_context"] = o.multiprocessing_context
        if o.num_workers > 0 and o.in_order is not None and has_in_order():
            kwargs["in_order"] = o.in_order
        return kwargs

    def fit_space(self, space: Any, device: str) -> Any:
        space = self._torch.fit_space(space, device)
        if "in_order" in space and not has_in_order():
            space = dataclasses.replace(space, params=tuple(p for p in space.params if p.name != "in_order"))
        return space

    def starting_points(self, space: Any, *, batch_sizes: tuple[int, ...], cores: int, cuda: bool) -> dict[str, dict[str, Any]]:
        """The DataLoader's defaults and the common heuristic over the user's Dataset, at the user's batch size."""
        batch = batch_sizes[len(batch_sizes) // 2]
        heuristic: dict[str, Any] = {"backend": self.name, "batch_size": batch, "num_workers": cores, "pin_memory": cuda,
                                     "prefetch_factor": 2, "persistent_workers": True}
        # as a training script writes it: the interpreter's own way of starting workers, batches in order. Left out, the
        # study would draw these two at random, and a start drawn as spawn with a worker per core can spend its whole
        # trial starting workers (16 of them re-importing torch took over 30 s on a 16-core machine).
        for name, value in (("multiprocessing_context", default_start_method()), ("in_order", True)):
            if name in space and space[name].contains(value):
                heuristic[name] = value
        return {
            "defaults": {"backend": self.name, "batch_size": batch, "num_workers": 0, "pin_memory": False},
            "heuristic": heuristic,
        }

    def start_up_only(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """The workers' start method, where fork is the interpreter's default (Linux before Python 3.14): fork copies a started process, where spawn
        and forkserver start each worker anew and import the user's module in it (of six such trials in 60 s runs on an
        H100, four gave no window in 13-30 s); the workers then load alike (a restart each epoch is priced in the rate)."""
        if int(params.get("num_workers") or 0) == 0 or default_start_method() != "fork":  # forkserver's is no soonest start
            return {}
        return {"multiprocessing_context": "fork"}

    def starts_once(self, loader: LoaderConfig) -> bool:
        return bool(loader.options.persistent_workers)

    def restarts_each_epoch(self, loader: LoaderConfig) -> bool:
        return loader.options.num_workers > 0 and not loader.options.persistent_workers

    def threads(self, params: Mapping[str, Any]) -> int:
        return int(params.get("num_workers", 0))

    def buffered_batches(self, loader: LoaderConfig) -> int:
        return self._torch.buffered_batches(self.as_torch(loader))

    def memory(self, loader: LoaderConfig, sizes: MemorySizes) -> MemoryParts:
        return self._torch.memory(self.as_torch(loader), sizes)  # worker_batch included

    def memory_fix(self, loader: LoaderConfig) -> str:
        return self._torch.memory_fix(self.as_torch(loader)).replace("loader.torch.", "loader.user.")

    def preload(self) -> None:
        import torch.utils.data  # noqa: F401 - imported ahead of the measured build

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
    ) -> UserLoader:
        """The DataLoader over what the user's function returns (called here; its module is imported once per process)."""
        from torch.utils.data import DistributedSampler

        from autotune.dataset.user import dataset_spec, is_iterable

        spec = dataset_spec(dataset.root)
        opts = loader.options
        if opts.num_workers > 0 and opts.multiprocessing_context not in (None, "fork") and not getattr(dataset, "pickles", True):
            raise UserError(f"multiprocessing_context {opts.multiprocessing_context} needs a Dataset that pickles; use fork")
        sampler: Any = None
        if indices is not None:  # delivered in that order (AutoLoader counts what was delivered by position)
            sampler = list(indices)
            opts = dataclasses.replace(opts, in_order=None)
        elif num_shards > 1 and not is_iterable(spec.dataset):  # a stream splits itself by rank
            sampler = DistributedSampler(spec.dataset, num_replicas=num_shards, rank=shard_id, shuffle=preset.train, seed=seed or 0,
                                         drop_last=preset.train)
        dl = dataloader(spec, opts, loader.batch_size, device, shuffle=preset.train, drop_last=preset.train, seed=seed, sampler=sampler)
        return UserLoader(dl, device, counted=True)


__all__ = ["START_METHODS", "UserBackend", "UserLoader", "dataloader", "to_device"]
