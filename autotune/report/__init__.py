"""The report: reads a study and writes ``<reports_dir>/<study>/`` with ``report.md``, ``report.html`` and PNGs.

Nothing else reads a study for display: the ``studies`` and ``show`` commands use :func:`list_studies`,
:func:`overview` and :func:`trial_rows` from here.

The folder is built under a temporary name beside its final place and renamed into it, so a reader sees the
old report or the new one, never half of one. The trial logs in its ``trials/`` sub-folder (written by the
trial processes while the study runs) move into the new folder: a file being written keeps being written. Plots need
the ``plot`` extra (matplotlib); without it the
report is written without images and says how to install them. A plot that fails is a note, never a
failed run.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from autotune.dataset.paths import safe_name
from autotune.errors import UserError
from autotune.report._data import (
    importances,
    latest_study_name,
    list_studies,
    load,
    outcome_table,
    overview,
    trial_rows,
)
from autotune.report._render import Figure, html_page, markdown

if TYPE_CHECKING:
    import optuna

__all__ = ["IMAGES", "latest_study_name", "list_studies", "load", "overview", "report_dir", "trial_rows", "write_report"]

logger = logging.getLogger(__name__)

#: The plots of a report: (anchor, heading, PNG file name).
IMAGES = (
    ("winner", "Winner against the baselines", "winner_vs_baselines.png"),
    ("throughput", "Throughput per trial over time", "throughput.png"),
    ("backends", "Throughput by backend", "backends.png"),
    ("knobs", "Throughput by knob", "knobs.png"),
    ("importance", "Parameter importance", "importance.png"),
    ("memory", "Memory peak per trial against the budget", "memory.png"),
)


def report_dir(study_name: str, reports_dir: str | os.PathLike[str] = "reports") -> Path:
    """Where a study's report goes: ``<reports_dir>/<safe_name(study_name)>``, never outside ``reports_dir``."""
    return Path(reports_dir) / safe_name(study_name)


def _draw(study: optuna.Study, ov: dict, rows: list[dict], folder: Path) -> tuple[list[Figure], list[str]]:
    from autotune._imports import try_import

    try:
        try_import("plot")
    except UserError as e:
        logger.warning("report without plots: %s", e)
        return [Figure(k, t, None, "Not drawn: matplotlib is missing.") for k, t, _ in IMAGES], [f"No plots: {e}"]
    from autotune.report import _plots

    imps, notes = importances(study)
    draw = {
        "winner": lambda p: _plots.plot_baselines(ov, p),
        "throughput": lambda p: _plots.plot_throughput(rows, ov, p),
        "backends": lambda p: _plots.plot_backends(rows, ov, p),
        "knobs": lambda p: _plots.plot_knobs(rows, imps, p),
        "importance": lambda p: _plots.plot_importance(imps, notes, p),
        "memory": lambda p: _plots.plot_memory(rows, ov, p),
    }
    figures = []
    for key, title, file in IMAGES:
        try:
            caption = draw[key](folder / file)
            figures.append(Figure(key, title, file, caption))
        except Exception as e:  # a plot must never cost the run its report
            logger.warning("report: the %s plot failed: %s", key, e, exc_info=logger.isEnabledFor(logging.DEBUG))
            (folder / file).unlink(missing_ok=True)
            figures.append(Figure(key, title, None, f"Not drawn: {type(e).__name__}: {e}"))
    return figures, notes


#: The sub-folder of a report folder that holds the trial logs (see :mod:`autotune.trials.logs`).
LOGS = "trials"


def _swap_into_place(tmp: Path, target: Path) -> None:
    logs = target / LOGS
    moved = logs.is_dir() and not logs.is_symlink()
    if moved:
        os.rename(logs, tmp / LOGS)  # the same file system: open log files move with it
    old = None
    try:
        if target.exists() or target.is_symlink():
            old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
            old.rmdir()
            os.rename(target, old)
        try:
            os.rename(tmp, target)
        except BaseException:
            if old is not None:
                os.rename(old, target)
            raise
    except BaseException:
        if moved:
            os.rename(tmp / LOGS, logs)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def write_report(study: optuna.Study, storage_url: str, reports_dir: str | os.PathLike[str] = "reports") -> Path:
    """Write the study's report and return its folder.

    Args:
        study: Any stored study, finished or not (running, pruned and failed trials are shown too).
        storage_url: Shown masked (no password) in the report.
        reports_dir: Parent folder; the report goes to ``<reports_dir>/<safe_name(study name)>``.

    Raises:
        UserError: The target is a symbolic link or a file, or the folder cannot be written.
    """
    parent = Path(reports_dir)
    target = report_dir(study.study_name, parent)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise UserError(f"{target} exists and is not a plain folder; remove it or pass another --reports-dir")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=parent))
    except OSError as e:
        raise UserError(f"cannot write reports under {str(parent)!r}: {e.strerror or e}; pass another --reports-dir") from None
    try:
        os.chmod(tmp, 0o777 & ~_umask())
        ov = overview(study, storage_url)
        rows = [{**r, "log": _relative_log(r.get("log"), target)} for r in trial_rows(study)]
        figures, notes = _draw(study, ov, rows, tmp)
        if ov["winner"] is None:
            notes.insert(0, "No trial has completed yet, so there is no winner; the plots show what the trials so far did.")
        failures = outcome_table(rows)
        (tmp / "report.md").write_text(markdown(ov, rows, failures, figures, notes), encoding="utf-8")
        (tmp / "report.html").write_text(html_page(ov, rows, failures, figures, notes, tmp), encoding="utf-8")
        _swap_into_place(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def _relative_log(log: str | None, folder: Path) -> str | None:
    """A trial log as the report links it: relative to the report folder when it lies inside it."""
    if not log:
        return None
    try:
        return Path(log).resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return log


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
