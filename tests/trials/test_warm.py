"""Warm trial processes (autotune.trials.warm): a kind that allows it measures its configs one after another in one
process during the search; failures end the process, the re-measurement is always fresh, and the budget prices a
fresh re-measurement with the start-up a warm trial saved."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import optuna
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.budget import TimeBudget, fresh_duration
from autotune.study.settings import TuneSettings
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner
from autotune.trials.runner import WindowVerdict, run_trial
from autotune.trials.spec import TrialSpec
from autotune.trials.warm import WarmPool, reuse_key

pytest.importorskip("nvidia.dali")

DALI_CPU = {"backend": {"choices": ["dali"]}, "batch_size": {"choices": [8]}, "dali_device": {"choices": ["cpu"]},
            "num_threads": {"int": [1, 2]}, "prefetch_queue_depth": {"choices": [1, 2]}}


def _dali(threads: int, queue: int = 2) -> LoaderConfig:
    return LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": threads, "prefetch_queue_depth": queue})


def _spec(dataset, loader: LoaderConfig, log: Path) -> TrialSpec:
    return TrialSpec(dataset=dataset, loader=loader, pipeline="imagenet-eval", device="cpu", warmup_batches=1, window_s=0.2, windows=2, log=str(log))


def _pid(log: Path) -> int:
    m = re.search(r"trial process (\d+)", log.read_text())
    assert m, log.read_text()
    return int(m.group(1))


def test_only_a_kind_that_reuses_its_process_single_rank_and_without_a_fault_gets_a_key(tiny_dataset) -> None:
    ds = scan(tiny_dataset)
    assert reuse_key(_spec(ds, _dali(1), Path("x"))) == ("dali", "cpu")
    torch_spec = _spec(ds, LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), Path("x"))
    assert reuse_key(torch_spec) is None
    spec = _spec(ds, _dali(1), Path("x"))
    spec.inject = "crash"
    assert reuse_key(spec) is None
    spec = _spec(ds, _dali(1), Path("x"))
    spec.ranks = 2
    assert reuse_key(spec) is None
    # the paired re-measurement of one kind may take that kind's process; one beside another kind's loader may not
    assert reuse_key(dataclasses.replace(_spec(ds, _dali(1), Path("x")), paired=(_dali(2),))) == ("dali", "cpu")
    assert reuse_key(dataclasses.replace(_spec(ds, _dali(1), Path("x")), paired=(torch_spec.loader,))) is None


class _Idle:
    """A kept process as the pool sees it (idle, or taken again for a trial)."""

    key = ("dali", "cpu")

    def __init__(self) -> None:
        self.ended = False

    def alive(self) -> bool:
        return not self.ended

    def end(self) -> None:
        self.ended = True


def test_the_pool_keeps_per_kind_idle_processes_the_newest_taken_first_and_ends_the_oldest_beyond() -> None:
    a, b, c = _Idle(), _Idle(), _Idle()
    pool = WarmPool(per_kind=2)  # where trials are built ahead: one measures while the other builds
    assert pool.live(_Idle.key) == 0
    pool.give(a)
    pool.give(b)
    assert not a.ended and not b.ended and pool.live(_Idle.key) == 2
    pool.give(c)
    assert a.ended and not b.ended and not c.ended
    assert pool.take(_Idle.key) is c and pool.take(_Idle.key) is b and pool.take(_Idle.key) is None
    assert pool.live(_Idle.key) == 2, "taken, they still run"
    c.ended = True  # a trial failed in it, which ends its process
    assert pool.live(_Idle.key) == 1
    pool.give(b)
    h, i = _Idle(), _Idle()
    pool.give(h)
    i.ended = True
    pool._idle[_Idle.key].insert(0, i)  # an idle one that died as it waited
    pool.give(b)  # b given again: the dead one goes, the live one stays
    assert pool.take(_Idle.key) is b and pool.take(_Idle.key) is h and not h.ended
    pool.close()
    assert pool.live(_Idle.key) == 0
    one = WarmPool()
    d, e = _Idle(), _Idle()
    one.give(d)
    one.give(e)
    assert d.ended and one.take(_Idle.key) is e
    f, g = _Idle(), _Idle()
    pool.give(f)
    pool.give(g)
    g.ended = True  # died as it waited: cleaned up, and the one before it is taken
    assert pool.take(_Idle.key) is f


def test_a_warm_process_measures_the_next_config_and_each_trial_writes_its_own_log(tiny_dataset, tmp_path) -> None:
    ds = scan(tiny_dataset)
    pool = WarmPool()
    try:
        first = run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool)
        # pruned after its first window: the process stops at the tuner's word and is kept all the same
        pruned = run_trial(_spec(ds, _dali(2), tmp_path / "1.log"), timeout_s=60, warm=pool,
                           on_intermediate=lambda step, value: WindowVerdict.PRUNE)
        third = run_trial(_spec(ds, _dali(2, 1), tmp_path / "2.log"), timeout_s=60, warm=pool)
    finally:
        pool.close()
    assert (first.outcome, pruned.outcome, third.outcome) == (Outcome.COMPLETE, Outcome.PRUNED, Outcome.COMPLETE)
    assert "warm_process" not in first.extra
    assert third.extra["warm_process"] == 3 and third.extra["saved_s"] > 0  # a fresh interpreter's imports, not paid again
    assert _pid(tmp_path / "0.log") == _pid(tmp_path / "1.log") == _pid(tmp_path / "2.log")
    assert "threads=2 queue=1" in (tmp_path / "2.log").read_text() and "threads=2 queue=1" not in (tmp_path / "0.log").read_text()
    assert "measured in the process of an earlier trial" in (tmp_path / "2.log").read_text()
    assert pool.reused == 2


def test_a_failed_trial_ends_its_process_and_a_dead_warm_process_is_not_used(tiny_dataset, tmp_path) -> None:
    import os
    import signal

    ds = scan(tiny_dataset)
    pool = WarmPool()
    try:
        run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool)
        os.kill(_pid(tmp_path / "0.log"), signal.SIGKILL)  # the kept process dies while it waits
        after_death = run_trial(_spec(ds, _dali(1), tmp_path / "1.log"), timeout_s=60, warm=pool)
        timed_out = run_trial(_spec(ds, _dali(2), tmp_path / "2.log"), timeout_s=0.05, warm=pool)
        after_timeout = run_trial(_spec(ds, _dali(1), tmp_path / "3.log"), timeout_s=60, warm=pool)
    finally:
        pool.close()
    assert after_death.outcome is Outcome.COMPLETE and "warm_process" not in after_death.extra
    assert _pid(tmp_path / "1.log") != _pid(tmp_path / "0.log")
    assert timed_out.outcome is Outcome.TIMEOUT
    assert after_timeout.outcome is Outcome.COMPLETE and "warm_process" not in after_timeout.extra
    assert _pid(tmp_path / "3.log") not in (_pid(tmp_path / "0.log"), _pid(tmp_path / "1.log"))


def _warm_search(tiny_dataset, tmp_path, monkeypatch, paired: bool) -> tuple[Tuner, list, set[int]]:
    """A search of DALI CPU configs, its trials spawned, as `autotune run` calls it; its measured trials and their pids."""
    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())
    settings = TuneSettings(cache="none", cores=2, window_s=0.2, windows=2, warmup_batches=1, n_trials=4, pruner="none", baselines=False,
                            confirm_top=2, confirm_repeats=1, sampler="random", seed=0, log_dir=str(tmp_path / "logs"), pipeline="imagenet-eval",
                            fork_trials=False, paired=paired)  # spawned trials: nothing but the tuner ends a warm one
    tuner = Tuner(scan(tiny_dataset), parse_space({"params": DALI_CPU}, cores=2), settings, storage="memory", study_name="warm")
    tuner.optimize(keep_warm=True)  # as `autotune run` calls it: the zygote and the idle process stay for the re-measurement
    measured = [t for t in tuner.study.trials if t.user_attrs.get("log") and "result" in t.user_attrs and "repeat_of" not in t.user_attrs["result"]]
    return tuner, measured, {_pid(Path(t.user_attrs["log"])) for t in measured}


def _running(pids: set[int]) -> bool:
    import psutil

    return any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in map(_process, pids))


@pytest.mark.slow
def test_the_search_reuses_a_process_and_the_paired_re_measurement_takes_it(tiny_dataset, tmp_path, monkeypatch) -> None:
    tuner, measured, pids = _warm_search(tiny_dataset, tmp_path, monkeypatch, paired=True)
    try:
        assert len(measured) >= 2 and len(pids) == 1, "the search's trials shared one process"
        assert tuner.study.user_attrs["warm_processes"]["trials"] == len(measured) - 1
        assert _running(pids), "the idle process stays for the paired re-measurement"
        record = tuner.confirm()
    finally:
        tuner.close()
    assert record["paired"]["warm_process"] == len(measured), record  # the process that measured every trial before it
    assert record["method"].startswith("top 2 re-measured together in the search's process of their kind"), record["method"]
    log = next((tmp_path / "logs").rglob("*remeasure-paired*"))
    assert _pid(log) in pids and "earlier trial" in log.read_text(), "the contenders were measured side by side in the search's process"
    assert not _running(pids), "no warm process outlives the re-measurement"


@pytest.mark.slow
def test_fresh_re_measurements_start_fresh_processes_beside_none_kept(tiny_dataset, tmp_path, monkeypatch) -> None:
    tuner, measured, pids = _warm_search(tiny_dataset, tmp_path, monkeypatch, paired=False)
    try:
        assert len(measured) >= 2 and len(pids) == 1, "the search's trials shared one process"
        seen_running: list[bool] = []
        measure = tuner.measure

        def spy(*a, **k):  # each fresh re-measurement begins with the search's process gone
            seen_running.append(_running(pids))
            return measure(*a, **k)

        monkeypatch.setattr(tuner, "measure", spy)
        tuner.confirm()
    finally:
        tuner.close()
    from autotune.config.schema import Config
    from autotune.study.result import figures
    from autotune.tuning.write import result_lines

    assert seen_running and not any(seen_running)
    best = max((t for t in tuner.study.trials if t.value is not None), key=lambda t: t.value)
    cfg = Config(loader=LoaderConfig.from_params(best.user_attrs["loader"]), result=figures(tuner.study))
    summary = {"time": {"elapsed_s": 30.0, "budget_s": 60.0, "spent_s": {"trials": 20.0}}}
    took = result_lines(cfg, tuner.study, Path("autotune.yaml"), None, summary, TimeBudget(60.0))[-1]
    n = len(measured) - 1
    assert re.fullmatch(rf"took 30 s of the 60 s budget: trials 20 s \({n} trials? in a warm process saved \d+ s of start-up\)", took), took
    logs = sorted((tmp_path / "logs").rglob("*.log"))
    remeasured = [p for p in logs if "remeasure" in p.name or "-r" in p.stem]
    assert remeasured, [p.name for p in logs]
    assert all(_pid(p) not in pids and "earlier trial" not in p.read_text() for p in remeasured)


def _process(pid: int):
    import psutil

    try:
        return psutil.Process(pid)
    except psutil.NoSuchProcess:
        return _Gone()


class _Gone:
    def is_running(self) -> bool:
        return False

    def status(self) -> str:
        return "gone"


def test_a_warm_trial_is_priced_for_the_re_measurement_as_a_fresh_process_takes_it() -> None:
    assert fresh_duration({"duration_s": 1.5, "saved_s": 3.0}) == 4.5
    assert fresh_duration({"duration_s": 4.5}) == 4.5
    study = optuna.create_study(direction="maximize")
    for value, duration, saved in ((100.0, 4.5, None), (99.0, 1.5, 3.0)):
        result = {"duration_s": duration, **({"saved_s": saved} if saved is not None else {})}
        study.add_trial(optuna.trial.create_trial(value=value, user_attrs={"result": result}))
    budget = TimeBudget(60.0, clock=lambda: 0.0)
    budget.record_trial(4.5)
    budget.record_trial(1.5)
    assert budget.contender_cost(study, 2) == pytest.approx(4.5)  # not (4.5 + 1.5) / 2: both start fresh when re-measured
