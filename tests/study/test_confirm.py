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
    settings = TuneSettings(paired=False, confirm_top=3, confirm_repeats=4, baselines=False)
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
        scan(tiny_dataset), space, TuneSettings(paired=False, confirm_top=3, confirm_repeats=2, baselines=False), storage=f"sqlite:///{tmp_path}/s.db",
        study_name="s",
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
    first = Tuner(scan(tiny_dataset), space, TuneSettings(paired=False, confirm_top=2, confirm_repeats=2, baselines=False), storage=storage, study_name="s")
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

    resumed = Tuner(scan(tiny_dataset), space, TuneSettings(paired=False, confirm_top=2, confirm_repeats=1, baselines=False), storage=storage, study_name="s",
                    resume=True)
    monkeypatch.setattr(resumed, "measure", lambda loader, *a, **k: TrialResult(Outcome.COMPLETE, samples_per_s={2: 293.0, 3: 390.0}[loader.torch.num_workers]))
    record = resumed.confirm()
    assert [c["scores"] for c in record["candidates"]] == [[424.9, 431.0, 418.0, 293.0], [400.0, 396.0, 401.0, 390.0]]
    assert record["earlier"] == 4 and record["attempted"] == 2
    assert record["method"] == confirmation_method(record) == (
        "top 2 re-measured 1x each, interleaved; 4 re-measurements of an earlier run of this study kept; "
        "winner: the fastest by the median of its re-measurements, the others told apart from it"
    )
    fig = figures(resumed.study)
    assert fig["scores"] == [424.9, 431.0, 418.0, 293.0] and fig["samples_per_s"] == pytest.approx(421.45, abs=0.06)  # the median of all four
    none_now = {**record, "attempted": 0, "candidates": [{**c, "scores": c["scores"][:3]} for c in record["candidates"]]}
    assert confirmation_method(none_now) == (
        "4 re-measurements of an earlier run of this study kept; none counted in this run (no re-measurement); "
        "winner: the fastest by the median of its re-measurements, the others told apart from it"
    )


def _tuner_with(tiny_dataset, tmp_path, trials: dict[int, tuple[float, str | None]], top: int = 3, repeats: int = 3, paired: bool = False,
                **more) -> Tuner:
    """A tuner whose study holds one complete trial per ``num_workers``: its first score and its role (None: sampled)."""
    space = parse_space(SPACE, cores=4)
    tuner = Tuner(scan(tiny_dataset), space, TuneSettings(paired=paired, confirm_top=top, confirm_repeats=repeats, baselines=False),
                  storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    for w, (value, role) in trials.items():
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": w})
        attrs = {"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "duration_s": 1.0,
                 **({"role": role} if role else {}), **more}
        tuner.study.add_trial(optuna.trial.create_trial(params={"num_workers": w}, distributions={"num_workers": optuna.distributions.IntDistribution(0, 4)},
                                                        value=value, user_attrs=attrs))
    return tuner


def _replay(tuner: Tuner, monkeypatch, readings: dict[int, list[float]]) -> list[int]:
    """Each re-measurement of ``num_workers`` w reads the next of ``readings[w]``; returns the order they ran in."""
    calls: list[int] = []

    def measure(loader, *a, **k):
        calls.append(loader.torch.num_workers)
        return TrialResult(Outcome.COMPLETE, samples_per_s=readings[loader.torch.num_workers].pop(0))

    monkeypatch.setattr(tuner, "measure", measure)
    return calls


def test_the_cheapest_config_that_cannot_be_told_apart_from_the_fastest_wins(tiny_dataset, tmp_path, monkeypatch):
    """Noise: 4 workers read a median 1 % above 2 workers, but their interleaved re-measurements overlap: 2 workers
    (two processes fewer) win, and the record, the YAML's result and the last line name both."""
    from pathlib import Path

    from autotune.study.result import config_from_study, figures
    from autotune.tuning.write import result_lines

    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None), 1: (700.0, None)})
    _replay(tuner, monkeypatch, {4: [1010.0, 960.0, 1000.0, 990.0, 1005.0], 2: [985.0, 1005.0, 975.0, 995.0, 980.0], 1: [690.0, 705.0, 700.0]})
    record = tuner.confirm()
    by_workers = {trial_attrs(t)["loader"]["num_workers"]: t.number for t in tuner.study.trials}
    assert record["fastest_trial"] == by_workers[4] and record["winner_trial"] == by_workers[2]
    assert record["indistinguishable"] == sorted([by_workers[4], by_workers[2]])  # 1 worker is told apart: every reading lower
    assert record["method"].endswith("winner: the cheapest of the 2 the re-measurement cannot tell apart from the fastest")
    result = figures(tuner.study)
    assert [a["trial"] for a in result["indistinguishable"]] == [by_workers[4], by_workers[2]]
    cfg = config_from_study(tuner.study, tuner.storage_url)  # the YAML's result: figures() had them, the YAML did not
    assert [(a["trial"], a["config"]) for a in cfg.result["indistinguishable"]] == [
        (n, trial_attrs(tuner.study.trials[n])["config"]) for n in (by_workers[4], by_workers[2])]
    lines = result_lines(cfg, tuner.study, Path("autotune.yaml"), None, {}, None)
    told = [line for line in lines if line.startswith("the re-measurement could not tell it (")]
    # by what the noise rule judged: the re-measurements alone, without each trial's own first score
    assert told == [f"the re-measurement could not tell it (985.0 re-measured) apart from {trial_attrs(tuner.study.trials[by_workers[4]])['config']} "
                    "(1,000.0 re-measured): the cheapest (fewest loader threads, then least memory) is taken"], lines


def test_a_config_told_apart_as_slower_does_not_win_for_being_cheaper(tiny_dataset, tmp_path, monkeypatch):
    """2 workers within 3 % of 4 workers on the medians, but every interleaved reading lower: told apart, the fastest wins."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (1000.0, None)}, top=2)
    _replay(tuner, monkeypatch, {4: [1000.0, 1002.0, 1001.0, 1000.0, 1000.0], 2: [985.0, 984.0, 986.0, 985.0, 985.0]})
    record = tuner.confirm()
    winner = next(t for t in tuner.study.trials if t.number == record["winner_trial"])
    assert trial_attrs(winner)["loader"]["num_workers"] == 4 and record["indistinguishable"] == [winner.number]


def test_single_re_measurements_tell_a_config_apart_only_beyond_the_margin(tiny_dataset, tmp_path, monkeypatch):
    """A 60 s run re-measures each candidate once. One reading each, 0.4 % apart, had called the cheaper config slower
    (and the report then showed the winner with the lower median of all scores): within 3 % they cannot be told apart,
    and the cheapest wins; 5 % apart on single readings is told apart."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (830.0, None), 2: (990.0, None)}, top=2, repeats=1)
    _replay(tuner, monkeypatch, {4: [1003.0], 2: [999.0]})
    record = tuner.confirm()
    workers = {t.number: trial_attrs(t)["loader"]["num_workers"] for t in tuner.study.trials}
    assert workers[record["fastest_trial"]] == 4 and workers[record["winner_trial"]] == 2
    assert sorted(record["indistinguishable"]) == sorted(workers) and record["method"].endswith("cannot tell apart from the fastest")

    tuner = _tuner_with(tiny_dataset, tmp_path / "b", {4: (830.0, None), 2: (990.0, None)}, top=2, repeats=1)
    _replay(tuner, monkeypatch, {4: [1003.0], 2: [950.0]})
    record = tuner.confirm()
    workers = {t.number: trial_attrs(t)["loader"]["num_workers"] for t in tuner.study.trials}
    assert workers[record["winner_trial"]] == 4 and len(record["indistinguishable"]) == 1
    assert record["method"].endswith("winner: the fastest by the median of its re-measurements, the others told apart from it")


def test_the_winner_is_never_one_its_re_measurement_shows_slower_than_a_starting_point(tiny_dataset, tmp_path, monkeypatch):
    """1 worker (sampled) cannot be told apart from the fastest, 4 workers, and is the cheapest; but every one of its
    readings is below every reading of the heuristic (3 workers, a starting point): the heuristic wins, not it."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 3: (995.0, "heuristic"), 1: (990.0, None)})
    _replay(tuner, monkeypatch, {4: [1000.0, 1040.0, 960.0, 1000.0, 1010.0], 3: [990.0, 1000.0, 985.0, 992.0, 996.0], 1: [980.0, 975.0, 982.0]})
    record = tuner.confirm()
    winner = next(t for t in tuner.study.trials if t.number == record["winner_trial"])
    assert len(record["indistinguishable"]) == 3  # all three overlap the fastest's readings
    assert trial_attrs(winner)["loader"]["num_workers"] == 3


def test_the_best_starting_point_is_re_measured_beside_the_sampled_leaders(tiny_dataset, tmp_path, monkeypatch):
    """The top three are sampled configs: the best start (DALI's usual, say; here the heuristic) takes the third place,
    so the rule above has a start to compare with, and the re-measurement still costs three candidates."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 3: (990.0, None), 2: (980.0, None), 1: (900.0, "heuristic"),
                                                 0: (100.0, "defaults")}, top=3, repeats=1)
    calls = _replay(tuner, monkeypatch, {w: [1000.0 - w] * 3 for w in range(5)})
    tuner.confirm()
    assert sorted(set(calls)) == [1, 3, 4]  # not the defaults: under a third of the best


def test_a_re_measurement_is_admitted_at_a_fresh_process_s_time(tiny_dataset, tmp_path, monkeypatch):
    """A trial measured in a warm process took 1 s but saved 3 s of start-up: its fresh re-measurement is asked to fit
    4 s of the budget (at 1 s, one that did not fit was begun, and the run went past its budget)."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, saved_s=3.0)
    _replay(tuner, monkeypatch, {4: [1000.0, 1000.0, 1000.0], 2: [990.0, 990.0, 990.0]})
    asked: list[float] = []
    tuner.confirm(fits=lambda s: asked.append(s) or True)
    assert asked and all(s == pytest.approx(4.0) or s == pytest.approx(8.0) for s in asked), asked
    assert pytest.approx(8.0) in asked  # the round of both, at 4 s each
