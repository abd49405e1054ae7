"""The search step: name and open the study, give the trials their log folder, then run the model's ceiling
and the trials (the measuring process, started while the dataset was scanned, forks each trial)."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autotune.dataset.paths import safe_name
from autotune.errors import UserError
from autotune.study.budget import TimeBudget
from autotune.study.fleet import studies_for
from autotune.study.storage import mask_url
from autotune.study.tuner import Tuner
from autotune.trials.logs import trial_log
from autotune.tuning.prepare import Prepared
from autotune.tuning.reporter import Reporter
from autotune.tuning.request import RunRequest, retune_flags

#: study attribute: the latest run was stopped by Ctrl-C or SIGTERM (--resume continues it)
INTERRUPTED = "interrupted"
#: study attribute: the winner was chosen but the YAML could not be written; --resume writes it without tuning
UNWRITTEN = "config_unwritten"

#: a ``with`` block whose wall time counts to a stage of the budget (``TimeBudget.stage``), or nothing without one
Stage = Callable[[str], contextlib.AbstractContextManager[Any]]


@dataclasses.dataclass
class OpenStudy:
    """The study a run measures in, through its tuner (which holds the settings from here on)."""

    tuner: Tuner
    name: str
    #: a finished study whose YAML could not be written: --resume writes it, without tuning again
    unwritten: bool
    done_before: int  # trials a resumed study finished before this run


def open_study(request: RunRequest, prep: Prepared, reporter: Reporter) -> OpenStudy:
    """Name the study (``--study-name``; under ``--resume`` the latest for this machine and dataset; else made up),
    make its trial log folder, open it with its attributes, and enqueue the warm start."""
    from autotune.report import LOGS
    from autotune.report import report_dir as report_folder

    name = _study_name(request, prep)
    log_dir = str(report_folder(name, request.reports_dir) / LOGS)  # each trial's output: <log_dir>/<trial>.log
    try:  # before any study exists: a --reports-dir that cannot hold the trial logs is a one-line error
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--reports-dir {str(request.reports_dir)!r}: cannot create {log_dir!r} ({e.strerror or e}); pass a folder you can write") from None
    settings = dataclasses.replace(prep.settings, log_dir=log_dir)
    tuner = Tuner(prep.dataset, prep.space, settings, storage=request.storage, study_name=name, resume=request.resume, attrs=_attrs(request, prep),
                  zygote=prep.zygote, made_up_name=not request.study_name and not request.resume)
    if tuner.study.study_name != name:  # NAME-2: another run made NAME in the same second, and logs to its folder
        name = tuner.study.study_name
        log_dir = str(report_folder(name, request.reports_dir) / LOGS)
        tuner.settings = dataclasses.replace(tuner.settings, log_dir=log_dir)
        Path(log_dir).mkdir(parents=True, exist_ok=True)
    if prep.zygote is not None:
        shutil.move(prep.zygote_log, str(trial_log(log_dir, "zygote")))
    if prep.budget is not None and not tuner.created:  # a resumed study: the time attr counts its earlier runs
        prep.budget.follow(tuner.study.user_attrs.get("time"))
    unwritten = bool(request.resume and tuner.study.user_attrs.get(UNWRITTEN) and "confirmation" in tuner.study.user_attrs)
    if prep.warm is not None and not unwritten:
        tuner.enqueue_warm_start(prep.warm)
    done_before = sum(t.state.is_finished() for t in tuner.study.trials)  # enqueued trials are still to run
    opened = OpenStudy(tuner=tuner, name=name, unwritten=unwritten, done_before=done_before)
    reporter.say(_header(request, prep, opened))
    return opened


def _study_name(request: RunRequest, prep: Prepared) -> str:
    if request.study_name:
        return request.study_name
    if request.resume:
        found = studies_for(request.storage, prep.key, must_exist=True)  # --resume: a storage file not there is an error
        if not found:
            raise UserError(f"--resume: no study for this machine and dataset in {mask_url(request.storage)}; run without --resume to start one")
        return str(found[-1].study_name)
    return f"{safe_name(Path(prep.dataset.root).name)}-{prep.key}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _attrs(request: RunRequest, prep: Prepared) -> dict[str, Any]:
    """The study's attributes: what it measures, where, how (``show``, ``report`` and ``--resume`` read them)."""
    settings = prep.settings
    attrs = {
        "fingerprint_key": prep.key,
        "dataset": prep.dataset.summary(),
        "pipeline": settings.pipeline,  # a stream of the user's is measured whole: imagenet-eval
        "device": prep.device,
        "hardware": prep.fp,
        "measurement": settings.measurement(),
        "budgets": settings.budgets.to_dict(),
        "space": prep.space.name,
        "sampler": settings.sampler,
        "pruner": settings.pruner,
        "ranks": settings.ranks,
        "retune_flags": retune_flags(request),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if settings.model is not None:
        attrs["model"] = settings.model.describe()
    return attrs


def _header(request: RunRequest, prep: Prepared, opened: OpenStudy) -> str:
    """The line that opens the measuring: the study, the data, the device, the space and the trials or the budget."""
    where = f"study {opened.name} in {mask_url(request.storage)}"
    if opened.unwritten:
        return f"{where} chose its config, which was not written: writing it without tuning again"
    n = request.n_trials
    return (f"{where}: {prep.dataset.count_text()}, {opened.tuner.settings.device}, space {prep.space.name}, "
            + (f"{n} {'trial' if n == 1 else 'trials'}" if prep.budget is None else budget_header(prep.budget))
            + (f", resuming after {opened.done_before}" if opened.done_before else "")
            + (" (--resume: no such study yet, so it starts here)" if request.resume and opened.tuner.created else ""))


def budget_header(budget: TimeBudget) -> str:
    """The first line's account of the budget; setup that already took it all says so (not "-11 s left")."""
    left = budget.remaining()
    if left > 0:
        return f"trials until the {budget.total_s:.0f} s budget ({left:.0f} s left)"
    return f"the {budget.total_s:.0f} s budget went on setting up ({budget.elapsed():.0f} s): one trial, then the YAML"


def search(request: RunRequest, prep: Prepared, opened: OpenStudy, reporter: Reporter, stage: Stage) -> None:
    """The model's ceiling (with ``--model`` or ``--step-ms``), then the trials until ``--n-trials``, ``--timeout``
    or the budget ends them. The measuring process stays up for the re-measurement."""
    if opened.unwritten:  # a run that only writes the YAML measures nothing
        return
    tuner = opened.tuner
    if tuner.settings.model is not None:
        from autotune.study.ceiling import measure_ceiling

        reporter.note("measuring the model's ceiling ...")
        with stage("ceiling"):
            tuner.study.set_user_attr("model_ceiling", measure_ceiling(tuner))
    callbacks: list[Callable[..., Any]] = [reporter]
    if prep.budget is not None:
        prep.budget.paired_price = tuner.paired_price
        callbacks.append(prep.budget.stop_callback(tuner.settings.confirm_top, tuner.settings.confirm_repeats))
    with stage("trials"):
        tuner.optimize(callbacks=callbacks, keep_warm=True)  # closed after the re-measurement
