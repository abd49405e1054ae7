"""Warm trial processes: one process measures a kind's configs one after another during the search.

A DALI trial on an H200 took 4.6 s, of which the measurement was 1.5 s: the rest was the process's import of DALI,
its CUDA context and the decoder's set-up. A kind whose loaders can be built and torn down in one process
(``LoaderBackend.reuses_process``) keeps its trial process after a complete trial, and the next trial of that kind is
sent to it, so the search screens several configs in the time of one fresh trial.

What stays as it was:

- A trial that fails, times out, goes over a memory budget or is stopped ends its process, as before: the next starts
  fresh.
- Fresh re-measurements (each contender alone, ``Tuner.confirm``) run in fresh processes, so their figures are a
  fresh process's, as training will see it. The paired re-measurement (the contenders side by side, compared round by
  round: :mod:`autotune.study.paired`) runs in the idle process of their kind where one is left, and ends it: its
  start-up and a DALI process's decoder set-up (5 s of a 13 s re-measurement on an H100) go to trials instead. Its
  rates compare the contenders with each other in one process; a decoder held there left a DALI pipeline's rate
  within the spread of one built alone (``benchmarks/dali_build.py --held``).
- A warm trial's result says so (``warm_process``: how many trials the process has measured, this one included; in
  the paired re-measurement's record, how many it measured before) and how much start-up it
  saved (``saved_s``): the time budget prices a fresh re-measurement with it.

One idle process is kept a kind, two where trials are built ahead (they take turns: one measures while the other
builds). Each gives back its loader's memory as it waits, but keeps its CUDA context and, for DALI on a GPU, its held
decoder (about 120 MiB), outside the memory budgets of the trial measured meanwhile. :meth:`WarmPool.close` ends them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import subprocess
from typing import TYPE_CHECKING, Any

from autotune.trials.tree import kill_tree

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    import psutil

    from autotune.trials.spec import TrialSpec
    from autotune.trials.zygote import ForkedTrial


def kind_key(backend: Any, device: str) -> tuple[str, str] | None:
    """The warm processes' key of a loader of ``backend`` (a name or the enum) on ``device``: its kind's name and the
    device, or None for a kind that does not reuse its process."""
    from autotune.loaders.backends import BACKENDS

    kind = BACKENDS.get(getattr(backend, "value", str(backend)))
    return (kind.name, device) if kind is not None and kind.reuses_process else None


def reuse_key(spec: TrialSpec) -> tuple[str, str] | None:
    """Which warm process may measure ``spec`` (its kind and device), or None when it needs a fresh one: a kind that
    does not reuse its process, several ranks, a model's training step, or a fault the test suite injects. Paired
    loaders (the re-measurement, :mod:`autotune.trials.paired`) of the kind may take one; they never keep it."""
    key = kind_key(spec.loader.backend, spec.device)
    if key is None or spec.ranks != 1 or spec.model is not None or spec.inject or any(kind_key(c.backend, spec.device) != key for c in spec.paired):
        return None
    return key


@dataclasses.dataclass
class WarmProcess:
    """A trial process that measured a complete trial and waits for the next spec of its kind."""

    proc: subprocess.Popen | ForkedTrial
    conn: Connection
    tmpdir: str
    key: tuple[str, str]
    #: its first trial's seconds to the first window less the loader's build and warm-up: a fresh process's start-up
    start_s: float
    served: int = 1
    seen: set[psutil.Process] = dataclasses.field(default_factory=set)

    def alive(self) -> bool:
        """Whether it still runs; a forked one also needs its zygote (it dies with it, unreported)."""
        zygote = getattr(self.proc, "zygote", None)
        return self.proc.poll() is None and (zygote is None or zygote.alive())

    def end(self) -> None:
        """Close its connection (it exits at once), then make sure it and its workers are gone, and its temp folder."""
        with contextlib.suppress(OSError):
            self.conn.close()
        try:
            self.proc.wait(1.0)
        except subprocess.TimeoutExpired:
            pass
        kill_tree(self.proc.pid, also=self.seen)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(2.0)
        shutil.rmtree(self.tmpdir, ignore_errors=True)


#: the longest a dropped trial built ahead is waited for to close its loader and give back its memory (0.2-0.5 s where
#: its build has ended); a process still setting itself up or building is ended instead
DROP_WAIT_S = 1.5


@dataclasses.dataclass
class BuiltAhead:
    """A trial whose process builds its loader, or holds it built, until its turn (:mod:`autotune.trials.ahead`)."""

    spec: TrialSpec
    #: the runner's handle on its process (``runner._Child``): ``go()`` starts the measurement, ``end()`` drops it
    child: Any

    def matches(self, spec: TrialSpec) -> bool:
        """Whether it was built for ``spec``: the same config, measurement and log, over the same dataset object (a
        file left out since, as undecodable, makes a new one)."""
        return spec.dataset is self.spec.dataset and (spec.loader, spec.log, spec.window_s, spec.windows, spec.warmup_batches, spec.device) == (
            self.spec.loader, self.spec.log, self.spec.window_s, self.spec.windows, self.spec.warmup_batches, self.spec.device)

    def drop(self, pool: WarmPool | None = None) -> None:
        """Drop the trial: its process closes the loader and goes to ``pool`` for the next trial of its kind; where
        it cannot (no pool, a build that failed or has not ended within :data:`DROP_WAIT_S`), the process ends (it
        leaves its wait at the connection's end), and its temp folder with it."""
        key = reuse_key(self.spec)
        if pool is None or key is None or not self.child.give_dropped(pool, key, DROP_WAIT_S):
            self.child.end(None, None, None)


class WarmPool:
    """The warm trial processes a study keeps (``per_kind`` a kind: DALI's stay while a torch start is measured), the
    trial built ahead, and what reuse saved."""

    def __init__(self, per_kind: int = 1) -> None:
        #: idle processes a kind, the newest last: two where trials are built ahead (one measures, the other builds)
        self.per_kind = max(1, per_kind)
        self._idle: dict[tuple[str, str], list[WarmProcess]] = {}
        self._kept: dict[tuple[str, str], list[WarmProcess]] = {}  # every process kept a kind, idle or taken again
        self._ahead: BuiltAhead | None = None
        self.reused = 0
        self.saved_s = 0.0
        self.built_ahead = 0
        self.ahead_s = 0.0
        self.waited_s = 0.0  # what the trials beside them waited for their builds: not hidden

    def take(self, key: tuple[str, str]) -> WarmProcess | None:
        """The newest idle process for ``key``, alive (one that died waiting is cleaned up), or None."""
        idle = self._idle.get(key, [])
        while idle:
            wp = idle.pop()
            if wp.alive():
                return wp
            wp.end()
        return None

    def give(self, wp: WarmProcess) -> None:
        """Keep ``wp`` for a later trial of its kind; one that died waiting is cleaned up, and the oldest idle one
        beyond :attr:`per_kind` ends."""
        idle = [wp]
        for p in reversed(self._idle.get(wp.key, [])):
            if p is wp:
                continue
            if p.alive() and len(idle) < self.per_kind:
                idle.insert(0, p)
            else:
                p.end()
        self._idle[wp.key] = idle
        self._kept[wp.key] = [p for p in self._kept.get(wp.key, []) if p is not wp and p.alive()] + [wp]

    def idle(self, key: tuple[str, str]) -> bool:
        """Whether an idle process of ``key``'s kind still runs (one that died waiting is cleaned up)."""
        wp = self.take(key)
        if wp is not None:
            self._idle.setdefault(key, []).append(wp)
        return wp is not None

    def only(self, key: tuple[str, str]) -> None:
        """End every idle process but the newest of ``key``'s kind, and the trial built ahead: the paired re-measurement
        that takes it is measured beside no other process's memory."""
        self.drop_ahead(reuse=False)
        keep = self.take(key)
        for wp in [p for kind in self._idle.values() for p in kind]:
            wp.end()
        self._idle = {key: [keep]} if keep is not None else {}
        self._kept = {k: [p for p in v if p is keep] for k, v in self._kept.items()}

    def live(self, key: tuple[str, str]) -> int:
        """How many processes of ``key``'s kind the pool has kept that still run (idle, measuring or building): below
        :attr:`per_kind`, a trial built ahead may start a fresh one."""
        self._kept[key] = [p for p in self._kept.get(key, []) if p.alive()]
        return len(self._kept[key])

    def note(self, saved_s: float) -> None:
        self.reused += 1
        self.saved_s += saved_s

    def hold(self, built: BuiltAhead) -> None:
        """Keep ``built`` for its trial (one at a time: one held before it is dropped)."""
        self.drop_ahead()
        self._ahead = built

    def holds(self) -> TrialSpec | None:
        """The spec of the trial held built ahead, if any."""
        return self._ahead.spec if self._ahead is not None else None

    def claim(self, spec: TrialSpec) -> BuiltAhead | None:
        """The trial built ahead for ``spec``, taken from the pool; None when none is held for it."""
        b = self._ahead
        if b is None or not b.matches(spec):
            return None
        self._ahead = None
        return b

    def ahead_ended(self) -> bool:
        """Whether the process of the trial held built ahead has ended: one that died in its build (a native crash)
        created no ``signal``, and the trial beside it would wait its whole ``BESIDE_WAIT_S``."""
        proc = getattr(self._ahead.child, "proc", None) if self._ahead is not None else None
        return proc is not None and proc.poll() is not None

    def drop_ahead(self, reuse: bool = True) -> None:
        """Drop the trial held built ahead, if any: it is not measured. Its process stays for the next trial of its
        kind (``reuse``; a fresh one's set-up took 2.5-3 s on an H100, and a trial beside it waited for it), or ends."""
        b, self._ahead = self._ahead, None
        if b is not None:
            b.drop(self if reuse else None)

    def note_ahead(self, ahead_s: float) -> None:
        self.built_ahead += 1
        self.ahead_s += ahead_s

    def note_waited(self, waited_s: float) -> None:
        """A trial's windows waited ``waited_s`` for the build beside it: that much of the build was not hidden."""
        self.waited_s += waited_s

    def close(self) -> None:
        self.drop_ahead(reuse=False)
        idle, self._idle, self._kept = [wp for kind in self._idle.values() for wp in kind], {}, {}
        for wp in idle:
            wp.end()

    def summary(self) -> dict[str, Any]:
        """The study attr ``warm_processes``: trials measured in a warm process, and the start-up seconds saved; trials
        built ahead, and the seconds of set-up and build that the trial before each overlapped."""
        out: dict[str, Any] = {"trials": self.reused, "saved_s": round(self.saved_s, 1)}
        if self.built_ahead:
            out["built_ahead"] = {"trials": self.built_ahead, "hidden_s": round(max(0.0, self.ahead_s - self.waited_s), 1)}
        return out
