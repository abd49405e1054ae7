"""The confirmation stage re-measures the top candidates and picks the true best among near-ties."""

from __future__ import annotations

import random

import optuna
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.spec import TrialResult

SPACE = {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [0, 4]}}}


def test_remeasurement_picks_true_best_among_near_ties(tiny_dataset, tmp_path, monkeypatch):
    # true rates: workers=2 is best by 3 %; a lucky first measurement made workers=1 look best
    true = {0: 500.0, 1: 970.0, 2: 1000.0, 3: 985.0, 4: 400.0}
    first = {0: 500.0, 1: 1080.0, 2: 990.0, 3: 1000.0, 4: 400.0}
    rng = random.Random(0)
    space = parse_space(SPACE, cores=4)
    settings = TuneSettings(confirm_top=3, confirm_repeats=4, baselines=False)
    tuner = Tuner(scan(tiny_dataset), space, settings, storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    for w in range(5):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": w})
        t = optuna.trial.create_trial(
            params={"num_workers": w}, distributions={"num_workers": optuna.distributions.IntDistribution(0, 4)},
            value=first[w], user_attrs={"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete"},
        )
        tuner.study.add_trial(t)

    calls = []

    def fake_measure(loader, number=None, on_intermediate=None, log=None):
        w = loader.torch.num_workers
        calls.append(w)
        return TrialResult(Outcome.COMPLETE, samples_per_s=true[w] * (1 + rng.uniform(-0.01, 0.01)))

    monkeypatch.setattr(tuner, "measure", fake_measure)
    record = tuner.confirm()
    assert sorted(set(calls)) == [1, 2, 3]  # the top 3 by first score were re-measured
    assert calls[:3] == calls[3:6]  # interleaved: one round over all candidates, then the next
    winner = next(t for t in tuner.study.trials if t.number == record["winner_trial"])
    assert trial_attrs(winner)["loader"]["num_workers"] == 2
    assert "interleaved" in record["method"]


def test_a_config_under_a_third_of_the_best_is_no_contender(tiny_dataset, tmp_path, monkeypatch):
    """The torch defaults at 32 samples/s against a heuristic at 170 (under a third): re-measuring them cannot change the winner."""
    space = parse_space(SPACE, cores=4)
    tuner = Tuner(
        scan(tiny_dataset), space, TuneSettings(confirm_top=3, confirm_repeats=2, baselines=False), storage=f"sqlite:///{tmp_path}/s.db", study_name="s"
    )
    for w, value in ((0, 32.0), (2, 170.0), (3, 150.0)):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": w})
        tuner.study.add_trial(
            optuna.trial.create_trial(
                params={"num_workers": w},
                distributions={"num_workers": optuna.distributions.IntDistribution(0, 4)},
                value=value,
                user_attrs={"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "duration_s": 22.0 if w == 0 else 4.0},
            )
        )
    calls = []
    monkeypatch.setattr(tuner, "measure", lambda loader, *a, **k: calls.append(loader.torch.num_workers) or TrialResult(Outcome.COMPLETE, samples_per_s=160.0))
    tuner.confirm()
    assert sorted(set(calls)) == [2, 3]  # the two leaders (and their close call), never the defaults

    from autotune.study.budget import TimeBudget

    assert TimeBudget(60).contender_cost(tuner.study, 3) == 4.0  # the defaults' 22 s do not price the re-measurement


def test_issue_42_item_8_a_resumed_study_keeps_its_earlier_re_measurements(tiny_dataset, tmp_path, monkeypatch):
    """Issue 42, item 8: after ``run --resume`` the winner's scores went from three measurements (median 424.9) to
    ``[424.9, 293.0]``: the earlier run's re-measurements were dropped. They are kept and counted with the new ones."""
    from autotune.study.evidence import confirmation_method
    from autotune.study.result import figures

    space = parse_space(SPACE, cores=4)
    storage = f"sqlite:///{tmp_path}/s.db"
    first = Tuner(scan(tiny_dataset), space, TuneSettings(confirm_top=2, confirm_repeats=2, baselines=False), storage=storage, study_name="s")
    for w, value in ((2, 424.9), (3, 400.0)):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": w})
        first.study.add_trial(
            optuna.trial.create_trial(
                params={"num_workers": w}, distributions={"num_workers": optuna.distributions.IntDistribution(0, 4)}, value=value,
                user_attrs={"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "duration_s": 4.0},
            )
        )
    earlier = {2: [431.0, 418.0], 3: [396.0, 401.0]}
    monkeypatch.setattr(first, "measure", lambda loader, *a, **k: TrialResult(Outcome.COMPLETE, samples_per_s=earlier[loader.torch.num_workers].pop(0)))
    assert [c["scores"] for c in first.confirm()["candidates"]] == [[424.9, 431.0, 418.0], [400.0, 396.0, 401.0]]

    resumed = Tuner(scan(tiny_dataset), space, TuneSettings(confirm_top=2, confirm_repeats=1, baselines=False), storage=storage, study_name="s", resume=True)
    monkeypatch.setattr(resumed, "measure", lambda loader, *a, **k: TrialResult(Outcome.COMPLETE, samples_per_s={2: 293.0, 3: 390.0}[loader.torch.num_workers]))
    record = resumed.confirm()
    assert [c["scores"] for c in record["candidates"]] == [[424.9, 431.0, 418.0, 293.0], [400.0, 396.0, 401.0, 390.0]]
    assert record["earlier"] == 4 and record["attempted"] == 2
    assert record["method"] == confirmation_method(record) == (
        "top 2 re-measured 1x each, interleaved; 4 re-measurements of an earlier run of this study kept; winner by median of all scores"
    )
    fig = figures(resumed.study)
    assert fig["scores"] == [424.9, 431.0, 418.0, 293.0] and fig["samples_per_s"] == pytest.approx(421.45, abs=0.06)  # the median of all four
    none_now = {**record, "attempted": 0, "candidates": [{**c, "scores": c["scores"][:3]} for c in record["candidates"]]}
    assert confirmation_method(none_now) == (
        "4 re-measurements of an earlier run of this study kept; none counted in this run (no re-measurement); winner by median of all scores"
    )
