"""What the report's plots draw: every point a trial that ran, at the time it ran."""

from __future__ import annotations

import datetime as dt

import pytest

pytest.importorskip("matplotlib")

from matplotlib.axes import Axes  # noqa: E402 - only where matplotlib is installed

from autotune.report._plots import plot_backends, plot_throughput  # noqa: E402 - after the skip


def _row(n: int, outcome: str, rate: float | None, minute: float | None) -> dict:
    t0 = dt.datetime(2026, 1, 1, 12, 0, 0)
    when = None if minute is None else t0 + dt.timedelta(minutes=minute)
    return {"trial": n, "outcome": outcome, "samples_per_s": rate, "backend": "torch", "role": None, "start": when, "end": when}


@pytest.fixture()
def drawn(monkeypatch):
    points: dict[str, list[tuple[float, float]]] = {}
    real = Axes.scatter

    def scatter(self, x, y, *a, **kw):
        points[str(kw.get("label"))] = list(zip(list(x), list(y), strict=True))
        return real(self, x, y, *a, **kw)

    monkeypatch.setattr(Axes, "scatter", scatter)
    return points


def test_a_queued_trial_is_not_drawn_as_a_failure_at_its_number(drawn, tmp_path):
    """A 'queued, not run' trial was a red cross at x = its trial number on a minutes axis (trial 9 at minute 9 of a
    one-minute run)."""
    rows = [_row(0, "complete", 100.0, 0.1), _row(1, "oom-host", None, 0.4), _row(9, "waiting", None, None)]
    caption = plot_throughput(rows, {}, tmp_path / "t.png")
    fails = drawn["not complete (pruned/failed)"]
    assert fails == [(pytest.approx(0.3), 0.0)]  # the failure that ran, at its minute since the first start; the queued one is not drawn
    assert "1 more queued, not run" in caption and "of 2 trials" in caption


def test_one_trial_is_one_trial(drawn, tmp_path):
    """The backends plot said "1 trials"."""
    caption = plot_backends([_row(0, "complete", 100.0, 0.1)], {}, tmp_path / "b.png")
    assert "over 1 trial" in caption and "1 trials" not in caption
    one = plot_throughput([_row(0, "complete", 100.0, 0.1)], {}, tmp_path / "t.png")
    assert one.startswith("1 of 1 trial completed")
