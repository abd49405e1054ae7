"""The trial runner: measure one config in a freshly spawned child process.

A crash, an out-of-memory kill or a hang costs one trial, not the study, and every byte of GPU memory goes
back when the child ends (DALI's pools never shrink). The parent never imports torch or touches a GPU: it
watches the child (wall-clock limit, memory budgets via :mod:`autotune.trials.guard`), relays its per-window rates
to the pruner, and classifies how it ended.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
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
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import STOP_SIGNALS
from autotune.outcomes import Outcome, died_of
from autotune.trials import logs
from autotune.trials.guard import Budgets, Monitor
from autotune.trials.one_rank import signal_built, waited_file
from autotune.trials.owner import owner_gone, this_owner
from autotune.trials.spec import TrialResult, TrialSpec
from autotune.trials.tree import kill_tree
from autotune.trials.warm import BuiltAhead, WarmPool, WarmProcess, reuse_key
from autotune.trials.zygote import ForkedTrial, Zygote

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

logger = logging.getLogger(__name__)

SAMPLE_S = 0.1  # memory sampling period: ten samples a second

#: a trial's temp folder (its child's TMPDIR) is ``<tmp>/autotune-trial-<pid>-XXXXXXXX``, with its owner in OWNER_FILE
TMP_PREFIX = "autotune-trial-"
OWNER_FILE = ".owner"


# --------------------------------------------------------------------------------------------- temp folders
def trial_tmpdir() -> str:
    """A new temp folder for one trial, its owner (``host:pid``, :mod:`autotune.trials.owner`) written inside: the
    trial removes it as it ends, and a later run removes it when a SIGKILL ended this one first."""
    path = tempfile.mkdtemp(prefix=f"{TMP_PREFIX}{os.getpid()}-")
    with open(os.path.join(path, OWNER_FILE), "w") as f:
        f.write(this_owner())
    return path


def remove_stale_tmpdirs(root: str | None = None) -> list[str]:
    """Remove the trial temp folders (and the ``pymp-*`` folders inside) whose owner is gone: a run on this host that
    was killed (SIGKILL) before its trial could remove its own. A live process's folder, another host's, another
    user's, and one without an owner (an older version's, or one being made) are left alone. Returns the paths removed."""
    root = root or tempfile.gettempdir()
    try:
        names = [n for n in os.listdir(root) if n.startswith(TMP_PREFIX)]
    except OSError:
        return []
    removed = []
    for name in names:
        path = os.path.join(root, name)
        marker = os.path.join(path, OWNER_FILE)
        try:
            st = os.stat(marker)
            with open(marker) as f:
                owner = f.read().strip()
        except OSError:
            continue
        if st.st_uid == os.getuid() and owner_gone(owner, since=st.st_mtime):  # written once, as the folder was made
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    if removed:
        logger.info("removed %d temp folder(s) that killed runs left: %s", len(removed), ", ".join(removed))
    return removed


# --------------------------------------------------------------------------------------------- parent
class WindowVerdict(enum.Enum):
    """What ``on_intermediate`` says after each window of a trial."""

    #: measure on
    GO_ON = "go on"
    #: end the trial now as ``pruned`` (the pruner's call: the config is slower than others at this window)
    PRUNE = "prune"
    #: end the trial now as ``complete``, with the windows measured so far (the time budget is spent)
    ENOUGH = "enough"


#: called with (window index, median rate so far) after each window of a trial; its verdict says how it goes on
OnIntermediate = Callable[[int, float], WindowVerdict]


def run_trial(
    spec: TrialSpec,
    *,
    timeout_s: float = 120.0,
    budgets: Budgets | None = None,
    on_intermediate: OnIntermediate | None = None,
    zygote: Zygote | None = None,
    warm: WarmPool | None = None,
    spent_s: float = 0.0,
    after_begin: Callable[[str], bool] | None = None,
) -> TrialResult:
    """Run ``spec`` in a fresh child process (or a warm one of its kind, from ``warm``) and return how it went.

    Args:
        spec: the config and measurement settings.
        timeout_s: wall-clock limit for the whole child (start-up included).
        budgets: memory budgets enforced while the child runs.
        on_intermediate: called with (window index, median rate so far); :attr:`WindowVerdict.PRUNE` prunes the
            trial, :attr:`WindowVerdict.ENOUGH` completes it with the windows measured so far.
        zygote: fork the child from this pre-imported process (:mod:`autotune.trials.zygote`) instead of spawning it.
        warm: keep a kind's process after a complete trial, and measure the next trial of that kind in it
            (:mod:`autotune.trials.warm`); None: every trial in a fresh process.
        spent_s: seconds already spent on this trial (a warm process that failed it first), added to its duration.
        after_begin: called with a file's path once the trial's process has its spec (the tuner builds the next
            trial ahead then, :mod:`autotune.trials.ahead`, with that file as its ``signal``); it returns whether it
            did. This trial's windows begin once the file exists: the build beside it overlaps this trial's set-up and
            build, never a timed window. A trial that ``warm`` holds built ahead is measured at once (its process gets
            ``"go"``, and its duration counts from then), and nothing is built beside it.

    Returns:
        A :class:`TrialResult`; never raises for a failing config. ``KeyboardInterrupt`` is re-raised after
        the child and its workers are gone.
    """
    budgets = budgets or Budgets()
    key = reuse_key(spec) if warm is not None else None
    child = _Child(key is not None and not spec.paired)  # paired loaders may take a warm process, never keep it
    built: BuiltAhead | None = None
    monitor: Monitor | None = None
    start = time.monotonic()
    result: TrialResult | None = None
    last_value: float | None = None
    marks: dict[str, float] = {}
    flag: str | None = None
    beside = False  # a trial is built beside this one, and signals ``flag`` when its build ends
    try:
        built = warm.claim(spec) if warm is not None and key is not None else None
        if built is not None:
            child = built.child
            wp = child.warm
            child.go()
            sent = True  # a build that failed left its result on the connection; a process that died, its exit
        else:
            wp = warm.take(key) if warm is not None and key is not None else None
            # a trial built beside this one builds while this one builds, and its end lets this one's windows begin
            flag = beside_flag() if after_begin is not None else None
            sent = child.begin(spec if flag is None else dataclasses.replace(spec, wait_for=flag), wp, zygote)
        # before the next trial's build begins beside it: the GPU's and /dev/shm's baselines are this trial's own
        monitor = Monitor(budgets, spec.device, ranks=spec.ranks)
        beside = flag is not None and sent and after_begin is not None and after_begin(flag)
        if flag is not None and not beside:
            signal_built(flag)  # nothing is built beside it: its windows begin at once
        proc, conn = child.proc, child.conn
        assert proc is not None and conn is not None  # begun
        if sent:
            ended = functools.partial(_signal_if_ended, warm, flag) if beside and warm is not None and flag else None  # a build beside that died
            result, last_value = _watch(proc, conn, monitor, start, timeout_s, on_intermediate, marks, ended)
            result = _waited_beside(result, flag) if beside else result
        if wp is not None and (not sent or (not marks and proc.poll() is not None) or (result is not None and result.outcome.is_memory)):
            # the warm process had ended as it waited, died before a window, or went over a budget with an earlier
            # trial's leftovers in it: the config gets a fresh process, and the time spent here counts
            logger.info("trial process %d could not measure %s warm (%s): a fresh one does", proc.pid, spec.loader.describe(),
                        result.message if result is not None else "it had ended")
            result = None
        elif key is not None and result is not None:
            child.keep_if_settled(result, marks, wait_s=spec.window_s + 2.0, warm=warm, key=key, monitor=monitor)
    finally:
        # on KeyboardInterrupt too: the child and its workers are gone before this returns; a Ctrl-C or SIGTERM meanwhile comes after
        with deferred_signals():
            child.end(result, monitor, warm)
        if flag is not None and (result is not None or sys.exc_info()[0] is not None):
            # its folder with it: a build beside that ends later signals nobody, and leaves nothing
            shutil.rmtree(os.path.dirname(flag), ignore_errors=True)
    if result is None:  # only a warm process that could not measure leaves none here; an exception is raised instead
        try:  # the fresh process's windows wait for the build begun beside the warm one, as its would have
            result = run_trial(dataclasses.replace(spec, wait_for=flag) if beside else spec, timeout_s=timeout_s, budgets=budgets,
                               on_intermediate=on_intermediate, zygote=zygote, warm=warm, spent_s=spent_s + time.monotonic() - start)
        finally:
            if flag is not None:
                shutil.rmtree(os.path.dirname(flag), ignore_errors=True)
        if beside and warm is not None:
            warm.note_waited(float(result.extra.get("beside_wait_s") or 0.0))
        return result
    assert monitor is not None
    if flag is not None and warm is not None:
        warm.note_waited(float(result.extra.get("beside_wait_s") or 0.0))
    ahead_s = float(result.extra.get("built_ahead_s") or 0.0) if built is not None else 0.0
    if ahead_s and warm is not None:  # its set-up and build overlapped the trial before: a fresh process pays them
        result.extra["saved_s"] = round(float(result.extra.get("saved_s") or 0.0) + ahead_s, 2)
        warm.note_ahead(ahead_s)
    return _with_peaks(result, monitor, time.monotonic() - start + spent_s, last_value)


def beside_flag() -> str:
    """A path, in a folder of its own, that a trial's windows wait for (``TrialSpec.wait_for``) and the trial built
    beside it creates (``TrialSpec.signal``)."""
    return os.path.join(tempfile.mkdtemp(prefix="autotune-beside-"), "built")


class _Child:
    """One trial's process, fresh or warm: its connection, temp folder and log, and how it ends (kept or killed)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep  # the spec asks the process to stay for the next trial of its kind
        self.proc: subprocess.Popen | ForkedTrial | None = None
        self.conn: Connection | None = None
        self.theirs: socket.socket | None = None
        self.tmpdir: str | None = None
        self.log_fd: int | None = None
        self.warm: WarmProcess | None = None
        self.kept: WarmProcess | None = None

    def begin(self, spec: TrialSpec, wp: WarmProcess | None, zygote: Zygote | None) -> bool:
        """Send ``spec`` to the warm process ``wp`` or to a new child; whether it was sent (False: ``wp`` had ended)."""
        self.warm = wp
        self.tmpdir = wp.tmpdir if wp is not None else trial_tmpdir()  # the child's TMPDIR: what its killed workers leave, goes with it
        spec = dataclasses.replace(spec, tmpdir=self.tmpdir, keep=self.keep)
        if wp is not None:
            self.proc, self.conn = wp.proc, wp.conn
            try:
                self.conn.send(spec)
                return True
            except OSError:  # it closed its end: it is ending
                return False
        from multiprocessing.connection import Connection

        ours, self.theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        # the child's stdout and stderr (native libraries' lines and workers' tracebacks too) go to its log file
        self.log_fd = logs.open_log(spec.log) if spec.log else None
        if spec.log and self.log_fd is None:
            self.log_fd = logs.null_output()
        self.proc = _start_child(spec, self.theirs, self.log_fd, zygote)
        self.theirs.close()
        self.theirs = None
        if self.log_fd is not None:
            os.close(self.log_fd)
            self.log_fd = None
        self.conn.send(spec)
        return True

    def go(self) -> None:
        """Start the measurement of a trial built ahead (a spec with ``hold``, sent by :meth:`begin`); a process that
        ended meanwhile is told by what it left on the connection, or by its exit."""
        assert self.conn is not None
        with contextlib.suppress(OSError):
            self.conn.send("go")

    def give_dropped(self, warm: WarmPool, key: tuple[str, str], wait_s: float) -> bool:
        """Tell a trial built ahead and not measured to drop its loader (``"drop"``) and hand its process to ``warm``
        for the next trial of its kind, once it says it has (``("dropped", payload)``) within ``wait_s``; whether it
        did. A build that failed (its result) or has not ended in time, or a process that ended, is left to :meth:`end`."""
        if not self.keep or self.proc is None or self.conn is None or self.proc.poll() is not None:
            return False
        msg = _answer(self.conn, "drop", ("result", "dropped"), wait_s)
        if msg is None or msg[0] == "result":  # none in time, or its build failed: the process ends
            return False
        if self.warm is None:  # a fresh process: its set-up, as its first trial would have priced it
            assert self.tmpdir is not None
            self.warm = WarmProcess(self.proc, self.conn, self.tmpdir, key, start_s=float(msg[1].get("process_setup_s") or 0.0), served=0)
        warm.give(self.warm)
        return True

    def keep_if_settled(self, result: TrialResult, marks: dict[str, float], *, wait_s: float, warm: WarmPool | None, key: tuple[str, str],
                        monitor: Monitor) -> None:
        """Keep the process for the next trial of its kind when it is ready for one, and note what a warm trial saved; a
        paired measurement (never kept) notes the warm process it took: how many trials it measured before."""
        assert self.proc is not None and self.conn is not None
        if not self.keep:
            if self.warm is not None:
                result.extra["warm_process"] = self.warm.served
            return
        payload = _settled(result, marks, self.conn, wait_s)
        if payload is None or warm is None:
            return
        # the process's own start-up: its imports and device set-up as the child timed them (paid by its first trial only)
        start_s = float(payload.get("process_setup_s", result.extra.get("process_setup_s")) or 0.0)
        wp = self.warm
        if wp is None:
            assert self.tmpdir is not None
            self.kept = WarmProcess(self.proc, self.conn, self.tmpdir, key, start_s=start_s, seen=set(monitor.seen))
            return
        wp.served += 1
        wp.seen |= monitor.seen
        saved = max(0.0, wp.start_s - start_s)
        result.extra.update(warm_process=wp.served, saved_s=round(saved, 2))
        warm.note(saved)
        self.kept = wp

    def end(self, result: TrialResult | None, monitor: Monitor | None, warm: WarmPool | None) -> None:
        """Hand a kept process to ``warm``; else end the process and its workers, and remove its temp folder."""
        if self.kept is not None and warm is not None:
            warm.give(self.kept)
        else:
            if self.keep and self.conn is not None:  # a child asked to stay leaves at the connection's end
                self.conn.close()
                self.conn = None
            if self.proc is not None:  # a complete result is in: no need to wait for a slow teardown
                _wait(self.proc, 1.0 if result is not None and result.outcome is Outcome.COMPLETE else 0.0)
                seen = (monitor.seen if monitor is not None else set()) | (self.warm.seen if self.warm is not None else set())
                kill_tree(self.proc.pid, also=seen)
                _wait(self.proc, 2.0)
            if self.theirs is not None:
                self.theirs.close()
            if self.conn is not None:
                self.conn.close()
            if self.tmpdir is not None:
                shutil.rmtree(self.tmpdir, ignore_errors=True)
        if monitor is not None:
            monitor.close()
        if self.log_fd is not None:
            os.close(self.log_fd)


def _settled(result: TrialResult, marks: dict[str, float], conn: Connection, wait_s: float) -> dict[str, Any] | None:
    """The payload of a trial whose process is ready for another trial (None when it is not): it sent a complete result
    itself, or (when the tuner ended the trial after a window: pruned, or the budget spent) it stopped at ``stop``
    and sent its complete result within ``wait_s`` (its window's end, and the loader's close)."""
    if marks.get("from_child"):
        return {} if result.outcome is Outcome.COMPLETE else None
    if result.outcome not in (Outcome.COMPLETE, Outcome.PRUNED) or "first_window" not in marks:
        return None
    msg = _answer(conn, "stop", ("result",), wait_s)
    return dict(msg[2]) if msg is not None and msg[1] == Outcome.COMPLETE.value else None


def _answer(conn: Connection, ask: str, kinds: tuple[str, ...], wait_s: float) -> tuple[Any, ...] | None:
    """Send ``ask`` to a trial's process and return the first message of one of ``kinds`` it sends within ``wait_s``
    (others passed over: a window that raced the ask); None when none came, or the connection closed."""
    try:
        conn.send(ask)
        deadline = time.monotonic() + wait_s
        while (left := deadline - time.monotonic()) > 0 and conn.poll(left):
            msg = conn.recv()
            if msg[0] in kinds:
                return tuple(msg)
    except (EOFError, OSError):
        pass
    return None


def needs_torchvision(spec: TrialSpec) -> bool:
    """Whether the trial of ``spec`` uses torchvision: a kind of loader that does (its own or a paired one's), or a model."""
    from autotune.loaders.backends import get_backend

    return spec.model is not None or any(get_backend(c.backend).needs_torchvision for c in (spec.loader, *spec.paired))


def _start_child(spec: TrialSpec, theirs: socket.socket, log_fd: int | None, zygote: Zygote | None) -> subprocess.Popen | ForkedTrial:
    """The trial's child: forked from ``zygote`` when it is alive, else a fresh interpreter; it reads its spec
    from the socket ``theirs`` and writes its output to ``log_fd`` (None: the tuner's own)."""
    if zygote is not None and zygote.alive():
        # a fresh process forked from one that has imported torch already (and torchvision, where the trial uses it)
        return zygote.fork(theirs.fileno(), log_fd, later=needs_torchvision(spec))
    # a fresh interpreter (not multiprocessing's spawn, which re-imports the caller's __main__)
    return subprocess.Popen(
        [sys.executable, "-m", "autotune.trials", str(theirs.fileno()), str(os.getpid())],
        pass_fds=(theirs.fileno(),),
        env={**os.environ, "TMPDIR": spec.tmpdir or tempfile.gettempdir()},
        stdout=log_fd, stderr=log_fd,  # None: the tuner's own
        start_new_session=True,  # its own process group: Ctrl-C reaches the tuner only, and killpg reaches every worker
    )


def _waited_beside(result: TrialResult, flag: str | None) -> TrialResult:
    """``result`` with ``beside_wait_s``, the seconds its windows waited for the build beside it: the child's payload
    has them, and a trial stopped after a window (pruned) left them in ``flag``'s ``.waited`` file."""
    if flag is not None and "beside_wait_s" not in result.extra:
        with contextlib.suppress(OSError, ValueError):
            result.extra["beside_wait_s"] = round(float(Path(waited_file(flag)).read_text()), 3)
    return result


def _signal_if_ended(warm: WarmPool, flag: str) -> bool:
    """Create ``flag`` once the process building beside a trial has ended without (it died in its build); whether
    ``flag`` is there (then nothing is left to watch)."""
    if os.path.exists(flag):
        return True
    if not warm.ahead_ended():
        return False
    signal_built(flag)
    return True


def _watch(proc: subprocess.Popen | ForkedTrial, conn: Connection, monitor: Monitor, start: float, timeout_s: float,
           on_intermediate: OnIntermediate | None, marks: dict[str, float] | None = None,
           each_sample: Callable[[], object] | None = None) -> tuple[TrialResult, float | None]:
    """Sample the child against the budgets and relay its windows until it ends, is stopped or runs out of time.

    Returns how it ended and the last window's rate (None before the first window). ``marks`` gets ``first_window``
    (seconds from ``start``) and ``from_child`` (the child sent the result itself). ``each_sample`` is called with
    each memory sample, until it returns something true.
    """
    marks = {} if marks is None else marks
    last_value: float | None = None
    next_sample = 0.0
    while True:
        now = time.monotonic()
        if now >= next_sample:
            over = monitor.sample(proc.pid)
            next_sample = now + SAMPLE_S
            if each_sample is not None and each_sample():
                each_sample = None
            if over is not None:
                return TrialResult(over, message=monitor.reason, extra={"over": monitor.over}), last_value
        if now - start > timeout_s:
            slow = f"no result within {timeout_s:.0f} s; raise --trial-timeout if this config is just slow to start"
            return TrialResult(Outcome.TIMEOUT, message=slow), last_value
        try:
            ready = conn.poll(min(SAMPLE_S, max(0.0, next_sample - now)))
        except (EOFError, OSError):
            ready = False
        if ready:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                msg = None
            if msg is None:
                return _died(_wait(proc, 2.0)), last_value
            if msg[0] == "window":
                _, step, value, spread = msg  # the median and (lowest, highest) of the steady windows so far
                last_value = value
                marks.setdefault("first_window", time.monotonic() - start)
                ended = _after_window(step, value, spread, on_intermediate)
                if ended is not None:
                    return ended, last_value
            elif msg[0] == "result":
                _, outcome, payload = msg
                marks["from_child"] = 1.0
                return _from_payload(Outcome(outcome), payload), last_value
        elif proc.poll() is not None:
            # drain a result that raced with the exit
            if conn.poll(0.5):
                continue
            return _died(proc.returncode), last_value


def _after_window(step: int, value: float, spread: tuple[float, float], on_intermediate: OnIntermediate | None) -> TrialResult | None:
    """The trial's result when ``on_intermediate`` ends it after window ``step``; None while it goes on."""
    verdict = on_intermediate(step, value) if on_intermediate is not None else WindowVerdict.GO_ON
    if verdict is WindowVerdict.ENOUGH:  # the time budget ran out: the windows so far are the measurement
        return TrialResult(Outcome.COMPLETE, samples_per_s=value, spread=(spread[0], spread[1]),
                           message=f"measured {step + 1} window(s): the time budget ran out")
    if verdict is WindowVerdict.PRUNE:
        return TrialResult(Outcome.PRUNED, samples_per_s=value, message=f"pruned after window {step}")
    return None


def _with_peaks(result: TrialResult | None, monitor: Monitor, duration_s: float, last_value: float | None) -> TrialResult:
    """``result`` with the trial's duration, the monitor's peaks and, for a trial that ended without a rate, the last
    window's."""
    if result is None:
        raise RuntimeError("the trial ended without a result")  # only an exception leaves none, and it is raised instead
    result.duration_s = duration_s
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
