"""Ending a trial's process with everything it started (:func:`kill_tree`)."""

from __future__ import annotations

import os
import signal

import psutil

from autotune.trials.guard import count_orphaned_cpu, cpu_s, process_tree


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
