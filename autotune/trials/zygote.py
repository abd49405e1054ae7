"""A process that has imported torch (and torchvision, once asked) and forks each trial process from itself.

Every trial is still a fresh process: it creates its own CUDA context (the zygote never touches the GPU),
and all its memory goes back when it ends. What it no longer pays is the interpreter start and the import of
torch and torchvision, several seconds a trial. Trial processes get the same treatment as spawned ones: their
own session (process group), death with their parent, their exit status reported back to the tuner.

Protocol on a Unix socket: the zygote sends ``R`` once :data:`PRELOAD` (and a user's module) is imported. The tuner
sends ``b"I"`` to have it import :data:`LATER` (it answers ``L 0 0`` when done), and ``b"F"`` with one or two file
descriptors (the trial's connection, and the log file that becomes its stdout and stderr, see
:mod:`autotune.trials.logs`); the zygote answers ``P pid``, and later ``X pid exitcode`` when that process ends.
Messages are served in order: a fork asked for after ``I`` waits for that import. Closing the socket ends it.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time

from autotune.trials import logs

logger = logging.getLogger(__name__)

_FRAME = struct.Struct("=cii")
#: imported before the zygote says it is ready: what every trial process needs
PRELOAD = (
    "numpy",
    "torch",
    "autotune.trials.child",
    "autotune.trials.measure",
    "autotune.trials.rank_group",
)
#: imported once the tuner asks (:meth:`Zygote.later_after`; :meth:`Zygote.start`: at once): what a torch DataLoader's
#: trial needs, and a DALI trial does not (torchvision's import, torch._dynamo's with it, was about half of the
#: zygote's on 2 cores)
LATER = ("PIL.Image", "torchvision", "torchvision.transforms", "autotune.loaders.backends._torch")
#: seconds a fork may wait beyond its own timeout while the zygote imports :data:`LATER`
LATER_WAIT_S = 120.0


class ForkedTrial:
    """A ``subprocess.Popen``-like handle (``pid``, ``poll``, ``wait``, ``returncode``) of a forked trial."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.zygote = zygote
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.zygote._pump(0.0)
            self.returncode = self.zygote._exits.pop(self.pid, None)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                if self.zygote.importing():  # it reports no process's end while it imports: wait for its answer
                    deadline = time.monotonic() + 0.05
                    continue
                raise subprocess.TimeoutExpired(f"trial {self.pid}", timeout or 0)
            if not self.zygote.alive():
                self.returncode = code = -signal.SIGKILL  # its children die with it
                break
            self.zygote._pump(min(0.05, left) if left is not None else 0.05)
        return code


class Zygote:
    """The tuner's side: start with :meth:`start`, fork trials with :meth:`fork`, end with :meth:`close`."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None
        self.sock: socket.socket | None = None
        self._buf = b""
        self._pids: list[int] = []
        self._exits: dict[int, int] = {}
        self._ready = False
        self._forks = 0
        self._later_after: int | None = 0  # forks before LATER is asked for (None: only for a trial that needs it)
        self._later_asked: float | None = None  # when it was (time.monotonic)
        self._later_done = False  # the zygote said it has imported LATER (or failed to: its trials import it then)

    @classmethod
    def start(cls, timeout: float = 120.0, log: str | None = None, preload: str | None = None) -> Zygote | None:
        """A ready zygote, or None (then trials are spawned the plain way).

        Args:
            timeout: seconds to wait for it to import torch (it imports :data:`LATER` next, before the first fork).
            log: the file that takes its own output (import warnings); None: the tuner's stdout and stderr.
        """
        z = cls.launch(log, preload)
        if z is not None:
            z.later_after(0)
        return z.ready(timeout) if z is not None else None

    @classmethod
    def launch(cls, log: str | None = None, preload: str | None = None) -> Zygote | None:
        """Start the zygote without waiting for its imports (``autotune run`` scans the dataset meanwhile);
        :meth:`ready` waits. None when it cannot even start. ``preload``: a user's pipeline function
        (``FILE.py:FUNC``, ``package.module:FUNC``) whose module it imports once, before it forks trials."""
        z = cls()
        ours, theirs = socket.socketpair()
        log_fd = logs.open_log(log, append=True) if log else None
        try:
            z.proc = subprocess.Popen(
                [sys.executable, "-m", "autotune.trials", "--zygote", str(theirs.fileno()), str(os.getpid()), *([preload] if preload else [])],
                pass_fds=(theirs.fileno(),),
                stdout=log_fd,
                stderr=log_fd,
                start_new_session=True,
            )
            z.sock = ours
            return z
        except Exception as e:  # noqa: BLE001 - fall back to spawning
            logger.warning("trials start without a pre-imported process (%s)", e)
            z.close()
            return None
        finally:
            theirs.close()
            if log_fd is not None:
                os.close(log_fd)

    def ready(self, timeout: float = 120.0) -> Zygote | None:
        """Wait until the zygote has imported torch; itself, or None (closed) if it did not get ready."""
        if self._ready:
            return self
        try:
            if self.sock is None:
                raise RuntimeError("the zygote is closed")
            ready, _, _ = select.select([self.sock], [], [], timeout)
            if not ready or self.sock.recv(1) != b"R":
                raise RuntimeError("the zygote did not get ready")
            self._ready = True
            return self
        except Exception as e:  # noqa: BLE001 - fall back to spawning
            logger.warning("trials start without a pre-imported process (%s)", e)
            self.close()
            return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _pump(self, timeout: float) -> None:
        """Read the zygote's messages for up to ``timeout`` seconds."""
        if self.sock is None:
            return
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            return
        try:
            data = self.sock.recv(4096)
        except OSError:
            data = b""
        self._buf += data
        while len(self._buf) >= _FRAME.size:
            kind, pid, code = _FRAME.unpack(self._buf[: _FRAME.size])
            self._buf = self._buf[_FRAME.size :]
            if kind == b"X":
                self._exits[pid] = code
            elif kind == b"P":
                self._pids.append(pid)
            elif kind == b"L":
                self._later_done = True

    def later_after(self, forks: int | None) -> None:
        """When the zygote imports :data:`LATER`: now (0; it does so once :data:`PRELOAD` is in), once ``forks`` trial
        processes were forked, or (None) only for a trial that needs it. Whatever this says, a fork whose trial
        needs it asks for it first. A search that builds its second trial beside the first, both DALI's, sets 2: they
        start without waiting for torchvision, which is imported while they build. Until asked, nothing is imported."""
        self._later_after = forks
        self._ask_later()

    def _ask_later(self, now: bool = False) -> None:
        due = now or (self._later_after is not None and self._forks >= self._later_after)
        if self._later_asked is None and due and self.sock is not None:
            try:
                self.sock.sendall(b"I")
            except OSError:  # a zygote that is gone: the next fork says so
                return
            self._later_asked = time.monotonic()

    def importing(self) -> bool:
        """Whether the zygote may be importing :data:`LATER` now (asked, not yet done, for at most LATER_WAIT_S): it
        reports no process's end meanwhile."""
        self._pump(0.0)
        return self._later_asked is not None and not self._later_done and time.monotonic() - self._later_asked < LATER_WAIT_S

    def fork(self, fd: int, output: int | None = None, timeout: float = 30.0, later: bool = True) -> ForkedTrial:
        """Fork a trial process that serves the connection ``fd`` (``autotune.trials.child.child_main``).

        ``output``: a descriptor that becomes the trial's stdout and stderr (its log); None keeps the zygote's.
        ``later``: whether the process needs :data:`LATER` (a torch DataLoader's trial does, and one with a model;
        DALI's does not): asked for first, if it was not.
        """
        if self.sock is None or not self.alive():
            raise RuntimeError("the zygote is gone")
        self._ask_later(now=later)
        socket.send_fds(self.sock, [b"F"], [fd] if output is None else [fd, output])
        self._forks += 1
        self._ask_later()
        deadline = time.monotonic() + timeout + (LATER_WAIT_S if self.importing() else 0.0)
        while not self._pids:
            if time.monotonic() > deadline or not self.alive():
                raise RuntimeError("the zygote did not fork")
            self._pump(0.05)
        return ForkedTrial(self, self._pids.pop(0))

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None
        if self.proc is not None:
            if not self._ready and self.proc.poll() is None:
                self.proc.kill()  # still importing: nothing of it to keep
            try:
                self.proc.wait(5.0)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5.0)
            self.proc = None


def serve(fd: int, tuner: int, preload: str | None = None) -> None:
    """The zygote's main loop (``python -m autotune.trials --zygote FD TUNER_PID [FILE.py:FUNC]``)."""
    from autotune.trials.child import child_main, set_parent_death_signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    set_parent_death_signal()
    if os.getppid() != tuner:
        os._exit(1)
    took = _import(PRELOAD)
    if preload:  # the user's module, once for every trial; a failure is the trial's to tell (it imports it again, and fails)
        from autotune.dataset.user import load_module

        t = time.perf_counter()
        try:
            load_module(preload)
        except Exception:  # noqa: BLE001 - told by each trial, in its log and its line
            logger.exception("importing %s failed", preload)
        took.append((preload, time.perf_counter() - t))
    _say("ready", took)
    sock = socket.socket(fileno=fd)
    sock.sendall(b"R")
    children: set[int] = set()
    while True:
        ready, _, _ = select.select([sock], [], [], 0.05)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children.clear()
                break
            if pid == 0:
                break
            children.discard(pid)
            sock.sendall(_FRAME.pack(b"X", pid, os.waitstatus_to_exitcode(status)))
        if not ready:
            continue
        msg, fds, _, _ = socket.recv_fds(sock, 1, 2)
        if msg == b"I":
            try:
                _import(LATER, "later")
            except Exception:  # noqa: BLE001 - a torchvision that does not import: each trial that uses it imports it, and fails, as a spawned one
                logger.exception("importing %s failed", ", ".join(LATER))
            sock.sendall(_FRAME.pack(b"L", 0, 0))
            continue
        if not msg:  # the tuner closed its end
            for pid in children:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
            os._exit(0)
        logs.flush_output()  # nothing buffered here is written twice
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                sock.close()
                os.setsid()  # its own process group, as a spawned trial has
                if len(fds) > 1:
                    logs.redirect_output(fds[1])  # before anything else: every line goes to the trial's log
                child_main(fds[0], parent=os.getppid())
            except BaseException:  # noqa: BLE001 - the forked child must reach os._exit below, whatever it raised
                code = 1
            finally:
                logs.flush_output()
                os._exit(code)
        for f in fds:
            os.close(f)
        children.add(pid)
        sock.sendall(_FRAME.pack(b"P", pid, 0))


def _import(names: tuple[str, ...], what: str | None = None) -> list[tuple[str, float]]:
    """Import ``names`` in turn: each with the seconds it took (``what``: said in the zygote's log)."""
    import importlib

    took = []
    for name in names:
        t = time.perf_counter()
        importlib.import_module(name)
        took.append((name, time.perf_counter() - t))
    if what:
        _say(what, took)
    return took


def _say(what: str, took: list[tuple[str, float]]) -> None:
    """One line of the zygote's log (its stderr): what its imports took, in all and each (zygote.log)."""
    sys.stderr.write(f"{what} in {sum(s for _, s in took):.2f} s: " + ", ".join(f"{n} {s:.2f} s" for n, s in took if s >= 0.01) + "\n")
    sys.stderr.flush()
