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
    """Fault injection for the test-suite (``TrialSpec.inject``)."""
    if not fault:
        return
    if fault == "segfault":
        ctypes.string_at(0)  # reads address 0: SIGSEGV
    elif fault == "hang":
        while True:
            time.sleep(1)
    elif fault.startswith("alloc:"):
        mib = int(fault.split(":", 1)[1])
        _inject.hold = bytearray(mib * 2**20)  # type: ignore[attr-defined]
        for i in range(0, len(_inject.hold), 4096):  # type: ignore[attr-defined]
            _inject.hold[i] = 1  # type: ignore[attr-defined]
        time.sleep(30)


def execute(spec: TrialSpec, on_window: Callable[[int, float], bool]) -> dict[str, Any]:
    """Build ``spec``'s loader on its device, measure it and return the result payload."""
    import torch

    from autotune.backends import get_backend
    from autotune.measure import measure
    from autotune.presets import get_preset

    _inject(spec.inject)
    if spec.seed is not None:
        torch.manual_seed(spec.seed)
    device = spec.device
    if device.startswith("cuda"):
        torch.cuda.init()
    consume = None
    extra: dict[str, Any] = {}
    if spec.model is not None:
        from autotune.model import prepare_consumer

        consume, extra = prepare_consumer(spec.model, spec.loader.batch_size, device, get_preset(spec.pipeline))
    if spec.ranks > 1:
        from autotune.ranks import measure_ranks

        return {**measure_ranks(spec, on_window), **extra}
    backend = get_backend(spec.loader.backend.value)
    t0 = time.perf_counter()
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
