"""The trial runner: measure one config in a freshly spawned child process.

A crash, an out-of-memory kill or a hang costs one trial, not the study, and every byte of GPU memory goes
back when the child ends (DALI's pools never shrink). The parent never imports torch or touches a GPU: it
watches the child (wall-clock limit, memory budgets via :mod:`autotune.trials.guard`), relays its per-window rates
to the pruner, and classifies how it ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import psutil

from autotune.errors import STOP_SIGNALS
from autotune.outcomes import Outcome, died_of
from autotune.trials import logs
from autotune.trials.guard import Budgets, Monitor, count_orphaned_cpu, cpu_s, process_tree
from autotune.trials.spec import TrialResult, TrialSpec
from autotune.trials.zygote import ForkedTrial, Zygote

logger = logging.getLogger(__name__)

SAMPLE_S = 0.1  # memory sampling period: ten samples a second


# --------------------------------------------------------------------------------------------- parent
def kill_tree(pid: int, timeout: float = 3.0, also: set[psutil.Process] | None = None) -> None:
    """Terminate a process and all its descendants; SIGKILL what is left after ``timeout``.

    Args:
        pid: the trial's child, leader of its own process group.
        timeout: seconds to wait after SIGTERM, then after SIGKILL.
        also: processes seen in the tree earlier (a worker re-parented to init is no longer a descendant);
            ``psutil.Process`` checks their start time, so a reused PID is never hit.
    """
    procs = process_tree(pid)
    procs += [p for p in (also or ()) if p not in procs and p.is_running()]
    # the trial's descendants die with it, unreaped by it: their CPU time leaves this tree (init reaps them);
    # keep it, or the run's own work would read as another job's (guard.OtherLoad)
    count_orphaned_cpu(sum(cpu_s(p) for p in procs if p.pid != pid))
    for p in reversed(procs):
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=timeout)
    try:  # anything left in the child's process group
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


#: what ``on_intermediate`` returns to end a trial at once with what it measured so far (the time budget is spent)
ENOUGH = "enough"


def run_trial(
    spec: TrialSpec,
    *,
    timeout_s: float = 120.0,
    budgets: Budgets | None = None,
    on_intermediate: Callable[[int, float], bool] | None = None,
    zygote: Zygote | None = None,
) -> TrialResult:
    """Run ``spec`` in a fresh child process and return how it went.

    Args:
        spec: the config and measurement settings.
        timeout_s: wall-clock limit for the whole child (start-up included).
        budgets: memory budgets enforced while the child runs.
        on_intermediate: called with (window index, median rate so far); returning True prunes the trial,
            returning :data:`ENOUGH` completes it with the windows measured so far.
        zygote: fork the child from this pre-imported process (:mod:`autotune.trials.zygote`) instead of spawning it.

    Returns:
        A :class:`TrialResult`; never raises for a failing config. ``KeyboardInterrupt`` is re-raised after
        the child and its workers are gone.
    """
    budgets = budgets or Budgets()
    tmpdir = tempfile.mkdtemp(prefix="autotune-trial-")  # the child's TMPDIR: what its killed workers leave, goes with it
    spec = dataclasses.replace(spec, tmpdir=tmpdir)
    ours, theirs = socket.socketpair()
    monitor = Monitor(budgets, spec.device, ranks=spec.ranks)
    start = time.monotonic()
    result: TrialResult | None = None
    last_value: float | None = None
    proc: subprocess.Popen | ForkedTrial | None = None
    from multiprocessing.connection import Connection

    parent_conn = Connection(ours.detach())
    # the child's stdout and stderr (native libraries' lines and workers' tracebacks too) go to its log file
    log_fd = logs.open_log(spec.log) if spec.log else None
    if spec.log and log_fd is None:
        log_fd = logs.null_output()
    try:
        if zygote is not None and zygote.alive():
            proc = zygote.fork(theirs.fileno(), log_fd)  # a fresh process forked from one that has imported torch already
        else:
            # a fresh interpreter (not multiprocessing's spawn, which re-imports the caller's __main__)
            proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.trials", str(theirs.fileno()), str(os.getpid())],
                pass_fds=(theirs.fileno(),),
                env={**os.environ, "TMPDIR": tmpdir},
                stdout=log_fd, stderr=log_fd,  # None: the tuner's own
                start_new_session=True,  # its own process group: Ctrl-C reaches the tuner only, and killpg reaches every worker
            )
        theirs.close()
        if log_fd is not None:
            os.close(log_fd)
            log_fd = None
        parent_conn.send(spec)
        next_sample = 0.0
        while True:
            now = time.monotonic()
            if now >= next_sample:
                over = monitor.sample(proc.pid)
                next_sample = now + SAMPLE_S
                if over is not None:
                    result = TrialResult(over, message=monitor.reason, extra={"over": monitor.over})
                    break
            if now - start > timeout_s:
                result = TrialResult(Outcome.TIMEOUT, message=f"no result within {timeout_s:.0f} s; raise --trial-timeout if this config is just slow to start")
                break
            try:
                ready = parent_conn.poll(min(SAMPLE_S, max(0.0, next_sample - now)))
            except (EOFError, OSError):
                ready = False
            if ready:
                try:
                    msg = parent_conn.recv()
                except (EOFError, OSError):
                    msg = None
                if msg is None:
                    result = _died(_wait(proc, 2.0))
                    break
                if msg[0] == "window":
                    _, step, value, spread = msg  # the median and (lowest, highest) of the steady windows so far
                    last_value = value
                    verdict = on_intermediate(step, value) if on_intermediate is not None else False
                    if verdict == ENOUGH:  # the time budget ran out: the windows so far are the measurement
                        result = TrialResult(Outcome.COMPLETE, samples_per_s=value, spread=tuple(spread),
                                             message=f"measured {step + 1} window(s): the time budget ran out")
                        break
                    if verdict:
                        result = TrialResult(Outcome.PRUNED, samples_per_s=value, message=f"pruned after window {step}")
                        break
                elif msg[0] == "result":
                    _, outcome, payload = msg
                    result = _from_payload(Outcome(outcome), payload)
                    break
            elif proc.poll() is not None:
                # drain a result that raced with the exit
                if parent_conn.poll(0.5):
                    continue
                result = _died(proc.returncode)
                break
    finally:
        # on KeyboardInterrupt too: the child and its workers are gone before this returns; a Ctrl-C or SIGTERM
        # that arrives meanwhile is delivered once they are
        with deferred_signals():
            if proc is not None:
                _wait(proc, 1.0 if result is not None and result.outcome is Outcome.COMPLETE else 0.0)  # the result is in: no need to wait for a slow teardown
                kill_tree(proc.pid, also=monitor.seen)
                _wait(proc, 2.0)
            theirs.close()
            parent_conn.close()
            monitor.close()
            shutil.rmtree(tmpdir, ignore_errors=True)
            if log_fd is not None:
                os.close(log_fd)
    assert result is not None
    result.duration_s = time.monotonic() - start
    result.peak_host_mib = max(result.peak_host_mib or 0.0, monitor.peak_host_mib) or None
    if monitor.peak_gpu_mib is not None:
        result.peak_gpu_mib = max(result.peak_gpu_mib or 0.0, monitor.peak_gpu_mib)
    if monitor.peak_shm_mib:
        result.extra.setdefault("peak_shm_mib", round(monitor.peak_shm_mib, 1))
    if result.samples_per_s is None and last_value is not None and result.outcome is not Outcome.COMPLETE:
        result.extra.setdefault("last_window_rate", round(last_value, 1))
    return result


@contextlib.contextmanager
def deferred_signals(signums: tuple[int, ...] = STOP_SIGNALS):
    """Hold Ctrl-C, SIGTERM and SIGHUP while the block runs, then deliver them to the handlers that were in place.

    A clean-up is never cut short, and a signal that arrives during it is never lost: it is raised again
    after the block (``KeyboardInterrupt`` for Ctrl-C). Main thread only; elsewhere the block just runs.
    """
    caught: list[int] = []

    def hold(signum: int, frame: object) -> None:
        caught.append(signum)

    old: dict[int, Any] = {}
    try:
        for s in signums:
            old[s] = signal.signal(s, hold)
    except ValueError:  # not the main thread: signals are not ours to hold
        for s, h in old.items():
            signal.signal(s, h)
        yield
        return
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, signal.SIG_DFL if h is None else h)
        for s in dict.fromkeys(caught):
            logger.info("delivering %s, held while a trial was cleaned up", signal.Signals(s).name)
            signal.raise_signal(s)


def _wait(proc: subprocess.Popen | ForkedTrial, timeout: float) -> int | None:
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        return None


def _died(exitcode: int | None) -> TrialResult:
    outcome, message = died_of(exitcode, "trial process")
    return TrialResult(outcome, message=message)


def _from_payload(outcome: Outcome, payload: dict[str, Any]) -> TrialResult:
    fields = {f.name for f in dataclasses.fields(TrialResult)}
    known = {k: v for k, v in payload.items() if k in fields}
    extra = {k: v for k, v in payload.items() if k not in fields}
    if "spread" in known and known["spread"] is not None:
        known["spread"] = tuple(known["spread"])
    r = TrialResult(outcome, **known)
    r.extra.update(extra)
    return r
