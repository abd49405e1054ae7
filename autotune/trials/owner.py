"""Who owns a trial, or a trial's temp folder: ``host:pid`` of the process that runs it, and whether it is gone.

A run killed with SIGKILL leaves its RUNNING trials in the study and its trials' temp folders on disk; a later
run removes what a dead run left, and never what a live process is using.
"""

from __future__ import annotations

import os
import socket

import psutil


def this_owner() -> str:
    """This process as an owner: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def owner_gone(owner: str, since: float | None = None) -> bool:
    """Whether the process ``owner`` (``host:pid``) is known to be gone: on this host, and that PID not running,
    or running but started after ``since`` (a Unix time: when the owner began what it owns), so another process.

    An owner on another host, or one that cannot be read, is never gone: what it owns is left alone.
    """
    host, _, pid = str(owner).rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        started = psutil.Process(int(pid)).create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # a process of another user that cannot be read: alive
        return False
    return since is not None and started > since + 1
