"""What a report shows, read from the study alone: trial rows, the winner, the baselines, importances.

The CLI's ``studies`` and ``show`` commands use these functions too, so one module reads studies for display.
"""

from __future__ import annotations

import datetime as _dt
import logging
import statistics
import warnings
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import UserError
from autotune.study.storage import mask_url, open_storage

logger = logging.getLogger(__name__)

#: Knobs drawn as curves first (the ones that matter most for a loader), then the most important others.
KEY_KNOBS = ("num_workers", "num_threads")
BASELINE_ROLES = ("defaults", "heuristic", "warm-start")
MEMORY_OUTCOMES = ("predicted-oom", "oom-gpu", "oom-host", "shm")

_TS = optuna.trial.TrialState


def open_existing_storage(url: str) -> optuna.storages.BaseStorage:
    """Open a storage for reading; a SQLite file that does not exist is an error (not a new empty file)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if str(path) not in ("", ":memory:") and not path.exists():
            raise UserError(f"no storage file {str(path)!r} (from {mask_url(url)}); run 'autotune run' here first, or pass --storage URL")
    return open_storage(url)


def load(url: str, name: str) -> optuna.Study:
    """Load study ``name`` from storage ``url``, or raise a one-line :class:`UserError`."""
    storage = open_existing_storage(url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        raise UserError(f"no study named {name!r} in {mask_url(url)}; list them with 'autotune studies --storage URL'") from None


def latest_study_name(url: str) -> str:
    """The most recently started study in a storage (for commands run without ``--study``)."""
    summaries = optuna.get_all_study_summaries(open_existing_storage(url), include_best_trial=False)
    if not summaries:
        raise UserError(f"the storage {mask_url(url)} holds no study; run 'autotune run' first")
    return max(summaries, key=lambda s: (s.datetime_start or _dt.datetime.min, s._study_id)).study_name


def _outcome(t: optuna.trial.FrozenTrial) -> str:
    return t.user_attrs.get("outcome") or ("complete" if t.state == _TS.COMPLETE else t.state.name.lower())


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One plain dict per trial, in trial order (what the per-trial tables and plots show)."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        a = t.user_attrs
        loader = a.get("loader") or a.get("loader_params") or dict(t.params)
        rate = a.get("samples_per_s")
        if rate is None and t.state == _TS.COMPLETE and t.value is not None:
            rate = round(float(t.value), 1)
        rows.append({
            "trial": t.number,
            "state": t.state.name.lower(),
            "outcome": _outcome(t),
            "role": a.get("role"),
            "config": a.get("config") or ", ".join(f"{k}={v}" for k, v in sorted(t.params.items())),
            "backend": (loader or {}).get("backend"),
            "loader": loader,
            "samples_per_s": rate,
            "spread": a.get("spread"),
            "peak_host_mib": a.get("peak_host_mib"),
            "peak_gpu_mib": a.get("peak_gpu_mib"),
            "startup_s": a.get("startup_s"),
            "duration_s": a.get("duration_s"),
            "fraction_of_ceiling": a.get("fraction_of_ceiling"),
            "message": a.get("message") or "",
            "log": a.get("log"),
            "start": t.datetime_start,
            "end": t.datetime_complete,
        })
    return rows


def outcome_table(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Failures grouped by outcome: count, trial numbers and the first message."""
    groups: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["outcome"] == "complete":
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


def overview(study: optuna.Study, storage_url: str) -> dict[str, Any]:
    """The study's settings, the winner with its evidence, and the baselines it is compared with."""
    from autotune.study.result import outcome_counts, winner

    a = study.user_attrs
    rows = trial_rows(study)
    by_number = {r["trial"]: r for r in rows}
    win = None
    try:
        best, scores = winner(study)
    except (UserError, StopIteration):
        best, scores = None, []
    if best is not None:
        r = by_number[best.number]
        win = {**r, "scores": [round(float(s), 1) for s in scores], "samples_per_s": round(statistics.median(scores), 1)}
    baselines: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["role"] in BASELINE_ROLES and r["role"] not in baselines:
            # the winner may be a baseline: then compare like with like (its confirmed median)
            baselines[r["role"]] = {**r, "samples_per_s": win["samples_per_s"]} if win and win["trial"] == r["trial"] else r
    speedups = {}
    for role in ("defaults", "heuristic"):
        b = baselines.get(role)
        if win and b and b.get("samples_per_s"):
            speedups[role] = round(win["samples_per_s"] / b["samples_per_s"], 2)
    starts = [r["start"] for r in rows if r["start"] is not None]
    return {
        "study": study.study_name,
        "storage": mask_url(storage_url),
        "created": a.get("created") or (min(starts).strftime("%Y-%m-%d %H:%M:%S") if starts else None),
        "dataset": a.get("dataset") or {},
        "pipeline": a.get("pipeline"),
        "device": a.get("device"),
        "hardware": a.get("hardware") or {},
        "budgets": a.get("budgets") or {},
        "measurement": a.get("measurement") or {},
        "space": a.get("space"),
        "sampler": a.get("sampler"),
        "pruner": a.get("pruner"),
        "ranks": a.get("ranks"),
        "model": a.get("model"),
        "model_ceiling": _ceiling(a.get("model_ceiling")),
        "model_ceiling_batch": (a.get("model_ceiling") or {}).get("batch_size") if isinstance(a.get("model_ceiling"), dict) else None,
        "confirmation": a.get("confirmation"),
        "trials": len(rows),
        "outcomes": outcome_counts(study),
        "winner": win,
        "baselines": baselines,
        "speedups": speedups,
    }


def _importance_of(trials: list[optuna.trial.FrozenTrial]) -> tuple[dict[str, float] | None, str]:
    """Importances of the knobs that vary among ``trials`` (fANOVA, then PED-ANOVA); or None and why not."""
    from optuna.importance import get_param_importances

    complete = [t for t in trials if t.state == _TS.COMPLETE and t.value is not None]
    if len(complete) < 3:
        return None, f"needs at least 3 completed trials, has {len(complete)}"
    from optuna import importance as oi

    # fANOVA needs scikit-learn; PED-ANOVA (numpy only) is the fallback, and copes with few trials
    evaluators = [("fANOVA", lambda: oi.FanovaImportanceEvaluator(seed=0))]
    if hasattr(oi, "PedAnovaImportanceEvaluator"):
        evaluators.append(("PED-ANOVA", lambda: oi.PedAnovaImportanceEvaluator()))
    errors = []
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "new study created in memory" lines
    try:
        return _first_importance(evaluators, complete, errors, get_param_importances)
    finally:
        optuna.logging.set_verbosity(verbosity)


def _first_importance(evaluators: list, complete: list[optuna.trial.FrozenTrial], errors: list[str], get_param_importances: Any) -> tuple[dict[str, float] | None, str]:
    for name, make in evaluators:
        tmp = optuna.create_study(direction="maximize")
        tmp.add_trials(complete)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                imp = get_param_importances(tmp, evaluator=make())
        except Exception as e:  # noqa: BLE001 - optuna raises several kinds for degenerate inputs or a missing sklearn
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
        ``([{"scope", "method", "values": {param: importance}}], notes)``; a scope that cannot be evaluated
        (too few trials, nothing varies) becomes a note instead.
    """
    trials = study.get_trials(deepcopy=False)
    scopes: list[tuple[str, list[optuna.trial.FrozenTrial]]] = [("all trials", trials)]
    backends = sorted({t.params.get("backend") for t in trials if t.params.get("backend") is not None})
    if len(backends) > 1:
        scopes += [(f"{b} trials", [t for t in trials if t.params.get("backend") == b]) for b in backends]
    out, notes = [], []
    for scope, ts in scopes:
        values, how = _importance_of(ts)
        if values is None:
            notes.append(f"Parameter importance over {scope} not computed: {how}.")
        else:
            out.append({"scope": scope, "method": how, "values": values})
    return out, notes


def list_studies(url: str) -> list[dict[str, Any]]:
    """Every study in a storage with its trial count, best rate and config, newest first."""
    storage = open_existing_storage(url)
    out = []
    for s in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=s.study_name, storage=storage)
        o = overview(study, url)
        w = o["winner"]
        out.append({
            "name": s.study_name,
            "trials": o["trials"],
            "complete": o["outcomes"].get("complete", 0),
            "best_samples_per_s": w["samples_per_s"] if w else None,
            "best_config": w["config"] if w else None,
            "best_trial": w["trial"] if w else None,
            "speedup_vs_defaults": o["speedups"].get("defaults"),
            "device": o["device"],
            "dataset": (o["dataset"] or {}).get("path"),
            "created": o["created"] or (s.datetime_start.strftime("%Y-%m-%d %H:%M:%S") if s.datetime_start else None),
        })
    return sorted(out, key=lambda r: str(r["created"] or ""), reverse=True)
