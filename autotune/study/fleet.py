"""A fleet: many machines share one Optuna storage (PostgreSQL), one study per fingerprint.

Each study carries the user attribute ``fingerprint_key``: a hash of what matters on the machine (GPU
model, usable cores, library versions, ...), the dataset signature, the pipeline, the space and the rank
count (:func:`autotune.tuning.prepare.study_key`). A node whose key already has a finished, fresh study writes that
study's config instead of tuning (``autotune run --reuse``). A study is finished once its winner was chosen
(the ``confirmation`` attribute); a study still running on another node is not reused.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
from pathlib import Path
from typing import Any

import optuna

from autotune.config.staleness import FUTURE_SLACK_DAYS
from autotune.errors import UserError
from autotune.study.storage import absolute_url, mask_url, open_storage

logger = logging.getLogger(__name__)


def _created(s: optuna.study.StudySummary) -> _dt.datetime | None:
    text = s.user_attrs.get("created")
    if text:
        try:
            t = _dt.datetime.fromisoformat(str(text).replace("Z", "+00:00"))
            return t if t.tzinfo else t.replace(tzinfo=_dt.timezone.utc)
        except ValueError:
            pass
    if s.datetime_start is not None:
        return s.datetime_start.astimezone(_dt.timezone.utc) if s.datetime_start.tzinfo else s.datetime_start.replace(tzinfo=_dt.timezone.utc)
    return None


def studies_for(storage_url: str, key: str, *, must_exist: bool = False) -> list[optuna.study.StudySummary]:
    """Studies in the storage whose ``fingerprint_key`` is ``key``, oldest first (``must_exist``: a storage file
    that is not there is an error, not made)."""
    storage = open_storage(storage_url, must_exist=must_exist)
    found = [s for s in optuna.get_all_study_summaries(storage, include_best_trial=False) if s.user_attrs.get("fingerprint_key") == key]
    epoch = _dt.datetime.min.replace(tzinfo=_dt.timezone.utc)
    return sorted(found, key=lambda s: _created(s) or epoch)


def best_of(storage_url: str, studies: list[optuna.study.StudySummary]) -> optuna.Study | None:
    """Of ``studies``, loaded, the one whose chosen config states the most samples/s (the figure its YAML would
    write: re-measured where it was), the newest of equals; None for none."""
    from autotune.study.result import figures

    storage = open_storage(storage_url)

    def rate(study: optuna.Study) -> float:
        try:
            return float(figures(study)["samples_per_s"] or 0.0)
        except Exception:  # a study that cannot state a winner is never the best
            logger.info("study %s states no winner: not reused", study.study_name, exc_info=True)
            return 0.0

    loaded = [optuna.load_study(study_name=s.study_name, storage=storage) for s in reversed(studies)]  # newest first
    return max(loaded, key=rate) if loaded else None  # max keeps the first of equals, the newest


def fresh_studies(storage_url: str, key: str, *, max_age_days: float | None = None, now: _dt.datetime | None = None) -> list[optuna.study.StudySummary]:
    """The finished studies for ``key`` no older than ``max_age_days`` (any age when None), oldest first."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    fresh = []
    for s in studies_for(storage_url, key):
        if "confirmation" not in s.user_attrs:
            logger.info("study %s for this fingerprint is not finished: not reused", s.study_name)
            continue
        created = _created(s)
        if max_age_days is not None and created is not None and (now - created).total_seconds() > max_age_days * 86400:
            logger.info("study %s is older than %g days: not reused", s.study_name, max_age_days)
            continue
        if max_age_days is not None and created is not None and (created - now).total_seconds() > FUTURE_SLACK_DAYS * 86400:
            logger.info("study %s was created in the future (%s): its age is unknown, not reused", s.study_name, created.isoformat())
            continue
        fresh.append(s)
    return fresh


def reuse(storage_url: str, key: str, out_path: str | os.PathLike[str], *, max_age_days: float | None = None) -> dict[str, Any] | None:
    """Write the config of a fresh study for ``key`` to ``out_path`` without tuning.

    Returns:
        The run summary (``action: reused``) or None when the storage has no fresh finished study for ``key``.
    """
    from autotune.config.files import save_config
    from autotune.study.result import config_from_study

    fresh = fresh_studies(storage_url, key, max_age_days=max_age_days)
    study = best_of(storage_url, fresh)
    if study is None:
        return None
    cfg = config_from_study(study, storage_url)
    save_config(cfg, out_path)
    return {
        "action": "reused",
        "study": study.study_name,
        "storage": mask_url(absolute_url(storage_url)),
        "config_path": str(out_path),
        "loader": cfg.loader.to_dict(),
        "result": cfg.result,
        "study_section": cfg.study,
        "interrupted": False,
        "tuning_s": 0.0,
        "fresh_studies": len(fresh),
    }


def previous_best(source: str, storage_url: str | None = None, backends: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    """The loader parameters to warm-start from: an autotune.yaml path, or ``study:NAME`` in ``storage_url``.

    The config is read without the fingerprint warning: re-tuning after a change is the point. With ``backends``
    (the space's), a winner of another backend gives way to the YAML's ``torch_fallback`` where the space tunes
    torch, else to None: nothing of it carries over (the space would have sampled every knob of it afresh).
    """
    from autotune.config.files import read_yaml
    from autotune.config.schema import FALLBACK_BACKEND, Config
    from autotune.study.result import config_from_study

    if source.startswith("study:"):
        name = source.removeprefix("study:")
        if not storage_url:
            raise UserError(f"--warm-start {source} needs --storage URL, the storage that holds the study")
        try:
            study = optuna.load_study(study_name=name, storage=open_storage(storage_url))
        except KeyError:
            raise UserError(f"--warm-start: no study named {name!r} in {mask_url(storage_url)}; list them with 'autotune studies --storage URL'") from None
        cfg = config_from_study(study, storage_url)
    else:
        if not Path(source).exists() and not source.endswith((".yaml", ".yml")):
            raise UserError(f"--warm-start {source!r} is neither a file nor study:NAME; pass an autotune.yaml or study:NAME")
        cfg = Config.from_dict(read_yaml(source, "config"), path=source)
    if backends is None or cfg.loader.backend.value in backends:
        return cfg.loader.to_params()
    fallback = cfg.dataloader if FALLBACK_BACKEND in backends else None
    if fallback is not None:
        logger.info("--warm-start %s: its winner is a %s config, outside the space; its best torch DataLoader instead", source, cfg.loader.backend.value)
        return fallback.to_params()
    logger.warning("--warm-start %s: its winner is a %s config, which the space does not tune (backends: %s); the search starts "
                   "from the baselines", source, cfg.loader.backend.value, ", ".join(backends))
    return None
