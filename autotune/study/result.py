"""From a stored study to the config that gets written: the winner, its evidence, the baselines."""

from __future__ import annotations

import statistics
from typing import Any

import optuna

from autotune.config.schema import Config, LoaderConfig
from autotune.errors import UserError
from autotune.study.storage import mask_url


def outcome_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        o = t.user_attrs.get("outcome") or ("complete" if t.state == optuna.trial.TrialState.COMPLETE else t.state.name.lower())
        counts[o] = counts.get(o, 0) + 1
    return counts


def _trial_by_number(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def winner(study: optuna.Study) -> tuple[optuna.trial.FrozenTrial, list[float]]:
    """The confirmed winner (or the best complete trial) and all its scores."""
    conf = study.user_attrs.get("confirmation")
    if conf:
        t = _trial_by_number(study, conf["winner_trial"])
        scores = next((c["scores"] for c in conf["candidates"] if c["trial"] == t.number), [t.value])
        return t, list(scores)
    complete = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.value is not None]
    if not complete:
        raise UserError(f"study {study.study_name!r} has no completed trial yet; run 'autotune run' (or --resume it) first")
    best = max(complete, key=lambda t: t.value)
    return best, [float(best.value)]


def baseline_rates(study: optuna.Study) -> dict[str, float | None]:
    """The baselines' rates, like for like with the winner: the median of their scores where they were re-measured."""
    out: dict[str, float | None] = {"defaults": None, "heuristic": None}
    remeasured = {c["trial"]: c["median"] for c in (study.user_attrs.get("confirmation") or {}).get("candidates", [])}
    for t in study.get_trials(deepcopy=False):
        role = t.user_attrs.get("role")
        if role in out and t.user_attrs.get("samples_per_s") is not None:
            out[role] = remeasured.get(t.number, t.user_attrs["samples_per_s"])
    return out


def config_from_study(study: optuna.Study, storage_url: str) -> Config:
    """The YAML for a study's winner, built from what the study stored (any machine can do this)."""
    best, scores = winner(study)
    if not isinstance(best.user_attrs.get("loader"), dict):
        raise UserError(f"study {study.study_name!r} was not written by 'autotune run' (its best trial has no loader config); pick an autotune study with 'autotune studies'")
    a = study.user_attrs
    rate = statistics.median(scores)
    base = baseline_rates(study)
    result: dict[str, Any] = {
        "samples_per_s": round(rate, 1),
        "spread": best.user_attrs.get("spread"),
        "scores": [round(s, 1) for s in scores],
        "startup_s": best.user_attrs.get("startup_s"),
        "peak_gpu_mib": best.user_attrs.get("peak_gpu_mib"),
        "peak_host_mib": best.user_attrs.get("peak_host_mib"),
        "defaults_samples_per_s": base["defaults"],
        "heuristic_samples_per_s": base["heuristic"],
        "speedup_vs_defaults": round(rate / base["defaults"], 2) if base["defaults"] else None,
        "speedup_vs_heuristic": round(rate / base["heuristic"], 2) if base["heuristic"] else None,
        "ranks": a.get("ranks", 1),
    }
    for k in ("per_rank_samples_per_s", "model_ceiling_samples_per_s", "fraction_of_ceiling", "headroom"):
        if k in best.user_attrs:
            result[k] = best.user_attrs[k]
    if "confirmation" in a:
        result["confirmed"] = {"method": a["confirmation"]["method"], "candidates": len(a["confirmation"]["candidates"])}
    for k, v in (a.get("result_extra") or {}).items():
        result[k] = v
    states = [t.state for t in study.get_trials(deepcopy=False)]
    counts = outcome_counts(study)
    study_section = {
        "name": study.study_name,
        "storage": mask_url(storage_url),
        "trials": len(states),
        "complete": counts.get("complete", 0),
        "failed": {k: v for k, v in counts.items() if k != "complete"},
        "best_trial": best.number,
        "sampler": a.get("sampler"),
        "pruner": a.get("pruner"),
        "space": a.get("space"),
    }
    return Config(
        loader=LoaderConfig.from_params(best.user_attrs["loader"]),
        pipeline=a.get("pipeline", "imagenet-train"),
        device=a.get("device", "cpu"),
        dataset=a.get("dataset", {}),
        hardware=a.get("hardware", {}),
        result=result,
        study=study_section,
        budgets=a.get("budgets", {}),
        measurement=a.get("measurement", {}),
    )
