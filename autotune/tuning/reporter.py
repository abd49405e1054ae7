"""What a run tells as it goes: one :class:`Reporter` takes every event and line of ``autotune run``.

The steps never print. The command line passes its terminal reporter (``autotune.cli._output.TerminalReporter``:
a progress bar or plain lines on stderr); :func:`autotune.tune` passes a :class:`LoggingReporter` unless given
another, so that a script's own logging set-up decides what is shown.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import optuna

    from autotune.study.tuner import TuneSettings
    from autotune.trials.spec import TrialResult


class Reporter(Protocol):
    """The events of a run, in order: lines of the set-up (:meth:`say`), :meth:`start`, then one call per trial
    (the reporter is Optuna's callback), :meth:`remeasure` around each re-measurement, :meth:`stop`, :meth:`wrote`
    once the YAML is whole, and the last lines (:meth:`say`, :meth:`warn`, :meth:`stopped`)."""

    def start(self, trials: int, remeasurements: int, settings: TuneSettings | None = None, done: int = 0, budget_s: float | None = None,
              best: float | None = None, since: float | None = None) -> None:
        """The trials begin: ``trials`` to run (a cap under a budget) and ``remeasurements`` at most; ``done``: the
        trials a resumed study ran before; ``budget_s``: the seconds left of the budget; ``best``: the resumed
        study's best rate; ``since`` (``time.monotonic``): where the elapsed time counts from."""

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """A trial ended (Optuna's callback)."""

    def repeat(self, trial: optuna.trial.FrozenTrial) -> None:
        """A sampled config an earlier trial measured: not measured again, not counted."""

    def remeasure(self, k: int, n: int, trial: optuna.trial.FrozenTrial, result: TrialResult | None) -> None:
        """Re-measurement ``k`` of ``n`` of ``trial``'s config starts (``result`` None) or has ended."""

    def note(self, text: str) -> None:
        """A stage of the measuring (the model's ceiling)."""

    def stop(self) -> None:
        """The measuring is over (also when it was stopped); called again, it does nothing."""

    def say(self, text: str) -> None:
        """A line of the run's account: the set-up, the winner, where the YAML went."""

    def warn(self, text: str) -> None:
        """One of the warnings the end of a run gives (a run too short, a busy machine), with its fix."""

    def stopped(self, text: str) -> None:
        """How a run stopped by a signal ended: what was written and how to continue. Told whatever else is shown."""

    def wrote(self, path: str) -> None:
        """The YAML at ``path`` is whole: a stop from now on loses nothing of it."""

    def counter(self, what: str) -> Callable[[int, int], None] | None:
        """A ``progress(done, total)`` for making ``what`` (the demo images), or None to make them silently."""


class LoggingReporter:
    """The :class:`Reporter` of :func:`autotune.tune`: every line a log record of ``autotune.tuning``, the
    warnings at WARNING, the run's account at INFO, each trial at DEBUG."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.log = logger or logging.getLogger("autotune.tuning")

    def start(self, trials: int, remeasurements: int, settings: TuneSettings | None = None, done: int = 0, budget_s: float | None = None,
              best: float | None = None, since: float | None = None) -> None:
        if budget_s is not None:
            self.log.info("trials until the budget's end (%.0f s left)", budget_s)
        else:
            self.log.info("%d trials, up to %d re-measurements", trials, remeasurements)

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        from autotune.study.evidence import trial_attrs  # optuna's: not at `import autotune`

        a = trial_attrs(trial)
        self.log.debug("trial %d %s: %s %s", trial.number, a.get("config", ""), a.get("outcome") or trial.state.name.lower(), a.get("samples_per_s") or "")

    def repeat(self, trial: optuna.trial.FrozenTrial) -> None:
        self.log.debug("trial %d %s: %s, not measured", trial.number, trial.user_attrs.get("config", ""),  # set before it is told
                       (trial.user_attrs.get("result") or {}).get("outcome") or "a repeat")

    def remeasure(self, k: int, n: int, trial: optuna.trial.FrozenTrial, result: TrialResult | None) -> None:
        if result is not None:
            self.log.debug("re-measured %d/%d: trial %d: %s", k, n, trial.number, result.samples_per_s or result.outcome.value)

    def note(self, text: str) -> None:
        self.log.info("%s", text)

    def stop(self) -> None:
        pass

    def say(self, text: str) -> None:
        self.log.info("%s", text)

    def warn(self, text: str) -> None:
        self.log.warning("%s", text)

    def stopped(self, text: str) -> None:
        self.log.warning("%s", text)

    def wrote(self, path: str) -> None:
        pass

    def counter(self, what: str) -> Callable[[int, int], None] | None:
        return None
