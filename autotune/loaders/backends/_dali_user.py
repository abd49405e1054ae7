"""The user's own DALI pipeline function (``--dataset FILE.py:FUNC``, ``FUNC`` decorated with ``@pipeline_def`` or
returning such a function): built with the tuned ``num_threads`` and ``prefetch_queue_depth`` (and ``hw_decoder_load``
where the function takes it), read through ``DALIGenericIterator``.

The function is called as ``fn(batch_size=..., num_threads=..., device_id=..., prefetch_queue_depth=...)``; ``device_id``
is the GPU's index, or None without one (a CPU-only pipeline). The outputs are named by the function's ``output_map``
attribute, or ``("images", "labels")``. An epoch is the pipeline's reader's, when it has exactly one reader; otherwise
the pipeline runs until it raises ``StopIteration`` (an external source that ends).
"""

from __future__ import annotations

import logging
import os
import traceback
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune._imports import is_available, try_import
from autotune.config.sections import DEFAULT_HW_DECODER_LOAD, KNOB_BOUNDS, DaliUserOptions
from autotune.errors import UserError
from autotune.loaders.backends._base import CUDA_CONTEXT_MIB, BatchLoader, LoaderBackend, MemoryParts, MemorySizes
from autotune.loaders.backends._dali import DALI_BASE_MIB, HELD_DECODER_MIB, USUAL_THREADS, DaliBackend, _device_id, _threads_in, ready_cuda

if TYPE_CHECKING:
    import torch

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.presets import Preset

logger = logging.getLogger(__name__)

#: the output names of a pipeline function without an ``output_map`` attribute
DEFAULT_OUTPUTS = ("images", "labels")


def output_names(pipeline_fn: Any) -> tuple[str, ...]:
    """The names of a pipeline function's outputs: its ``output_map`` attribute, or :data:`DEFAULT_OUTPUTS`."""
    names = getattr(pipeline_fn, "output_map", None)
    if names is None:
        return DEFAULT_OUTPUTS
    if isinstance(names, str) or not all(isinstance(n, str) for n in names) or not names:
        raise UserError(f"the pipeline function's output_map must be a list of output names such as ['images', 'labels'], but got {names!r}")
    return tuple(names)


def pipeline_kwargs(pipeline_fn: Any, batch_size: int, options: DaliUserOptions, device_id: int | None, *, seed: int | None = None,
                    shard_id: int = 0, num_shards: int = 1) -> dict[str, Any]:
    """The arguments a pipeline function is called with: the Pipeline's ``batch_size``, ``num_threads``, ``device_id`` and
    ``prefetch_queue_depth`` (and ``seed`` when given); ``hw_decoder_load``, ``shard_id`` and ``num_shards`` only where
    the function's signature takes them."""
    from autotune.dataset.user import takes_hw_decoder_load

    kwargs: dict[str, Any] = {"batch_size": batch_size, "num_threads": options.num_threads, "device_id": device_id,
                              "prefetch_queue_depth": options.prefetch_queue_depth}
    if seed is not None:
        kwargs["seed"] = int(seed) % 2**31
    if takes_hw_decoder_load(pipeline_fn):
        kwargs["hw_decoder_load"] = DEFAULT_HW_DECODER_LOAD if options.hw_decoder_load is None else options.hw_decoder_load
    if num_shards > 1:
        taken = _parameters(pipeline_fn)
        if not {"shard_id", "num_shards"} <= taken:
            raise UserError("the pipeline function must take shard_id and num_shards (passed to its reader) to be read by several ranks")
        kwargs.update(shard_id=shard_id, num_shards=num_shards)
    return kwargs


def _parameters(pipeline_fn: Any) -> set[str]:
    import inspect

    try:
        return set(inspect.signature(pipeline_fn).parameters)
    except (TypeError, ValueError):
        return set()


def build_iterator(target: str, options: DaliUserOptions, batch_size: int, device: str, *, train: bool, seed: int | None = None,
                   shard_id: int = 0, num_shards: int = 1) -> tuple[Any, Any, tuple[str, ...], int]:
    """Build the pipeline function of ``target`` and its ``DALIGenericIterator``. Returns ``(pipeline, iterator, output
    names, batches per epoch)``; 0 batches when the pipeline has no single reader to tell an epoch's length."""
    try_import("dali")  # a missing DALI is a one-line error naming the pip extra
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from autotune.dataset.user import UserCodeError, _user_call, pipeline_function

    def split_target(t: str) -> str:  # the function's name, as the user's other errors name it
        return t.rpartition(":")[2]

    fn = pipeline_function(target)
    names = output_names(fn)
    kwargs = pipeline_kwargs(fn, batch_size, options, _device_id(device, "cpu"), seed=seed, shard_id=shard_id, num_shards=num_shards)
    where = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    path = os.path.abspath(where.co_filename) if where is not None else None
    pipe = _user_call(target, lambda: fn(**kwargs), path)
    try:
        _user_call(target, pipe.build, path)
    except UserCodeError as e:
        cause = e.__cause__
        if isinstance(cause, NotImplementedError) and traceback.extract_tb(cause.__traceback__)[-1].name == "define_graph":  # no outputs given
            raise UserError(f"{split_target(target)} returns no output; return the pipeline's outputs (such as images, labels)") from None
        raise
    outputs = getattr(pipe, "num_outputs", None)
    if isinstance(outputs, int) and outputs != len(names):  # DALIGenericIterator would fail on a name with no output: KeyError 'labels'
        said = f"its output_map names {len(names)}" if getattr(fn, "output_map", None) is not None else f"{len(names)} are named by default {list(names)}"
        raise UserError(f"{split_target(target)} returns {outputs} output{'s' if outputs != 1 else ''}, but {said}; return as many, or set "
                        f"{split_target(target)}.output_map = [one name for each output]")
    readers = list(pipe.reader_meta())
    policy = LastBatchPolicy.DROP if train else LastBatchPolicy.PARTIAL
    if len(readers) == 1:
        iterator = DALIGenericIterator([pipe], list(names), reader_name=readers[0], auto_reset=True, last_batch_policy=policy,
                                       prepare_first_batch=False)
        size = pipe.reader_meta(readers[0])["epoch_size"] // max(1, num_shards)
        return pipe, iterator, names, size // batch_size if train else -(-size // batch_size)
    iterator = DALIGenericIterator([pipe], list(names), auto_reset=True, prepare_first_batch=False)
    return pipe, iterator, names, 0


class DaliUserLoader(BatchLoader):
    """The user's DALI pipeline through ``DALIGenericIterator``: each batch as its first output and its second (or, for a
    pipeline of one output, an empty tensor of the batch's length), on the device. Each ``iter()`` is one epoch."""

    def __init__(self, pipeline: Any, iterator: Any, names: tuple[str, ...], device: str, length: int) -> None:
        import torch

        self.pipeline = pipeline
        self.iterator = iterator
        self.names = names
        self.device = device
        self._len = length
        self._to_device = torch.device(device).type != "cpu"
        self._unfinished = False

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        import torch

        if self.iterator is None:
            raise UserError("this DALI loader was closed; build a new one with autotune.build_loader")
        if self._unfinished:  # DALI cannot restart an epoch half read: read what is left of it first
            for _ in iter(lambda: next(self.iterator, None), None):
                pass
        self._unfinished = True
        for batch in self.iterator:
            out = batch[0]
            first = out[self.names[0]]
            if first.shape[0] == 0:
                continue  # PARTIAL policy: the shorter of uneven shards ends with an empty batch
            second = out[self.names[1]] if len(self.names) > 1 else torch.empty(first.shape[0], 0)
            if self._to_device:
                first, second = first.to(self.device), second.to(self.device)
            yield first, second
        self._unfinished = False

    def close(self) -> None:
        pipe, self.pipeline, self.iterator = self.pipeline, None, None
        shutdown = getattr(pipe, "_shutdown", None)
        if shutdown is not None:
            shutdown()


def dali_user_config(cfg: Any) -> Any:
    """``cfg`` (a Config, a LoaderConfig or a YAML's path) read, when it is a config of this kind; else None."""
    if isinstance(cfg, (str, os.PathLike)):
        from autotune.config.files import load_config

        cfg = load_config(cfg)
    loader = getattr(cfg, "loader", cfg)
    return cfg if getattr(getattr(loader, "backend", None), "value", None) == DaliUserBackend.name else None


def iterator_for(target: str, cfg: Any, *, device: str | None = None, seed: int | None = None, shard_id: int = 0, num_shards: int = 1) -> Any:
    """``autotune.build_loader("FILE.py:FUNC", cfg)`` for a config of this kind: the pipeline built with ``cfg``'s knobs
    and its ``DALIGenericIterator`` (each batch a list of one dict, by output name), shuffled as the pipeline does."""
    chosen = cfg.loader if hasattr(cfg, "loader") else cfg
    train = getattr(cfg, "pipeline", "imagenet-train") != "imagenet-eval"
    where = device or getattr(cfg, "device", None) or "cpu"
    _, iterator, _, _ = build_iterator(target, chosen.options, chosen.batch_size, where, train=train, seed=seed, shard_id=shard_id,
                                       num_shards=num_shards)
    return iterator


class DaliUserBackend(LoaderBackend):
    """The user's own DALI pipeline function (``--dataset FILE.py:FUNC``)."""

    name = "dali_user"
    options = DaliUserOptions
    params = {"num_threads": "num_threads", "prefetch_queue_depth": "prefetch_queue_depth", "hw_decoder_load": "hw_decoder_load"}
    space_rules = {
        "num_threads": ("int", *KNOB_BOUNDS["num_threads"]),
        "prefetch_queue_depth": ("int", 1, 64),
        "hw_decoder_load": ("number", 0.0, 1.0),
    }
    label = "your DALI pipeline"
    install = DaliBackend.install
    reuses_process = True  # as DALI's own kind: the user's module, DALI and the device are set up once
    needs_torchvision = False  # its decoding and augmentation are DALI's

    def describe(self, loader: LoaderConfig) -> str:
        o = loader.options
        s = f"dali_user b={loader.batch_size} threads={o.num_threads} queue={o.prefetch_queue_depth}"
        return s + (f" hw_load={o.hw_decoder_load:g}" if o.hw_decoder_load is not None else "")

    def available(self) -> bool:
        return is_available("dali")

    def fit_space(self, space: Any, device: str) -> Any:
        """Without a GPU there is no hardware decoder: ``hw_decoder_load`` is left out."""
        return space if device.startswith("cuda") else without(space, "hw_decoder_load")

    def starting_points(self, space: Any, *, batch_sizes: tuple[int, ...], cores: int, cuda: bool) -> dict[str, dict[str, Any]]:
        """Four threads and DALI's queue of two (what DALI's examples pass), and a thread per core up to eight, at the
        user's batch size; with ``hw_decoder_load`` in the space, DALI's usual share."""
        batch = batch_sizes[len(batch_sizes) // 2]
        base: dict[str, Any] = {"backend": self.name, "batch_size": batch, "prefetch_queue_depth": 2}
        if "hw_decoder_load" in space:
            base["hw_decoder_load"] = DEFAULT_HW_DECODER_LOAD
        return {"defaults": {**base, "num_threads": _threads_in(space, 4)},
                "heuristic": {**base, "num_threads": _threads_in(space, min(cores, USUAL_THREADS))}}

    def threads(self, params: Mapping[str, Any]) -> int:
        return int(params.get("num_threads", 2))

    def buffered_batches(self, loader: LoaderConfig) -> int:
        return int(loader.options.prefetch_queue_depth)

    def memory(self, loader: LoaderConfig, sizes: MemorySizes) -> MemoryParts:
        """DALI's own pools, each thread's decode buffer and the queue's batches (the pipeline's stages are unknown:
        counted as the delivered batch's size)."""
        o = loader.options
        out = sizes.out_batch_mib
        parts = MemoryParts(host={"dali": DALI_BASE_MIB, "decode_threads": o.num_threads * sizes.decoded_mib})
        if sizes.cuda:
            parts.gpu.update(cuda_context=CUDA_CONTEXT_MIB, held_decoder=HELD_DECODER_MIB, stages=o.prefetch_queue_depth * out, batches_on_gpu=2 * out)
        else:
            parts.host.update(stages=o.prefetch_queue_depth * out, consumer=out)
        return parts

    def memory_fix(self, loader: LoaderConfig) -> str:
        return f"prefetch_queue_depth {loader.options.prefetch_queue_depth}); lower loader.dali_user.prefetch_queue_depth"

    def preload(self) -> None:
        try_import("dali")
        import nvidia.dali.plugin.pytorch  # noqa: F401 - imported ahead of the measured build

    def ready_device(self, device: str) -> float:
        return ready_cuda(device)

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
    ) -> DaliUserLoader:
        """Build the user's pipeline function (its module imported once per process) and its iterator."""
        if indices is not None:
            raise UserError("a DALI pipeline function reads what its own reader reads; tune it with autotune run --dataset FILE.py:FUNC")
        pipe, iterator, names, length = build_iterator(dataset.root, loader.options, loader.batch_size, device, train=preset.train, seed=seed,
                                                       shard_id=shard_id, num_shards=num_shards)
        logger.debug("built %s: %s, device %s", dataset.root, loader.describe(), device)
        return DaliUserLoader(pipe, iterator, names, device, length)


def without(space: Any, name: str) -> Any:
    """``space`` without the parameter ``name``."""
    import dataclasses

    return dataclasses.replace(space, params=tuple(p for p in space.params if p.name != name)) if name in space else space


__all__ = ["DEFAULT_OUTPUTS", "DaliUserBackend", "DaliUserLoader", "iterator_for", "output_names", "pipeline_kwargs"]
