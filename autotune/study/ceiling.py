"""The model's ceiling: its training samples/s on one batch already resident on the device, measured once per
study in a child process like any trial, at each batch size the space allows."""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import TYPE_CHECKING, Any

from autotune.errors import UserError
from autotune.study.selection import ceiling_batch_sizes

if TYPE_CHECKING:
    from autotune.study.tuner import Tuner

logger = logging.getLogger(__name__)

#: Under a time budget, the share of what is left after which the ceiling measures no further batch size (the first
#: is always measured, with a trial's time; the trials need the rest).
CEILING_SHARE = 0.5
#: A batch size the ceiling's share left no time for.
NOT_MEASURED = "not-measured"


def measure_ceiling(tuner: Tuner) -> dict[str, Any]:
    """The model's training samples/s on one device-resident batch, at each batch size the space allows.

    Each batch size runs in a spawned child like a trial (same windows, budgets and timeout). The measured
    GPU footprints are put on ``tuner.settings.model`` so that later memory estimates use them.

    Returns:
        The record stored as the study attr ``model_ceiling``: ``model``, ``per_batch_size`` (one GPU's rate,
        spread, outcome, model_gpu_mib per batch size), ``ranks``, ``samples_per_s`` (the best batch size's, times
        the ranks: all ranks' GPUs, as trials are scored), ``per_gpu_samples_per_s`` and ``batch_size`` of the best.

    Under a time budget, batch sizes after the first are measured while :data:`CEILING_SHARE` of the time left
    lasts; those it leaves no time for are recorded as ``not-measured``.

    Raises:
        UserError: no batch size completed because the model cannot be built (e.g. an unknown name), or because
            its steps alone gave no result in a trial's time at the smallest batch size (every trial trains it too).
    """
    from autotune.config.schema import LoaderConfig
    from autotune.outcomes import Outcome
    from autotune.study.tuner import MIN_TRIAL_S
    from autotune.trials.logs import trial_log
    from autotune.trials.runner import run_trial

    s = tuner.settings
    model = dataclasses.replace(s.model, resident=True)
    per: dict[str, dict[str, Any]] = {}
    measured: list[tuple[int, float]] = []
    sizes = ceiling_batch_sizes(tuner.space)
    # under --budget the ceiling takes its share of what is left, the trials the rest (a slow model on a CPU took
    # minutes of a one-minute budget, at every batch size). The smallest batch size comes first, with a trial's
    # time (it starts CUDA and tunes the kernels: the slowest); the others while the share lasts
    ends = time.monotonic() + CEILING_SHARE * s.time_left() if s.time_left is not None else None
    first: tuple[int, float] | None = None  # the smallest batch size and the time it was given
    for i, b in enumerate(sizes):
        timeout = s.trial_timeout
        if ends is not None and i > 0:
            left = ends - time.monotonic()
            if left < MIN_TRIAL_S:
                per[str(b)] = {"outcome": NOT_MEASURED, "message": "not measured: the time budget's share for the ceiling was spent"}
                logger.info("model ceiling at batch %d: not measured, the budget's share for it was spent", b)
                continue
            timeout = min(timeout, left)
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": b})
        spec = dataclasses.replace(tuner.spec(loader, log=trial_log(s.log_dir, f"ceiling-{b}")), model=model, ranks=1, inject=None)
        r = run_trial(spec, timeout_s=timeout, budgets=s.budgets)
        first = first or (b, timeout)
        row: dict[str, Any] = {"outcome": r.outcome.value}
        if r.outcome is Outcome.COMPLETE and r.samples_per_s:
            row.update(samples_per_s=round(r.samples_per_s, 1), spread=[round(x, 1) for x in r.spread or ()])
            if "model_gpu_mib" in r.extra:
                row["model_gpu_mib"] = r.extra["model_gpu_mib"]
                measured.append((b, float(r.extra["model_gpu_mib"])))
        else:
            row["message"] = r.message[:300]
        per[str(b)] = row
        logger.info("model ceiling at batch %d: %s", b, row)
    done = {int(b): v["samples_per_s"] for b, v in per.items() if "samples_per_s" in v}
    if not done:
        earliest = next(iter(per.values()))
        if earliest["outcome"] == Outcome.CRASH.value:
            raise UserError(f"the model {model.describe()!r} could not be trained: {earliest.get('message', '')}")
        if earliest["outcome"] == Outcome.TIMEOUT.value:  # a trial's time for the smallest batch: every trial trains it too
            b, given = first or (sizes[0], s.trial_timeout)
            fix = "raise --budget" if ends is not None else "raise --trial-timeout"
            raise UserError(f"the model {model.describe()!r} is too slow to tune with here: its training steps alone, on batch {b} resident "
                            f"on {s.device}, gave no result in {given:.0f} s; {fix}, pass --step-ms MS for the step's time instead of --model, "
                            f"or a smaller --batch-size")
    if measured:
        tuner.settings.model = dataclasses.replace(s.model, gpu_mib=tuple(measured))
    best_b = max(done, key=done.get) if done else None  # type: ignore[arg-type]
    ranks = max(1, int(s.ranks))
    one = done.get(best_b) if best_b else None
    return {
        "model": s.model.describe(),
        "method": "the same training steps on one batch resident on the device"
        + (f"; measured on one GPU, times {ranks} ranks (each rank trains on its own GPU)" if ranks > 1 else ""),
        "per_batch_size": per,  # one GPU's rates
        "ranks": ranks,
        "samples_per_s": None if one is None else round(one * ranks, 1),  # all ranks together, as trials are scored
        "per_gpu_samples_per_s": one,
        "batch_size": best_b,
    }
