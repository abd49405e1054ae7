"""The confirm step: the best configs measured again, so that a lucky trial does not win alone. Under a budget the
round is planned to fit the time left: fewer contenders, or fewer repeats."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from autotune.study.confirm import candidates
from autotune.study.paired import pairs, rounds_cost
from autotune.tuning.prepare import Prepared
from autotune.tuning.reporter import Reporter
from autotune.tuning.search import OpenStudy, Stage

if TYPE_CHECKING:
    import optuna

    from autotune.study.budget import TimeBudget
    from autotune.study.settings import TuneSettings


def confirm(prep: Prepared, opened: OpenStudy, reporter: Reporter, stage: Stage) -> None:
    """Re-measure the best configs (``--confirm-top`` of them, ``--confirm-repeats`` times each) where trials completed."""
    tuner = opened.tuner
    if opened.unwritten or not tuner.complete_trials():
        return
    budget = prep.budget
    if budget is not None:
        s = tuner.settings
        budget.confirm_planned = top, repeats = planned(budget, s, tuner.study)
        tuner.settings = dataclasses.replace(s, confirm_top=top, confirm_repeats=repeats)
    with stage("re-measurement"):
        record = tuner.confirm(on_step=reporter.remeasure, fits=budget.fits if budget is not None else None)
    if budget is not None and isinstance(record, dict) and isinstance(record.get("candidates"), list):
        budget.contenders = len(record["candidates"])


def planned(budget: TimeBudget, s: TuneSettings, study: optuna.Study) -> tuple[int, int]:
    """The re-measurement that fits the time left, as ``(top, repeats)``: fresh rounds priced at the contenders' own
    trial time (:meth:`~autotune.study.budget.TimeBudget.confirm_fit`). Where not one such round fits but the
    contenders are re-measured paired (:func:`~autotune.study.paired.pairs`) and two paired rounds fit (the process,
    the builds and the windows: :func:`~autotune.study.paired.rounds_cost`), one: the paired process measures the
    rounds that fit its time. On 2 cores a last slow-starting trial left 5.7 s, under the 6.6 s of two fresh
    re-measurements, and the run took its best single trial where a paired round (5.2 s) fitted."""
    top, repeats = budget.confirm_fit(s.confirm_top, s.confirm_repeats, budget.contender_cost(study, s.confirm_top))
    if repeats == 0 and top > 1 and s.confirm_repeats > 0 and pairs(s):
        cands = candidates(study, top)
        repeats = int(len(cands) > 1 and budget.fits(rounds_cost(cands, s.window_s)))
    return top, repeats


def remeasurements(opened: OpenStudy, n_trials: int) -> int:
    """The re-measurements the run plans at most: none with fewer than two contenders."""
    s = opened.tuner.settings
    n_contenders = min(s.confirm_top, n_trials + opened.done_before)  # one trial has no other to be compared with
    return n_contenders * s.confirm_repeats if n_contenders > 1 else 0
