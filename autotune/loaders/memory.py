"""The memory a loader config needs, estimated from its knobs and the dataset's image sizes, before it runs.

The study's memory guard (:mod:`autotune.trials.guard`) skips a trial predicted to exceed its budget;
:func:`machine_problem` refuses, in :func:`autotune.build_loader`, a config (a hand-edited YAML) that could not fit
this machine at all, which would otherwise grow until the kernel kills the training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from autotune.config.fingerprint import local_ranks
from autotune.loaders.backends import CUDA_CONTEXT_MIB as CUDA_CONTEXT_MIB  # the size every GPU estimate starts from
from autotune.loaders.backends import MemorySizes, get_backend

if TYPE_CHECKING:
    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import Dataset

MiB = 2**20

#: the share of ``/dev/shm``'s free space a loader may use by default (a study's trial, AutoLoader, build_loader)
SHM_FRACTION = 0.8
SHM_PATH = "/dev/shm"

#: Sizes the estimate adds to the bytes of the batches, in MiB (measured on torch 2.x, rounded up); each kind of
#: loader adds its own (:meth:`autotune.loaders.backends.LoaderBackend.memory`).
CHILD_BASE_MIB = 600  # the trial process: Python, torch and torchvision imported (PSS)
#: A decoded image is about this many times its JPEG file.
DECODE_RATIO = 6


def estimate(loader: LoaderConfig, dataset: Dataset, pipeline: str = "imagenet-train", device: str = "cpu", ranks: int = 1) -> dict[str, Any]:
    """The memory a config is expected to need, in MiB, with the parts it is made of.

    Args:
        loader: the config.
        dataset: sizes the decoded images (mean file bytes times ``DECODE_RATIO``, at least a crop).
        pipeline: the preset (its crop sizes the output batches: float32, 3 x crop x crop).
        device: ``cpu`` or ``cuda[:N]``.
        ranks: loaders measured at once (host memory adds up; GPU memory is per GPU).

    Returns:
        ``{"host_mib", "gpu_mib" (None on CPU), "shm_mib", "parts": {name: MiB}}``.
    """
    from autotune.loaders.presets import get_preset

    crop = get_preset(pipeline).crop
    file_b = max(1, dataset.mean_bytes)
    sizes = MemorySizes(
        batch_size=loader.batch_size, crop=crop, file_bytes=file_b, cuda=device.startswith("cuda"),
        decoded_mib=max(file_b * DECODE_RATIO, 3 * crop * crop) / MiB,  # one decoded uint8 RGB image
        out_batch_mib=loader.batch_size * 3 * crop * crop * 4 / MiB,  # float32 CHW, what every kind delivers
    )
    parts = get_backend(loader.backend).memory(loader, sizes)
    n = max(1, ranks)
    host = CHILD_BASE_MIB + n * sum(parts.host.values())
    out_parts = {"process": CHILD_BASE_MIB, **{k: round(v * n, 1) for k, v in parts.host.items()}}
    if parts.gpu:
        out_parts.update({f"gpu_{k}": round(v, 1) for k, v in parts.gpu.items()})
    return {
        "host_mib": round(host, 1),
        "gpu_mib": round(sum(parts.gpu.values()), 1) if sizes.cuda else None,
        "shm_mib": round(n * parts.shm, 1),
        "parts": out_parts,
    }


#: the share of the /dev/shm budget that a config fitted to it (:func:`fit_shm`) plans for its workers' batches: the
#: rest is margin (another process's files, the monitor's trend that stops a trial before it crosses the budget)
SHM_SHARE = 0.75


def fit_shm(loader: LoaderConfig, dataset: Dataset, shm_mib: float | None, pipeline: str = "imagenet-train", device: str = "cpu",
            ranks: int = 1) -> LoaderConfig:
    """``loader`` with its workers handing over batches small enough for ``shm_mib`` of ``/dev/shm``
    (``worker_batch``, joined into whole batches in the main process: :mod:`autotune.loaders.joined`), where its
    whole batches would not fit there and its kind can join them; otherwise ``loader`` as it is.

    Docker gives a container 64 MiB of ``/dev/shm``: one float32 batch of 256 crops of 224 is 154 MB, so every
    DataLoader with workers dies there, and the rules of thumb with it. Fitted, the same workers run. A
    ``worker_batch`` the config already has is fitted again."""
    from autotune.config.schema import LoaderConfig

    opts = loader.options
    if not hasattr(opts, "worker_batch"):
        return loader
    if opts.worker_batch:  # this machine's /dev/shm decides it, not the one a warm start's YAML was tuned on
        loader = LoaderConfig.from_params({k: v for k, v in loader.to_params().items() if k != "worker_batch"})
    if shm_mib is None or opts.num_workers == 0:
        return loader
    need = float(estimate(loader, dataset, pipeline, device, ranks)["shm_mib"])
    if need <= shm_mib or loader.batch_size < 2:
        return loader
    # the /dev/shm of a worker batch of one sample (the kind's estimate grows with it): each worker's prefetched
    # batches and the one it collates into (default_collate writes a worker's batch straight into shared memory)
    one = LoaderConfig.from_params({**loader.to_params(), "worker_batch": 1})
    per_sample = float(estimate(one, dataset, pipeline, device, ranks)["shm_mib"])
    most = int(SHM_SHARE * shm_mib / per_sample) if per_sample > 0 else loader.batch_size
    if most < 1:  # one sample at a time, where that fits the budget without the margin; else the memory guard tells it
        if per_sample > shm_mib:
            return loader
        most = 1
    pieces = -(-loader.batch_size // most)  # the fewest worker batches a batch is joined from, all of about one size
    return LoaderConfig.from_params({**loader.to_params(), "worker_batch": -(-loader.batch_size // pieces)})


def refit_shm(loader: LoaderConfig, dataset: Dataset, shm_mib: float | None, pipeline: str = "imagenet-train", device: str = "cpu",
              ranks: int = 1) -> LoaderConfig | None:
    """``loader`` fitted to ``shm_mib`` (:func:`fit_shm`) where its workers' batches need more ``/dev/shm`` than that
    (a YAML tuned where /dev/shm was larger); None where they fit, or where nothing is known. A config that fits is
    left as it was tuned, its worker batch included."""
    if shm_mib is None or float(estimate(loader, dataset, pipeline, device, ranks)["shm_mib"]) <= shm_mib:
        return None
    return fit_shm(loader, dataset, shm_mib, pipeline, device, ranks)


def fit_here(loader: LoaderConfig, dataset: Dataset, pipeline: str, device: str, where: str) -> LoaderConfig:
    """The config ``autotune.build_loader`` builds on this machine: ``loader``, or, where ``/dev/shm`` here cannot hold
    its workers' batches (:data:`SHM_FRACTION` of its free space, shared by the node's ranks), ``loader`` with its
    workers handing over smaller batches, joined (a warning says so): it would crash otherwise."""
    import warnings

    free = shm_free_mib()
    refit = refit_shm(loader, dataset, SHM_FRACTION * free if free is not None else None, pipeline, device, local_ranks())
    if refit is None:
        return loader
    wb = refit.options.joined_from(refit.batch_size) if hasattr(refit.options, "joined_from") else None
    if not wb:
        warnings.warn(f"{where}: /dev/shm here ({free:,.0f} MiB free) cannot hold its workers' batches, not even one sample at a time: they may "
                      "crash; give the container more (docker run --shm-size=8g) or use num_workers=0", stacklevel=3)
        return loader
    warnings.warn(f"{where}: /dev/shm here ({free:,.0f} MiB free) cannot hold its workers' whole batches of {loader.batch_size}: each worker "
                  f"hands over {wb} sample{'s' if wb > 1 else ''} at a time, joined in order; re-tune here for the fastest config it allows, "
                  "or give the container more (docker run --shm-size=8g)", stacklevel=3)
    return refit


def shm_free_mib(path: str = SHM_PATH) -> float | None:
    """Free space of ``/dev/shm`` in MiB (None where there is none to read)."""
    import os

    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize / MiB


def _gib(need: float, have: float) -> tuple[str, str]:
    """``need`` and ``have`` (MiB) in GiB, with as many decimals as it takes for them to read apart."""
    for digits in (0, 1, 2):
        a, b = f"{need / 1024:,.{digits}f}", f"{have / 1024:,.{digits}f}"
        if a != b:
            return a, b
    return f"{need / 1024:,.2f}", f"{have / 1024:,.2f}"


def machine_problem(loader: LoaderConfig, dataset: Dataset, pipeline: str, device: str, *, host_mib: float | None, gpu_mib: float | None,
                    ranks: int = 1, factor: float = 1.0) -> str | None:
    """Why ``loader`` cannot fit this machine's whole memory (``host_mib`` of RAM, ``gpu_mib`` on the GPU; None:
    unknown), or None: the estimate (``ranks`` loaders at once on the host) over ``factor`` times what there is.

    The estimate is rough and errs high (a batch in ``/dev/shm`` and its pinned copy both count), so
    :func:`autotune.build_loader` refuses only at twice the machine; ``check`` and ``load_config`` call a config
    over the machine itself no match for it. A study's own winners fit its budgets, a fraction of what was free."""
    est = estimate(loader, dataset, pipeline, device, ranks)
    for need, have, what in ((est["host_mib"], host_mib, "host memory"), (est["gpu_mib"], gpu_mib, "GPU memory")):
        if need is not None and have is not None and need > factor * have:
            shown_need, shown_have = _gib(need, have)
            fix = get_backend(loader.backend).memory_fix(loader)
            over = "more than" if factor <= 1.0 else ("over twice" if factor == 2.0 else f"over {factor:g} times")
            per = f" for {ranks} ranks" if ranks > 1 and what == "host memory" else ""
            return (f"this loader config would need about {shown_need} GiB of {what}{per}, {over} the {shown_have} GiB this machine "
                    f"has (batch size {loader.batch_size}, {fix}" + ("" if fix.endswith("batch size") else ", or the batch size"))
    return None


def fit_difference(cfg: Any, current: dict[str, Any]) -> Any:
    """A :class:`~autotune.config.fingerprint.Difference` that matters when ``cfg``'s loader cannot run here: a train
    batch larger than the recorded dataset's images per rank, or more memory than this machine has (registered with
    :func:`autotune.config.fingerprint.register_fit_check`), sized with the image bytes and the ranks the YAML recorded;
    None when it fits, or when the YAML cannot say (an unknown pipeline)."""
    from autotune.config.fingerprint import Difference
    from autotune.dataset.scan import Dataset
    from autotune.errors import UserError
    from autotune.loaders.presets import get_preset

    if cfg.loader is None:
        return None
    mean = cfg.dataset.get("mean_bytes") if isinstance(cfg.dataset, dict) else None
    mean = mean if isinstance(mean, int) and not isinstance(mean, bool) and 0 < mean < 2**40 else 0
    images = Dataset(root="", classes=(), files=("",), labels=(0,), total_bytes=mean)  # one image of the recorded mean size
    ranks = (cfg.result or {}).get("ranks") if isinstance(cfg.result, dict) else None
    ranks = ranks if isinstance(ranks, int) and not isinstance(ranks, bool) and 1 <= ranks <= 1024 else 1
    samples = cfg.dataset.get("samples") if isinstance(cfg.dataset, dict) else None
    try:
        train = get_preset(cfg.pipeline).train
    except UserError:  # an unknown pipeline: said by whoever builds it
        return None
    if train and isinstance(samples, int) and not isinstance(samples, bool) and 0 < samples // ranks < cfg.loader.batch_size:
        # the last partial batch is dropped: build_loader refuses it, and AutoLoader would deliver empty epochs
        return Difference("loader.batch_size", None, None, True, note=(
            f"{cfg.loader.batch_size} is larger than the {samples // ranks} images per rank of the dataset the YAML records "
            f"({samples}{f' over {ranks} ranks' if ranks > 1 else ''}), so an epoch would hold no batch"))
    device = "cuda" if str(cfg.device).startswith("cuda") and current.get("gpu_mib") else "cpu"
    ram = current.get("ram_gib")
    try:
        why = machine_problem(cfg.loader, images, cfg.pipeline, device, host_mib=ram * 1024 if isinstance(ram, (int, float)) and ram else None,
                              gpu_mib=current.get("gpu_mib"), ranks=ranks)
        shm = current.get("shm_mib")
        refit = refit_shm(cfg.loader, images, SHM_FRACTION * shm if isinstance(shm, (int, float)) and shm > 0 else None, cfg.pipeline, device, ranks)
    except UserError:  # an unknown pipeline: said by whoever builds it
        return None
    if why is not None:
        return Difference("memory", None, None, True, note=why)
    if refit is not None:  # build_loader fits it (smaller worker batches, joined): it runs, but was not tuned so
        need = estimate(cfg.loader, images, cfg.pipeline, device, ranks)["shm_mib"]
        wb = refit.options.joined_from(refit.batch_size) if hasattr(refit.options, "joined_from") else None
        then = f"build_loader has each worker hand over {wb} sample{'s' if wb > 1 else ''} at a time, joined" if wb else "it cannot run its workers"
        return Difference("shm", None, None, True, note=(
            f"/dev/shm here ({shm:,.0f} MiB) is too small for its workers' batches ({need:,.0f} MiB): {then}; re-tune here for the fastest "
            "config it allows, or give the container more (docker run --shm-size=8g)"))
    return None
