"""``build_loader``: the loader a config describes, exactly as the study measured it."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.utils.data import DataLoader

    from autotune.config.schema import Config, LoaderConfig
    from autotune.dataset.scan import Dataset
    from autotune.loaders.backends import BatchLoader


def default_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``. (Initialises CUDA: not for the study's parent process.)"""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def check_device(device: Any) -> str:
    """``device`` when batches can go there on this machine: ``cpu``, or ``cuda[:N]`` with that GPU visible to torch.

    Raises:
        UserError: one line naming the device and what to pass instead.
    """
    import torch

    from autotune.errors import UserError

    try:  # a name or a torch.device; not a bare number, which torch would read as a GPU's index
        dev = torch.device(device) if isinstance(device, (str, torch.device)) else None
    except (RuntimeError, TypeError):
        dev = None
    if dev is None or dev.type not in ("cpu", "cuda"):
        raise UserError(f"device must be 'cpu', 'cuda' or 'cuda:N', but got {device!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(f"device {str(device)!r} needs a CUDA GPU, but torch sees none; pass device='cpu'")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise UserError(
                f"device {str(device)!r} is not here: torch sees {torch.cuda.device_count()} GPU(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}"
            )
    return str(dev)


def other_dataset(cfg: Config, dataset: Dataset) -> str | None:
    """How the dataset ``cfg`` was tuned on differs from ``dataset`` beyond the tolerance of a growing dataset (another
    folder's content, or many more or fewer images), or None: the loader was measured on files like these."""
    from autotune.config import fingerprint

    if not any(cfg.dataset.get(k) is not None for k in fingerprint.DATASET_MATTERS):
        return None  # written by hand: nothing to compare
    diffs = [d for d in fingerprint.diff_dataset(cfg.dataset, dataset.summary()) if d.matters]
    if not diffs:
        return None
    shown = [str(d) for d in diffs if d.field != "dataset.signature"] or ["other files (their names and sizes differ)"]
    return f"{cfg.path or 'the config'} was tuned on another dataset ({cfg.dataset.get('path', 'unrecorded')}; {'; '.join(shown)})"


def _retune(cfg: Config, path: str | os.PathLike[str]) -> str:
    import shlex

    yaml_path = shlex.quote(str(cfg.path)) if cfg.path else "autotune.yaml"
    return f"autotune run --dataset {shlex.quote(str(path))} --warm-start {yaml_path} --out {yaml_path}"


def build_loader(
    path: str | os.PathLike[str] | Any,
    cfg: Config | LoaderConfig,
    *,
    pipeline: str | None = None,
    device: str | None = None,
    shard_id: int = 0,
    num_shards: int = 1,
    seed: int | None = None,
) -> BatchLoader | DataLoader:
    """Build the tuned loader over the dataset at ``path``, or the tuned DataLoader over your own Dataset.

    Args:
        path: the dataset folder (one sub-folder per class); or your own map-style ``torch.utils.data.Dataset`` (or an
            :class:`autotune.DatasetSpec`, or a ``FILE.py:FUNC`` that returns one): then the result is a
            ``torch.utils.data.DataLoader`` over it with the config's DataLoader keywords (its own kind's, or a folder
            config's torch ones), batches left on the host.
        cfg: a :class:`~autotune.config.Config` (from :func:`autotune.load_config`) or just its ``loader``.
        pipeline: preset name; defaults to the config's (``imagenet-train`` or ``imagenet-eval``).
        device: where batches are delivered; defaults to the config's device when available, else ``cpu``.
        shard_id, num_shards: this rank's shard (DDP): rank and world size.
        seed: seeds shuffling and augmentation.

    Files the study found undecodable (``dataset.excluded`` in the YAML) are left out, with one warning that
    names those still in the folder. A config whose batches in flight would need over twice this machine's RAM
    or GPU memory (a hand-edited ``prefetch_queue_depth: 1024``) is refused with a :class:`UserError`.

    Returns:
        An iterable of ``(images, labels)`` batches on ``device``; each ``iter()`` is one epoch and ``len()``
        counts batches. Train presets drop the last partial batch; eval presets keep it.
    """
    from autotune.config.files import whole_number
    from autotune.config.schema import Config, LoaderConfig, seed_number
    from autotune.dataset.scan import scan
    from autotune.dataset.user import DatasetSpec, is_target
    from autotune.errors import UserError, expect

    own = isinstance(path, DatasetSpec) or not isinstance(path, (str, bytes, os.PathLike)) and (hasattr(path, "__getitem__") or hasattr(path, "__iter__"))
    if own or is_target(path):  # the user's own Dataset (or FILE.py:FUNC): a DataLoader over it
        return _over_own(path, cfg, own=own, device=device, seed=seed_number(seed), shard_id=shard_id, num_shards=num_shards)
    expect(path, "path", (str, os.PathLike), "the dataset folder's path or your own Dataset")
    if isinstance(cfg, (str, os.PathLike)):  # a YAML's path: what load_config reads
        from autotune.config.files import load_config

        cfg = load_config(cfg)
    if not isinstance(cfg, (Config, LoaderConfig)):
        raise UserError(f"cfg must be a Config (autotune.load_config(path)), a LoaderConfig or a YAML's path, but got {type(cfg).__name__}")
    loader_cfg = cfg.loader if isinstance(cfg, Config) else cfg
    if pipeline is None:
        pipeline = cfg.pipeline if isinstance(cfg, Config) else "imagenet-train"
    if device is None:
        wanted = cfg.device if isinstance(cfg, Config) else None
        device = wanted if wanted == "cpu" else default_device()
    device = check_device(device)
    num_shards = whole_number(num_shards, "num_shards", "the number of ranks")
    shard_id = whole_number(shard_id, "shard_id", "this rank, from 0", least=0)
    if not 0 <= shard_id < num_shards:
        raise UserError(f"shard_id must be between 0 and num_shards - 1, but got shard_id={shard_id}, num_shards={num_shards}")
    seed = seed_number(seed)
    from autotune.loaders.shards import drop_problem, shard_problem

    problem = shard_problem(shard_id, num_shards)
    if problem is not None:
        warnings.warn(problem, stacklevel=2)
    dataset = scan(path)
    if isinstance(cfg, Config) and cfg.excluded_files:
        dataset = _without_excluded(dataset, cfg.excluded_files)
    if isinstance(cfg, Config) and pipeline == (cfg.pipeline or pipeline):  # an eval loader on the val folder is meant
        other = other_dataset(cfg, dataset)
        if other is not None:
            warnings.warn(f"{other}: its loader may not be the fastest for {path}; re-tune for this folder with '{_retune(cfg, path)}'", stacklevel=2)
    from autotune.loaders.presets import get_preset

    preset = get_preset(pipeline)
    per_shard = len(dataset) // num_shards
    if preset.train and per_shard < loader_cfg.batch_size:  # the last partial batch is dropped: not one batch an epoch
        raise UserError(
            f"batch size {loader_cfg.batch_size} is larger than the {per_shard} images of this shard ({len(dataset)} in {path}, "
            f"{num_shards} shard(s)), so an epoch would hold no batch; use more images, or re-tune on this dataset (autotune run --dataset {path})"
        )
    dropped = drop_problem(loader_cfg.batch_size, per_shard, "images of this shard" if num_shards > 1 else "images") if preset.train else None
    if dropped is not None and shard_id == 0:  # a YAML tuned on a small set at b=256: say what training loses, once
        warnings.warn(f"{dropped}; re-tune with a batch size that divides them more closely (autotune run --dataset {path} --batch-size N)", stacklevel=2)
    too_big = _memory_problem(loader_cfg, dataset, pipeline, device)
    if too_big is not None:  # a hand-edited queue of 1,024 batches grew until the kernel killed the training
        raise UserError(too_big)
    from autotune.loaders.memory import fit_here

    loader_cfg = fit_here(loader_cfg, dataset, pipeline, device, str(getattr(cfg, "path", None) or "this config"))
    loader = build_from_dataset(dataset, loader_cfg, pipeline=pipeline, device=device, shard_id=shard_id, num_shards=num_shards, seed=seed)
    disagree = _ranks_disagree(loader, loader_cfg, dataset, pipeline, num_shards, seed) if preset.train else None  # an eval loader may be one rank's
    if disagree is not None:  # a YAML per node, or seed + rank: a hang at the first epoch's end, or overlapping shards
        loader.close()
        raise UserError(disagree)
    return loader


def _over_own(path: Any, cfg: Any, *, own: bool, device: str | None, seed: int | None, shard_id: int, num_shards: int) -> Any:
    """:func:`build_loader` over the user's own Dataset, DatasetSpec or ``FILE.py:FUNC``: its DataLoader with ``cfg``'s
    knobs (fitted to this machine's /dev/shm), or the DALIGenericIterator of a config of the user's pipeline function."""
    from autotune.dataset.scan import Dataset
    from autotune.loaders.backends._dali_user import dali_user_config, iterator_for
    from autotune.loaders.backends._user import dataloader_for
    from autotune.loaders.memory import fit_here

    dali = dali_user_config(cfg) if not own else None
    if dali is not None:  # a config of the user's DALI pipeline function: its DALIGenericIterator
        return iterator_for(str(path), dali, device=device, seed=seed, shard_id=shard_id, num_shards=num_shards)
    sized = Dataset(root="", classes=(), files=("",), labels=(0,), total_bytes=0)  # a sample as the kind sizes it: a float32 crop
    where = str(getattr(cfg, "path", None) or "this config")
    return dataloader_for(path, cfg, seed=seed, shard_id=shard_id, num_shards=num_shards,
                          fit=lambda chosen: fit_here(chosen, sized, "imagenet-train", getattr(cfg, "device", "cpu"), where))


def _ranks_disagree(loader: BatchLoader, loader_cfg: LoaderConfig, dataset: Dataset, pipeline: str, num_shards: int, seed: int | None) -> str | None:
    """What the ranks of a DDP job disagree on (batch size, batches per epoch, dataset, seed), or None."""
    from autotune.loaders.shards import describe, ranks_disagree

    torch_seed = loader_cfg.backend.value == "torch"  # its DistributedSampler's permutation; DALI's shards do not depend on it
    return ranks_disagree(
        lambda: describe(
            batch_size=loader_cfg.batch_size,
            batches=len(loader),
            pipeline=pipeline,
            images=len(dataset),
            signature=dataset.signature(),
            seed=(seed or 0) if torch_seed else None,
        ),
        num_shards,
        pipeline,
    )


def _without_excluded(dataset: Dataset, excluded: tuple[str, ...]) -> Dataset:
    """``dataset`` less the files the study found undecodable, with one warning naming those still in the folder."""
    kept = dataset.without(excluded, "excluded by the study")
    kept_files = set(kept.files)
    left_out = [dataset.name_of(f) for f in dataset.files if f not in kept_files]
    if left_out:
        warnings.warn(
            f"leaving out {len(left_out)} {'file' if len(left_out) == 1 else 'files'} that the study found undecodable: {', '.join(left_out)}; "
            f"fix or remove {'it' if len(left_out) == 1 else 'them'}",
            stacklevel=3,  # build_loader's caller
        )
    return kept


#: build_loader refuses a config predicted to need this many times the machine's memory (the estimate errs high;
#: over the machine itself, ``check`` and ``load_config`` already call the YAML no match for it)
REFUSE_FACTOR = 2.0


def _memory_problem(loader: LoaderConfig, dataset: Dataset, pipeline: str, device: str) -> str | None:
    """Why the loader cannot fit this machine's RAM or GPU (:func:`autotune.loaders.memory.machine_problem`), or
    None; under DDP, host memory holds every local rank's loader (``LOCAL_WORLD_SIZE``)."""
    import psutil

    from autotune.config.fingerprint import local_ranks
    from autotune.loaders.memory import MiB, machine_problem

    gpu_mib = None
    if device.startswith("cuda"):
        import torch

        gpu_mib = torch.cuda.get_device_properties(torch.device(device)).total_memory / MiB
    return machine_problem(loader, dataset, pipeline, device, host_mib=psutil.virtual_memory().total / MiB, gpu_mib=gpu_mib, ranks=local_ranks(),
                           factor=REFUSE_FACTOR)


def build_from_dataset(
    dataset: Dataset,
    loader: LoaderConfig,
    *,
    pipeline: str,
    device: str,
    shard_id: int = 0,
    num_shards: int = 1,
    seed: int | None = None,
    indices: Sequence[int] | None = None,
) -> BatchLoader:
    """:func:`build_loader` over an already scanned dataset (no second scan), optionally over ``indices`` only.

    Args:
        dataset: the scanned dataset.
        loader: the loader config.
        pipeline: preset name.
        device: where batches are delivered.
        shard_id, num_shards: this rank's shard (ignored with ``indices``).
        seed: seeds shuffling and augmentation.
        indices: dataset positions to read, in this order, once per epoch, with no shuffle of the loader's own.

    Returns:
        The backend's loader.
    """
    from autotune.loaders.backends import get_backend
    from autotune.loaders.presets import get_preset

    return get_backend(loader.backend.value).build(
        dataset, get_preset(pipeline), loader, device, shard_id=shard_id, num_shards=num_shards, seed=seed, indices=indices
    )
