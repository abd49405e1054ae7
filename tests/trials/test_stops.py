"""Stopping the tuner on the CPU (signals, a kill, a stop at any point of a trial's life): the completed trials are kept,
the best config is written, and no child process remains."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import optuna
import psutil
import pytest

from autotune.config.files import load_config
from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.runner import run_trial
from autotune.trials.spec import TrialResult, TrialSpec
from tests.helpers import start_autotune
from tests.trials.faults_common import SMALL, fault_tuner, runners, wait_no_runners


# ---------------------------------------------------------------------------------- stopping the tuner
def _start_tuner(dataset: Path, workdir: Path, study: str, n_trials: int, *extra: str) -> subprocess.Popen:
    cmd = [
        "run", "--dataset", str(dataset), "--space", "cpu", "--n-trials", str(n_trials),
        "--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--confirm-top", "0", "--no-report", "--quiet",
        "--storage", f"sqlite:///{workdir}/stop.db", "--study-name", study, "--out", str(workdir / "autotune.yaml"), *extra,
    ]
    return start_autotune(cmd, workdir)


def _complete(workdir: Path, study: str) -> list[int]:
    try:
        s = optuna.load_study(study_name=study, storage=f"sqlite:///{workdir}/stop.db")
    except Exception:  # noqa: BLE001 - not created yet
        return []
    return [t.number for t in s.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))]


def _wait_complete(proc: subprocess.Popen, workdir: Path, study: str, n: int, timeout: float = 120.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while len(done := _complete(workdir, study)) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"only {len(done)} trials completed in {timeout:.0f} s"
        time.sleep(0.3)
    return done


def _wait_measuring(proc: subprocess.Popen, workdir: Path, study: str, timeout: float = 60.0) -> None:
    """Until a trial is RUNNING with its owner stamped, and a moment more: the run is mid-measurement.
    (A SIGKILL between Optuna marking a trial RUNNING and the owner's stamp, a database commit apart, leaves a
    trial no later run can tell from another host's; a sleep of a second landed there once on a busy machine.)"""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"no trial was measuring within {timeout:.0f} s"
        try:
            s = optuna.load_study(study_name=study, storage=f"sqlite:///{workdir}/stop.db")
            running = [t for t in s.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)) if t.user_attrs.get("owner")]
        except Exception:  # noqa: BLE001 - the database being written: look again
            running = []
        if running:
            time.sleep(0.3)  # its process started
            return
        time.sleep(0.1)


def _stacks(pid: int) -> str:
    """The Python stacks of ``pid`` and its children, where py-spy is installed: what a hung stop waits on."""
    if not shutil.which("py-spy"):
        return "(py-spy is not installed)"
    out = []
    for p in [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]:
        done = subprocess.run(["py-spy", "dump", "--pid", str(p)], capture_output=True, text=True, timeout=30, check=False)
        out.append(done.stdout + done.stderr)
    return "\n".join(out)


@pytest.fixture()
def hangup_as_in_a_terminal():
    """SIGHUP as a terminal leaves it, for this test and the processes it starts: under ``nohup`` (the suite run in
    the background) it is ignored, which autotune keeps, as it should, and the hang-up tests then saw nothing."""
    old = signal.signal(signal.SIGHUP, signal.SIG_DFL)
    yield
    signal.signal(signal.SIGHUP, old)


@pytest.mark.parametrize("sig, code, said, repeats", [
    (signal.SIGINT, 130, "interrupted", 1),
    # docker stop, systemd and Slurm send SIGTERM: handled like Ctrl-C, with its own exit code
    (signal.SIGTERM, 143, "terminated (SIGTERM): wrote the best config so far to ", 1),
    # the terminal or the ssh session closed: the process used to die of it, nothing written, the study not marked
    (signal.SIGHUP, 129, "hung up (SIGHUP): wrote the best config so far to ", 1),
    # Ctrl-C pressed again and again, a supervisor's repeated SIGTERM: one landed in the clean-up, and the line
    # said "stopped before any trial completed; no config was written" after two trials had
    (signal.SIGINT, 130, "interrupted: wrote the best config so far to ", 8),
    (signal.SIGTERM, 143, "terminated (SIGTERM): wrote the best config so far to ", 8),
], ids=["sigint", "sigterm", "sighup", "sigint-x8", "sigterm-x8"])
@pytest.mark.slow
def test_a_stop_signal_keeps_the_trials_and_writes_the_best_yaml(small_dataset, workdir, sig, code, said, repeats, hangup_as_in_a_terminal):
    name = f"{sig.name.lower()}-{repeats}"
    proc = _start_tuner(small_dataset, workdir, name, 30)
    try:
        _wait_complete(proc, workdir, name, 1)
        time.sleep(1.0)  # into the next trial
        for _ in range(repeats):
            proc.send_signal(sig)
            time.sleep(0.1)
        try:
            _, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running 60 s after the signals; its threads:\n{_stacks(proc.pid)}")
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == code, err
    assert said in err and "autotune.yaml; continue with --resume" in err
    # told at most once, however many follow (none when the YAML was written before the second arrived: the process
    # then ignores them on its way out; test_stop_signals_after_the_first_are_told_once holds the telling to once)
    assert err.count("stopping already") == 0 if repeats == 1 else err.count("stopping already") <= 1, err
    cfg = load_config(workdir / "autotune.yaml")
    assert cfg.result["samples_per_s"] > 0
    assert not wait_no_runners(proc.pid, timeout=5)
    s = optuna.load_study(study_name=name, storage=f"sqlite:///{workdir}/stop.db")
    assert not [t for t in s.trials if t.state is optuna.trial.TrialState.RUNNING]
    finished = [t for t in s.trials if t.state.is_finished()]  # enqueued baselines not yet run stay WAITING
    assert trial_attrs(finished[-1]).get("outcome") in ("interrupted", "complete", "pruned")


@pytest.mark.parametrize("where", ["before its owner is stamped", "creating the trial", "storing its result",
                                   "as the objective stamps its owner", "in the trial, turned into another error"])
@pytest.mark.slow
def test_a_stop_outside_the_objective_leaves_no_trial_running(small_dataset, workdir, monkeypatch, where):
    """A Ctrl-C or SIGTERM that lands in Optuna's own code around the objective: the trial is not left RUNNING. (A
    loaded run's SIGTERM landed between Optuna's RUNNING and the owner's stamp: the trial, ownerless, stayed RUNNING.)"""
    from optuna.study import _optimize

    tuner = fault_tuner(small_dataset, workdir, "outside", n_trials=3, baselines=False)
    for _ in range(3):
        tuner._enqueue(SMALL, "test")
    if where == "before its owner is stamped":
        storage = tuner.study._storage
        real_set = storage.set_trial_user_attr
        stamps = []

        def set_attr(trial_id, key, value):
            if key == "owner" and trial_id not in stamps:  # a trial's first stamp (the objective stamps it again)
                stamps.append(trial_id)
                if len(stamps) == 2:
                    raise KeyboardInterrupt  # RUNNING in the storage, no owner yet
            return real_set(trial_id, key, value)

        monkeypatch.setattr(storage, "set_trial_user_attr", set_attr)
    elif where == "as the objective stamps its owner":  # the stamp stood before the objective's own handling
        storage = tuner.study._storage
        real_set = storage.set_trial_user_attr
        seen: list[int] = []

        def set_attr(trial_id, key, value):
            if key == "owner":
                seen.append(trial_id)
                if seen.count(trial_id) == 2 and len(set(seen)) == 2:  # the second trial's stamp in the objective
                    raise KeyboardInterrupt
            return real_set(trial_id, key, value)

        monkeypatch.setattr(storage, "set_trial_user_attr", set_attr)
    elif where == "in the trial, turned into another error":  # a library that catches the stop and raises its own error
        real_objective = tuner._objective

        def objective(trial):
            if trial.number == 1:
                try:
                    raise KeyboardInterrupt
                except KeyboardInterrupt:
                    raise RuntimeError("the pool was broken while it was used") from None
            return real_objective(trial)

        monkeypatch.setattr(tuner, "_objective", objective)
    elif where == "creating the trial":
        calls = []

        real_before = type(tuner.study.sampler).before_trial

        def before_trial(sampler, study, trial):
            calls.append(trial.number)
            if len(calls) == 2:
                raise KeyboardInterrupt  # the trial exists in the storage, the objective has not started
            real_before(sampler, study, trial)

        monkeypatch.setattr(type(tuner.study.sampler), "before_trial", before_trial)
    else:
        real_tell = _optimize._tell_with_warning

        def tell(*a, **kw):
            if kw["trial"].number == 1:
                raise KeyboardInterrupt  # measured, not yet stored
            return real_tell(*a, **kw)

        monkeypatch.setattr(_optimize, "_tell_with_warning", tell)
    with pytest.raises(KeyboardInterrupt):
        tuner.optimize()
    trials = tuner.study.get_trials(deepcopy=False)
    assert not [t.number for t in trials if t.state is optuna.trial.TrialState.RUNNING]
    assert trials[0].state is optuna.trial.TrialState.COMPLETE
    assert (trials[1].state, trial_attrs(trials[1])["outcome"]) == (optuna.trial.TrialState.FAIL, "interrupted")
    assert not runners()


@pytest.mark.usefixtures("sigint_as_in_a_terminal")
@pytest.mark.slow
def test_ctrl_c_during_trial_clean_up_is_raised_after_it(small_dataset, monkeypatch):
    """A Ctrl-C that lands while the runner ends the trial's processes waits for that, then stops the run."""
    from autotune.trials import runner

    real_kill_tree = runner.kill_tree
    cleaned = []

    def ctrl_c_then_kill_tree(pid, *a, **kw):
        signal.raise_signal(signal.SIGINT)  # Ctrl-C, now, in the middle of the clean-up
        real_kill_tree(pid, *a, **kw)
        cleaned.append(pid)

    monkeypatch.setattr(runner, "kill_tree", ctrl_c_then_kill_tree)
    spec = TrialSpec(scan(small_dataset), LoaderConfig.from_params({**SMALL, "num_workers": 0}), window_s=0.2, windows=2, warmup_batches=1)
    with pytest.raises(KeyboardInterrupt):
        run_trial(spec, timeout_s=60)
    assert len(cleaned) == 1, "the clean-up ran to its end before the Ctrl-C was raised"
    assert not runners()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the handler is back


def test_sigterm_held_during_clean_up_stops_the_run_after_it():
    from autotune.cli._run import _StopOnce
    from autotune.errors import Terminated, interrupt_exit_code
    from autotune.trials.runner import deferred_signals

    steps = []
    with _StopOnce(), pytest.raises(Terminated) as e:
        with deferred_signals():
            signal.raise_signal(signal.SIGTERM)
            steps.append("clean-up done")
        steps.append("not reached")
    assert steps == ["clean-up done"]
    assert isinstance(e.value, KeyboardInterrupt) and interrupt_exit_code(e.value) == 143
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_sighup_is_held_during_clean_up_like_sigterm(hangup_as_in_a_terminal):
    """deferred_signals held SIGINT and SIGTERM only: a first SIGHUP cut a trial's clean-up (its processes, in their
    own session, never got the hangup) or the YAML's writing short."""
    from autotune.cli._run import _StopOnce
    from autotune.errors import HungUp, interrupt_exit_code
    from autotune.trials.runner import deferred_signals

    steps = []
    with _StopOnce(), pytest.raises(HungUp) as e:
        with deferred_signals():
            signal.raise_signal(signal.SIGHUP)
            steps.append("clean-up done")
        steps.append("not reached")
    assert steps == ["clean-up done"] and interrupt_exit_code(e.value) == 129


class _SignalledInDel:
    """An object whose ``__del__`` takes a SIGTERM: as SQLAlchemy's weakref callbacks did when a garbage collection
    ran them at the moment a supervisor's SIGTERM came."""

    def __del__(self) -> None:
        import os

        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(1000):  # Python code for the handler to run in, still inside __del__
            pass


@pytest.mark.parametrize("block_ends", [False, True], ids=["run-goes-on", "block-ends"])
def test_a_stop_raised_where_python_swallows_it_still_stops_the_run(block_ends):
    """CI: 1 of 8 SIGTERMs landed in a weakref callback at a garbage collection; Python printed "Exception ignored"
    and went on, the run finished every trial and exited 0. The stop is sent again and ends the run; if the block
    ends first, it is raised as the block ends."""
    from autotune.cli._run import _StopOnce
    from autotune.errors import Terminated, interrupt_exit_code

    steps = []
    with pytest.raises(Terminated) as e, _StopOnce(exits=False):
        _SignalledInDel()  # dropped at once: its __del__ takes the signal
        steps.append("after the swallowed stop")
        if not block_ends:
            time.sleep(5)
            steps.append("not reached")
    assert steps == ["after the swallowed stop"] and interrupt_exit_code(e.value) == 143


@pytest.mark.usefixtures("sigint_as_in_a_terminal")
def test_stop_signals_after_the_first_are_told_once(capsys):
    from autotune.cli._run import _StopOnce

    with _StopOnce(exits=False):
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGINT)
        for _ in range(3):  # the clean-up goes on: each is dropped, the first of them told
            signal.raise_signal(signal.SIGINT)
    assert capsys.readouterr().err.count("stopping already") == 1


@pytest.mark.usefixtures("sigint_as_in_a_terminal")
@pytest.mark.parametrize("exits", [True, False], ids=["the-command", "in-process"])
def test_a_stopped_run_about_to_exit_ignores_the_signals_after_it(exits):
    """Eight Ctrl-Cs, 0.1 s apart: the last landed after the YAML was written and the handlers were put back, and
    the command died of SIGINT (-2) instead of exiting 130. In-process (``main()`` called from Python), the
    caller's handlers are put back as they were."""
    import os

    from autotune.cli._run import _StopOnce
    from autotune.errors import STOP_SIGNALS

    before = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    try:
        with pytest.raises(KeyboardInterrupt), _StopOnce(exits=exits):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        after = {s: signal.getsignal(s) for s in STOP_SIGNALS}
    finally:
        for s, h in before.items():
            signal.signal(s, h)
    assert after == ({s: signal.SIG_IGN for s in STOP_SIGNALS} if exits else before)


def test_a_process_forked_while_stopping_once_is_stopped_by_its_signals():
    """The demo set's drawing pool inherited the handler: three SIGTERMs to the group printed 'stopping already' three
    times, and the workers went on."""
    import os

    from autotune.cli._run import _StopOnce

    with _StopOnce():
        pid = os.fork()
        if pid == 0:  # the child: a SIGTERM ends it as by default, not told and dropped
            try:
                signal.raise_signal(signal.SIGTERM)
                time.sleep(5)
            finally:
                os._exit(7)
        _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


@pytest.mark.slow
def test_sigkill_then_resume_keeps_every_completed_trial(small_dataset, workdir):
    proc = _start_tuner(small_dataset, workdir, "sigkill", 30)
    try:
        _wait_complete(proc, workdir, "sigkill", 1)
        _wait_measuring(proc, workdir, "sigkill")  # into the next trial
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
    left = wait_no_runners(proc.pid, timeout=10)
    assert not left, f"orphaned trial processes: {left}"
    before = _complete(workdir, "sigkill")
    assert before
    resumed = _start_tuner(small_dataset, workdir, "sigkill", 2, "--resume")
    out, err = resumed.communicate(timeout=180)
    assert resumed.returncode == 0, err
    after = _complete(workdir, "sigkill")
    assert set(before) <= set(after) and len(after) > len(before)
    s = optuna.load_study(study_name="sigkill", storage=f"sqlite:///{workdir}/stop.db")
    assert not [t for t in s.trials if t.state is optuna.trial.TrialState.RUNNING], "the killed run's trial is marked failed"
    load_config(workdir / "autotune.yaml")
    assert not wait_no_runners(resumed.pid, timeout=5)


@pytest.mark.slow
def test_a_trial_told_enough_completes_with_the_windows_so_far(small_dataset):
    """The time budget is spent: the trial ends at its next window, complete, with what it measured."""
    from autotune.trials.runner import WindowVerdict

    spec = TrialSpec(scan(small_dataset), LoaderConfig.from_params({**SMALL, "num_workers": 0}), window_s=0.2, windows=5, warmup_batches=1)
    r = run_trial(spec, timeout_s=60, on_intermediate=lambda step, value: WindowVerdict.ENOUGH if step >= 1 else WindowVerdict.GO_ON)
    assert r.outcome is Outcome.COMPLETE and r.samples_per_s > 0 and "measured 2 window(s)" in r.message
    assert "the time budget ran out" in r.message and r.spread[0] <= r.samples_per_s <= r.spread[1]
    assert not runners()


@pytest.mark.slow
def test_a_stop_during_the_set_up_says_no_config_was_written(workdir, tiny_dataset, monkeypatch, capsys):
    """SIGTERM while the dataset was scanned printed 'terminated (SIGTERM)' alone; the docs promise the last line
    says whether a config was written."""
    from autotune.cli import main
    from autotune.errors import Terminated
    from autotune.tuning import prepare

    def stopped(path):
        raise Terminated()

    monkeypatch.setattr(prepare, "scan", stopped)
    assert main(["run", "--dataset", str(tiny_dataset), "--budget", "15", "--no-report"]) == 143
    assert capsys.readouterr().err.strip().splitlines()[-1] == "autotune: terminated (SIGTERM): stopped before any trial completed; no config was written"
    assert not (workdir / "autotune.yaml").exists()


@pytest.mark.usefixtures("sigint_as_in_a_terminal")
def test_a_stop_lost_on_its_way_ends_the_run_at_the_next_measurement(tiny_dataset, tmp_path, monkeypatch):
    """CI, under load: one Ctrl-C, and the run went on measuring for a minute. Wherever the raised stop was lost (a
    finaliser, a library's broad except), the handler keeps it and the next measurement raises it: the running study
    stops after the trial it was in, its trials kept."""
    from autotune.cli._run import _StopOnce
    from autotune.dataset.scan import scan
    from autotune.study.evidence import trial_attrs
    from autotune.study.space import parse_space

    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())
    space = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [0, 4]}}}, cores=4)
    tuner = Tuner(scan(tiny_dataset), space, TuneSettings(cache="none", baselines=False, n_trials=10, confirm_top=0), storage="memory", study_name="s")
    measured = []

    def fake_run_trial(spec, **kw):
        measured.append(spec.loader.describe())
        if len(measured) == 2:  # the signal comes, and its exception is swallowed by the code it landed in
            try:
                signal.raise_signal(signal.SIGINT)
            except KeyboardInterrupt:
                pass
        return TrialResult(Outcome.COMPLETE, samples_per_s=100.0 + len(measured), duration_s=0.1)

    monkeypatch.setattr("autotune.study.tuner.run_trial", fake_run_trial)
    with pytest.raises(KeyboardInterrupt), _StopOnce(exits=False):
        tuner.optimize()
    assert len(measured) == 2, "no measurement after the lost stop"
    kept = [t for t in tuner.study.trials if t.state is optuna.trial.TrialState.COMPLETE and trial_attrs(t).get("outcome") == "complete"]
    assert len(kept) == 2  # (a sampled repeat of a measured config is not measured, so the stop waits for the next new one)
    from autotune.errors import raise_if_stopped

    raise_if_stopped()  # the run is over: nothing is kept for the next one
