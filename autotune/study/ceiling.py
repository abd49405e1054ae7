"""The model's ceiling: its training samples/s on one batch already resident on the device, measured once per
study in a child process like any trial, at each batch size the space allows."""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING, Any

from autotune.errors import UserError
from autotune.study.selection import ceiling_batch_sizes

if TYPE_CHECKING:
    from autotune.study.tuner import Tuner

logger = logging.getLogger(__name__)


def measure_ceiling(tuner: Tuner) -> dict[str, Any]:
    """The model's training samples/s on one device-resident batch, at each batch size the space allows.

    Each batch size runs in a spawned child like a trial (same windows, budgets and timeout). The measured
    GPU footprints are put on ``tuner.settings.model`` so that later memory estimates use them.

    Returns:
        The record stored as the study attr ``model_ceiling``: ``model``, ``per_batch_size`` (one GPU's rate,
        spread, outcome, model_gpu_mib per batch size), ``ranks``, ``samples_per_s`` (the best batch size's, times
        the ranks: all ranks' GPUs, as trials are scored), ``per_gpu_samples_per_s`` and ``batch_size`` of the best.

    Raises:
        UserError: no batch size completed because the model cannot be built (e.g. an unknown name), or because
            its steps alone gave no result in a trial's time at the smallest batch size (every trial trains it too).
    """
    from autotune.config.schema import LoaderConfig
    from autotune.outcomes import Outcome
    from autotune.trials.logs import trial_log
    from autotune.trials.runner import run_trial

    s = tuner.settings
    model = dataclasses.replace(s.model, resident=True)
    per: dict[str, dict[str, Any]] = {}
    measured: list[tuple[int, float]] = []
    sizes = ceiling_batch_sizes(tuner.space)
    for b in sizes:
        loader = LoaderConfig.from_params({"batch_size": b})  # the default kind: the loader is not what it measures
        spec = dataclasses.replace(tuner.spec(loader, log=trial_log(s.log_dir, f"ceiling-{b}")), model=model, ranks=1, inject=None)
        r = run_trial(spec, timeout_s=s.trial_timeout, budgets=s.budgets)
        if r.outcome is Outcome.TIMEOUT and b == sizes[0]:  # the smallest batch in a trial's time: every trial trains it too
            fix = "raise --budget" if s.time_left is not None else "raise --trial-timeout"
            raise UserError(f"the model {model.describe()!r} is too slow to tune with here: its training steps alone, on batch {b} resident "
                            f"on {s.device}, gave no result in {s.trial_timeout:.0f} s; {fix}, pass --step-ms MS for the step's time instead of --model, "
                            f"or a smaller --batch-size")
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
    if measured:
        tuner.settings.model = dataclasses.replace(s.model, gpu_mib=tuple(measured))
    best_b = max(done, key=done.__getitem__) if done else None
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
