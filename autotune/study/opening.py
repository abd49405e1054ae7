"""Opening a study: a new one under a free name, or one that ``--resume`` may continue.

A resumed study continues only with what it measured (the same dataset, space, device, measurement ...), and
the trials a killed run on this host left RUNNING are marked failed first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import optuna

from autotune.errors import UserError
from autotune.study.evidence import fail_interrupted, trial_attrs
from autotune.study.settings import TuneSettings, make_pruner, make_sampler
from autotune.study.storage import mask_url, not_ours
from autotune.trials.owner import owner_gone

if TYPE_CHECKING:
    from autotune.dataset.scan import Dataset
    from autotune.study.space import SearchSpace

logger = logging.getLogger(__name__)


def _exists(storage: optuna.storages.BaseStorage, name: str) -> bool:
    """Whether ``storage`` holds a study named ``name``: one look-up, not a summary of every study stored."""
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


def open_study(storage: optuna.storages.BaseStorage, url: str, study_name: str, settings: TuneSettings, *, resume: bool = False,
               made_up_name: bool = False) -> tuple[optuna.Study, bool]:
    """The study ``study_name`` in ``storage`` (opened from ``url``), and whether it existed before.

    Args:
        made_up_name: ``study_name`` was made up (from the dataset, the machine and the second), not asked for:
            a study of that name started by another run in the same second makes this one ``NAME-2``.

    Raises:
        UserError: the study exists and ``resume`` is not set, or another program made it.
    """
    base, attempt = study_name, 1
    exists = _exists(storage, study_name)
    while made_up_name and not resume and exists:
        attempt += 1
        study_name = f"{base}-{attempt}"
        exists = _exists(storage, study_name)
    foreign = not_ours(optuna.load_study(study_name=study_name, storage=storage)) if exists else None
    if foreign is not None:  # --resume would add trials to another program's study (and read its trials as ours)
        raise UserError(f"study {study_name!r} in {mask_url(url)} was not made by autotune ({foreign}); pass another --study-name")
    if exists and not resume:
        raise UserError(f"study {study_name!r} already exists in {mask_url(url)}; pass --resume to continue it, or another --study-name")
    while True:
        try:
            study = optuna.create_study(
                storage=storage,
                study_name=study_name,
                direction="maximize",
                sampler=make_sampler(settings.sampler, settings.seed),
                pruner=make_pruner(settings.pruner),
                load_if_exists=resume,
            )
            return study, exists
        except Exception as e:  # Optuna's DuplicatedStudyError, or the database's unique-name error
            if not (isinstance(e, optuna.exceptions.DuplicatedStudyError) or "unique constraint failed: studies.study_name" in str(e).lower()):
                raise
            if not made_up_name or resume or attempt >= 100:  # another run created it between the look and the create
                raise UserError(f"another run created study {study_name!r} in {mask_url(url)} at the same moment; pass --resume to join it, "
                                "or another --study-name") from None
            attempt += 1
            study_name = f"{base}-{attempt}"


def _shown(value: Any) -> str:
    """A measurement setting as its flag takes it: 0.5, 3, warm."""
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _range(dist: optuna.distributions.BaseDistribution) -> str:
    if isinstance(dist, optuna.distributions.CategoricalDistribution):
        return "{" + ", ".join(map(str, dist.choices)) + "}"
    low, high = getattr(dist, "low", "?"), getattr(dist, "high", "?")
    return f"[{low}, {high}]"


def check_resumable(study: optuna.Study, dataset: Dataset, space: SearchSpace, settings: TuneSettings, attrs: dict[str, Any]) -> None:
    """--resume continues a study only with what it measured: the same dataset, space, device, pipeline, ranks
    and model.

    The dataset may sit at another path (another node of a fleet) when its files are the same; the same path
    with changed files is measured on, with a warning.
    """
    a, name = study.user_attrs, study.study_name
    was = a.get("dataset") or {}
    now = dataset.summary()
    if was.get("signature") and was["signature"] != now["signature"]:
        if was.get("path") != now["path"]:
            raise UserError(f"--resume: study {name!r} was tuned on {was.get('path')} ({was.get('samples')} images), not on {now['path']} "
                            f"({now['samples']} images); pass that --dataset, or another --study-name to tune this one")
        logger.warning("the files under %s changed since study %s measured them (%s images then, %s now): resuming on them",
                       now["path"], name, was.get("samples"), now["samples"])
        study.set_user_attr("dataset", now)  # the YAML describes the files the trials from now on measure
    for key, flag in (("space", "--space"), ("device", "--device"), ("pipeline", "--pipeline"), ("ranks", "--gpus"), ("model", "--model")):
        old, new = a.get(key), attrs.get(key)
        if key == "device" and isinstance(old, str) and isinstance(new, str):
            old, new = old.split(":")[0], new.split(":")[0]  # cuda and cuda:0 are one kind
        # no model is a setting too (in a study a run made: it has a space); other keys an old study may lack
        compared = (key == "model" and "space" in a) or (old is not None and new is not None)
        if compared and old != new:
            raise UserError(f"--resume: study {name!r} was tuned with {flag} {a.get(key) or '(none)'}, not {attrs.get(key) or '(none)'}; "
                            f"resume with the same, or tune under another --study-name")
    was_m, now_m = a.get("measurement") or {}, attrs.get("measurement") or {}
    changed = []
    for k, flag in (("window_s", "--window"), ("windows", "--windows"), ("warmup_batches", "--warmup-batches"), ("cache", "--cache")):
        if was_m.get(k) is None or now_m.get(k) is None or was_m[k] == now_m[k]:
            continue
        if k in settings.planned:  # planned from another --budget: the study's own windows, not a refusal
            setattr(settings, k, was_m[k])
            continue
        changed.append((flag, _shown(was_m[k]), _shown(now_m[k])))
    if changed:  # its trials would be ranked against others measured another way, and the YAML would name the first
        raise UserError(f"--resume: study {name!r} measured with {', '.join(f'{f} {w}' for f, w, _ in changed)}, this run with "
                        f"{', '.join(f'{f} {n}' for f, _, n in changed)}; pass {' '.join(f'{f} {w}' for f, w, _ in changed)} "
                        "to resume it, or tune under another --study-name")
    for t in study.get_trials(deepcopy=False):  # the same space name can still give other ranges (see _objective)
        for param, dist in t.distributions.items():
            if param in space and space[param].distribution() != dist:
                raise UserError(f"--resume: study {name!r} sampled {param} from {_range(dist)}, this run from {_range(space[param].distribution())} "
                                "(--batch-size, --gpus, the cores, the dataset's size or the space file changed); resume with the same, "
                                "or tune under another --study-name")


def another_live_owner(study: optuna.Study, me: str | None = None) -> bool:
    """Whether a process other than ``me`` that owns a trial of ``study`` is still running (one on another host
    counts as running): then a trial without an owner may be its own, made a moment before it stamped it."""
    owners = {str(trial_attrs(t).get("owner")) for t in study.get_trials(deepcopy=False) if trial_attrs(t).get("owner")}
    return any(not owner_gone(o) for o in owners - {me})


def fail_stale_trials(study: optuna.Study) -> list[int]:
    """Mark as failed the RUNNING trials that a killed run on this host left behind (its process is gone).

    Without a heartbeat Optuna keeps them RUNNING for ever, and TPE's constant liar avoids their configs.
    Trials of other hosts sharing the storage, and of live processes, are left alone. Returns their numbers.
    """
    stale = []
    others: bool | None = None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        owner = trial_attrs(t).get("owner")
        if not owner:  # killed between Optuna's RUNNING and the owner's stamp: stale unless a live process may own it
            if others is None:
                others = another_live_owner(study)
            gone = not others
        else:  # the same PID started after the trial is another process
            gone = owner_gone(str(owner), since=t.datetime_start.timestamp() if t.datetime_start else None)
        if gone:
            fail_interrupted(study, t)
            stale.append(t.number)
    if stale:
        logger.info("trials %s were left running by a run that was killed: marked failed", stale)
    return stale
