"""``--budget SECONDS``: the plan for a budget, the study stopped in time for the re-measurement, and the
whole run inside the budget (on a fake clock: each fake trial costs a fixed number of seconds)."""

from __future__ import annotations

import types

import optuna
import pytest

from autotune.cli import main
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study import budget as budget_mod
from autotune.study.budget import WRITE_RESERVE_S, Plan, TimeBudget, plan
from autotune.study.evidence import trial_attrs
from autotune.trials.spec import TrialResult
from tests.helpers import FakeClock


def test_plan_shortens_the_measurement_for_short_budgets_and_keeps_what_the_user_set():
    assert plan(60) == Plan(0.5, 3, 2, 1)
    assert plan(200) == Plan(1.0, 3, 3, 2)
    assert plan(900) == Plan(1.0, 5, 3, 2)
    assert plan(60, window_s=2.0, confirm_repeats=0) == Plan(2.0, 3, 2, 0)


def test_confirm_fit_shrinks_the_re_measurement_to_the_time_left():
    clock = FakeClock()
    b = TimeBudget(60, clock=clock)
    clock.now += 60 - WRITE_RESERVE_S - 9  # 9 s left for re-measurements of 4 s each
    assert b.confirm_fit(3, 2, cost=4.0) == (2, 1)
    clock.now += 5  # 4 s left: not even two
    assert b.confirm_fit(3, 2, cost=4.0) == (3, 0)


def test_another_trial_fits_counts_the_re_measurement_that_must_follow():
    clock = FakeClock()
    b = TimeBudget(60, clock=clock)
    b.record_trial(4.0)
    clock.now += 42  # 42 + 4 (next) + 2*1*4*1.25 (re-measure, with its margin) + 3 (write) = 59
    assert b.another_trial_fits(2, 1)
    clock.now += 2
    assert not b.another_trial_fits(2, 1)
    assert b.another_trial_fits(2, 1, contender_s=2.0)  # 44 + 4 + 5 + 3: cheap contenders leave room
    clock.now -= 10
    assert not b.another_trial_fits(2, 1, contender_s=9.0)  # 34 + 4 + 2*9*1.25 + 3: slow starters (DALI) need more
    # 34 + 2*12*1.25 + 3 > 60: no re-measurement can fit any more, so the time left goes to trials, not idle
    assert b.another_trial_fits(2, 1, contender_s=12.0)
    # one config complete so far: stopping would leave nothing to re-measure, so one more trial is worth more
    clock.now += 10  # 44 + 4 + 2*4*1.25 + 3 > 60, but 44 + 4 + 3 fits
    assert not b.another_trial_fits(2, 1, contender_s=4.0)
    assert b.another_trial_fits(2, 1, contender_s=4.0, contenders=1)
    assert not b.another_trial_fits(2, 1, contender_s=4.0, contenders=2)
    clock.now -= 10
    b.record_trial(6.0)
    clock.now += 18
    assert not b.another_trial_fits(2, 1, contender_s=12.0)  # 52 + 6 (the slowest trial) + 3: no room for one more


def test_sampling_stops_while_the_smallest_re_measurement_still_fits():
    """Seen on the H200: at 42 s of 60, two DALI contenders of 7.5 s each fitted exactly (42 + 15 + 3), but the
    check priced them with the margin (18.8 s) and went on to three fast trials: no re-measurement at all."""
    clock = FakeClock()
    b = TimeBudget(60, clock=clock)
    for s in (5.0, 8.0, 4.0, 4.0, 7.0):
        b.record_trial(s)
    clock.now += 42
    assert not b.another_trial_fits(2, 1, contender_s=7.5, contenders=3)  # stop: the re-measurement gets the time
    assert b.confirm_fit(2, 1, cost=7.5) == (2, 1)
    clock.now += 1  # 43 + 15 + 3 > 60: no re-measurement fits, the time left goes to trials
    assert b.another_trial_fits(2, 1, contender_s=7.5, contenders=3) == (43 + 8 + WRITE_RESERVE_S <= 60)


def test_re_measurement_is_planned_at_the_contenders_own_trial_time(tiny_dataset, workdir):
    import optuna

    study = optuna.create_study(direction="maximize")
    for value, seconds in ((100.0, 2.0), (900.0, 12.0), (800.0, 10.0), (50.0, 3.0)):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"duration_s": seconds}))
    b = TimeBudget(60, clock=FakeClock())
    for seconds in (2.0, 12.0, 10.0, 3.0):
        b.record_trial(seconds)
    assert b.trial_cost() == 6.5  # the median of all trials
    assert b.contender_cost(study, 2) == 11.0  # the two best: the slow starters


def test_quick_contenders_are_priced_at_their_own_trial_time_not_at_slower_others():
    """A user's Dataset whose module takes 4 s to import: its fork configs lead and take 3 s a trial, its spawn and
    forkserver configs (the import in every worker) 11-13 s. Priced at the median trial, a 60 s run on 2 cores stopped
    sampling with 18 s left for a re-measurement that took 5 s, and ended after 46 s."""
    import optuna

    study = optuna.create_study(direction="maximize")
    for value, seconds in ((620.0, 3.0), (610.0, 3.0), (300.0, 11.0), (280.0, 13.0), (250.0, 12.0)):
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"duration_s": seconds}))
    b = TimeBudget(60, clock=FakeClock())
    for seconds in (3.0, 3.0, 11.0, 13.0, 12.0):
        b.record_trial(seconds)
    assert b.trial_cost() == 11.0
    assert b.contender_cost(study, 2) == 3.0


def _stopping_study():
    """A 60 s budget on a fake clock, its stop callback (top 2, once), and a study whose stop() is recorded."""
    clock = FakeClock()
    b = TimeBudget(60, clock=clock)
    study = optuna.create_study(direction="maximize")
    stopped: list[bool] = []
    study.stop = lambda: stopped.append(True)  # noqa: E731 - the callback's only use of the study
    return clock, b, b.stop_callback(2, 1), study, stopped


def test_the_slow_torch_defaults_do_not_price_the_next_trial():
    """A 4 s bad-data trial, a 5 s heuristic, then the torch defaults (22 s): 39 s of 60 spent. Priced at the
    defaults, no trial fits and the queued DALI start never runs; priced at the others, it and a re-measurement do."""
    clock, b, cb, study, stopped = _stopping_study()
    clock.now += 8  # setup
    for seconds, value, role in ((4.0, None, "dali-heuristic"), (5.0, 170.0, "heuristic"), (22.0, 32.0, "defaults")):
        clock.now += seconds
        attrs = {"duration_s": seconds, "role": role, "outcome": "complete" if value else "bad-data"}
        t = (
            optuna.trial.create_trial(value=value, user_attrs=attrs)
            if value
            else optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs=attrs)
        )
        study.add_trial(t)
        cb(study, study.trials[-1])
    assert b.elapsed() == 39.0 and not stopped, "a 4 to 5 s trial and the re-measurement still fit in the 21 s left"
    assert b.trial_s == [4.0, 5.0] and b.trials_measured == 3 and b.contender_cost(study, 2) == 5.0


@pytest.mark.parametrize("setup_s,measured", [(18.0, True), (21.0, False)], ids=["fits", "would-take-the-re-measurement"])
def test_the_queued_torch_defaults_are_measured_when_a_trial_fits(setup_s, measured):
    """Seen on the H200 with a set-up of 18 s: three baselines of 5, 8 and 6 s, then sampling stopped for the
    re-measurement with the torch defaults (queued fourth, a 3 s trial) not measured: the YAML had no speedup. The
    defaults still run where the quickest trial and the smallest re-measurement fit; never in its place."""
    clock, b, cb, study, stopped = _stopping_study()
    queue = ((5.0, 25985.0, "dali-mixed"), (8.0, 21774.0, "dali-heuristic"), (6.0, 3146.0, "heuristic"), (3.0, 250.0, "defaults"), (6.0, 20000.0, None))
    for *_, role in queue[:4]:
        study.enqueue_trial({}, user_attrs={"role": role})
    clock.now += setup_s
    for seconds, value, role in queue:
        trial = study.ask()  # the oldest queued trial first, as Optuna runs them
        assert trial_attrs(trial).get("role") == role
        clock.now += seconds
        trial.set_user_attr("duration_s", seconds)
        study.tell(trial, value)
        cb(study, study.trials[trial.number])
        if stopped:
            break
    ran = [trial_attrs(t).get("role") for t in study.trials if t.state is optuna.trial.TrialState.COMPLETE]
    # the heuristic ran (the YAML's torch fallback), then the defaults only where they fit before the re-measurement
    assert ran == ["dali-mixed", "dali-heuristic", "heuristic", *(["defaults"] if measured else [])]
    assert b.confirm_fit(2, 1, cost=b.contender_cost(study, 2)) == (2, 1)  # the top two re-measured once, as planned


def test_the_defaults_are_priced_at_the_median_trial_not_the_quickest():
    """A trial that crashed at start-up took 0.5 s: priced at it, the defaults would take the re-measurement's time."""
    clock = FakeClock()
    b = TimeBudget(60, clock=clock)
    for seconds in (0.5, 8.0, 8.0):
        b.record_trial(seconds)
    clock.now += 34.0  # 34 + 8 (a trial) + 2 * 8 (the top two once) + 3 > 60; 34 + 0.5 + 16 + 3 fits
    assert not b.reference_fits(2, 1, contender_s=8.0)
    clock.now -= 2.0
    assert b.reference_fits(2, 1, contender_s=8.0)  # 32 + 8 + 16 + 3 = 59


@pytest.mark.parametrize("budget_s,trial_s", [(60, 4.0), (30, 2.5), (120, 7.0)])
@pytest.mark.slow
def test_a_run_under_budget_ends_within_ten_percent_of_it(tiny_dataset, workdir, monkeypatch, budget_s, trial_s):
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    seen: list[str] = []

    def rate(ld):  # fast enough that each loader's queue refills within a switch of the paired re-measurement
        return 100.0 * (100.0 + ld.batch_size + 10 * getattr(ld.torch, "num_workers", 0))

    def fake_run_trial(spec, **kw):
        start = clock.now
        clock.now += trial_s
        seen.append(spec.loader.describe())
        if spec.paired:  # the contenders in one process: built, then a window each a round, no round begun past its deadline
            loaders = (spec.loader, *spec.paired)
            rounds = []
            while len(rounds) < spec.max_rounds and clock.now + len(loaders) * spec.window_s <= start + spec.paired_s:
                clock.now += len(loaders) * spec.window_s
                rounds.append([rate(ld) for ld in loaders])
            return TrialResult(Outcome.COMPLETE, samples_per_s=rate(spec.loader), duration_s=clock.now - start,
                               extra={"paired": {"rounds": rounds, "steady_from": 0, "window_s": spec.window_s}})
        r = rate(spec.loader)
        return TrialResult(Outcome.COMPLETE, samples_per_s=r, spread=(r, r), windows=[r] * spec.windows, duration_s=trial_s)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    rc = main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--budget", str(budget_s), "--seed", "1", "--no-report", "--quiet"])
    assert rc == 0
    (summary,) = optuna.get_all_study_summaries("sqlite:///autotune.db")
    study = optuna.load_study(study_name=summary.study_name, storage="sqlite:///autotune.db")
    t = study.user_attrs["time"]
    elapsed = clock.now - 1000.0
    assert t["budget_s"] == budget_s
    assert elapsed <= budget_s * 1.10, (elapsed, t)
    assert elapsed >= budget_s * 0.6, (elapsed, t)  # the budget is used, not left idle
    assert len(study.trials) < 500  # the budget, not the trial cap, stopped the study
    assert t["stopped_sampling_after_trial"] == len(study.trials) - 1
    top, repeats = t["remeasured"]["top"], t["remeasured"]["repeats"]
    measured = [tr for tr in study.trials if trial_attrs(tr).get("outcome") != "repeat"]  # a repeat is told, not measured
    conf = study.user_attrs["confirmation"]
    if top > 1 and repeats:  # the contenders side by side in one process, for the rounds the planned time holds
        assert conf["attempted"] == 1 and len(conf["paired"]["rounds"]) >= 2, conf
        assert len(conf["candidates"]) == top and "in one fresh process" in conf["method"]
    else:
        assert conf["attempted"] == 0
    assert len(seen) == len(measured) + conf["attempted"]
    assert t["trials_measured"] == len(measured)
    assert set(t["spent_s"]) >= {"setup", "trials", "re-measurement"}
    # where the trials' seconds went: each measured trial's own, and the repeats told apart
    assert t["trials_s"]["measuring"] == pytest.approx(len(measured) * trial_s, abs=0.1), t["trials_s"]
    assert t["trials_s"]["told_trials"] == len(study.trials) - len(measured)


@pytest.mark.slow
def test_the_planned_measurement_is_what_the_trials_get(tiny_dataset, workdir, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    specs = []

    def fake_run_trial(spec, **kw):
        clock.now += 5.0
        specs.append((spec.window_s, spec.windows, kw["timeout_s"]))
        return TrialResult(Outcome.COMPLETE, samples_per_s=100.0, spread=(100.0, 100.0), duration_s=5.0)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--budget", "40", "--no-report", "--quiet"]) == 0
    assert {s[:2] for s in specs} == {(0.5, 3)}
    assert all(s[2] <= 20.0 for s in specs)  # a trial may not take more than half the budget


def test_a_budget_too_short_is_a_one_line_error(tiny_dataset, workdir, capsys):
    assert main(["run", "--dataset", str(tiny_dataset), "--budget", "3", "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--budget 3 is too short" in err[0] and "--budget 10" in err[0]
    assert main(["run", "--dataset", str(tiny_dataset), "--budget", "1e308", "--quiet"]) == 2  # ran for minutes, then printed 309 digits
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["autotune: error: --budget 1e+308 is more than a day; pass --budget 86400 or less (a few minutes usually settle it)"]


@pytest.mark.slow
def test_a_real_run_under_budget_says_where_the_time_went(tiny_dataset, workdir, capsys):
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--budget", "25", "--batch-size", "8", "--no-report", "--warmup-batches", "1"]) == 0
    err = capsys.readouterr().err
    assert "of the 25 s budget" in err and "trials" in err


@pytest.mark.slow
def test_the_report_says_how_the_budget_was_spent(tiny_dataset, workdir, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))

    def fake_run_trial(spec, **kw):
        clock.now += 3.0
        return TrialResult(Outcome.COMPLETE, samples_per_s=float(spec.loader.batch_size), spread=(1.0, 1.0), duration_s=3.0)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--budget", "30", "--quiet"]) == 0
    md = next((workdir / "reports").rglob("report.md")).read_text()
    line = next(ln for ln in md.splitlines() if "s budget" in ln)
    assert "of a 30 s budget" in line and "trials" in line and "setup" in line


@pytest.mark.slow
def test_a_re_measurement_that_no_longer_fits_is_skipped(tiny_dataset, workdir, monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    calls = []

    def fake_run_trial(spec, **kw):
        calls.append(spec.loader.describe())
        # trials are quick, but every re-measurement (after the first trials) takes far longer than planned
        clock.now += 3.0 if len(calls) <= 6 else 20.0
        return TrialResult(Outcome.COMPLETE, samples_per_s=float(100 + len(calls)), spread=(1.0, 1.0), duration_s=3.0)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    assert (
        main(
            [
                "run",
                "--dataset",
                str(tiny_dataset),
                "--space",
                "cpu",
                "--budget",
                "40",
                "--remeasure",
                "fresh",
                "--n-trials",
                "6",
                "--confirm-top",
                "3",
                "--confirm-repeats",
                "2",
                "--no-report",
                "--quiet",
            ]
        )
        == 0
    )
    elapsed = clock.now - 1000.0
    assert elapsed <= 40 * 1.10 + 20.0  # at most the one re-measurement that overran its plan
    study = optuna.load_study(study_name=optuna.get_all_study_summaries("sqlite:///autotune.db")[0].study_name, storage="sqlite:///autotune.db")
    conf = study.user_attrs["confirmation"]
    assert conf["attempted"] < 6 and "until the time budget ran out" in conf["method"]


def fake_trials(monkeypatch, trial_s: float = 3.0) -> FakeClock:
    """Runs without a measuring process: each trial takes ``trial_s`` on the returned clock and scores 100 + batch."""
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))

    def fake_run_trial(spec, **kw):
        clock.now += trial_s
        rate = 100.0 + spec.loader.batch_size
        return TrialResult(Outcome.COMPLETE, samples_per_s=rate, spread=(rate, rate), windows=[rate] * spec.windows, duration_s=trial_s)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    return clock


@pytest.mark.slow
def test_a_resumed_study_keeps_the_time_of_its_earlier_runs(tiny_dataset, workdir, monkeypatch):
    """The study attr ``time`` is the latest run's; a resumed study's says how many runs and their earlier seconds,
    and the report's time row names them (the trial table holds every run's trials)."""
    from autotune.report._render import facts

    fake_trials(monkeypatch)

    def run(budget: str, *extra: str) -> dict:
        assert (
            main(
                [
                    "run",
                    "--dataset",
                    str(tiny_dataset),
                    "--space",
                    "cpu",
                    "--budget",
                    budget,
                    "--seed",
                    "1",
                    "--no-report",
                    "--quiet",
                    "--study-name",
                    "thrice",
                    *extra,
                ]
            )
            == 0
        )
        study = optuna.load_study(study_name="thrice", storage="sqlite:///autotune.db")
        assert len(study.trials) < 100  # a small space, exhausted: not hundreds of repeats up to the trial cap
        return study.user_attrs["time"]

    first = run("30")
    assert "runs" not in first
    second = run("36", "--resume")
    assert second["runs"] == 2 and second["earlier_s"] == first["elapsed_s"]
    third = run("24", "--resume")  # budgets apart, so that each run's own time cannot pass for the earlier ones'
    assert third["runs"] == 3 and third["earlier_s"] == pytest.approx(first["elapsed_s"] + second["elapsed_s"], abs=0.11)
    base = {"dataset": {}, "hardware": {}, "measurement": {}, "budgets": {}, "study": "s", "storage": "sqlite:///x.db"}
    row = dict(facts({**base, "time": third}))["time"]
    assert f"the latest of 3 runs of this study, after {third['earlier_s']:.0f} s in the earlier ones" in row


def test_a_round_the_budget_cut_short_is_set_aside(tiny_dataset, workdir, monkeypatch):
    """On one H200: the leader (31,088) re-measured once at 17,169, the runner-up (26,455) not at all before the time
    ran out; the median of the leader's two lost to the runner-up's one. Like for like, the partial round is set aside."""
    from autotune.config.schema import LoaderConfig
    from autotune.study.evidence import confirmation_method
    from autotune.study.space import load_space
    from autotune.study.tuner import Tuner, TuneSettings

    tuner = Tuner(
        scan(tiny_dataset), load_space("cpu", cores=2), TuneSettings(cores=2, confirm_top=2, confirm_repeats=2, paired=False),
        storage="sqlite:///c.db", study_name="c"
    )
    for rate, workers in ((31088.0, 1), (26455.0, 2)):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": workers})
        tuner.study.add_trial(
            optuna.trial.create_trial(
                value=rate, user_attrs={"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "duration_s": 5.0}
            )
        )
    monkeypatch.setattr(Tuner, "measure", lambda self, loader, **kw: TrialResult(Outcome.COMPLETE, samples_per_s=17169.0, spread=(1.0, 1.0)))
    room = iter([True, True])  # the round seemed to fit, and its first re-measurement did (it took longer than its trial)
    record = tuner.confirm(fits=lambda s: next(room, False))
    assert record["winner_trial"] == 0 and record["set_aside"] == [{"trial": 0, "score": 17169.0}]
    assert [c["scores"] for c in record["candidates"]] == [[31088.0], [26455.0]]
    assert (
        confirmation_method(record)
        == record["method"]
        == ("best single trial: the time budget ended the one re-measurement round part-way, its 1 score set aside (like for like)")
    )
    failed_first = {**record, "repeats": 2, "attempted": 3}  # a whole round whose two re-measurements failed came first
    assert "failed" in confirmation_method(failed_first) and "the one re-measurement round" not in confirmation_method(failed_first)


def test_a_round_that_does_not_fit_is_not_begun(tiny_dataset, workdir, monkeypatch):
    """With 7 s left and two 5 s candidates, the round began, the second re-measurement did not fit, and the first
    one's 5 s went to a score set aside (a 40 s budget lost 9 s so)."""
    from autotune.config.schema import LoaderConfig
    from autotune.study.space import load_space
    from autotune.study.tuner import Tuner, TuneSettings

    tuner = Tuner(
        scan(tiny_dataset), load_space("cpu", cores=2), TuneSettings(cores=2, confirm_top=2, confirm_repeats=2, paired=False),
        storage="sqlite:///r.db", study_name="r"
    )
    for rate, workers in ((310.0, 1), (264.0, 2)):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": workers})
        tuner.study.add_trial(
            optuna.trial.create_trial(
                value=rate, user_attrs={"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "duration_s": 5.0}
            )
        )
    left = [7.0]

    def measure(self, loader, **kw):
        left[0] -= 5.0
        return TrialResult(Outcome.COMPLETE, samples_per_s=300.0, spread=(1.0, 1.0))

    monkeypatch.setattr(Tuner, "measure", measure)
    record = tuner.confirm(fits=lambda s: s <= left[0])
    assert record["attempted"] == 0 and "set_aside" not in record and left == [7.0]
    assert record["method"] == "best single trial (no re-measurement)"
    left[0] = 12.0  # a whole round fits, the second does not: one round, both candidates, nothing set aside
    record = tuner.confirm(fits=lambda s: s <= left[0])
    assert record["attempted"] == 2 and "set_aside" not in record and [len(c["scores"]) for c in record["candidates"]] == [2, 2]


@pytest.mark.slow
def test_a_slow_trial_ends_at_its_next_window_before_the_planned_re_measurement(tiny_dataset, workdir, monkeypatch):
    """Seen with --budget 30: three trials of 3 s, then one of 7 s took the time left, and the top two were not
    re-measured. The planned re-measurement's time is kept from the trials: the slow one ends at its next window."""
    from autotune.trials.runner import WindowVerdict

    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    trials: list[str] = []

    def fake_run_trial(spec, on_intermediate=None, timeout_s=120.0, **kw):
        trials.append(spec.loader.describe())
        slow = len(trials) == 4  # the fourth trial: windows of 6 s where the others take 1 s
        rate, start, seen = 100.0 + len(trials) % 3, clock.now, []
        for step in range(3):
            clock.now += 6.0 if slow else 1.0
            seen.append(rate)
            verdict = on_intermediate(step, rate) if on_intermediate is not None else WindowVerdict.GO_ON
            if verdict is WindowVerdict.ENOUGH:
                return TrialResult(
                    Outcome.COMPLETE,
                    samples_per_s=rate,
                    spread=(rate, rate),
                    windows=seen,
                    duration_s=clock.now - start,
                    message=f"measured {step + 1} window(s): the time budget ran out",
                )
            if verdict is WindowVerdict.PRUNE:
                return TrialResult(Outcome.PRUNED, samples_per_s=rate, duration_s=clock.now - start)
        return TrialResult(Outcome.COMPLETE, samples_per_s=rate, spread=(rate, rate), windows=seen, duration_s=clock.now - start)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    assert (
        main(
            [
                "run",
                "--dataset",
                str(tiny_dataset),
                "--space",
                "cpu",
                "--budget",
                "30",
                "--remeasure",
                "fresh",
                "--seed",
                "1",
                "--no-baselines",
                "--pruner",
                "none",
                "--no-report",
                "--quiet",
            ]
        )
        == 0
    )
    study = optuna.load_study(study_name=optuna.get_all_study_summaries("sqlite:///autotune.db")[0].study_name, storage="sqlite:///autotune.db")
    (slow,) = [t for t in study.trials if trial_attrs(t).get("duration_s") == 12.0]  # the fourth measured (a repeat is told, not run)
    assert trial_attrs(slow)["message"] == "measured 2 window(s): the time budget ran out", trial_attrs(slow)
    assert study.user_attrs["time"]["remeasured"] == {"top": 2, "repeats": 1, "contenders": 2}, study.user_attrs["time"]
    assert study.user_attrs["confirmation"]["attempted"] == 2
    assert clock.now - 1000.0 <= 30.0


@pytest.mark.slow
def test_issue_42_item_7_a_slow_starter_is_cut_where_the_re_measurement_begins(tiny_dataset, workdir, monkeypatch):
    """Issue 42, item 7: a 60 s demo's last trial (a slow starter, no window yet) ran until the budget's end,
    "interrupted: the time budget ran out 21 s into the trial", then "re-measurement 0 s", and the winner was picked on
    single readings. A trial is cut where the planned re-measurement's time begins: that time is never a trial's."""
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    calls: list[float | None] = []  # each measurement's time limit (the re-measurements' too)

    def fake_run_trial(spec, on_intermediate=None, timeout_s=120.0, **kw):
        calls.append(timeout_s)
        start = clock.now
        if len(calls) == 4:  # the fourth trial starts slowly: no window comes before its limit
            clock.now += timeout_s
            return TrialResult(Outcome.TIMEOUT, message="no result", duration_s=timeout_s)
        rate = 100.0 + len(calls) % 3
        clock.now += 3.0
        return TrialResult(Outcome.COMPLETE, samples_per_s=rate, spread=(rate, rate), windows=[rate] * 3, duration_s=clock.now - start)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    argv = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--budget", "30", "--seed", "1", "--no-baselines", "--pruner", "none",
            "--remeasure", "fresh", "--no-report", "--quiet"]
    assert main(argv) == 0
    study = optuna.load_study(study_name=optuna.get_all_study_summaries("sqlite:///autotune.db")[0].study_name, storage="sqlite:///autotune.db")
    assert study.user_attrs["time"]["remeasured"] == {"top": 2, "repeats": 1, "contenders": 2}, study.user_attrs["time"]
    (slow,) = [t for t in study.trials if trial_attrs(t).get("outcome") == Outcome.INTERRUPTED.value]
    assert "the time budget ran out" in trial_attrs(slow)["message"], trial_attrs(slow)
    # three trials of 3 s: 9 s spent; the top two re-measured once is planned at 2 x 3 s x 1.25, the YAML's writing 3 s
    assert calls[3] == pytest.approx(30 - 9 - 2 * 3 * budget_mod.REMEASURE_MARGIN - WRITE_RESERVE_S)
    conf = study.user_attrs["confirmation"]
    assert conf["attempted"] == 2 and all(len(c["scores"]) == 2 for c in conf["candidates"]), conf
    assert clock.now - 1000.0 <= 30.0


def test_a_trial_cut_at_the_budgets_end_leaves_the_yaml_and_the_exit_two_seconds(tiny_dataset, workdir, monkeypatch):
    """No re-measurement planned: a slow trial ran until the budget's very end, and on the H200 under a 4-CPU quota the
    command exited 0.6 s past its 60 s. A trial is cut 2 s before the budget ends."""
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    calls: list[float | None] = []

    def fake_run_trial(spec, on_intermediate=None, timeout_s=120.0, **kw):
        calls.append(timeout_s)
        if timeout_s is not None and timeout_s < 15.0:  # cut by the budget: a slow starter, no window before its limit
            clock.now += timeout_s
            return TrialResult(Outcome.TIMEOUT, message="no result", duration_s=timeout_s)
        clock.now += 3.0
        return TrialResult(Outcome.COMPLETE, samples_per_s=100.0, spread=(100.0, 100.0), windows=[100.0] * 3, duration_s=3.0)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    start = clock.now
    argv = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--budget", "30", "--seed", "1", "--no-baselines", "--pruner", "none",
            "--confirm-top", "0", "--no-report", "--quiet"]
    assert main(argv) == 0
    assert calls[-1] is not None and calls[-1] < 15.0, calls  # the last trial was cut by the budget
    assert clock.now - start == pytest.approx(30 - 2.0), calls  # where it was cut: 2 s before the end


def test_the_trials_seconds_are_told_apart_measuring_around_and_told():
    """Where the trials stage's time went: a 60 s H200 run's trials took 42 s, their measurements 36 s, and nothing
    said where the rest went. A trial asked for ahead starts where the one before it ended (not counted twice), a
    told one is apart, and another process's trials are not this run's."""
    import datetime

    from autotune.study.budget import trial_account

    t0 = datetime.datetime(2026, 12, 5, 12, 0, 0)

    def trial(start: float, end: float, result: dict, owner: str = "me:1") -> optuna.trial.FrozenTrial:
        t = optuna.trial.create_trial(state=optuna.trial.TrialState.COMPLETE, value=1.0, user_attrs={"owner": owner, "result": result})
        t.datetime_start, t.datetime_complete = t0 + datetime.timedelta(seconds=start), t0 + datetime.timedelta(seconds=end)
        return t

    trials = [
        trial(0.0, 5.0, {"outcome": "complete", "duration_s": 3.0}),  # waited 2 s for the measuring process
        trial(4.0, 7.5, {"outcome": "complete", "duration_s": 2.3}),  # asked for ahead at 4 s: its own time from 5 s
        trial(4.5, 4.6, {"outcome": Outcome.DOMINATED.value}),  # told while the first measured: no end for the next one's start
        trial(7.8, 7.9, {"outcome": "repeat"}),
        trial(1.0, 30.0, {"outcome": "complete", "duration_s": 20.0}, owner="other:2"),
    ]
    assert trial_account(trials, "me:1") == {"measuring": 5.3, "around": 2.2, "told": 0.2, "told_trials": 2, "first_wait": 2.0}
    # a resumed study: the trials of an earlier run (by the same host:pid in a container) are not this run's
    earlier = trial(-100.0, -90.0, {"outcome": "complete", "duration_s": 9.0})
    assert trial_account([earlier, *trials], "me:1", since=t0)["measuring"] == 5.3
    assert trial_account([], "me:1") == {"measuring": 0.0, "around": 0.0, "told": 0.0, "told_trials": 0}
