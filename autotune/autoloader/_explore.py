"""The exploration rules: when a candidate has been measured enough, when it is abandoned, when to settle.

Plain arithmetic on what the loop measured, no torch and no clock of its own, so the rules are tested with
made-up timings. The score of a candidate is the wall time per sample of the user's own loop (loader plus
training step: the time between consecutive ``__next__`` calls) after its first ``warmup_batches`` batches,
the slowest rank's under DDP. Lower is better; the study stores its inverse, samples per second.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
from typing import Any

from autotune.errors import UserError, expect

#: how a candidate's measurement ended
CONTINUE, DONE, SLOW, FAILED, BUDGET = "continue", "done", "slow", "failed", "budget"


@dataclasses.dataclass(frozen=True)
class Exploration:
    """How :class:`~autotune.AutoLoader` explores.

    Args:
        budget_s: wall seconds of training after which exploration stops and the best candidate so far is kept.
        max_slowdown: a candidate slower than the best so far by more than this factor is abandoned at its next
            check point (1.5: 50 % slower).
        warmup_batches: batches after each (re)build that are not measured (workers starting, queues filling).
        measure_batches: measured batches that complete a candidate.
        check_batches: measured batches between check points (where a slow or failed candidate is dropped;
            under DDP the ranks agree only there).
        max_candidates: candidates tried at most, the starting points included.
        settle_wait: settle at once on a measured candidate whose loop waited for data less than this fraction
            of its time: the loader keeps up with the step, so no other loader can make the loop faster. The
            longest single wait is left out: one hiccup (a collection, an epoch's end) is not a loader too slow
            (from four measured batches on; over fewer, every wait counts).
    """

    budget_s: float = 180.0
    max_slowdown: float = 1.5
    warmup_batches: int = 5
    measure_batches: int = 30
    check_batches: int = 10
    max_candidates: int = 16
    settle_wait: float = 0.03

    def __post_init__(self) -> None:
        expect(self.budget_s, "budget_s", numbers.Real, "a number of seconds (0 explores nothing)")
        expect(self.max_slowdown, "max_slowdown", numbers.Real, "a number (1.5 abandons candidates 50 % slower than the best)")
        for name in ("warmup_batches", "measure_batches", "check_batches", "max_candidates"):
            expect(getattr(self, name), name, numbers.Integral, "a whole number of batches" if name.endswith("batches") else "a whole number")
        expect(self.settle_wait, "settle_wait", numbers.Real, "a fraction between 0 and 1")
        if not self.budget_s >= 0:
            raise UserError(f"budget_s must be >= 0 seconds, but got {self.budget_s!r}")
        if not self.max_slowdown >= 1.0:
            raise UserError(f"max_slowdown must be >= 1.0 (1.5 abandons candidates 50 % slower than the best), but got {self.max_slowdown!r}")
        for name in ("warmup_batches",):
            if getattr(self, name) < 0:
                raise UserError(f"{name} must be >= 0, but got {getattr(self, name)}")
        for name in ("measure_batches", "check_batches", "max_candidates"):
            if getattr(self, name) < 1:
                raise UserError(f"{name} must be >= 1, but got {getattr(self, name)}")
        if not 0.0 <= self.settle_wait < 1.0:
            raise UserError(f"settle_wait must be between 0 and 1, but got {self.settle_wait!r}")


def loop_rate(per_sample: float) -> float | None:
    """Samples per second of the training loop from its seconds per sample (None when nothing was measured)."""
    return 1.0 / per_sample if per_sample and math.isfinite(per_sample) else None


HICCUP_MIN_BATCHES = 4  # measured batches from which the longest single wait counts as a hiccup


@dataclasses.dataclass
class Tally:
    """What one rank measured of the current candidate. The counters are the same on every rank."""

    since_build: int = 0  # batches fetched since the last (re)build: the first warmup_batches are not measured
    measured: int = 0
    samples: int = 0
    loop_s: float = 0.0
    wait_s: float = 0.0
    wait_max: float = 0.0  # the longest single wait measured: left out of the wait fraction (one hiccup is not a slow loader)
    failed: str | None = None
    warm_checked: bool = False
    checked: int = 0  # `measured` at the last check point
    start_s: float | None = None  # the last build and its first batch, in seconds: what switching to it costs

    def add(self, loop_s: float, samples: int, wait_s: float) -> None:
        """One measured batch: the loop's time since the last one, its samples, and how long it waited for them."""
        self.loop_s += loop_s
        self.samples += samples
        self.wait_s += wait_s
        self.wait_max = max(self.wait_max, wait_s)
        self.measured += 1

    @property
    def steady_wait_s(self) -> float:
        """The measured waits without the longest one (what tells whether the loader keeps up). Over fewer than
        :data:`HICCUP_MIN_BATCHES` batches (an epoch of two or three batches) nothing is left out: there one wait
        is a large part of the measurement, and an epoch's end comes back every few batches."""
        return self.wait_s - self.wait_max if self.measured >= HICCUP_MIN_BATCHES else self.wait_s

    def rebuilt(self) -> None:
        self.since_build = 0
        self.warm_checked = False

    def check_due(self, rules: Exploration) -> bool:
        """Whether this call is a check point: just after the warm-up, then every ``check_batches`` measured."""
        if not self.warm_checked and self.since_build >= max(1, rules.warmup_batches):
            return True
        return self.measured > self.checked and self.measured % rules.check_batches == 0

    def mark_checked(self) -> None:
        self.warm_checked = True
        self.checked = self.measured


@dataclasses.dataclass(frozen=True)
class Best:
    number: int
    params: dict[str, Any]
    per_sample: float
    start_s: float | None = None  # its build and first batch (seconds), when measured


class Explorer:
    """Rank 0's judge: a candidate's verdict at each check point, the best so far, and when to settle."""

    def __init__(self, rules: Exploration, started: float) -> None:
        self.rules = rules
        self.started = started
        self.best: Best | None = None
        self.tried = 0

    def over_budget(self, now: float) -> bool:
        return now - self.started >= self.rules.budget_s

    def judge(self, *, measured: int, samples: int, loop_s: float, failed: bool, now: float, complete: bool = False) -> str:
        """The verdict at a check point: ``continue``, ``done``, ``slow``, ``failed`` or ``budget``.

        ``complete``: the candidate was measured over a whole epoch, which counts as a finished measurement.
        """
        r = self.rules
        if failed:
            return FAILED
        per_sample = loop_s / samples if samples else math.inf
        if measured and self.best is not None and per_sample > self.best.per_sample * r.max_slowdown:
            return SLOW
        if measured >= r.measure_batches or (complete and measured):
            return DONE
        if self.over_budget(now):
            return BUDGET
        return CONTINUE

    def record(self, number: int, params: dict[str, Any], verdict: str, per_sample: float, start_s: float | None = None) -> None:
        """A candidate ended: it is the best so far when it was measured and is faster."""
        if verdict in (DONE, BUDGET) and math.isfinite(per_sample) and (self.best is None or per_sample < self.best.per_sample):
            self.best = Best(number, dict(params), per_sample, start_s)

    def stay_to_epoch_end(self, verdict: str, per_sample: float, samples_left: int) -> bool:
        """On settling mid-epoch on another candidate: finish the epoch on the current one instead?

        The winner's loader is built once at the next epoch anyway; switching now costs a second build and start of
        it (``start_s``, measured when it was tried). Staying costs the current candidate's extra time per sample
        over what is left of the epoch. Stay when that is less, and the current candidate neither failed nor is
        unmeasured.
        """
        best = self.best
        if verdict == FAILED or best is None or best.start_s is None or not math.isfinite(per_sample) or samples_left <= 0:
            return False
        return samples_left * max(0.0, per_sample - best.per_sample) < best.start_s

    def settle_now(self, verdict: str, wait_fraction: float, now: float) -> bool:
        """After a candidate ended: stop exploring (budget spent, candidates used up, or the loader keeps up)."""
        if verdict == BUDGET or self.over_budget(now) or self.tried >= self.rules.max_candidates:
            return True
        return verdict == DONE and self.best is not None and wait_fraction < self.rules.settle_wait
