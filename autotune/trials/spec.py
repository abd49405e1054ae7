"""What a trial is asked to do (:class:`TrialSpec`) and how it went (:class:`TrialResult`): plain data passed
between the study, the runner and the child."""

from __future__ import annotations

import dataclasses
from typing import Any

from autotune.outcomes import Outcome


@dataclasses.dataclass
class TrialSpec:
    """Everything the child needs; pickled to the spawned process."""

    dataset: Any  # autotune.dataset.Dataset
    loader: Any  # autotune.config.LoaderConfig
    pipeline: str = "imagenet-train"
    device: str = "cpu"
    warmup_batches: int = 2
    window_s: float = 1.0
    windows: int = 5
    seed: int | None = None
    ranks: int = 1
    model: Any = None  # autotune.trials.model.ModelSpec, when scoring training steps
    inject: str | None = None  # the test-suite's fault injection, see autotune.trials._faults
    tmpdir: str | None = None  # the trial's own temporary folder, removed by the runner when the trial ends
    log: str | None = None  # the file that takes the trial process's stdout and stderr (None: the parent's)
    #: the process stays, after its result, for the next spec of the same kind (:mod:`autotune.trials.warm`)
    keep: bool = False
    #: build the loader, then wait for ``"go"`` before measuring (a config built while an earlier trial measures: the
    #: search's next trial, :mod:`autotune.trials.ahead`); any other message, or the connection's end, drops it
    hold: bool = False
    #: a file that lets this trial's warm-up and windows begin once it exists: the trial built beside it
    #: (:mod:`autotune.trials.ahead`) creates it as its build ends, so no build overlaps a timed window; None: no wait
    wait_for: str | None = None
    #: the file this trial creates once its build ends or fails: the ``wait_for`` of the trial measured beside it
    signal: str | None = None
    #: more loaders measured beside ``loader`` in one process, in alternating windows (:mod:`autotune.trials.paired`)
    paired: tuple[Any, ...] = ()
    #: a paired measurement's rounds: at most this many, and none begun that would end past ``paired_s`` seconds
    #: after ``sent_at`` (``time.time()`` as the tuner sent the spec; None: as it arrived); ``paired_s`` None: no deadline
    max_rounds: int = 0
    paired_s: float | None = None
    sent_at: float | None = None


@dataclasses.dataclass
class TrialResult:
    outcome: Outcome
    samples_per_s: float | None = None
    spread: tuple[float, float] | None = None
    windows: list[float] = dataclasses.field(default_factory=list)
    steady_from: int = 0
    startup_s: float | None = None
    warmup_s: float | None = None
    peak_host_mib: float | None = None
    peak_gpu_mib: float | None = None
    duration_s: float = 0.0
    message: str = ""
    bad_file: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_attrs(self) -> dict[str, Any]:
        """Trial user attributes (what optuna-dashboard and the report show)."""
        d = {
            "outcome": self.outcome.value,
            "samples_per_s": _r(self.samples_per_s),
            "spread": [_r(x) for x in self.spread] if self.spread else None,
            "windows": [_r(x) for x in self.windows],
            "steady_from": self.steady_from,
            "startup_s": _r(self.startup_s, 3),
            "warmup_s": _r(self.warmup_s, 3),
            "peak_host_mib": _r(self.peak_host_mib),
            "peak_gpu_mib": _r(self.peak_gpu_mib),
            "duration_s": _r(self.duration_s, 2),
        }
        if self.message:
            d["message"] = self.message[:500]
        if self.bad_file:
            d["bad_file"] = self.bad_file
        d.update(self.extra)
        return d


def _r(x: float | None, nd: int = 1) -> float | None:
    return None if x is None else round(float(x), nd)
