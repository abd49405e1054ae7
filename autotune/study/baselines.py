"""The starting points of a study: the baselines measured first, and a warm start fitted into the space.

The baselines are the framework defaults, the common heuristic and, where DALI is offered, DALI's usual starts;
the YAML reports the winner against them. A warm start is a previous winner, fitted into this space, with its
close neighbours.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autotune.study.settings import TuneSettings
    from autotune.study.space import SearchSpace

logger = logging.getLogger(__name__)

#: DALI's usual starting point: a thread per core, up to this many (more threads start slowly and rarely help:
#: on a 32-core node with H200s, 32 threads scored 7,752 images/s where 8 scored 15,717; benchmarks/RESULTS.md)
DALI_USUAL_THREADS = 8
#: threads of the hardware-decoder start (file reading only: the JPEGs are decoded by the GPU's engines)
DALI_HW_THREADS = 4


def _threads_in(space: SearchSpace, threads: int) -> int:
    """``threads`` moved into the space's ``num_threads`` range, when it has one."""
    if "num_threads" in space and space["num_threads"].kind == "int":
        return int(min(max(threads, space["num_threads"].low), space["num_threads"].high))
    return threads


def baseline_configs(space: SearchSpace, settings: TuneSettings) -> dict[str, dict[str, Any]]:
    """The framework defaults and the common heuristic (at the space's usual batch size), and DALI's usual starts
    (NVIDIA's example settings; with GPU decode also all JPEGs on the hardware decoder at the largest batch).

    They are measured first: the YAML reports the winner against the defaults, the heuristic and DALI's usual start
    (``dali-heuristic``), and all of them seed the sampler.
    """
    choices = space["batch_size"].choices if space["batch_size"].kind == "choices" else (int(space["batch_size"].low),)
    batch = 64 if 64 in choices else choices[0]
    cuda = settings.device.startswith("cuda")
    out = {
        "defaults": {"backend": "torch", "batch_size": batch, "num_workers": 0, "pin_memory": False},
        "heuristic": {"backend": "torch", "batch_size": batch, "num_workers": settings.cores, "pin_memory": cuda, "prefetch_factor": 2, "persistent_workers": True},
    }
    if "dali" in space.backends():
        # where DALI is offered, its usual starting point too: a thread per core, DALI's own queue depth and
        # hardware-decoder share, GPU decode when there is a GPU, a middle batch size
        threads = min(settings.cores, DALI_USUAL_THREADS)
        dali: dict[str, Any] = {"backend": "dali", "batch_size": sorted(choices)[len(choices) // 2], "num_threads": _threads_in(space, threads), "prefetch_queue_depth": 2}
        if "dali_device" in space:
            dali["dali_device"] = "gpu" if cuda and "gpu" in space["dali_device"].choices else space["dali_device"].choices[-1]
            if dali["dali_device"] == "gpu":
                dali["hw_decoder_load"] = 0.65
        out["dali-heuristic"] = dali
        if dali.get("dali_device") == "gpu":
            # GPU decode's other usual start: every JPEG on the hardware decoder (H100/H200-class GPUs have several
            # engines), the largest batch, a few threads (they only read files). On an H200 it scored 27,125
            # images/s against 22,625 for NVIDIA's 0.65 share (benchmarks/RESULTS.md, time to quality)
            hw = {**dali, "batch_size": max(choices), "num_threads": _threads_in(space, min(settings.cores, DALI_HW_THREADS)), "hw_decoder_load": 1.0}
            if hw != dali:
                out["dali-hw"] = hw
    return out


def neighbours(params: dict[str, Any], space: SearchSpace, limit: int = 2) -> list[dict[str, Any]]:
    """Close neighbours of a config: one numeric knob one step up or down, within the space."""
    out = []
    for name in ("num_workers", "num_threads", "batch_size", "prefetch_queue_depth", "prefetch_factor"):
        if name not in params or name not in space:
            continue
        p = space[name]
        values = sorted(p.choices) if p.kind == "choices" else None
        v = params[name]
        for step in (+1, -1):
            if values is not None:
                if v not in values:
                    continue
                i = values.index(v) + step
                if not 0 <= i < len(values):
                    continue
                nv = values[i]
            else:
                nv = max(1, round(v * 2)) if step > 0 else max(int(p.low), v // 2)
                if not p.contains(nv) or nv == v:
                    continue
            out.append({**params, name: nv})
            if len(out) >= limit:
                return out
    return out


def fit_to_space(params: dict[str, Any], space: SearchSpace) -> dict[str, Any]:
    """The closest config the space allows (a config tuned elsewhere, e.g. for more cores or another batch size).

    A number outside a range is clamped; a value that is not among the choices becomes the nearest numeric
    choice, or the first choice. A fixed ``--batch-size`` (a single choice) therefore wins.
    """
    out = dict(params)
    for name, v in params.items():
        if name not in space or space[name].contains(v):
            continue
        p = space[name]
        numeric = isinstance(v, (int, float)) and not isinstance(v, bool)
        if p.kind == "choices":
            nums = [c for c in p.choices if isinstance(c, (int, float)) and not isinstance(c, bool)]
            out[name] = min(nums, key=lambda c: abs(c - v)) if numeric and nums else p.choices[0]
        elif numeric:
            out[name] = type(v)(min(max(v, p.low), p.high))
    if out != params:
        logger.info("warm start fitted into the space: %s -> %s", params, out)
    return out
