"""The confirm step under a time budget: where no fresh round of re-measurement fits the time left, a paired
re-measurement whose two rounds fit is still run (its process prices itself), and nothing is begun where neither fits."""

from __future__ import annotations

import dataclasses
import types

from autotune.study.budget import WRITE_RESERVE_S, TimeBudget
from autotune.tuning.confirm import confirm
from tests.helpers import FakeClock
from tests.study.test_confirm import _tuner_with
from tests.study.test_paired import _paired_replay


def _at(tiny_dataset, tmp_path, monkeypatch, elapsed: float, paired: bool = True):
    """Two contenders of 4 s trials each (0.2 s start-up), a 60 s budget ``elapsed`` seconds in, and the confirm step
    run on them with the paired process reading 1000 and 980 a round. Returns (the budget, the record, the calls)."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=paired,
                        duration_s=4.0, startup_s=0.2, warmup_s=0.01)
    clock = FakeClock()
    budget = TimeBudget(60.0, clock=clock)
    clock.now += elapsed
    tuner.settings = dataclasses.replace(tuner.settings, window_s=0.5, time_left=lambda: budget.remaining() - WRITE_RESERVE_S)
    calls = _paired_replay(tuner, monkeypatch, [{4: 1000.0, 2: 980.0}, {4: 1000.0, 2: 980.0}])
    opened = types.SimpleNamespace(tuner=tuner, unwritten=False)
    confirm(types.SimpleNamespace(budget=budget), opened, types.SimpleNamespace(remeasure=None), budget.stage)
    return budget, tuner.study.user_attrs.get("confirmation"), calls


def test_a_paired_round_runs_where_it_fits_and_no_fresh_round_does(tiny_dataset, tmp_path, monkeypatch):
    # 7.5 s left before the writing: two fresh re-measurements (8 s) do not fit; the paired process and two rounds
    # (1 s + 2 x (0.21 s + 3 x 0.5 s) + 2 x 3 x 0.5 s = 7.42 s) do
    budget, record, calls = _at(tiny_dataset, tmp_path, monkeypatch, 60.0 - WRITE_RESERVE_S - 7.5)
    assert budget.confirm_fit(2, 1, 4.0) == (2, 0)  # what fresh re-measurement alone would plan
    assert budget.confirm_planned == (2, 1)
    assert calls == [("paired", [4, 2])] and len(record["paired"]["rounds"]) == 2


def test_nothing_is_begun_where_neither_fits(tiny_dataset, tmp_path, monkeypatch):
    budget, record, calls = _at(tiny_dataset, tmp_path, monkeypatch, 60.0 - WRITE_RESERVE_S - 7.0)  # under the paired 7.42 s
    assert budget.confirm_planned == (2, 0)
    assert calls == [] and record["attempted"] == 0 and record["method"] == "best single trial (no re-measurement)"


def test_fresh_re_measurement_alone_is_not_planned_past_the_time_left(tiny_dataset, tmp_path, monkeypatch):
    budget, record, calls = _at(tiny_dataset, tmp_path, monkeypatch, 60.0 - WRITE_RESERVE_S - 7.5, paired=False)
    assert budget.confirm_planned == (2, 0) and calls == [] and record["attempted"] == 0
