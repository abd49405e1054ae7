"""What the terminal shows while a command runs: log lines, the progress of ``autotune run``, one line per failure.

Three modes, on stderr:

- a terminal: a progress bar (trials, then re-measurements k of n) with the best rate, the elapsed time and
  an estimate of the time left; a failed trial adds one line above the bar;
- no terminal (a file, a pipe, a CI log): one plain line per event (trial ended, re-measurement started and
  ended), no carriage returns or colour codes;
- ``--quiet``: errors only.

Log records (autotune's warnings, and Optuna's lines with ``--verbose``) are printed through the same
display, so a line never lands inside the bar. Trial processes never write here: their output goes to their
log files (:mod:`autotune.trials.logs`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from typing import IO, TYPE_CHECKING, Any

from autotune.study.evidence import trial_attrs

if TYPE_CHECKING:
    import optuna

    from autotune.study.tuner import TuneSettings
    from autotune.trials.spec import TrialResult

#: Outcomes that get a line of their own above the bar (a slow config pruned early, or one predicted not to
#: fit in memory, is the search working as meant, not a failure to tell).
LOUD = ("crash", "bad-data", "timeout", "oom-host", "oom-gpu", "shm", "interrupted")
#: Seconds a trial takes besides its timed windows (process start, loader build, warm-up), for the estimate.
TRIAL_OVERHEAD_S = 5.0
#: Seconds to start the process that trials are forked from (it imports torch once).
ZYGOTE_S = 8.0

_display: TerminalReporter | None = None  # the reporter drawing now, if any: log lines go through it


class _Handler(logging.Handler):
    """Writes log records through the active display (above the bar), else to stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            # a file name that is not UTF-8 prints as \xNN, as everywhere else (autotune.dataset.paths.printable)
            text = self.format(record).encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            if _display is not None:
                _display.line(text)
            else:
                sys.stderr.write(text + "\n")
                sys.stderr.flush()
        except Exception:  # noqa: BLE001 - logging must never raise
            self.handleError(record)


class _Formatter(logging.Formatter):
    """``warning: message`` for users; ``LEVEL logger: message`` with --verbose."""

    def __init__(self, verbose: bool) -> None:
        super().__init__("%(levelname)s %(name)s: %(message)s" if verbose else "%(message)s")
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if self.verbose or record.levelno < logging.WARNING:
            return text
        return f"{'warning' if record.levelno < logging.ERROR else 'error'}: {text}"


def configure_logging(verbose: bool, quiet: bool = False) -> Callable[[], None]:
    """One handler on the root logger; Optuna's lines go through it too (only with ``verbose``).

    ``quiet``: errors only. Python warnings become log records, so they obey the same level. Returns a function
    that puts the logging set-up back as it was (``main`` called in-process, by a script or a test).
    """
    import optuna

    root = logging.getLogger()
    optuna_root = logging.getLogger("optuna")
    # handlers that print to the terminal make way for ours; others (a file, a test's capture) stay
    consoles = (sys.stderr, sys.stdout, sys.__stderr__, sys.__stdout__, getattr(sys.stderr, "inner", None), getattr(sys.stdout, "inner", None))
    replaced = [h for h in root.handlers if isinstance(h, logging.StreamHandler) and h.stream in consoles]
    saved = (replaced, root.level, optuna_root.level, optuna_root.propagate)
    for h in replaced:
        root.removeHandler(h)
    handler = _Handler()
    handler.setFormatter(_Formatter(verbose))
    root.addHandler(handler)
    root.setLevel(logging.INFO if verbose else logging.ERROR if quiet else logging.WARNING)
    logging.captureWarnings(True)
    # PIL warns of a large image from 89 M pixels on; the scan refuses images past its own limit, and names them
    warnings.filterwarnings("ignore", message=r"Image size \(\d+ pixels\) exceeds limit")
    optuna.logging.disable_default_handler()  # its own handler printed "[W ...] Trial 0 failed" and a traceback
    optuna.logging.enable_propagation()
    optuna.logging.set_verbosity(optuna.logging.INFO if verbose else optuna.logging.ERROR)

    def restore() -> None:
        logging.captureWarnings(False)
        root.removeHandler(handler)
        for h in saved[0]:
            root.addHandler(h)
        root.setLevel(saved[1])
        optuna_root.setLevel(saved[2])
        optuna_root.propagate = saved[3]
        optuna.logging.enable_default_handler()

    return restore


def _clock(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s // 3600}:{s // 60 % 60:02d}:{s % 60:02d}" if s >= 3600 else f"{s // 60}:{s % 60:02d}"


def _short(text: str, width: int = 160) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= width else text[: width - 3] + "..."


def estimate_s(trials: int, remeasurements: int, window_s: float, windows: int, timeout: float | None = None) -> float:
    """A rough duration of a run before it starts: each trial's windows plus its start-up, then the re-measurements."""
    per = windows * window_s + TRIAL_OVERHEAD_S
    tuning = trials * per if timeout is None else min(trials * per, timeout + per)
    return ZYGOTE_S + tuning + remeasurements * per


class TerminalReporter:
    """What ``autotune run`` tells, on stderr (see the module's docstring for the three modes): the
    :class:`~autotune.tuning.reporter.Reporter` of the command line.

    The run calls :meth:`start`, then Optuna calls the reporter after each trial, then :meth:`remeasure`
    around each re-measurement, and :meth:`stop` at the end; :meth:`note` names a stage; :meth:`say` and
    :meth:`warn` tell the set-up and the result (not with ``--quiet``), :meth:`stopped` how a stopped run ended.
    """

    def __init__(self, quiet: bool = False, stream: IO[str] | None = None) -> None:
        self.stream = stream or sys.stderr
        if quiet:
            self.mode = "off"
        else:
            tty = hasattr(self.stream, "isatty") and self.stream.isatty() and os.environ.get("TERM") != "dumb"
            self.mode = "bar" if tty else "lines"
        self.total = 0
        self.deadline: float | None = None
        self.finished = 0
        self.remeasurements = 0
        self.best: float | None = None
        self.start_time = time.monotonic()
        self.since = self.start_time
        self.remeasured = 0
        self._bar: Any = None
        self._remeasure_task: Any = None
        #: the YAML's path once it is whole: a stop signal after it need not be held back (``autotune.cli._run``)
        self.written: str | None = None

    # -- the run's stages -----------------------------------------------------------------------------
    def start(self, trials: int, remeasurements: int, settings: TuneSettings | None = None, done: int = 0, budget_s: float | None = None,
              best: float | None = None, since: float | None = None) -> None:
        """Trials to run and re-measurements at most; with the settings, the whole run's estimated time is shown.
        With ``budget_s`` (``--budget``: the seconds left of it), the time decides the number of trials; ``best``:
        the best rate of the trials a resumed study completed before; ``since`` (``time.monotonic``): where the
        elapsed time counts from (the command's start, so that elapsed and left add up to the budget; default now)."""
        global _display
        self.total, self.remeasurements = trials, remeasurements
        self.best = best
        self.start_time = time.monotonic()
        self.since = self.start_time if since is None else since
        self.deadline = None if budget_s is None else self.start_time + budget_s
        if self.mode == "off":
            return
        if budget_s is not None:
            if budget_s > 0:
                self._print(f"time budget: {_clock(budget_s)} left for the trials, the re-measurement and the YAML")
        elif settings is not None:
            estimate = estimate_s(trials, remeasurements, settings.window_s, settings.windows, settings.timeout)
            what = f"{trials} {'trial' if trials == 1 else 'trials'}" + (f" and up to {remeasurements} re-measurements" if remeasurements else "")
            self._print(f"estimated time: about {_clock(estimate)} for {what}" + (f" (resuming after {done} finished)" if done else ""))
        if self.mode == "bar":
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                ProgressColumn,
                TextColumn,
                TimeElapsedColumn,
            )
            from rich.table import Column
            from rich.text import Text

            reporter = self

            class LeftColumn(ProgressColumn):
                """The time left, counted down at every refresh (with a budget), not only when a trial ends."""

                def render(self, task) -> Text:
                    if task.fields.get("left") == "" or reporter.deadline is None:
                        return Text(str(task.fields.get("left", "")))
                    return Text(reporter._left())

            fixed = Column(no_wrap=True)
            self._bar = Progress(
                TextColumn("{task.fields[stage]}", table_column=fixed), MofNCompleteColumn(table_column=fixed), BarColumn(bar_width=12, table_column=fixed),
                TextColumn("best {task.fields[best]}/s", table_column=fixed), TimeElapsedColumn(table_column=fixed), LeftColumn(table_column=fixed),
                TextColumn("{task.description}", table_column=Column(no_wrap=True, overflow="ellipsis", ratio=1)),
                console=Console(file=self.stream), transient=False, redirect_stdout=False, redirect_stderr=False, expand=True,
            )
            self._task = self._bar.add_task("", total=trials if self.deadline is None else None, best=f"{self.best:,.0f}" if self.best else "-", stage="trial",
                                            left=self._left() if self.deadline is not None else "")
            self._bar.start()
            _display = self

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """Optuna's callback after each trial."""
        import optuna

        a = trial_attrs(trial)
        outcome = a.get("outcome") or trial.state.name.lower()
        rate = a.get("samples_per_s")
        if trial.state == optuna.trial.TrialState.COMPLETE and trial.value is not None and not a.get("reference"):  # a reference never wins
            # the rate as the line states it (rounded as stored), so that "complete N; best N" agree
            self.best = max(self.best or 0.0, float(rate if isinstance(rate, (int, float)) and rate else trial.value))
        self.finished += 1
        what = f"{outcome} {rate:,.0f} samples/s" if outcome == "complete" and rate else outcome
        if outcome == "complete" and a.get("message"):  # measured in fewer windows (the budget's end), or a repeat
            what += f" ({_short(a['message'])})"
        best = f"{self.best:,.0f}" if self.best else "-"
        if self.mode == "lines":
            count = f"{self.finished}/{self.total}" if self.deadline is None else f"{self.finished}"
            line = f"trial {trial.number} ({count}) {a.get('config', '')}: "
            line += _failure(outcome, a) if outcome != "complete" else what
            self._print(f"{line}; best {best} samples/s; {self._times()}")
        elif self.mode == "bar":
            if outcome in LOUD:
                self.line(f"trial {trial.number} {_failure(outcome, a)}")
            self._bar.update(self._task, advance=1, best=best, left=self._left(), description=f"last: #{trial.number} {a.get('config', '')}: {what}")

    def repeat(self, trial: optuna.trial.FrozenTrial) -> None:
        """A sampled config an earlier trial measured: not measured, not counted; a line says so (the trial numbers
        went 3, 5 without a word until the summary)."""
        if self.mode == "lines":
            self._print(f"trial {trial.number} {trial_attrs(trial).get('config', '')}: {trial_attrs(trial).get('message', 'a repeat, not measured')}")

    def remeasure(self, k: int, n: int, trial: optuna.trial.FrozenTrial, result: TrialResult | None) -> None:
        """Re-measurement ``k`` of ``n`` of ``trial``'s config starts (``result`` None) or has ended."""
        config = trial_attrs(trial).get("config", "")
        self.remeasurements = n
        if result is not None:
            self.remeasured = k
        if self.mode == "lines":
            if result is None:
                self._print(f"re-measuring {k}/{n}: trial {trial.number} {config}; {self._times(k - 1)}")
            else:
                complete = result.samples_per_s and result.outcome.value == "complete"
                what = f"{result.samples_per_s:,.0f} samples/s" if complete else f"{result.outcome.value}: {_short(result.message)}"
                self._print(f"re-measured {k}/{n}: trial {trial.number}: {what}")
        elif self.mode == "bar":
            if self._remeasure_task is None:
                self._bar.update(self._task, description="trials done", left="")
                self._remeasure_task = self._bar.add_task("", total=n, best=f"{self.best:,.0f}" if self.best else "-", stage="re-measure", left="")
            if result is None:
                self._bar.update(self._remeasure_task, description=f"#{trial.number} {config}", left=self._left(k - 1))
            else:
                self._bar.update(self._remeasure_task, completed=k, left=self._left(k))

    def note(self, text: str) -> None:
        """A stage of the run (the model's ceiling)."""
        if self.mode == "lines":
            self._print(text)
        elif self.mode == "bar":
            self._bar.update(self._task, description=text)

    def line(self, text: str) -> None:
        """One line above the bar (or on its own without one)."""
        if self._bar is not None:
            self._bar.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self._print(text)

    def stop(self) -> None:
        global _display
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
        if _display is self:
            _display = None

    def say(self, text: str) -> None:
        """A line of the run's account (the set-up, the result); none with ``--quiet``."""
        if self.mode != "off":
            self.line(text)

    def warn(self, text: str) -> None:
        """A warning of the run's end, with its fix; none with ``--quiet``."""
        self.say(f"warning: {text}")

    def stopped(self, text: str) -> None:
        """How a stopped run ended: told with ``--quiet`` too."""
        self.line(text)

    def wrote(self, path: str) -> None:
        self.written = path

    def counter(self, what: str) -> Callable[[int, int], None] | None:
        """A line at each quarter of the demo set made (none with ``--quiet``)."""
        if self.mode == "off":
            return None
        from autotune.dataset.synth import quarter_lines

        return quarter_lines(what)

    # -- helpers ---------------------------------------------------------------------------------------
    def _print(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def _left(self, remeasured: int | None = None) -> str:
        """The time left: the trials and re-measurements still to run, at the mean pace so far."""
        if self.deadline is not None:
            return f"~{_clock(max(0.0, self.deadline - time.monotonic()))} left"
        remeasured = self.remeasured if remeasured is None else remeasured
        done = self.finished + remeasured
        todo = max(0, self.total - self.finished) + self.remeasurements - remeasured
        if not done or not todo:
            return ""
        return f"~{_clock(todo * (time.monotonic() - self.start_time) / done)} left"

    def _times(self, remeasured: int | None = None) -> str:
        left = self._left(remeasured)
        return f"{_clock(time.monotonic() - self.since)} elapsed" + (f", {left}" if left else "")



def _failure(outcome: str, a: dict[str, Any]) -> str:
    """How a trial that did not complete ended, in one line, with its log for the details."""
    if outcome == "bad-data" and a.get("bad_file"):
        text = f"{outcome}: {a['bad_file']} cannot be decoded: left out of the following trials; fix or remove it before training"
    else:
        msg = _short(a.get("message") or "")
        if msg.startswith(f"{outcome} "):  # "pruned: pruned after window 1" says it twice
            msg = msg[len(outcome) + 1:]
        text = f"{outcome}: {msg}" if msg else outcome
    return text + (f" (log: {_display_path(a['log'])})" if outcome in LOUD and a.get("log") else "")


def _display_path(path: str) -> str:
    """A path relative to the working folder when it lies below it (shorter to read)."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _strict(value: Any) -> Any:
    """``value`` with every float that JSON cannot hold (inf, nan: a study of another program may store them) as null."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict(v) for v in value]
    return value


def write_json(value: Any, out: IO[str] | None = None, **kwargs: Any) -> None:
    """``--json`` output that every parser reads: no ``Infinity`` or ``NaN`` (written as null), odd types as text."""
    import json

    json.dump(_strict(value), out or sys.stdout, allow_nan=False, default=str, **kwargs)


@contextlib.contextmanager
def hand_edited(study: str) -> Iterator[None]:
    """Turn what a study's attributes edited by hand break while it is shown (a string where autotune writes a
    mapping, a winner trial that is not there) into one line; the traceback goes to the ``--verbose`` log."""
    from autotune.errors import UserError

    try:
        yield
    except (AttributeError, TypeError, KeyError, ValueError, IndexError, StopIteration) as e:
        logging.getLogger("autotune").info("study %r could not be shown", study, exc_info=True)
        first = str(e).splitlines()[0][:120] if str(e) else ""
        raise UserError(f"study {study!r} holds an attribute that is not what autotune writes ({type(e).__name__}: {first}); "
                        "was it edited by hand? 'autotune studies' lists the others, 'autotune run --resume' rewrites its record") from None
