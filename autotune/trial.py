"""What runs inside a trial's child process: build the loader, measure it, report peaks."""

from __future__ import annotations

import ctypes
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.runner import TrialSpec

logger = logging.getLogger(__name__)


def _inject(fault: str | None) -> None:
    """Fault injection for the test-suite (``TrialSpec.inject``).

    ``segfault``, ``hang``: the trial process itself; ``alloc:<MiB>``: it allocates MiB of host memory, 32 MiB
    at a time, and holds it; ``worker-segfault``, ``worker-hang``: every torch DataLoader worker does so on
    its first sample (the trial process stays well).
    """
    if not fault:
        return
    if fault == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif fault == "hang":
        while True:
            time.sleep(1)
    elif fault.startswith("alloc:"):
        mib = int(fault.split(":", 1)[1])
        hold = []
        for _ in range(0, mib, 32):
            hold.append(bytearray(b"\1" * (32 * 2**20)))  # touched pages: resident
            time.sleep(0.02)
        _inject.hold = hold  # type: ignore[attr-defined]
        time.sleep(60)
    elif fault in ("worker-segfault", "worker-hang"):
        from torch.utils.data import get_worker_info

        from autotune.backends._torch import FileListDataset

        getitem = FileListDataset.__getitem__

        def faulty(self, index):  # noqa: ANN001
            if get_worker_info() is not None:  # forked workers inherit this patch; the trial process does not run it
                _inject(fault.removeprefix("worker-"))
            return getitem(self, index)

        FileListDataset.__getitem__ = faulty
    else:
        raise ValueError(f"unknown fault {fault!r}")


def find_bad_file(dataset: Any, budget_s: float = 30.0) -> str | None:
    """The first file of ``dataset`` that PIL cannot decode, looking for at most ``budget_s`` seconds.

    DALI's decoders do not always name the file that failed (the GPU decoder reports the batch); this
    decodes each file at 1/8 scale (JPEG draft mode still reads every byte, so truncation shows).
    """
    from PIL import Image

    deadline = time.monotonic() + budget_s
    for path in dataset.files:
        if time.monotonic() > deadline:
            logger.info("no undecodable file found within %.0f s", budget_s)
            return None
        try:
            with Image.open(path) as img:
                img.draft("RGB", (max(1, img.width // 8), max(1, img.height // 8)))
                img.load()
        except Exception:  # noqa: BLE001 - PIL's many error types: this file does not decode
            return path
    return None


def execute(spec: TrialSpec, on_window: Callable[[int, float], bool]) -> dict[str, Any]:
    """Build ``spec``'s loader on its device, measure it and return the result payload."""
    _inject(spec.inject)
    import torch

    from autotune.backends import get_backend
    from autotune.measure import measure
    from autotune.presets import get_preset

    if spec.seed is not None:
        torch.manual_seed(spec.seed)
    device = spec.device
    if device.startswith("cuda"):
        torch.cuda.init()
    consume = None
    extra: dict[str, Any] = {}
    if spec.model is not None:
        from autotune.model import prepare_consumer

        consume, extra = prepare_consumer(spec.model, spec.loader.batch_size, device, get_preset(spec.pipeline), num_classes=len(spec.dataset.classes))
    if spec.ranks > 1:
        from autotune.ranks import measure_ranks

        return {**measure_ranks(spec, on_window), **extra}
    backend = get_backend(spec.loader.backend.value)
    t0 = time.perf_counter()
    if getattr(spec.model, "resident", False):  # the model's ceiling: one batch already on the device
        from autotune.model import resident_loader

        loader = resident_loader(spec)
    else:
        loader = backend.build(spec.dataset, get_preset(spec.pipeline), spec.loader, device, seed=spec.seed)
    build_s = time.perf_counter() - t0
    try:
        m = measure(loader, device, warmup_batches=spec.warmup_batches, window_s=spec.window_s, windows=spec.windows, on_window=on_window, consume=consume)
    finally:
        loader.close()
    payload = m.to_dict()
    payload["startup_s"] = build_s + m.startup_s
    if device.startswith("cuda"):
        payload["peak_gpu_mib"] = torch.cuda.max_memory_reserved() / 2**20
    payload.pop("batches", None)
    payload.pop("samples", None)
    payload.pop("epochs", None)
    return {**payload, **extra}
