"""``autotune run``, step by step: :func:`prepare`, :func:`search`, :func:`confirm`, :func:`write`.

:func:`run` takes a resolved :class:`~autotune.tuning.request.RunRequest` and a
:class:`~autotune.tuning.reporter.Reporter`, and returns the run's summary (what ``--json`` prints). Every
storage it opens is closed when it returns, so that scripts can call it again and again.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import time
from typing import Any

from autotune.errors import UserError, interrupt_detail, with_detail
from autotune.study.budget import trial_account
from autotune.study.evidence import contenders, trial_attrs
from autotune.study.storage import closing_storages, is_storage_error, mask_log_secrets, storage_failure
from autotune.trials.owner import this_owner
from autotune.tuning.caveats import keep_busier
from autotune.tuning.confirm import confirm, remeasurements
from autotune.tuning.prepare import Prepared, prepare
from autotune.tuning.reporter import LoggingReporter, Reporter
from autotune.tuning.request import RunRequest
from autotune.tuning.search import INTERRUPTED, OpenStudy, Stage, open_study, search
from autotune.tuning.write import Measured, write


def run(request: RunRequest, reporter: Reporter | None = None) -> dict[str, Any]:
    """Run ``autotune run`` as ``request`` asks, telling ``reporter`` (default: a
    :class:`~autotune.tuning.reporter.LoggingReporter`); returns the summary (printed with ``--json``).

    Raises:
        UserError: bad input (one line), no trial completed (exit code 1), or the study's storage failed (the
            trials stored so far stay).
        KeyboardInterrupt: stopped before any trial completed; its detail says that no config was written.
    """
    mask_log_secrets()  # a storage password never reaches the logs
    try:
        with closing_storages(), contextlib.ExitStack() as early:
            return _steps(request, reporter if reporter is not None else LoggingReporter(), early)
    except UserError:
        raise
    except KeyboardInterrupt as e:  # before the study began (the scan, the set-up): nothing to keep, and the line says so
        if not interrupt_detail(e):
            with_detail(e, "stopped before any trial completed; no config was written")
        raise
    except Exception as e:  # the database failed (a full disk mid-run): one line; the trials stored so far stay
        if is_storage_error(e):
            raise storage_failure(request.storage, e) from None
        raise


def _steps(request: RunRequest, reporter: Reporter, early: contextlib.ExitStack) -> dict[str, Any]:
    prep = prepare(request, reporter, early)
    if not isinstance(prep, Prepared):  # --if-stale found nothing to do, or --reuse wrote a stored study's YAML
        return prep
    opened = open_study(request, prep, reporter)
    measured = _measure(request, prep, opened, reporter)
    return write(request, prep, opened, measured, reporter)


def _measure(request: RunRequest, prep: Prepared, opened: OpenStudy, reporter: Reporter) -> Measured:
    """The search and the re-measurement; a stop (Ctrl-C, SIGTERM) ends them, and the run goes on to write the
    best config so far. The study records the time, the other load and whether the run was stopped."""
    tuner, budget = opened.tuner, prep.budget
    if not opened.unwritten:
        # a resumed study's best so far: the progress line's "best" starts there
        rates = [float(trial_attrs(t).get("samples_per_s") or t.value or 0.0) for t in contenders(tuner.study)]
        reporter.start(request.n_trials, remeasurements(opened, request.n_trials), tuner.settings, done=opened.done_before,
                       budget_s=budget.remaining() if budget is not None else None, best=max(rates) if rates else None,
                       since=budget.start if budget is not None and budget.clock is time.monotonic else None)
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (errors.Terminated) under the CLI
    t0 = time.monotonic()
    stage: Stage = budget.stage if budget is not None else (lambda name: contextlib.nullcontext())
    if budget is not None:
        budget.mark("study open")
        budget.spent["setup"] = budget.elapsed()
    try:
        search(request, prep, opened, reporter, stage)
        confirm(prep, opened, reporter, stage)
    except KeyboardInterrupt as e:
        interrupted = e
    finally:
        reporter.stop()
        tuner.close()
        if budget is not None:
            since = _dt.datetime.now() - _dt.timedelta(seconds=budget.elapsed())  # this run's start: a resumed study's earlier runs apart
            budget.trials_account = trial_account(tuner.study.get_trials(deepcopy=False), this_owner(), since)
            tuner.study.set_user_attr("time", budget.to_dict())
        if not opened.unwritten:  # a run that only writes the YAML measured nothing
            keep_busier(tuner.study, prep.others.to_dict())
        if interrupted is not None or tuner.study.user_attrs.get(INTERRUPTED):  # `autotune studies` names it; --resume clears it
            tuner.study.set_user_attr(INTERRUPTED, interrupted is not None)
    return Measured(interrupted=interrupted, tuning_s=time.monotonic() - t0)
