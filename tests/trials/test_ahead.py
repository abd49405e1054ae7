"""The next trial built while one measures (autotune.trials.ahead): it waits for its turn, is measured from then and
says what it hid; one never measured leaves its process to the next trial of its kind, or ends it where the search
ends; the search leaves no trial running."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import optuna
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.budget import TimeBudget
from autotune.study.settings import TuneSettings
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner
from autotune.trials.ahead import build_ahead, halved
from autotune.trials.guard import Budgets
from autotune.trials.runner import run_trial
from autotune.trials.spec import TrialSpec
from autotune.trials.warm import WarmPool, reuse_key
from tests.trials.test_warm import _Idle

pytest.importorskip("nvidia.dali")

DALI_CPU = {"backend": {"choices": ["dali"]}, "batch_size": {"choices": [8]}, "dali_device": {"choices": ["cpu"]},
            "num_threads": {"int": [1, 2]}, "prefetch_queue_depth": {"choices": [1, 2, 3]}}


def _dali(threads: int, queue: int = 2) -> LoaderConfig:
    return LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": threads, "prefetch_queue_depth": queue})


def _spec(dataset, loader: LoaderConfig, log: Path) -> TrialSpec:
    return TrialSpec(dataset=dataset, loader=loader, pipeline="imagenet-eval", device="cpu", warmup_batches=1, window_s=0.2, windows=2, log=str(log))


def _pid(log: Path, wait_s: float = 30.0) -> int:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        m = re.search(r"trial process (\d+)", log.read_text()) if log.exists() else None
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError(f"no trial process in {log}")


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_a_trial_built_ahead_waits_for_its_turn_and_is_measured_in_that_process(tiny_dataset, tmp_path) -> None:
    ds = scan(tiny_dataset)
    pool = WarmPool()
    try:
        ahead = dataclasses.replace(_spec(ds, _dali(2, 1), tmp_path / "1.log"), signal=str(tmp_path / "built"))
        assert build_ahead(ahead, warm=pool, zygote=None)
        held = _pid(tmp_path / "1.log")
        first = run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool)  # measured meanwhile, in another process
        deadline = time.monotonic() + 60
        while not (tmp_path / "built").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (tmp_path / "built").exists(), "its build ended, and it said so to the trial beside it"
        assert "complete" not in (tmp_path / "1.log").read_text(), "a trial built ahead measures nothing before its turn"
        assert pool.holds() is ahead
        second = run_trial(ahead, timeout_s=60, warm=pool)
    finally:
        pool.close()
    assert first.outcome is Outcome.COMPLETE and second.outcome is Outcome.COMPLETE
    assert _pid(tmp_path / "0.log") != held and _pid(tmp_path / "1.log") == held
    assert second.extra["built_ahead_s"] > 0
    # where a trial's time goes, for the time budget's account: the build (inside the start-up), the teardown, and a
    # kept process's giving back of the loader's memory
    assert 0 <= second.extra["build_s"] <= second.startup_s and second.extra["close_s"] >= 0 and second.extra["release_s"] >= 0
    assert second.extra["saved_s"] >= round(second.extra["built_ahead_s"], 2)  # a fresh re-measurement pays what was hidden
    assert pool.summary()["built_ahead"]["trials"] == 1
    assert pool.holds() is None


def test_a_trial_is_built_ahead_in_a_fresh_process_only_while_the_pool_has_fewer_than_it_keeps(tiny_dataset, tmp_path) -> None:
    """A fresh process's set-up beside a warm trial made that trial's windows wait 2.4-2.8 s on an H100."""
    ds = scan(tiny_dataset)
    pool = WarmPool(per_kind=2)
    a, b = _Idle(), _Idle()
    pool.give(a)  # the pool reads only key, alive() and end()
    pool.give(b)
    pool.take(_Idle.key)
    pool.take(_Idle.key)  # both measuring or building
    ahead = _spec(ds, _dali(2, 1), tmp_path / "1.log")
    try:
        assert not build_ahead(ahead, warm=pool, zygote=None), "no fresh process beside a warm trial"
        assert pool.holds() is None and not (tmp_path / "1.log").exists()
        b.ended = True  # a trial failed in it, which ended its process: one fresh process makes the pair again
        assert build_ahead(ahead, warm=pool, zygote=None)
        assert _pid(tmp_path / "1.log")
    finally:
        pool.close()


def test_a_trial_is_built_ahead_in_the_idle_warm_process_of_its_kind(tiny_dataset, tmp_path) -> None:
    ds = scan(tiny_dataset)
    pool = WarmPool(per_kind=2)
    try:
        assert run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool).outcome is Outcome.COMPLETE
        assert build_ahead(_spec(ds, _dali(2, 1), tmp_path / "1.log"), warm=pool, zygote=None)
        assert _pid(tmp_path / "1.log") == _pid(tmp_path / "0.log"), "built in the idle warm process"
    finally:
        pool.close()


def test_a_trial_built_ahead_and_never_measured_is_dropped_with_its_process(tiny_dataset, tmp_path) -> None:
    ds = scan(tiny_dataset)
    pool = WarmPool()
    spec = _spec(ds, _dali(1), tmp_path / "0.log")
    assert build_ahead(spec, warm=pool, zygote=None)
    pid = _pid(tmp_path / "0.log")
    other = _spec(ds, _dali(2), tmp_path / "1.log")
    assert pool.claim(other) is None  # held for its own trial only
    fewer = scan(tiny_dataset)  # the same files, but another dataset object: one left out as undecodable makes a new one
    assert pool.claim(_spec(fewer, _dali(1), tmp_path / "0.log")) is None
    assert pool.holds() is spec
    pool.close()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    assert pool.holds() is None


def _built(flag: Path, wait_s: float = 60.0) -> None:
    deadline = time.monotonic() + wait_s
    while not flag.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert flag.exists(), "its build ended"


def test_a_trial_built_ahead_and_dropped_leaves_its_process_to_the_next_trial_of_its_kind(tiny_dataset, tmp_path) -> None:
    """Ended instead, a later build needed a fresh process, whose set-up made the trial beside it wait about 3 s on an H100."""
    ds = scan(tiny_dataset)
    pool = WarmPool(per_kind=2)
    ahead = dataclasses.replace(_spec(ds, _dali(2, 1), tmp_path / "0.log"), signal=str(tmp_path / "built"))
    key = reuse_key(ahead)
    assert key is not None
    try:
        assert build_ahead(ahead, warm=pool, zygote=None)
        pid = _pid(tmp_path / "0.log")
        _built(tmp_path / "built")
        pool.drop_ahead()  # its config turned out not worth measuring
        assert pool.holds() is None and _alive(pid) and pool.idle(key) and pool.live(key) == 1
        assert "the process waits for the next trial of its kind" in (tmp_path / "0.log").read_text()
        later = run_trial(_spec(ds, _dali(1), tmp_path / "1.log"), timeout_s=60, warm=pool)
    finally:
        pool.close()
    assert later.outcome is Outcome.COMPLETE
    assert _pid(tmp_path / "1.log") == pid and "measured in the process of an earlier trial" in (tmp_path / "1.log").read_text()
    assert later.extra["warm_process"] == 1 and later.extra["saved_s"] > 0  # the set-up it did not pay again
    assert "complete" not in (tmp_path / "0.log").read_text(), "the dropped trial measured nothing"


def test_a_trial_built_ahead_and_dropped_before_its_build_ends_is_ended(tiny_dataset, tmp_path, monkeypatch) -> None:
    import autotune.trials.warm as warm_module

    monkeypatch.setattr(warm_module, "DROP_WAIT_S", 0.0)  # nothing is waited for
    ds = scan(tiny_dataset)
    pool = WarmPool(per_kind=2)
    ahead = _spec(ds, _dali(2, 1), tmp_path / "0.log")
    key = reuse_key(ahead)
    assert key is not None
    try:
        assert build_ahead(ahead, warm=pool, zygote=None)
        pid = _pid(tmp_path / "0.log")
        pool.drop_ahead()
        assert not pool.idle(key)
    finally:
        pool.close()
    deadline = time.monotonic() + 10
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)


def test_a_torch_dataloader_is_not_built_ahead(tiny_dataset, tmp_path) -> None:
    ds = scan(tiny_dataset)
    pool = WarmPool()
    torch_spec = _spec(ds, LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1}), tmp_path / "0.log")
    assert not build_ahead(torch_spec, warm=pool, zygote=None)  # its workers would load beside the trial measured
    assert pool.holds() is None


def test_what_a_trial_waited_for_the_build_beside_it_is_neither_hidden_nor_priced_into_a_re_measurement() -> None:
    from autotune.study.evidence import fresh_duration

    pool = WarmPool()
    pool.note_waited(0.5)  # trial 0's windows waited half a second for trial 1's build ...
    pool.note_ahead(2.0)  # ... which took 2 s from trial 0's start
    assert pool.summary()["built_ahead"] == {"trials": 1, "hidden_s": 1.5}
    assert fresh_duration({"duration_s": 4.0, "saved_s": 1.0, "beside_wait_s": 0.5}) == 4.5


def test_two_trials_at_once_are_held_to_half_of_each_memory_budget() -> None:
    b = halved(Budgets(host_mib=1000.0, gpu_mib=None, shm_mib=64.0, reserve_gpu_mib=10.0))
    assert (b.host_mib, b.gpu_mib, b.shm_mib, b.reserve_gpu_mib) == (500.0, None, 32.0, 10.0)


def test_the_budget_builds_ahead_only_while_two_more_trials_fit() -> None:
    now = [0.0]
    budget = TimeBudget(60.0, clock=lambda: now[0])
    assert budget.ahead_fits()  # no trial priced yet
    budget.record_trial(10.0)
    now[0] = 30.0
    assert budget.ahead_fits()  # 30 + 2 x 10 + 3 <= 60
    budget.reserved_s = 10.0
    assert not budget.ahead_fits()  # the re-measurement's time is never a trial's


def _tuner(tiny_dataset, tmp_path, monkeypatch, **kw) -> Tuner:
    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())
    kw.setdefault("log_dir", str(tmp_path / "logs"))
    settings = TuneSettings(cache="none", cores=2, window_s=0.2, windows=2, warmup_batches=1, pruner="none", baselines=False, confirm_top=2,
                            confirm_repeats=1, sampler="random", seed=0, pipeline="imagenet-eval", fork_trials=False, build_ahead=True, **kw)
    return Tuner(scan(tiny_dataset), parse_space({"params": DALI_CPU}, cores=2), settings, storage="memory", study_name="ahead")


def _result(t: optuna.trial.FrozenTrial) -> dict:
    return t.user_attrs.get("result") or {}


@pytest.mark.parametrize("logs", [True, False], ids=["trial-logs", "no-logs"])
def test_the_search_measures_trials_built_ahead_and_leaves_none_running(tiny_dataset, tmp_path, monkeypatch, logs) -> None:
    tuner = _tuner(tiny_dataset, tmp_path, monkeypatch, n_trials=4, **({} if logs else {"log_dir": None}))
    try:
        tuner.optimize()
    finally:
        tuner.close()
    trials = tuner.study.trials
    assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL)]
    measured = [t for t in trials if "repeat_of" not in _result(t)]
    assert len(measured) == 4, "n_trials is kept: the last trial asks for none ahead"
    ahead = [t for t in measured if _result(t).get("built_ahead_s")]
    # the second beside the first, both fresh; a later one in the idle warm process while another measures in the other
    assert len(ahead) == 2 and _result(ahead[1]).get("warm_process"), [_result(t) for t in trials]
    assert tuner.study.user_attrs["warm_processes"]["built_ahead"]["trials"] == len(ahead)
    for before, built in zip(measured, measured[1:], strict=False):
        if _result(built).get("built_ahead_s"):
            # built while the trial before it built, whose windows waited for that build; nothing was built beside it
            assert "beside_wait_s" in _result(before) and not _result(before).get("built_ahead_s")


def test_a_trial_times_no_window_before_the_build_beside_it_ends(tiny_dataset, tmp_path) -> None:
    import threading

    ds = scan(tiny_dataset)
    flags: list[str] = []
    signalled: list[float] = []

    def beside(flag: str) -> bool:  # a build beside the trial that ends a second after it began
        flags.append(flag)

        def end() -> None:
            time.sleep(2.0)
            signalled.append(time.time())
            Path(flag).touch()

        threading.Thread(target=end, daemon=True).start()
        return True

    pool = WarmPool()
    try:
        waited = run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool, after_begin=beside)
        alone = run_trial(_spec(ds, _dali(2), tmp_path / "1.log"), timeout_s=60, warm=pool, after_begin=lambda flag: False)
    finally:
        pool.close()
    assert waited.outcome is Outcome.COMPLETE and alone.outcome is Outcome.COMPLETE
    assert waited.extra["beside_ready_at"] >= signalled[0], "its warm-up and windows began after the build beside it ended"
    assert "beside_wait_s" in alone.extra  # nothing built beside it: the runner lets its windows begin
    assert not Path(flags[0]).parent.exists(), "the flag's folder goes with the trial"


def test_a_trial_asked_for_ahead_when_the_search_stops_is_failed_not_left_running(tiny_dataset, tmp_path, monkeypatch) -> None:
    tuner = _tuner(tiny_dataset, tmp_path, monkeypatch, n_trials=10)

    def stop_after_first(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        study.stop()

    try:
        tuner.optimize(callbacks=[stop_after_first])
    finally:
        tuner.close()
    trials = tuner.study.trials
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert _result(trials[1])["outcome"] == Outcome.INTERRUPTED.value
    assert "ended before it was measured" in _result(trials[1])["message"]
    assert trials[1].user_attrs["config"].startswith("dali-cpu")
    assert tuner.study.user_attrs.get("warm_processes", {}).get("built_ahead") is None


def test_a_queued_dali_start_is_built_ahead_but_the_reference_keeps_its_place(tiny_dataset, tmp_path, monkeypatch) -> None:
    from autotune.study.evidence import trial_attrs

    tuner = _tuner(tiny_dataset, tmp_path, monkeypatch, n_trials=6)
    tuner._searching = True
    torch_loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1})
    assert tuner._may_build_ahead(_dali(1)) and not tuner._may_build_ahead(torch_loader)  # nothing is built beside a torch trial
    tuner._searching = False
    for threads, queue, role in ((1, 1, "dali-mixed"), (2, 2, "dali-heuristic"), (2, 3, "warm-start")):
        tuner._enqueue(_dali(threads, queue).to_params(), role)
    tuner._enqueue({"backend": "torch", "batch_size": 8, "num_workers": 0}, "defaults")  # the speedup's reference
    try:
        tuner.optimize()
    finally:
        tuner.close()
    trials = tuner.study.trials
    assert [trial_attrs(t).get("role") for t in trials[:4]] == ["dali-mixed", "dali-heuristic", "warm-start", "defaults"]
    ahead = [bool(_result(t).get("built_ahead_s")) for t in trials]
    assert ahead[:4] == [False, True, False, False]  # 1: built during 0; 2: the reference came next after it, so not asked
    assert any(ahead[4:]), "a sampled trial is built during a DALI trial"
    assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL)]


def test_the_config_being_measured_is_not_built_again_and_a_failed_build_fails_no_trial(tiny_dataset, tmp_path, monkeypatch) -> None:
    tuner = _tuner(tiny_dataset, tmp_path, monkeypatch, n_trials=4)
    current = _dali(2, 3)
    monkeypatch.setattr(tuner, "_loader_of", lambda trial: current)
    tuner._searching = True
    try:
        tuner._build_next(current)
        assert tuner._asked is not None and tuner._warm is not None and tuner._warm.holds() is None
    finally:
        tuner._searching = False
        tuner._unasked()
        tuner.close()

    tuner = _tuner(tiny_dataset, tmp_path, monkeypatch, n_trials=3)

    def broken(*args, **kwargs):
        raise OSError("fork failed")

    monkeypatch.setattr("autotune.study.tuner.build_ahead", broken)
    try:
        tuner.optimize()
    finally:
        tuner.close()
    states = [t.state for t in tuner.study.trials]
    assert len(states) >= 3 and set(states) == {optuna.trial.TrialState.COMPLETE}, states


class _DiesInItsBuild:
    """A held trial's process that ends without creating its signal, as one killed by a native crash in its build."""

    def __init__(self) -> None:
        import subprocess
        import sys

        self.proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])

    def end(self, *_: object) -> None:
        self.proc.wait()


def test_a_build_beside_that_dies_without_its_signal_is_not_waited_out(tiny_dataset, tmp_path) -> None:
    """A held process killed natively in its build created no signal: the trial beside it waited its whole 10 s."""
    from autotune.trials.one_rank import BESIDE_WAIT_S
    from autotune.trials.warm import BuiltAhead

    ds = scan(tiny_dataset)
    pool = WarmPool()

    def beside(flag: str) -> bool:
        pool.hold(BuiltAhead(_spec(ds, _dali(2), tmp_path / "1.log"), _DiesInItsBuild()))
        return True

    try:
        result = run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool, after_begin=beside)
    finally:
        pool.close()
    assert result.outcome is Outcome.COMPLETE
    assert result.extra["beside_wait_s"] < BESIDE_WAIT_S / 2, result.extra


@pytest.mark.slow
def test_a_trial_pruned_after_a_window_still_says_what_it_waited_for_the_build_beside_it(tiny_dataset, tmp_path) -> None:
    """Its payload never comes (the parent stops it after the window): beside_wait_s was missing, so what the overlap
    hid was told the larger by it."""
    import threading

    from autotune.trials.runner import WindowVerdict

    ds = scan(tiny_dataset)

    def beside(flag: str) -> bool:  # a build beside the trial that ends 6 s after it began: after the trial's own build
        threading.Timer(6.0, lambda: Path(flag).touch()).start()
        return True

    pool = WarmPool()
    try:
        pruned = run_trial(_spec(ds, _dali(1), tmp_path / "0.log"), timeout_s=60, warm=pool, after_begin=beside,
                           on_intermediate=lambda step, value: WindowVerdict.PRUNE)
    finally:
        pool.close()
    assert pruned.outcome is Outcome.PRUNED
    assert 0.0 < pruned.extra["beside_wait_s"] < 6.5, pruned.extra
    assert pool.waited_s == pruned.extra["beside_wait_s"]
