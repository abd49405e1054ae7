"""The confirm step: the best configs measured again, so that a lucky trial does not win alone. Under a budget the
round is planned to fit the time left: fewer contenders, or fewer repeats."""

from __future__ import annotations

import dataclasses

from autotune.tuning.prepare import Prepared
from autotune.tuning.reporter import Reporter
from autotune.tuning.search import OpenStudy, Stage


def confirm(prep: Prepared, opened: OpenStudy, reporter: Reporter, stage: Stage) -> None:
    """Re-measure the best configs (``--confirm-top`` of them, ``--confirm-repeats`` times each) where trials completed."""
    tuner = opened.tuner
    if opened.unwritten or not tuner.complete_trials():
        return
    budget = prep.budget
    if budget is not None:
        s = tuner.settings
        budget.confirm_planned = budget.confirm_fit(s.confirm_top, s.confirm_repeats, budget.contender_cost(tuner.study, s.confirm_top))
        top, repeats = budget.confirm_planned
        tuner.settings = dataclasses.replace(s, confirm_top=top, confirm_repeats=repeats)
    with stage("re-measurement"):
        record = tuner.confirm(on_step=reporter.remeasure, fits=budget.fits if budget is not None else None)
    if budget is not None and isinstance(record, dict) and isinstance(record.get("candidates"), list):
        budget.contenders = len(record["candidates"])


def remeasurements(opened: OpenStudy, n_trials: int) -> int:
    """The re-measurements the run plans at most: none with fewer than two contenders."""
    s = opened.tuner.settings
    n_contenders = min(s.confirm_top, n_trials + opened.done_before)  # one trial has no other to be compared with
    return n_contenders * s.confirm_repeats if n_contenders > 1 else 0
