"""``--budget SECONDS``: the one knob a user wants ("spend at most a minute").

A :class:`TimeBudget` starts with the command and is shared by every stage of the run. It plans the measurement
(shorter windows for a short budget), stops sampling new trials while there is still time to re-measure the
contenders and write the YAML, shrinks the re-measurement to what fits, and records where the time went (the
study attr ``time``, shown by the report).

The cost of one more trial is learned as the run goes: the median wall time of the trials so far (start-up,
warm-up and windows), not a guess made up front.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from autotune.study.evidence import fresh_duration, is_told, trial_attrs

#: seconds kept back for writing the YAML and the report after the last measurement
WRITE_RESERVE_S = 3.0
#: trials whose time says nothing of the next one's: the torch defaults (one process decodes, so a trial of them can
#: take several times any other's). Priced at it, a budget stops sampling with time left for several trials.
UNPRICED_ROLES = frozenset({"defaults"})
#: the baseline the YAML's speedup is measured against: when it is the next in the queue as sampling would stop, it
#: is measured still if a trial fits before the smallest re-measurement (a YAML without it has no speedup)
REFERENCE_ROLE = "defaults"

#: re-measurements are planned at this many times the contenders' own trial time (their start-up varies)
REMEASURE_MARGIN = 1.25
#: a budget shorter than this cannot measure even the baselines; it is refused with a one-line error
MIN_BUDGET_S = 10.0


@dataclasses.dataclass(frozen=True)
class Plan:
    """How a budget is spent: the measurement of one trial and the re-measurement of the contenders."""

    window_s: float
    windows: int
    confirm_top: int
    confirm_repeats: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def plan(
    budget_s: float, *, window_s: float | None = None, windows: int | None = None, confirm_top: int | None = None, confirm_repeats: int | None = None
) -> Plan:
    """The measurement for a budget; what the user set explicitly is kept.

    Under two minutes, a trial is measured in three half-second windows (enough to tell a 10 % difference once the
    ramp-up is cut) and the top two are re-measured once; up to five minutes, three one-second windows and the top
    three twice; beyond, the full measurement (five one-second windows).
    """
    if budget_s < 120:
        auto = Plan(0.5, 3, 2, 1)
    elif budget_s < 300:
        auto = Plan(1.0, 3, 3, 2)
    else:
        auto = Plan(1.0, 5, 3, 2)
    return Plan(
        window_s if window_s is not None else auto.window_s,
        windows if windows is not None else auto.windows,
        confirm_top if confirm_top is not None else auto.confirm_top,
        confirm_repeats if confirm_repeats is not None else auto.confirm_repeats,
    )


def process_start() -> float:
    """When this process started, on the ``time.monotonic`` clock (its imports included), as a user times a command."""
    now = time.monotonic()
    try:
        import psutil

        return now - max(0.0, time.time() - psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - no process start time (psutil missing or refused): count from now
        return now


class TimeBudget:
    """Wall-clock seconds for the whole run, from the command's start, and their use stage by stage.

    Args:
        total_s: the budget.
        clock: a monotonic clock (tests pass a fake one).
        start: when the budget started on that clock (default: now); the CLI passes the process's start.
    """

    def __init__(self, total_s: float, clock: Callable[[], float] | None = None, start: float | None = None) -> None:
        self.total_s = float(total_s)
        self.clock = clock or time.monotonic
        self.start = self.clock() if start is None else float(start)
        self.spent: dict[str, float] = {}
        self.trial_s: list[float] = []
        self.trials_measured = 0  # every trial, priced or not
        self.stopped_sampling_at: int | None = None
        self.confirm_planned: tuple[int, int] | None = None
        #: the configs the re-measurement found within reach of the best (fewer than two: nothing was re-measured)
        self.contenders: int | None = None
        #: the planned re-measurement's seconds, kept from the trials: one slower than the others ends at its next
        #: window before it (a trial of twice the median took the time and the re-measurement was skipped)
        self.reserved_s = 0.0
        self.earlier: tuple[int, float] | None = None  # a resumed study: its earlier runs and their seconds
        #: the set-up's steps, each the seconds elapsed when it ended (``time.setup_marks_s``): where set-up time goes
        self.marks: dict[str, float] = {}
        #: where the trials' seconds went (``time.trials_s``, :func:`trial_account`), once they have run
        self.trials_account: dict[str, Any] | None = None
        #: a contender's seconds in a paired re-measurement of the contenders given (None: not paired in a kept process,
        #: so each is priced as a fresh process takes it); the tuner's ``paired_price``
        self.paired_price: Callable[[list[Any]], float | None] | None = None

    def mark(self, step: str) -> None:
        """Note that the set-up's ``step`` has ended, now."""
        self.marks[step] = self.elapsed()

    def follow(self, before: Any) -> None:
        """Count the earlier runs of a resumed study, from its ``time`` attr as the last run left it."""
        if isinstance(before, dict) and isinstance(before.get("elapsed_s"), (int, float)):
            runs, earlier = before.get("runs"), before.get("earlier_s")
            self.earlier = (runs if isinstance(runs, int) else 1,
                            (float(earlier) if isinstance(earlier, (int, float)) else 0.0) + float(before["elapsed_s"]))

    def elapsed(self) -> float:
        return self.clock() - self.start

    def remaining(self) -> float:
        return self.total_s - self.elapsed()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Add the wall time of the ``with`` block to ``spent[name]``."""
        t0 = self.clock()
        try:
            yield
        finally:
            self.spent[name] = self.spent.get(name, 0.0) + self.clock() - t0

    def record_trial(self, seconds: float, priced: bool = True) -> None:
        """A trial ended after ``seconds``; ``priced``: its time predicts the next trial's (see UNPRICED_ROLES)."""
        self.trials_measured += 1
        if priced:
            self.trial_s.append(float(seconds))

    def trial_cost(self) -> float | None:
        """The expected wall time of one more trial: the median of the trials so far (None before the first)."""
        return statistics.median(self.trial_s) if self.trial_s else None

    def contender_cost(self, study: Any, top: int) -> float | None:
        """The expected wall time of one re-measurement: the mean of the ``top`` best trials' own durations, each as a
        fresh process takes it, or (where less) a contender's share of their paired re-measurement in the process
        the search kept (:attr:`paired_price`).

        Contenders are often the slow starters (a DALI GPU pipeline takes seconds to start), so the median
        of all trials, fast pruned ones included, would under-count the re-measurement; and where they are the quick
        ones (a user's fork workers, beside spawn configs importing the user's libraries in every worker), it would
        over-count it, and keep back time that no trial then uses.
        """
        import optuna

        done = [
            t
            for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
            if t.value is not None
            and trial_attrs(t).get("duration_s")
            and trial_attrs(t).get("role") not in UNPRICED_ROLES
            and not trial_attrs(t).get("reference")
        ]  # a reference is never re-measured
        from autotune.study.evidence import CONTENDER_FLOOR

        best = sorted(done, key=lambda t: t.value, reverse=True)[: max(1, top)]
        best = [t for t in best if t.value >= CONTENDER_FLOOR * best[0].value]  # the contenders Tuner.candidates re-measures
        if not best:
            return self.trial_cost()
        # a trial measured in a warm process (autotune.trials.warm) saved its start-up; a fresh re-measurement's is fresh
        fresh = statistics.fmean(fresh_duration(trial_attrs(t)) for t in best)
        # side by side in a process the search kept (autotune.study.paired.warm_price), where that is less: its rounds
        # fill what is kept either way (on 2 cores a fresh DALI CPU process is forked in a second, and four rounds of
        # its slow refills priced 11-17 s where the fresh trials' time kept 7-8 s)
        paired = self.paired_price(best) if self.paired_price is not None else None
        return min(fresh, paired) if paired is not None else fresh

    def fits(self, seconds: float) -> bool:
        """Whether ``seconds`` more work and writing the YAML still end inside the budget."""
        return self.elapsed() + seconds + WRITE_RESERVE_S <= self.total_s

    def confirm_fit(self, top: int, repeats: int, cost: float | None = None) -> tuple[int, int]:
        """The largest (top, repeats) no larger than asked whose re-measurements fit the time left."""
        cost = cost if cost is not None else self.trial_cost()
        if cost is None or cost <= 0:
            return top, repeats
        left = self.remaining() - WRITE_RESERVE_S
        for r in range(repeats, 0, -1):
            for k in range(top, 1, -1):
                if k * r * cost <= left:
                    return k, r
        return top, 0

    def another_trial_fits(self, top: int, repeats: int, contender_s: float | None = None, contenders: int | None = None) -> bool:
        """Whether one more trial and then the planned re-measurement (``contender_s`` each, with a margin for
        their spread) still end inside the budget.

        When not even the smallest re-measurement (two contenders, once, at their own trial time) fits any more, it is skipped
        whatever happens, or when fewer than two configs have completed (stopping would leave nothing to
        re-measure): the time left goes to trials rather than sitting unused, each priced at the slowest trial so far.
        """
        cost = self.trial_cost()
        if cost is None:
            return self.remaining() > WRITE_RESERVE_S
        per = (contender_s or cost) * REMEASURE_MARGIN
        k = top if repeats > 0 else 0
        remeasure = k * repeats * per
        smallest = 2 * (contender_s or cost)  # two contenders once, at their own trial time: what confirm_fit still runs
        if k > 1 and (self.elapsed() + smallest + WRITE_RESERVE_S > self.total_s or (contenders is not None and contenders < 2)):
            # trials only from here: the next may be a slow starter, and nothing else absorbs it
            self.reserved_s = 0.0
            return self.elapsed() + max(self.trial_s) + WRITE_RESERVE_S <= self.total_s
        self.reserved_s = remeasure
        return self.elapsed() + cost + remeasure + WRITE_RESERVE_S <= self.total_s

    def reference_fits(self, top: int, repeats: int, contender_s: float | None = None) -> bool:
        """Whether a trial of the reference (:data:`REFERENCE_ROLE`) still fits: a trial at the median so far (the
        quickest, a start-up crash or a pruned one, would under-price it), then the smallest re-measurement (two
        contenders once, when one is planned and still fits), then the writing. The trial itself ends at its next
        window once :meth:`measure_left` is spent."""
        cost = self.trial_cost()
        if cost is None:
            return False
        smallest = 2 * (contender_s or cost) if top > 1 and repeats > 0 else 0.0
        after = smallest if self.fits(smallest) else 0.0  # a re-measurement that no longer fits is not kept from it
        if not self.fits(cost + after):
            return False
        self.reserved_s = after  # what the reference leaves to the re-measurement: it ends (or is cut) where that begins
        return True

    def ahead_fits(self) -> bool:
        """Whether, after the trial measured now, one more trial and the planned re-measurement still fit: the next
        trial may then be built while this one measures (:mod:`autotune.trials.ahead`); built and never measured,
        its build would be wasted."""
        cost = self.trial_cost()
        if cost is None:
            return self.remaining() > WRITE_RESERVE_S
        return self.elapsed() + 2 * cost + self.reserved_s + WRITE_RESERVE_S <= self.total_s

    def measure_left(self) -> float:
        """Seconds a trial may still measure before it ends at its next window: the time left, less the YAML's
        writing and the planned re-measurement (a trial is cut only where the writing's reserve begins)."""
        return self.remaining() - WRITE_RESERVE_S - self.reserved_s

    def stop_callback(self, top: int, repeats: int) -> Callable[[Any, Any], None]:
        """An Optuna callback: learn the trial's cost; stop the study when another trial would not fit."""

        from autotune.study.evidence import CONTENDER_FLOOR, contenders

        def callback(study: Any, trial: Any) -> None:
            d = trial_attrs(trial).get("duration_s")
            if d:
                self.record_trial(d, priced=trial_attrs(trial).get("role") not in UNPRICED_ROLES)
            done = [t.value for t in contenders(study) if t.value is not None]
            n_contenders = sum(v >= CONTENDER_FLOOR * max(done) for v in done) if done else 0  # what the re-measurement would take
            contender_s = self.contender_cost(study, top)
            if not self.another_trial_fits(top, repeats, contender_s, contenders=n_contenders):
                if _next_role(study) == REFERENCE_ROLE and self.reference_fits(top, repeats, contender_s):
                    return  # one trial more: the speedup's reference, cut at its next window
                self.stopped_sampling_at = trial.number
                study.stop()

        return callback

    def to_dict(self) -> dict[str, Any]:
        """The study attr ``time``: the budget, what each stage took, and what was cut to fit."""
        out: dict[str, Any] = {
            "budget_s": round(self.total_s, 1),
            "elapsed_s": round(self.elapsed(), 1),
            "spent_s": {k: round(v, 1) for k, v in self.spent.items()},
            **({"setup_marks_s": {k: round(v, 2) for k, v in self.marks.items()}} if self.marks else {}),
            "trials_measured": self.trials_measured,
            "median_trial_s": None if (median_s := self.trial_cost()) is None else round(median_s, 2),
            **({"trials_s": self.trials_account} if self.trials_account is not None else {}),
        }
        if self.stopped_sampling_at is not None:
            out["stopped_sampling_after_trial"] = self.stopped_sampling_at
        if self.confirm_planned is not None:
            out["remeasured"] = {"top": self.confirm_planned[0], "repeats": self.confirm_planned[1],
                                 **({"contenders": self.contenders} if self.contenders is not None else {})}
        if self.earlier is not None:
            out["runs"], out["earlier_s"] = self.earlier[0] + 1, round(self.earlier[1], 1)
        return out


def trial_account(trials: list[Any], owner: str, since: Any = None) -> dict[str, Any]:
    """Where the trials' seconds went (the ``time`` attr's ``trials_s``), over the trials ``owner`` ran from ``since``
    (a datetime; a resumed study's earlier runs apart), the measured ones one after another (one asked for ahead starts
    where the one before it ended): ``measuring``, the trial processes' own time, start-up included; ``around``, the
    rest of a measured trial's time (its first, the wait for the measuring process to import, is ``first_wait`` too);
    ``told``, the trials told without a measurement (a repeat, a dominated kind: ``told_trials`` of them), which may
    overlap a measured one (told while it measured). What the trials stage spent beyond these is the sampler's and the
    study's."""
    out = {"measuring": 0.0, "around": 0.0, "told": 0.0}
    told, first_wait, last_end = 0, None, None
    ran = [t for t in trials if t.datetime_start and t.datetime_complete and trial_attrs(t).get("owner") == owner
           and (since is None or t.datetime_start >= since)]
    for t in sorted(ran, key=lambda t: t.datetime_complete):
        d = trial_attrs(t).get("duration_s")
        if is_told(t) or not isinstance(d, (int, float)):
            out["told"] += max(0.0, (t.datetime_complete - t.datetime_start).total_seconds())
            told += 1
            continue
        start = max(t.datetime_start, last_end) if last_end is not None else t.datetime_start
        wall, last_end = max(0.0, (t.datetime_complete - start).total_seconds()), t.datetime_complete
        out["measuring"] += float(d)
        out["around"] += max(0.0, wall - float(d))
        first_wait = max(0.0, wall - float(d)) if first_wait is None else first_wait
    return {**{k: round(v, 1) for k, v in out.items()}, "told_trials": told, **({"first_wait": round(first_wait, 1)} if first_wait is not None else {})}


def _next_role(study: Any) -> str | None:
    """The role of the trial the study runs next (the oldest queued one), or None when it samples one."""
    import optuna

    waiting = study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))
    return trial_attrs(min(waiting, key=lambda t: t.number)).get("role") if waiting else None
