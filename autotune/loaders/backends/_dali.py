"""The DALI backend: ``fn.readers.file`` over the scanned file list, the preset as DALI operators, a PyTorch iterator.

The pipelines equal the torch backend's (:func:`autotune.loaders.backends._torch.build_transform`):

- train: random resized crop (``decoders.image_random_crop`` + ``resize``), random horizontal flip, normalize;
- eval: resize of the shorter side, center crop, normalize.

Decoding happens on the GPU (``mixed``) when ``loader.dali.device`` is ``gpu``, else on the CPU. DALI's decoders
give RGB for grayscale, CMYK, palette and alpha images, as PIL's ``convert("RGB")`` does.

File names that are not valid UTF-8 (``str`` with surrogate escapes, as ``os.scandir`` returns them) cannot be
passed to DALI, which takes UTF-8 strings; such files are read through symlinks with ASCII names in a private
temporary folder (copies where symlinks are refused), removed by :meth:`DaliLoader.close`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from autotune._imports import is_available, try_import
from autotune.config.sections import KNOB_BOUNDS, DaliOptions
from autotune.errors import SpaceError, UserError
from autotune.loaders.backends._base import CUDA_CONTEXT_MIB, BatchLoader, LoaderBackend, MemoryParts, MemorySizes

if TYPE_CHECKING:
    import torch

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.presets import Preset

logger = logging.getLogger(__name__)

#: The reader's name, which the iterator uses to learn the epoch and shard sizes.
READER_NAME = "Reader"

#: Memory sizes, in MiB (measured on DALI 2.x, rounded up).
DALI_BASE_MIB = 300  # DALI's libraries and host pools
DALI_GPU_BASE_MIB = 400  # nvJPEG / hardware decoder state and DALI's device pools
#: the mixed decoder's device_memory_padding and host_memory_padding, in bytes: DALI's own defaults (see _graph)
NVJPEG_DEVICE_PADDING = 16 * 2**20
NVJPEG_HOST_PADDING = 8 * 2**20
NVJPEG_DEVICE_PADDING_MIB = NVJPEG_DEVICE_PADDING / 2**20
NVJPEG_HOST_PADDING_MIB = NVJPEG_HOST_PADDING / 2**20  # pinned

#: DALI's usual starting point: a thread per core, up to this many (more threads start slowly and rarely help:
#: on a 32-core node with H200s, 32 threads scored 7,752 images/s where 8 scored 15,717; benchmarks/RESULTS.md)
USUAL_THREADS = 8
#: the mixed-decode start: three quarters of the cores, up to this many threads (they read the files and do the CPU
#: half of the CUDA decoder's work), and this share of the JPEGs on the hardware decoder; offered where three quarters
#: of the cores reach MIXED_THREADS (16 cores and more), the hardware-decoder start below that
MIXED_THREADS = 12
MIXED_HW_LOAD = 0.5
#: threads of the hardware-decoder start (file reading only: the JPEGs are decoded by the GPU's engines)
HW_THREADS = 4


def _is_utf8(path: str) -> bool:
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def dali_file_list(files: tuple[str, ...]) -> tuple[list[str], str | None]:
    """Paths DALI can open: the files themselves, or links with ASCII names for those that are not UTF-8.

    Args:
        files: the dataset's files, as scanned (may hold surrogate escapes for undecodable bytes).

    Returns:
        ``(paths, tmpdir)``: one path per file in the same order, and the temporary folder holding the links
        (``None`` when every name was usable as is). The caller removes the folder.

    Raises:
        UserError: when a file can be neither linked nor copied into the temporary folder.
    """
    bad = [i for i, f in enumerate(files) if not _is_utf8(f)]
    if not bad:
        return list(files), None
    tmpdir = tempfile.mkdtemp(prefix="autotune-dali-")
    out = list(files)
    try:
        for i in bad:
            ext = os.path.splitext(files[i])[1]
            link = os.path.join(tmpdir, f"{i:09d}{ext if _is_utf8(ext) else ''}")
            try:
                os.symlink(os.path.abspath(files[i]), link)
            except OSError:
                shutil.copyfile(files[i], link)
            out[i] = link
    except OSError as e:
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise UserError(
            f"cannot make a UTF-8 named link to {files[bad[0]]!r} for DALI ({e.strerror}); rename the files to UTF-8 names or use the torch backend"
        ) from None
    logger.info("%d file name(s) are not UTF-8; DALI reads them through links in %s", len(bad), tmpdir)
    return out, tmpdir


#: per CUDA device, an idle pipeline with a GPU decoder kept built for as long as the process lives, or None where
#: none could be built (:func:`hold_decoders`)
_HELD: dict[int, Any] = {}
#: its GPU memory, on an H100 (114 MiB measured), counted in every pipeline's estimate on a CUDA device (a trial
#: process's holds one)
HELD_DECODER_MIB = 120


def hold_decoders(device_id: int) -> bool:
    """Keep an idle pipeline with a GPU decoder built on ``device_id`` for as long as this process lives; whether one is.

    A DALI decoder's first build in a process sets up the image codec library, its GPU side included, and the release
    of the last decoder tears it down again. On an H100 every build paid it: 1.7 s for GPU decode and 1.0 s for CPU
    decode on a device, whatever the batch, threads, queue or hardware-decoder share; a reader alone built in 2 ms.
    Beside one pipeline with a GPU decoder kept built (batch 1, one thread, never run: 114 MiB of GPU memory, 34 MiB
    of host memory), the same builds took 0.17 s and 0.03 s; beside a CPU decoder kept instead, nothing changed
    (benchmarks/gpu-logs/h100-2026-12-06-search-5/keeper.log, a holder fed by a one-file reader).

    Only a trial process that is kept for later trials of its kind does this (:func:`ready_cuda`, as it starts): a warm
    process builds a pipeline per trial. Never in the user's own process (``build_loader``, AutoLoader), where a torch
    ``DataLoader`` may fork its workers beside DALI's threads, nor in a process measured once.
    Where no such pipeline can be built (no GPU decoder), nothing is held, it is not tried again (said once), and each
    build pays as before."""
    if device_id in _HELD:
        return _HELD[device_id] is not None
    _HELD[device_id] = None  # tried once: a device where none can be built is not tried again at every build
    try:
        from nvidia.dali import fn
        from nvidia.dali.pipeline import Pipeline

        pipe = Pipeline(batch_size=1, num_threads=1, device_id=device_id, prefetch_queue_depth=1)
        with pipe:
            pipe.set_outputs(fn.decoders.image(fn.external_source(name="held", device="cpu"), device="mixed"))
        pipe.build()
    except Exception as e:  # noqa: BLE001 - an optimisation only: the pipeline asked for is built as before
        logger.info("no GPU decoder kept built on device %d (each DALI build sets up its codecs again): %s: %s", device_id, type(e).__name__, e)
        return False
    _HELD[device_id] = pipe
    return True


def ready_cuda(device: str) -> float:
    """``ready_device`` of both DALI backends: on a CUDA device, a GPU decoder held (:func:`hold_decoders`); the
    seconds that took, which each build in a process without it pays (0.0 where it was held already, or none is)."""
    if not device.startswith("cuda"):
        return 0.0
    index = _device_id(device, "cpu")
    assert index is not None
    if index in _HELD:
        return 0.0
    t0 = time.perf_counter()
    held = hold_decoders(index)
    return time.perf_counter() - t0 if held else 0.0


def _device_id(device: str, dali_device: str) -> int | None:
    """The CUDA device index for the pipeline, or ``None`` for a CPU-only pipeline.

    Raises:
        UserError: for GPU decoding with a CPU target, or an unknown device string.
    """
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise UserError(f"device must be 'cpu', 'cuda' or 'cuda:N', but got {device!r}") from None
    if dev.type == "cpu":
        if dali_device == "gpu":
            raise UserError(
                "loader.dali.device 'gpu' decodes on the GPU, so batches cannot be delivered to device 'cpu'; "
                "set loader.dali.device to cpu or use a cuda device"
            )
        return None  # no CUDA at all: CPU_ONLY_DEVICE_ID would still look for a driver
    if dev.type != "cuda":
        raise UserError(f"the DALI backend delivers batches to 'cpu' or 'cuda[:N]', but got {device!r}")
    if not torch.cuda.is_available():
        raise UserError(f"device {device!r} needs a CUDA GPU, but torch sees none; use device 'cpu' with loader.dali.device cpu")
    return dev.index if dev.index is not None else torch.cuda.current_device()


def _graph(
    fn: Any, types: Any, preset: Preset, opts: DaliOptions, files: list[str], labels: list[int], *, to_gpu: bool, shard_id: int, num_shards: int,
    shuffle: bool | None = None,
) -> tuple[Any, Any]:
    """The preset as DALI operators; called inside the pipeline definition.

    Args:
        fn, types: ``nvidia.dali.fn`` and ``nvidia.dali.types``.
        preset: the pipeline preset.
        opts: the DALI knobs (``device`` decides where decoding runs).
        files, labels: what the reader reads, in ``ImageFolder`` order.
        to_gpu: whether the outputs go to a GPU (CPU decoding then moves the images before normalizing).
        shard_id, num_shards: this reader's shard.
        shuffle: whether the reader shuffles; default: for train presets (False reads ``files`` in order).

    Returns:
        ``(images, labels)`` DataNodes: float32 CHW images and int32 labels.
    """
    jpegs, lab = fn.readers.file(
        files=files,
        labels=labels,
        random_shuffle=preset.train if shuffle is None else shuffle,  # a fixed global shuffle, then a shuffle buffer: shards stay disjoint
        shard_id=shard_id,
        num_shards=num_shards,
        pad_last_batch=True,  # every epoch the same length
        stick_to_shard=not preset.train,  # eval: each rank keeps its part, like DistributedSampler
        name=READER_NAME,
    )
    gpu_decode = opts.device == "gpu"
    decode_kw: dict[str, Any] = {"device": "mixed" if gpu_decode else "cpu", "output_type": types.RGB}
    if gpu_decode:
        decode_kw["hw_decoder_load"] = opts.hw_decoder_load
        # DALI's default paddings, not the ResNet-50 recipe's (201 MiB device, 134 MiB host): with the recipe's, a
        # pipeline that decodes part of a batch on the CPU (hw_decoder_load < 1) took 2.3-3.2 s to its first batch
        # instead of 0.3-0.4 s and held 5.1 GB instead of 1.2 GB of host memory, and was no faster after
        # (benchmarks/gpu-logs/h200-2026-12-03-search-2/dali-padding-probe.log)
        decode_kw["device_memory_padding"] = NVJPEG_DEVICE_PADDING
        decode_kw["host_memory_padding"] = NVJPEG_HOST_PADDING
    mean = [m * 255.0 for m in preset.mean]
    std = [s * 255.0 for s in preset.std]
    if preset.train:
        images = fn.decoders.image_random_crop(
            jpegs, random_area=list(preset.scale), random_aspect_ratio=list(preset.ratio), num_attempts=10, **decode_kw
        )
        images = fn.resize(images, resize_x=preset.crop, resize_y=preset.crop)
        if to_gpu and not gpu_decode:
            images = images.gpu()
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", mean=mean, std=std, mirror=fn.random.coin_flip(probability=0.5)
        )
    else:
        images = fn.decoders.image(jpegs, **decode_kw)
        images = fn.resize(images, resize_shorter=preset.resize)
        if to_gpu and not gpu_decode:
            images = images.gpu()
        images = fn.crop_mirror_normalize(
            images, dtype=types.FLOAT, output_layout="CHW", crop=(preset.crop, preset.crop), mean=mean, std=std
        )
    if to_gpu:
        lab = lab.gpu()
    return images, lab


def epoch_batches(samples: int, batch_size: int, train: bool, shard_id: int, num_shards: int) -> int:
    """Batches one shard yields per epoch.

    DALI's readers split the dataset into contiguous shards of ``floor(samples * i / num_shards)`` boundaries.
    Train (``LastBatchPolicy.DROP``): every shard yields the full batches of the smallest shard, so that all
    ranks take the same number of steps. Eval (``PARTIAL``): a shard yields all of its own samples.

    Args:
        samples: images in the whole dataset.
        batch_size: samples per batch.
        train: whether the last partial batch is dropped.
        shard_id, num_shards: the shard.

    Returns:
        The number of batches.
    """
    if train:
        return samples // num_shards // batch_size
    size = samples * (shard_id + 1) // num_shards - samples * shard_id // num_shards
    return -(-size // batch_size)


class DaliLoader(BatchLoader):
    """``(images, labels)`` batches from a DALI pipeline through ``DALIGenericIterator``.

    Each ``iter()`` is one epoch. DALI cannot restart an epoch that was left half-read, so a new ``iter()``
    first reads (and discards) what is left of an unfinished one.
    """

    def __init__(self, pipeline: Any, iterator: Any, device: str, tmpdir: str | None, length: int) -> None:
        self.pipeline = pipeline
        self.iterator = iterator
        self.device = device
        self.tmpdir = tmpdir  # links for file names that are not UTF-8, if any
        self._len = length
        self._unfinished = False
        self._cleanup = weakref.finalize(self, shutil.rmtree, tmpdir, True) if tmpdir else None

    def __len__(self) -> int:
        return self._len

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        import torch

        if self.iterator is None:
            raise UserError("this DALI loader was closed; build a new one with autotune.build_loader")
        if self._unfinished:
            logger.debug("finishing the previous, partly read epoch before starting a new one")
            # next() to the end, not a for loop: iter() on DALI's iterator resets it, and a reset half-way
            # through an epoch only prints "DALI iterator does not support resetting ..." to the terminal
            while True:
                try:
                    next(self.iterator)
                except StopIteration:
                    break
        self._unfinished = True
        for batch in self.iterator:
            out = batch[0]
            if out["images"].shape[0] == 0:
                continue  # PARTIAL policy: the shorter of uneven shards ends with an empty batch
            labels = out["labels"]
            if labels.dim() > 1:
                labels = labels.squeeze(-1)
            yield out["images"], labels.to(torch.int64)
        self._unfinished = False

    def close(self) -> None:
        """Release the pipeline (its threads and device memory) and the temporary link folder.

        The pipeline is shut down here, not left to its ``__del__``: a Ctrl-C that arrives while its threads stop
        would be raised inside ``__del__``, where Python prints it and drops it, and training would go on.
        """
        pipe, self.pipeline, self.iterator = self.pipeline, None, None
        shutdown = getattr(pipe, "_shutdown", None)  # DALI's own teardown, which __del__ calls
        if pipe is not None and shutdown is None:
            logger.debug("this DALI has no Pipeline._shutdown: the pipeline stops when it is freed")
        try:
            if shutdown is not None:
                shutdown()
        finally:
            if self._cleanup is not None:
                self._cleanup()


def _threads_in(space: Any, threads: int) -> int:
    """``threads`` moved into the space's ``num_threads``: see :func:`_into`."""
    return int(_into(space, "num_threads", threads))


def _into(space: Any, name: str, value: float) -> float:
    """``value`` moved into the space's ``name`` (the nearest value it allows: the search space's ``Param.nearest``);
    as it is where the space has no such parameter (a start outside the space is measured as a reference only)."""
    return space[name].nearest(value) if name in space else value


class DaliBackend(LoaderBackend):
    name = "dali"
    options = DaliOptions
    params = {"dali_device": "device", "num_threads": "num_threads", "prefetch_queue_depth": "prefetch_queue_depth", "hw_decoder_load": "hw_decoder_load"}
    space_rules = {
        "num_threads": ("int", *KNOB_BOUNDS["num_threads"]),
        "prefetch_queue_depth": ("int", 1, 64),
        "hw_decoder_load": ("number", 0.0, 1.0),
        "dali_device": ("device", None, None),
    }
    label = "DALI"
    install = 'pip install -e ".[dali]" (CUDA 13 drivers: ".[dali-cu13]")'
    smoke_checks = {"dali-cpu": ({"dali_device": "cpu", "num_threads": 1}, "cpu"), "dali-gpu": ({"dali_device": "gpu", "num_threads": 1}, "cuda")}
    decode_errors_unnamed = True  # DALI's decoder may fail without naming the file
    reuses_process = True  # its import, CUDA context and decoder set-up took most of a 4.6 s trial on an H200
    needs_torchvision = False  # its decoding and augmentation are DALI's
    # preload_before_fork stays False: DALI's import sets up its allocators, and nothing CUDA may come before a fork

    def describe(self, loader: LoaderConfig) -> str:
        d = loader.dali
        assert d is not None
        s = f"dali-{d.device} b={loader.batch_size} threads={d.num_threads} queue={d.prefetch_queue_depth}"
        if d.device == "gpu":
            s += f" hw_load={d.hw_decoder_load:g}"
        return s

    def available(self) -> bool:
        return is_available("dali")

    def fit_space(self, space: Any, device: str) -> Any:
        if device.startswith("cuda") or "dali_device" not in space or "gpu" not in space["dali_device"].choices:
            return space
        space = space.restrict("dali_device", ("cpu",))  # GPU decode needs a GPU
        if not space["dali_device"].choices:
            raise SpaceError(f"{space.source}: params.dali_device offers GPU decode only, but the device is {device}; add cpu to its choices or run on a GPU")
        return space

    def starting_points(self, space: Any, *, batch_sizes: tuple[int, ...], cores: int, cuda: bool) -> dict[str, dict[str, Any]]:
        """NVIDIA's example settings (``dali-heuristic``): a thread per core, DALI's own queue depth and hardware-decoder
        share, GPU decode when there is a GPU, a middle batch size; with GPU decode also, at the largest batch, the
        mixed-decode start (``dali-mixed``: three quarters of the cores, up to :data:`MIXED_THREADS`, half of the JPEGs
        on the hardware decoder) where three quarters of the cores reach :data:`MIXED_THREADS`, else the
        hardware-decoder start (``dali-hw``: :data:`HW_THREADS` threads, every JPEG on the hardware decoder)."""
        usual: dict[str, Any] = {"backend": "dali", "batch_size": sorted(batch_sizes)[len(batch_sizes) // 2],
                                 "num_threads": _threads_in(space, min(cores, USUAL_THREADS)), "prefetch_queue_depth": 2}
        if "dali_device" in space:
            usual["dali_device"] = "gpu" if cuda and "gpu" in space["dali_device"].choices else space["dali_device"].choices[-1]
            if usual["dali_device"] == "gpu":
                usual["hw_decoder_load"] = _into(space, "hw_decoder_load", 0.65)
        out = {"dali-heuristic": usual}
        if usual.get("dali_device") == "gpu":
            # GPU decode's other start. On 16 cores, every JPEG on the hardware decoder (4 threads) read 11,490-30,303
            # images/s in 24 fresh processes of eight interleaved compares on an H200 and an H100 (median 21,782), the
            # mixed start 19,381-28,487 (median 24,886): the steadiest and the fastest of DALI's starts there
            # (benchmarks/start_spread.py). Held to 8 cores, the mixed start (6 threads) read 0.75x the hardware-decoder
            # start, slower in 5 of 5 paired and 5 of 5 fresh comparisons on an H100
            # (benchmarks/gpu-logs/h100-2026-12-06-search-5/line8.json): below 16 cores the hardware-decoder start stays
            if cores * 3 // 4 >= MIXED_THREADS:
                role, threads, load = "dali-mixed", MIXED_THREADS, MIXED_HW_LOAD
            else:
                role, threads, load = "dali-hw", min(cores, HW_THREADS), 1.0
            other = {**usual, "batch_size": max(batch_sizes), "num_threads": _threads_in(space, threads),
                     "hw_decoder_load": _into(space, "hw_decoder_load", load)}
            if other != usual:  # a space that leaves one batch, one thread count and one share has one start
                out[role] = other
        return out

    def unfit(self, params: Mapping[str, Any], device: str) -> str | None:
        if params.get("dali_device") == "gpu" and not device.startswith("cuda"):
            return f"decodes on the GPU (dali_device 'gpu'), but this AutoLoader delivers to {device}; use dali_device 'cpu', or a CUDA device"
        return None

    def threads(self, params: Mapping[str, Any]) -> int:
        return int(params.get("num_threads", 2))  # GPU decode too: its threads read the files

    def decode_threads(self, params: Mapping[str, Any]) -> int | None:
        return self.threads(params) if params.get("dali_device", "cpu") == "cpu" else None

    def buffered_batches(self, loader: LoaderConfig) -> int:
        """The prefetch queue's depth."""
        assert loader.dali is not None
        return loader.dali.prefetch_queue_depth

    def memory(self, loader: LoaderConfig, sizes: MemorySizes) -> MemoryParts:
        d = loader.dali
        assert d is not None
        q, b, out, decoded = d.prefetch_queue_depth, sizes.batch_size, sizes.out_batch_mib, sizes.decoded_mib
        parts = MemoryParts()
        parts.host["dali"] = DALI_BASE_MIB
        parts.host["encoded_queue"] = q * b * sizes.file_bytes / 2**20
        parts.host["decode_threads"] = d.num_threads * decoded  # each thread's decode scratch buffer
        stage = b * (decoded + 3 * sizes.crop * sizes.crop / 2**20)  # decoded images + resized crops, one batch
        if d.device == "gpu":
            parts.gpu.update(cuda_context=CUDA_CONTEXT_MIB, decoder=DALI_GPU_BASE_MIB + NVJPEG_DEVICE_PADDING_MIB, held_decoder=HELD_DECODER_MIB)
            parts.host["nvjpeg_host_padding"] = 2 * d.num_threads * NVJPEG_HOST_PADDING_MIB  # pinned, per thread
            parts.gpu.update(stages=q * (stage + out), batches_on_gpu=2 * out)
        else:
            parts.host["stages"] = q * stage
            if sizes.cuda:
                parts.gpu.update(cuda_context=CUDA_CONTEXT_MIB, held_decoder=HELD_DECODER_MIB, stages=q * out, batches_on_gpu=2 * out)
            else:
                parts.host["stages"] += q * out
                parts.host["consumer"] = out
        return parts

    def memory_fix(self, loader: LoaderConfig) -> str:
        assert loader.dali is not None
        return f"prefetch_queue_depth {loader.dali.prefetch_queue_depth}); lower loader.dali.prefetch_queue_depth (the search spaces try 1 to 4)"

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
    ) -> DaliLoader:
        """Build the DALI pipeline and its PyTorch iterator.

        Args:
            dataset: the scanned dataset.
            preset: the pipeline preset (train or eval).
            loader: the loader config; its ``dali`` section holds the knobs.
            device: where batches are delivered: ``cpu``, ``cuda`` (the current CUDA device) or ``cuda:N``.
            shard_id, num_shards: this rank's shard of the dataset.
            seed: seeds shuffling and augmentation; ``None`` for a random seed.
            indices: read exactly these dataset positions, in this order, as a file list (no shuffle, no shard).

        Returns:
            A :class:`DaliLoader`; train presets drop the last partial batch, eval presets keep it.

        Raises:
            UserError: DALI is not installed, GPU decoding with a CPU target, or bad shard arguments.
        """
        try_import("dali")  # a missing DALI is a one-line error naming the pip extra
        from nvidia.dali import fn, types
        from nvidia.dali.pipeline import Pipeline
        from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

        opts = loader.dali if loader.dali is not None else DaliOptions()
        if not 0 <= shard_id < num_shards:
            raise UserError(f"shard_id must be between 0 and num_shards - 1, but got shard_id={shard_id}, num_shards={num_shards}")
        labels = list(dataset.labels)
        if indices is not None:
            if not indices:
                raise UserError("indices is empty; pass at least one dataset position")
            dataset = dataclasses.replace(dataset, files=tuple(dataset.files[i] for i in indices), labels=tuple(dataset.labels[i] for i in indices))
            labels = list(dataset.labels)
            shard_id, num_shards = 0, 1
        if len(dataset) < num_shards:
            raise UserError(f"the dataset has {len(dataset)} images, fewer than num_shards={num_shards}; use fewer shards or more images")
        device_id = _device_id(device, opts.device)
        to_gpu = device_id is not None
        if to_gpu and not str(device).startswith("cuda:"):
            device = f"cuda:{device_id}"
        files, tmpdir = dali_file_list(dataset.files)
        try:
            pipe = Pipeline(
                batch_size=loader.batch_size,
                num_threads=opts.num_threads,
                device_id=device_id,
                seed=None if seed is None else int(seed) % 2**31,
                prefetch_queue_depth=opts.prefetch_queue_depth,
            )
            with pipe:
                images, out_labels = _graph(
                    fn, types, preset, opts, files, labels, to_gpu=to_gpu, shard_id=shard_id, num_shards=num_shards,
                    shuffle=False if indices is not None else None,
                )
                pipe.set_outputs(images, out_labels)
            pipe.build()
            policy = LastBatchPolicy.DROP if preset.train else LastBatchPolicy.PARTIAL
            # the first batch is decoded when it is asked for, not while building: building is what a loader built
            # once pays once (AutoLoader leaves it out of a short epoch's score), decoding is every batch's cost
            iterator = DALIGenericIterator(
                [pipe], ["images", "labels"], reader_name=READER_NAME, auto_reset=True, last_batch_policy=policy,
                prepare_first_batch=False,
            )
        except BaseException:
            if tmpdir:
                shutil.rmtree(tmpdir, ignore_errors=True)
            raise
        logger.debug("built DALI %s pipeline: %s, device_id=%s, shard %d/%d", preset.name, loader.describe(), device_id, shard_id, num_shards)
        return DaliLoader(pipe, iterator, device, tmpdir, epoch_batches(len(dataset), loader.batch_size, preset.train, shard_id, num_shards))
