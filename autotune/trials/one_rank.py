"""What one rank measures: its loader, built on its device and shard, warmed up, then timed in windows.

A single-rank trial is :func:`measure_rank` in the trial's child process; with several ranks, each rank
process of :mod:`autotune.trials.rank_group` runs it on its own shard and device.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.trials.measure import Measurement, OnWindow
    from autotune.trials.spec import TrialSpec


def measure_rank(
    spec: TrialSpec,
    device: str,
    on_window: OnWindow,
    *,
    shard_id: int = 0,
    num_shards: int = 1,
    after_warmup: Callable[[], None] | None = None,
    keep_loading: Callable[[dict[str, Any]], bool] | None = None,
    hold: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Build ``spec``'s loader on ``device`` (and this shard), measure it and return the result payload.

    Args:
        spec: the trial.
        device: ``cpu``, ``cuda`` or ``cuda:N``; a CUDA device is bound before anything else touches CUDA.
        on_window: called after each window with (index, median so far, (lowest, highest) so far); True stops the
            measurement.
        shard_id, num_shards: this rank's shard of the dataset.
        after_warmup: called once the loader is warmed up, before the first window.
        keep_loading: called with the payload once the windows are done; the loader goes on (untimed)
            while it returns True.
        hold: called once the loader is built, before it is measured; it returns when the measurement may begin
            (a trial built ahead waits there for its turn), or raises to drop the trial.
    """
    import torch

    from autotune.loaders.backends import get_backend
    from autotune.loaders.presets import get_preset
    from autotune.trials.measure import measure

    start_device(device)
    consume = None
    extra: dict[str, Any] = {}
    if spec.model is not None:
        from autotune.trials.model import prepare_consumer

        consume, extra = prepare_consumer(spec.model, spec.loader.batch_size, device, get_preset(spec.pipeline), num_classes=len(spec.dataset.classes))
    backend = get_backend(spec.loader.backend.value)
    t0 = time.perf_counter()
    loader: Any  # the backend's loader, or the model's one resident batch
    try:
        if getattr(spec.model, "resident", False):  # the model's ceiling: one batch already on the device
            from autotune.trials.model import resident_loader

            loader = resident_loader(spec)
        else:
            loader = backend.build(spec.dataset, get_preset(spec.pipeline), spec.loader, device, seed=spec.seed, shard_id=shard_id, num_shards=num_shards)
    finally:  # built or failed, the trial measured beside this one may time its windows now
        signal_built(spec.signal)
    build_s = time.perf_counter() - t0
    if hold is not None:
        try:
            hold()
        except BaseException:
            loader.close()
            raise
    if spec.wait_for is not None:  # a build beside this trial: its windows wait for it, so that it slows none of them
        waited = wait_for_file(spec.wait_for, BESIDE_WAIT_S)
        extra.update(beside_wait_s=round(waited, 3), beside_ready_at=time.time())
        with contextlib.suppress(OSError):  # for the parent, should it stop this trial after a window (its payload never comes)
            Path(waited_file(spec.wait_for)).write_text(str(waited))

    restarts = backend.restarts_each_epoch(spec.loader) and not getattr(spec.model, "resident", False)
    epoch_samples = _epoch_samples(loader, spec.loader.batch_size) if restarts else None

    def payload(m: Measurement) -> dict[str, Any]:
        out = m.to_dict()
        out["startup_s"] = build_s + m.startup_s
        if epoch_samples and out.get("samples_per_s"):
            # workers that do not persist start again every epoch: the windows ran inside one, training pays the start
            # once an epoch (a forkserver start on a 2-core machine halved a 2,000-sample epoch's rate, unseen before)
            out["rate_within_epoch"] = out["samples_per_s"]
            out["epoch_restart_s"] = round(m.startup_s, 3)
            out["samples_per_s"] = per_epoch_rate(out["samples_per_s"], out["epoch_restart_s"], epoch_samples)
            if out.get("spread"):
                out["spread"] = [per_epoch_rate(x, out["epoch_restart_s"], epoch_samples) for x in out["spread"]]
        if device.startswith("cuda"):
            out["peak_gpu_mib"] = torch.cuda.max_memory_reserved(torch.device(device)) / 2**20
        for k in ("batches", "samples", "epochs"):
            out.pop(k, None)
        return {**out, **extra}

    tail = None if keep_loading is None else lambda m: keep_loading(payload(m))
    try:
        m = measure(
            loader, device, warmup_batches=spec.warmup_batches, window_s=spec.window_s, windows=spec.windows, on_window=on_window,
            consume=consume, after_warmup=after_warmup, keep_loading=tail, drain_batches=buffered_batches(spec.loader),
        )
    finally:
        t_close = time.perf_counter()
        loader.close()
    out = payload(m)
    out["build_s"] = round(build_s, 3)  # of startup_s: the loader's construction, before its first batch was asked for
    out["close_s"] = round(time.perf_counter() - t_close, 3)  # the loader's teardown, inside the trial's time
    return out


#: the longest a trial's windows wait for the build beside them (a build that hangs is not waited out: the trial is
#: measured then, beside it)
BESIDE_WAIT_S = 10.0


def waited_file(flag: str) -> str:
    """Where a trial whose windows waited for ``flag`` (a build beside it) writes the seconds it waited."""
    return flag + ".waited"


def signal_built(path: str | None) -> None:
    """Create ``path`` (a trial's ``signal``: its build has ended); nothing for None, or where it cannot be written."""
    if path is not None:
        with contextlib.suppress(OSError):  # the trial it was for has ended and taken its folder: nobody waits
            open(path, "a").close()


def wait_for_file(path: str, limit_s: float) -> float:
    """Wait until ``path`` exists, at most ``limit_s``; the seconds waited."""
    import os

    t0 = time.perf_counter()
    while not os.path.exists(path) and time.perf_counter() - t0 < limit_s:
        time.sleep(0.005)
    return time.perf_counter() - t0


def buffered_batches(loader: Any) -> int:
    """How many batches ``loader`` (a :class:`~autotune.config.schema.LoaderConfig`) can hold ready before they are
    asked for: workers x prefetch factor for torch (2 batches a worker by default), the queue depth for DALI."""
    from autotune.loaders.backends import get_backend

    return get_backend(loader.backend).buffered_batches(loader)


def per_epoch_rate(rate: float, restart_s: float, epoch_samples: int) -> float:
    """Samples a second over whole epochs of ``epoch_samples`` that each start with ``restart_s`` of worker start-up."""
    if rate <= 0:
        return rate
    return epoch_samples / (epoch_samples / rate + max(0.0, restart_s))


def _epoch_samples(loader: Any, batch_size: int) -> int | None:
    """Samples in one of ``loader``'s epochs (batches x batch size); None when it has no length (a stream)."""
    try:
        return int(len(loader)) * int(batch_size)
    except TypeError:
        return None


def start_device(device: str) -> None:
    """Bind a CUDA device (``cuda:N``) and create its context before anything else touches CUDA; nothing for the CPU."""
    if device.startswith("cuda"):
        import torch

        if ":" in device:
            torch.cuda.set_device(device)
        torch.cuda.init()
