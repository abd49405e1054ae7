"""Is a tuned config still right for this machine? What ``autotune check`` and ``autotune run --if-stale`` ask.

A config is stale when this machine's fingerprint differs from the recorded one in a field that matters
(:data:`autotune.config.fingerprint.MATTERS`), when the dataset changed, or when it is older than ``max_age_days``.

The dataset is compared when a folder is given, or else when the folder recorded in the YAML exists on this
machine; a config checked where its dataset is absent (a YAML copied to a new node before the data) is
judged on hardware and software alone.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from pathlib import Path
from typing import Any

from autotune.config import fingerprint
from autotune.config.files import read_yaml
from autotune.config.fingerprint import Difference
from autotune.config.schema import Config
from autotune.dataset import user
from autotune.dataset.paths import printable, recorded_path

logger = logging.getLogger(__name__)

#: A ``created`` stamp this far ahead of the clock (days) is clock skew between machines; further is no age at all.
FUTURE_SLACK_DAYS = 1.0


def age_days(cfg: Config, now: _dt.datetime | None = None) -> float | None:
    """Days since ``cfg`` was created, or None when its ``created`` stamp does not parse."""
    try:
        created = _dt.datetime.fromisoformat(str(cfg.created).replace("Z", "+00:00"))
    except ValueError:
        return None
    if created.tzinfo is None:
        created = created.replace(tzinfo=_dt.timezone.utc)
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return (now - created).total_seconds() / 86400.0


def assess(
    cfg: Config,
    current: dict[str, Any] | None = None,
    *,
    max_age_days: float | None = None,
    dataset: str | os.PathLike[str] | None = None,
    compare_dataset: bool = True,
) -> list[Difference]:
    """Every difference between ``cfg``'s machine and this one (``matters`` says which invalidate it).

    Args:
        cfg: the config to check.
        current: this machine's fingerprint (default: collected now).
        max_age_days: a config older than this gets an ``age`` difference that matters.
        dataset: the dataset folder to compare; default: the recorded folder, when it exists here.
        compare_dataset: False leaves the dataset out.

    Returns:
        The differences; empty when this machine matches.
    """
    diffs = fingerprint.compare(cfg, current)
    # a folder named by the user is read (a wrong path is an error); the recorded one when it can be compared
    folder = dataset if dataset is not None else _recorded_folder(cfg)
    if compare_dataset and folder and (dataset is not None or dataset_not_compared(cfg) is None):
        # the files the study left out count the same whether they are still there or removed
        diffs.extend(fingerprint.diff_dataset(cfg.dataset, fingerprint.dataset_summary(folder, cfg.excluded_files)))
    if max_age_days is not None:
        age = age_days(cfg)
        if age is None:  # no date to count from: it cannot be shown to be young enough
            diffs.append(Difference("created", cfg.created, f"not a date, so not within the {max_age_days:g}-day limit", True))
        elif age < -FUTURE_SLACK_DAYS:  # a clock ahead by more than skew: its age cannot be known
            diffs.append(Difference("created", cfg.created, f"in the future, so not within the {max_age_days:g}-day limit", True))
        elif age > max_age_days:
            shown = next((round(age, d) for d in range(1, 10) if round(age, d) > max_age_days), age)  # never "0.0 -> over the 0.0001-day limit"
            diffs.append(Difference("age_days", shown, f"over the {max_age_days:g}-day limit", True))
    return diffs


def _recorded_folder(cfg: Config) -> str | None:
    """The YAML's dataset folder as this machine names it (a name that is not UTF-8 is recorded escaped)."""
    folder = cfg.dataset.get("path")
    return recorded_path(folder) if isinstance(folder, str) and folder else None


def dataset_not_compared(cfg: Config, dataset: str | os.PathLike[str] | None = None, compare_dataset: bool = True) -> str | None:
    """Why :func:`assess` leaves the dataset out, with the fix; None when it compares it or was asked not to."""
    if not compare_dataset:
        return None
    if not any(cfg.dataset.get(k) is not None for k in fingerprint.DATASET_MATTERS):
        return "the YAML records nothing of its dataset to compare against"
    if dataset is not None:
        return None
    folder = _recorded_folder(cfg)
    if not folder:
        return "the YAML records no dataset folder; pass --dataset DIR to compare one"
    if not fingerprint.dataset_here(folder):
        if isinstance(cfg.dataset.get("function"), dict):  # the user's own pipeline
            if folder.startswith("<"):  # a Dataset object given to AutoLoader or tune() in its process: no file names it
                return f"the YAML was tuned over a Dataset object ({folder}); pass --dataset FILE.py:FUNC (or package.module:FUNC) returning it to compare"
            return f"{folder} is not here (its file is gone or moved); pass --dataset FILE.py:FUNC (or package.module:FUNC) to compare it where it is now"
        return f"{folder} is not here; pass --dataset DIR to compare the images where they are now"
    return None


def is_stale(
    path: str | os.PathLike[str],
    current: dict[str, Any] | None = None,
    *,
    max_age_days: float | None = None,
    dataset: str | os.PathLike[str] | None = None,
) -> tuple[bool, list[str]]:
    """Whether the config at ``path`` needs re-tuning here, and why (one short reason per difference).

    A missing file is stale (the first run of a cron job tunes); a file that is not an autotune config
    raises :class:`~autotune.errors.ConfigError` rather than being overwritten.
    """
    if not Path(path).exists():
        return True, [f"{path} does not exist"]
    cfg = Config.from_dict(read_yaml(path, "config"), path=str(path))
    diffs = [d for d in assess(cfg, current, max_age_days=max_age_days, dataset=dataset) if d.matters]
    return bool(diffs), [str(d) for d in diffs]


def recorded_dataset(path: str | os.PathLike[str]) -> str:
    """The dataset folder the config at ``path`` was tuned on, for ``run --if-stale FILE`` without ``--dataset``.

    Asked every time, stale or not: a cron job written without ``--dataset`` fails the first night, not the night
    the machine changes.

    Raises:
        UserError: the file is missing (its first tuning needs a folder), records none, or its folder is not here.
    """
    from autotune.errors import UserError

    fix = f"pass --dataset DIR (run --dataset DIR --if-stale {printable(str(path))})"
    if not Path(path).exists():
        raise UserError(f"--if-stale {printable(str(path))} does not exist yet, so it records no dataset to tune on; {fix}")
    cfg = Config.from_dict(read_yaml(path, "config"), path=str(path))
    folder = _recorded_folder(cfg)
    if not folder:
        raise UserError(f"--if-stale {printable(str(path))} records no dataset folder (dataset.path); {fix}")
    if not fingerprint.dataset_here(folder):
        own = user.is_target(folder) or isinstance(cfg.dataset.get("function"), dict)  # the user's pipeline: its file is gone or moved
        if own:
            fix = f"pass --dataset FILE.py:FUNC (run --dataset FILE.py:FUNC --batch-size B --if-stale {printable(str(path))})"
        raise UserError(f"--if-stale {printable(str(path))} was tuned on {printable(folder)}, which {'is not here' if own else 'is not a folder here'}; {fix}")
    return folder
