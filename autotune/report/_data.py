"""What a report shows, read from the study alone: trial rows, the winner, the baselines, importances.

The CLI's ``studies`` and ``show`` commands use these functions too, so one module reads studies for display.
"""

from __future__ import annotations

import datetime as _dt
import logging
import warnings
from collections.abc import Callable
from typing import Any

import optuna

from autotune.config.schema import LoaderConfig
from autotune.errors import UserError
from autotune.outcomes import TOLD
from autotune.study.evidence import told_later_start, trial_attrs
from autotune.study.selection import ceiling_attrs, study_ceiling
from autotune.study.storage import absolute_url, mask_url, not_ours, open_storage

logger = logging.getLogger(__name__)

#: Knobs drawn as curves first (the ones that matter most for a loader), then the most important others.
KEY_KNOBS = ("num_workers", "num_threads")
BASELINE_ROLES = ("defaults", "heuristic", "dali-heuristic", "warm-start")
MEMORY_OUTCOMES = ("predicted-oom", "oom-gpu", "oom-host", "shm")

_TS = optuna.trial.TrialState


def open_existing_storage(url: str) -> optuna.storages.BaseStorage:
    """Open a storage for reading (any URL ``autotune run`` opens); a SQLite or journal file that does not exist is
    an error, not a new empty file."""
    return open_storage(url, must_exist=True)


def load(url: str, name: str) -> optuna.Study:
    """Load study ``name`` from storage ``url``, or raise a one-line :class:`UserError`."""
    storage = open_existing_storage(url)
    try:
        study = optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UserError(f"no study named {name!r} in {mask_url(url)}; list them with 'autotune studies --storage URL'") from None
    foreign = not_ours(study)
    if foreign is not None:  # another program's study in a shared storage: its figures are not samples/s
        raise UserError(f"study {name!r} in {mask_url(url)} was not made by autotune ({foreign}); "
                        "pick an autotune study with 'autotune studies --storage URL'")
    return study


def latest_study_name(url: str) -> str:
    """The most recently started autotune study in a storage (for commands run without ``--study``); another
    program's studies in the same storage are passed over."""
    storage = open_existing_storage(url)
    summaries = sorted(optuna.get_all_study_summaries(storage, include_best_trial=False),
                       key=lambda s: (s.datetime_start or _dt.datetime.min, s._study_id), reverse=True)
    for s in summaries:
        if len(s.directions) == 1 and not_ours(optuna.load_study(study_name=s.study_name, storage=storage)) is None:
            return s.study_name
    if summaries:
        raise UserError(f"the storage {mask_url(url)} holds no study made by autotune (only another program's); run 'autotune run' first")
    raise UserError(f"the storage {mask_url(url)} holds no study; run 'autotune run' first")


def _outcome(t: optuna.trial.FrozenTrial) -> str:
    return trial_attrs(t).get("outcome") or ("complete" if t.state == _TS.COMPLETE else t.state.name.lower())


def _described(params: Any) -> str:
    """A queued trial's config (its ``loader_params``, set when it was queued) as trials describe theirs; "" when none."""
    if not isinstance(params, dict):
        return ""
    try:
        return LoaderConfig.from_params(params).describe()
    except (UserError, KeyError, TypeError, ValueError):
        return ""


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One plain dict per trial, in trial order (what the per-trial tables and plots show)."""
    ceiling = study_ceiling(study.user_attrs)
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = trial_attrs(t)
        loader = a.get("loader") or a.get("loader_params") or dict(t.params)
        rate = a.get("samples_per_s")
        if rate is None and t.state == _TS.COMPLETE and t.value is not None and a.get("outcome") != "repeat":  # a repeat measured nothing
            rate = round(float(t.value), 1)
        rows.append({
            "trial": t.number,
            "state": t.state.name.lower(),
            "outcome": _outcome(t),
            "role": a.get("role"),
            "config": a.get("config") or _described(a.get("loader_params")) or ", ".join(f"{k}={v}" for k, v in sorted(t.params.items())),
            "backend": (loader or {}).get("backend"),
            "loader": loader,
            "samples_per_s": rate,
            "spread": a.get("spread"),
            "peak_host_mib": a.get("peak_host_mib"),
            "peak_gpu_mib": a.get("peak_gpu_mib"),
            "startup_s": a.get("startup_s"),
            "duration_s": a.get("duration_s"),
            "fraction_of_ceiling": _fraction(ceiling, loader, rate, a.get("fraction_of_ceiling")),
            "message": a.get("message") or "",
            "repeat_of": a.get("repeat_of"),
            "log": a.get("log"),
            "start": t.datetime_start,
            "end": t.datetime_complete,
        })
    return rows


def _fraction(ceiling: dict[str, Any] | None, loader: Any, rate: Any, stored: Any) -> Any:
    """A trial's fraction of the model's ceiling, from the study's ceiling where it can be (so that a study written
    before the ceiling counted every rank reads right), else as the trial stored it."""
    try:
        b = int((loader or {}).get("batch_size"))  # type: ignore[arg-type]  # a missing or odd value is the except's
    except (TypeError, ValueError):
        return stored
    return ceiling_attrs(ceiling, b, rate if isinstance(rate, (int, float)) else None).get("fraction_of_ceiling", stored)


def outcome_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures grouped by outcome: count, trial numbers and the first message."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["outcome"] in ("complete", *TOLD, "waiting"):  # a repeat failed nothing (not measured again); a waiting one never ran
            continue
        g = groups.setdefault(r["outcome"], {"outcome": r["outcome"], "count": 0, "trials": [], "message": ""})
        g["count"] += 1
        g["trials"].append(r["trial"])
        if not g["message"] and r["message"]:
            g["message"] = r["message"]
    return sorted(groups.values(), key=lambda g: (-g["count"], g["outcome"]))


def _ceiling(value: Any) -> float | None:
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, dict):
        for k in ("samples_per_s", "rate", "ceiling"):
            if isinstance(value.get(k), (int, float)):
                return float(value[k])
    return None


def _mapping(value: Any) -> dict[str, Any]:
    """A user attribute that should be a mapping: another program's study may hold anything there."""
    return value if isinstance(value, dict) else {}


def overview(study: optuna.Study, storage_url: str) -> dict[str, Any]:
    """The study's settings, the winner with its evidence, and the baselines it is compared with."""
    from autotune.study.evidence import confirmation_method
    from autotune.study.result import BASELINE_ROLES as COMPARED
    from autotune.study.result import (
        baseline_key,
        baseline_rates,
        baseline_spreads,
        baseline_trials,
        figures,
        outcome_counts,
    )

    a = study.user_attrs
    ceiling = study_ceiling(a)
    rows = trial_rows(study)
    by_number = {r["trial"]: r for r in rows}
    try:
        fig = figures(study)  # the same figures the YAML holds
    except (UserError, StopIteration):
        fig = None
    win = None
    if fig is not None:
        win = {**by_number[fig["trial"]], "scores": fig["scores"], "samples_per_s": fig["samples_per_s"], "spread": fig["spread"]}
        win["fraction_of_ceiling"] = _fraction(ceiling, win.get("loader"), fig["samples_per_s"], win.get("fraction_of_ceiling"))
    rates, spreads = baseline_rates(study), baseline_spreads(study)
    baselines: dict[str, dict[str, Any]] = {}
    for role, t in baseline_trials(study).items():
        if role in BASELINE_ROLES:
            # the rate and spread like for like with the winner's: of its re-measurements where it had some
            b = dict(by_number[t.number])
            if rates.get(role) is not None:
                b["samples_per_s"] = rates[role]
            if role in spreads:
                b["spread"] = spreads[role]
            baselines[role] = b
    speedups = {role: fig[f"speedup_vs_{baseline_key(role)}"] for role in COMPARED if fig and fig.get(f"speedup_vs_{baseline_key(role)}") is not None}
    conf = a.get("confirmation")
    if conf:
        conf = {**conf, "method": confirmation_method(conf)}
    starts = [r["start"] for r in rows if r["start"] is not None]
    return {
        "study": study.study_name,
        "storage": mask_url(absolute_url(storage_url)),  # the dashboard line opens it from any folder
        "created": a.get("created") or (_stamp(min(starts)) if starts else None),
        "dataset": _mapping(a.get("dataset")),
        "pipeline": a.get("pipeline"),
        "device": a.get("device"),
        "hardware": _mapping(a.get("hardware")),
        "budgets": _mapping(a.get("budgets")),
        "measurement": _mapping(a.get("measurement")),
        "space": a.get("space"),
        "sampler": a.get("sampler"),
        "pruner": a.get("pruner"),
        "ranks": a.get("ranks"),
        "model": a.get("model"),
        "model_ceiling": _ceiling(ceiling if ceiling is not None else a.get("model_ceiling")),
        "model_ceiling_batch": ceiling.get("batch_size") if ceiling else None,
        "model_ceiling_ranks": ceiling.get("ranks") if ceiling else None,
        "confirmation": conf,
        "time": a.get("time") if isinstance(a.get("time"), dict) else None,
        "other_load": a.get("other_load") if isinstance(a.get("other_load"), dict) else None,
        "trials": len(rows),
        "outcomes": outcome_counts(study),
        "later_start": sum(1 for t in study.get_trials(deepcopy=False) if told_later_start(t)),  # of the dominated ones
        "winner": win,
        "baselines": baselines,
        "speedups": speedups,
    }


#: Fewer completed trials than this in a scope: its importances are noted as a rough guide.
FEW_FOR_IMPORTANCE = 10
#: Fewer than this: none computed (three hand-picked baselines say nothing of which knob matters).
MIN_FOR_IMPORTANCE = 5


def _importance_trials(trials: list[optuna.trial.FrozenTrial]) -> list[optuna.trial.FrozenTrial]:
    # a trial without params (AutoLoader records its starting points so) would leave no knob shared by all
    return [t for t in trials if t.state == _TS.COMPLETE and t.value is not None and trial_attrs(t).get("outcome") != "repeat" and t.params]


def _importance_of(trials: list[optuna.trial.FrozenTrial]) -> tuple[dict[str, float] | None, str]:
    """Importances of the knobs that vary among ``trials`` (fANOVA, then PED-ANOVA); or None and why not."""
    from optuna.importance import get_param_importances

    complete = _importance_trials(trials)
    if len(complete) < MIN_FOR_IMPORTANCE:
        return None, f"needs at least {MIN_FOR_IMPORTANCE} completed trials, has {len(complete)}"
    from optuna import importance as oi

    # fANOVA needs scikit-learn; PED-ANOVA (numpy only) is the fallback, and copes with few trials
    evaluators: list[tuple[str, Callable[[], Any]]] = [("fANOVA", lambda: oi.FanovaImportanceEvaluator(seed=0))]
    if hasattr(oi, "PedAnovaImportanceEvaluator"):
        evaluators.append(("PED-ANOVA", lambda: oi.PedAnovaImportanceEvaluator()))
    errors: list[str] = []
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created in memory" lines
    try:
        return _first_importance(evaluators, complete, errors, get_param_importances)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _first_importance(
    evaluators: list, complete: list[optuna.trial.FrozenTrial], errors: list[str], get_param_importances: Any
) -> tuple[dict[str, float] | None, str]:
    for name, make in evaluators:
        tmp = optuna.create_study(direction="maximize")
        tmp.add_trials(complete)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                imp = get_param_importances(tmp, evaluator=make())
        except Exception as e:  # noqa: BLE001 - optuna raises several kinds for degenerate inputs or a missing sklearn
            if isinstance(e, ImportError) or "sklearn" in str(e):
                errors.append(f"{name}: needs scikit-learn (pip install scikit-learn)")
            else:
                errors.append(f"{name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
            continue
        shared = {k for k in set.intersection(*(set(t.params) for t in complete)) if len({repr(t.params[k]) for t in complete}) > 1}
        imp = {k: float(v) for k, v in imp.items() if k in shared}  # conditional knobs only in their own scope
        if imp:
            return imp, name
        errors.append(f"{name}: no knob varies among these trials")
    return None, "; ".join(errors)


def importances(study: optuna.Study) -> tuple[list[dict[str, Any]], list[str]]:
    """Parameter importances over all trials (shared knobs) and per backend (its own knobs).

    Returns:
        ``([{"scope", "method", "trials", "values": {param: importance}}], notes)``; a scope that cannot be
        evaluated (too few trials, nothing varies) becomes a note instead, and so does a scope of so few trials
        that its importances are only a rough guide.
    """
    trials = study.get_trials(deepcopy=False)
    scopes: list[tuple[str, list[optuna.trial.FrozenTrial]]] = [("all trials", trials)]
    backends = sorted({str(t.params["backend"]) for t in trials if t.params.get("backend") is not None})
    if len(backends) > 1:
        scopes += [(f"{b} trials", [t for t in trials if t.params.get("backend") == b]) for b in backends]
    out, notes = [], []
    for scope, ts in scopes:
        values, how = _importance_of(ts)
        if values is None:
            notes.append(f"Parameter importance over {scope} not computed: {how}.")
        else:
            n = len(_importance_trials(ts))
            out.append({"scope": scope, "method": how, "trials": n, "values": values})
            if n < FEW_FOR_IMPORTANCE:
                notes.append(
                    f"Parameter importance over {scope} comes from {n} trials: a rough guide (a knob the sampler left "
                    f"early scores low); about {FEW_FOR_IMPORTANCE} or more make it steadier."
                )
    return out, notes


#: a listed study's figures where it has none to show (the same keys as any row's)
_EMPTY_ROW: dict[str, Any] = {
    "trials": None,
    "complete": None,
    "queued": 0,
    "best_samples_per_s": None,
    "best_config": None,
    "best_trial": None,
    "speedup_vs_defaults": None,
    "device": None,
    "dataset": None,
    "interrupted": False,
    "in_training": False,
}


def _stamp(when: _dt.datetime) -> str:
    """Optuna's start time (naive, this machine's local time) as autotune stamps ``created``: UTC, ``...T...Z``, so
    that the studies of both sort together."""
    return when.astimezone(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _study_row(storage: optuna.storages.BaseStorage, s: optuna.study.StudySummary, url: str) -> dict[str, Any]:
    study = optuna.load_study(study_name=s.study_name, storage=storage)
    foreign = not_ours(study)
    if foreign is not None:  # listed, so that the name is not a mystery, but none of its figures are samples/s
        created = _stamp(s.datetime_start) if s.datetime_start else None
        return {**_EMPTY_ROW, "name": s.study_name, "trials": len(study.get_trials(deepcopy=False)), "created": created, "foreign": foreign}
    o = overview(study, url)
    w = o["winner"]
    dataset = o["dataset"] if isinstance(o["dataset"], dict) else {}
    return {
        "name": s.study_name,
        "trials": o["trials"],
        "complete": o["outcomes"].get("complete", 0),
        "queued": o["outcomes"].get("waiting", 0),  # queued and never run (the budget ended first): in "trials" too
        "best_samples_per_s": w["samples_per_s"] if w else None,
        "best_config": w["config"] if w else None,
        "best_trial": w["trial"] if w else None,
        "speedup_vs_defaults": o["speedups"].get("defaults"),
        "device": o["device"],
        "dataset": dataset.get("path"),
        "created": o["created"] or (_stamp(s.datetime_start) if s.datetime_start else None),
        "interrupted": study.user_attrs.get("interrupted") is True,  # the latest run was stopped: --resume continues it
        # AutoLoader's: its samples/s are the training loop's (loader plus step), not the loader's alone
        "in_training": isinstance(study.user_attrs.get("measurement"), dict) and study.user_attrs["measurement"].get("in_training") is True,
    }


def list_studies(url: str) -> list[dict[str, Any]]:
    """Every study in a storage with its trial count, best rate and config, newest first.

    A study that cannot be read (attributes edited by hand) is listed with its ``error`` instead of its figures,
    and another program's study with why it is not autotune's (``foreign``); neither hides the others.
    """
    storage = open_existing_storage(url)
    out = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        try:
            out.append(_study_row(storage, s, url))
        except Exception as e:  # one bad study must not break the listing of the others
            logger.info("study %r cannot be read", s.study_name, exc_info=True)
            first = str(e).splitlines()[0] if str(e) else ""
            created = _stamp(s.datetime_start) if s.datetime_start else None
            out.append({**_EMPTY_ROW, "name": s.study_name, "created": created, "error": f"{type(e).__name__}: {first}"[:200]})
    return sorted(out, key=lambda r: str(r["created"] or ""), reverse=True)
