"""Trials forked from a pre-imported process: fresh processes, same outcomes, nothing left behind."""

from __future__ import annotations

import os
import re
import socket
import time

import optuna
import psutil
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.trials.runner import WindowVerdict, run_trial
from autotune.trials.spec import TrialSpec
from autotune.trials.zygote import Zygote

pytestmark = pytest.mark.slow  # each test forks trials from a pre-imported process


def _spec(dataset, **kw):
    return TrialSpec(
        scan(dataset), LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 1, "prefetch_factor": 2}), window_s=0.1, windows=2, **kw
    )


def test_forked_trial_completes_in_a_fresh_process(tiny_dataset, zygote):
    seen = []
    r1 = run_trial(_spec(tiny_dataset), zygote=zygote, on_intermediate=lambda s, v: seen.append(v) or WindowVerdict.GO_ON)
    r2 = run_trial(_spec(tiny_dataset), zygote=zygote)
    assert r1.outcome is Outcome.COMPLETE and r2.outcome is Outcome.COMPLETE and r1.samples_per_s > 0
    assert seen  # windows reach the pruner as with spawned trials
    assert psutil.Process(zygote.proc.pid).children() == []  # each trial process is gone when its trial ends


def test_forked_trial_crash_and_hang_are_classified(tiny_dataset, zygote):
    assert run_trial(_spec(tiny_dataset, inject="segfault"), zygote=zygote).outcome is Outcome.CRASH
    r = run_trial(_spec(tiny_dataset, inject="signal:40"), zygote=zygote)  # a real-time signal has no name: it raised ValueError
    assert (r.outcome, r.message) == (Outcome.CRASH, "trial process died with signal 40")
    r = run_trial(_spec(tiny_dataset, inject="hang"), zygote=zygote, timeout_s=3)
    assert r.outcome is Outcome.TIMEOUT
    assert psutil.Process(zygote.proc.pid).children() == []


def test_zygote_ends_with_close_and_its_trials_with_it(tiny_dataset):
    z = Zygote.start()
    pid = z.proc.pid
    assert psutil.pid_exists(pid) and psutil.Process(pid).ppid() == os.getpid()
    z.close()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # a closed zygote falls back to spawning
    assert run_trial(_spec(tiny_dataset), zygote=z).outcome is Outcome.COMPLETE


def test_the_re_measurement_forks_from_the_trials_process(workdir, tiny_dataset, monkeypatch):
    """The trials' pre-imported process was ended after the last trial and started again for the re-measurement:
    on an H200 that took 7 s of a 60 s run, and with them the re-measurement round it had planned."""
    from autotune.cli import main
    from autotune.trials.zygote import Zygote

    monkeypatch.setattr("autotune.study.confirm.CONTENDER_FLOOR", 0.0)  # both configs are re-measured, however far apart
    launched = []
    real_launch = Zygote.launch
    monkeypatch.setattr(Zygote, "launch", classmethod(lambda cls, *a, **k: launched.append(1) or real_launch(*a, **k)))
    assert (
        main(
            [
                "run",
                "--dataset",
                str(tiny_dataset),
                "--space",
                "cpu",
                "--n-trials",
                "2",
                "--batch-size",
                "4",
                "--window",
                "0.2",
                "--windows",
                "2",
                "--confirm-top",
                "2",
                "--confirm-repeats",
                "1",
                "--quiet",
                "--no-report",
            ]
        )
        == 0
    )
    study = optuna.load_study(study_name=optuna.get_all_study_summaries("sqlite:///autotune.db")[0].study_name, storage="sqlite:///autotune.db")
    assert study.user_attrs["confirmation"]["attempted"] == 2  # re-measured, from the same process as the trials
    assert launched == [1]


def test_its_log_says_what_each_import_took(tmp_path):
    """The first trial of a default run on an H100 waited 5-7 s for this process's imports; its log says which."""
    (tmp_path / "pipe.py").write_text("import time\n\ntime.sleep(0.3)\n\n\ndef make():\n    return [0]\n")
    log = tmp_path / "zygote.log"
    z = Zygote.start(log=str(log), preload=f"{tmp_path / 'pipe.py'}:make")
    try:
        assert z is not None
        line = next(x for x in log.read_text().splitlines() if x.startswith("ready in "))
        took = re.search(r"pipe\.py:make (\d+\.\d+) s", line)
        assert " torch " in line and took is not None and float(took[1]) >= 0.3, line
    finally:
        z.close()


def _said(log, what):
    return [x for x in log.read_text().splitlines() if x.startswith(f"{what} in ")]


def _fork_one(z, later=False):
    """A fork (by default one that needs no torchvision, as DALI's trials): its process finds its connection closed, and ends."""
    ours, theirs = socket.socketpair()
    trial = z.fork(theirs.fileno(), later=later)
    theirs.close()
    ours.close()
    trial.wait(30)


def _waited_for(log, what):
    for _ in range(600):
        if _said(log, what):
            return _said(log, what)[0]
        time.sleep(0.1)
    return ""


def _has_torchvision(z) -> bool:
    """Whether the zygote's process has loaded torchvision's native library (read from its memory map)."""
    with open(f"/proc/{z.proc.pid}/maps") as f:
        return "torchvision" in f.read()


def test_torchvision_is_imported_after_the_forks_the_tuner_names(tiny_dataset, tmp_path):
    """Before its first trial, the zygote imported torchvision too (about half of its imports on 2 cores), which a
    DALI trial does not use: a search that builds its second trial beside the first starts both first."""
    log = tmp_path / "zygote.log"
    z = Zygote.launch(log=str(log)).ready()
    try:
        assert z is not None and _said(log, "ready") and not _has_torchvision(z)
        z.later_after(2)
        _fork_one(z)
        time.sleep(0.5)
        assert not _said(log, "later") and not _has_torchvision(z)
        _fork_one(z)
        assert "torchvision" in _waited_for(log, "later") and _has_torchvision(z)  # asked for after the second fork
        assert run_trial(_spec(tiny_dataset), zygote=z).outcome is Outcome.COMPLETE
    finally:
        z.close()
    log.write_text("")
    z = Zygote.launch(log=str(log)).ready()  # None: only a fork that needs it asks
    try:
        z.later_after(None)
        _fork_one(z)
        time.sleep(0.5)
        assert not _said(log, "later")
        assert run_trial(_spec(tiny_dataset), zygote=z).outcome is Outcome.COMPLETE  # a torch DataLoader's trial asks first
        assert _said(log, "later") and _has_torchvision(z)
    finally:
        z.close()
    log.write_text("")
    z = Zygote.start(log=str(log))  # start: at once, before any fork
    try:
        assert "torchvision" in _waited_for(log, "later")
    finally:
        z.close()


def test_a_torchvision_that_does_not_import_leaves_the_zygote_forking(tmp_path, monkeypatch):
    """Imported after the zygote said it was ready, a torchvision that fails to import (a mismatched pair) ended the
    zygote mid-run; now its trials that use it fail on their own, as spawned ones do, and the others run."""
    fake = tmp_path / "site" / "torchvision"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise RuntimeError('operator torchvision::nms does not exist')\n")
    monkeypatch.setenv("PYTHONPATH", f"{fake.parent}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    log = tmp_path / "zygote.log"
    z = Zygote.start(log=str(log))
    try:
        assert z is not None
        for _ in range(300):
            if "importing" in log.read_text():
                break
            time.sleep(0.1)
        assert "torchvision::nms does not exist" in log.read_text()
        _fork_one(z)
        assert z.alive() and not z.importing()
    finally:
        z.close()
