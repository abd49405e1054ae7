"""How a trial ended."""

from __future__ import annotations

import enum
import signal


class Outcome(str, enum.Enum):
    """The outcome of one trial, stored as the trial's ``outcome`` user attribute.

    Memory outcomes (``predicted-oom``, ``oom-gpu``, ``oom-host``, ``shm``) and ``timeout`` are told to
    Optuna as *pruned* trials with a zero score, so the sampler learns to avoid that region; ``crash`` and
    ``bad-data`` are told as *failed* trials (they say nothing about the config's speed). A ``repeat`` is a
    sampled config that an earlier trial already measured: Optuna is told the earlier result, nothing is measured.
    """

    COMPLETE = "complete"
    PRUNED = "pruned"  # stopped early by the pruner: clearly slower than the others
    PREDICTED_OOM = "predicted-oom"
    OOM_GPU = "oom-gpu"
    OOM_HOST = "oom-host"
    SHM = "shm"
    TIMEOUT = "timeout"
    CRASH = "crash"
    BAD_DATA = "bad-data"
    INTERRUPTED = "interrupted"
    REPEAT = "repeat"  # a sampled config an earlier trial measured: told the earlier result, not measured again
    DOMINATED = "dominated"  # a sampled config of a kind measured far below another kind: told the worst, not measured

    @property
    def is_memory(self) -> bool:
        return self in (Outcome.PREDICTED_OOM, Outcome.OOM_GPU, Outcome.OOM_HOST, Outcome.SHM)

    @property
    def steers_sampler(self) -> bool:
        """Whether the outcome is a property of the config that the sampler should learn to avoid."""
        return self.is_memory or self in (Outcome.TIMEOUT, Outcome.PRUNED)

    def __str__(self) -> str:
        return self.value


#: outcomes told to the sampler without a measurement (a repeat, a config of a dominated kind): no trial ran, none failed
TOLD = (Outcome.REPEAT.value, Outcome.DOMINATED.value)


def died_of(exitcode: int | None, what: str) -> tuple[Outcome, str]:
    """The outcome of ``what`` (a trial or rank process) that ended with ``exitcode`` before it reported, and why.

    Killed by SIGBUS: shared memory ran out (``shm``); by SIGKILL: most likely the kernel's out-of-memory
    killer (``oom-host``); anything else (a real-time signal too, which has no name) is a ``crash``.
    """
    if exitcode is None or exitcode >= 0:
        return Outcome.CRASH, f"{what} exited with code {exitcode} before reporting"
    try:
        sig = signal.Signals(-exitcode)
    except ValueError:  # a real-time signal: no name, no known meaning
        return Outcome.CRASH, f"{what} died with signal {-exitcode}"
    outcome = {signal.SIGBUS: Outcome.SHM, signal.SIGKILL: Outcome.OOM_HOST}.get(sig, Outcome.CRASH)
    hint = " (killed: the kernel's out-of-memory killer?)" if sig is signal.SIGKILL else ""
    return outcome, f"{what} died with {sig.name}{hint}"


class Backend(str, enum.Enum):
    """A kind of loader, as ``loader.backend`` names it. ``torch`` and ``dali`` are built in; a kind registered in
    :mod:`autotune.loaders.backends` beyond them gets its member when it is registered (:meth:`add`)."""

    TORCH = "torch"
    DALI = "dali"

    @classmethod
    def add(cls, name: str) -> Backend:
        """The member named ``name``, made when there is none yet: ``Backend(name)`` finds it from then on. It is not
        listed by ``list(Backend)``, which holds the built-in kinds."""
        if name not in cls._value2member_map_:
            member = str.__new__(cls, name)
            member._name_, member._value_ = name.upper(), name
            cls._value2member_map_[name] = member
        return cls(name)

    def __str__(self) -> str:
        return self.value
