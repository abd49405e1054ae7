"""From a stored study to the config that gets written: the winner, its evidence, the baselines."""

from __future__ import annotations

import statistics
from typing import Any

import optuna

from autotune.config.schema import FALLBACK_BACKEND, Config, LoaderConfig, backend_of
from autotune.dataset.paths import printable
from autotune.errors import ConfigError, UserError
from autotune.outcomes import TOLD, Outcome
from autotune.study.evidence import (
    confirmation_method,
    contenders,
    failing_alike,
    is_repeat,
    is_told,
    measured_complete,
    told_later_start,
    trial_attrs,
    trial_value,
)
from autotune.study.storage import absolute_url, mask_url
from autotune.trials.guard import too_busy

#: the baselines the winner is compared with: the DataLoader defaults, the torch rule of thumb, DALI's usual start
#: (the last only where the space offers DALI; its YAML keys read ``dali_heuristic``)
BASELINE_ROLES = ("defaults", "heuristic", "dali-heuristic")


def baseline_key(role: str) -> str:
    """A baseline role as it reads in the YAML's keys: ``dali-heuristic`` -> ``dali_heuristic``."""
    return role.replace("-", "_")


def outcome_counts(study: optuna.Study) -> dict[str, int]:
    counts: dict[str, int] = {}
    for t in study.get_trials(deepcopy=False):
        o = trial_attrs(t).get("outcome") or ("complete" if t.state == optuna.trial.TrialState.COMPLETE else t.state.name.lower())
        counts[o] = counts.get(o, 0) + 1
    return counts


#: outcomes of trials that did not run their config: a repeat of one measured, queued when the budget ran out, left
#: out by the memory guard's prediction before it started
_NOT_MEASURED = (*TOLD, "waiting", "predicted-oom")


def search_account(study: optuna.Study, best: optuna.trial.FrozenTrial) -> dict[str, Any]:
    """What the search measured and what found the winner: ``configs_measured`` (distinct configs a trial read a rate
    of, to its end or cut: one that crashed, or went over a budget, before a window measured nothing),
    ``sampled_measured`` (of them, those the sampler drew rather than a starting point or a warm start) and
    ``winner_from``: ``search`` for a sampled winner, else the starting point's role (``dali-mixed``, ``dali-hw``, ``dali-heuristic``,
    ``heuristic``, ``defaults``, ``warm-start``)."""
    measured: dict[str, bool] = {}
    for t in study.get_trials(deepcopy=False):
        a = trial_attrs(t)
        outcome = a.get("outcome") or ("complete" if t.state == optuna.trial.TrialState.COMPLETE else t.state.name.lower())
        if outcome in _NOT_MEASURED or t.state in (optuna.trial.TrialState.WAITING, optuna.trial.TrialState.RUNNING):
            continue
        # a worker_init_fn that raised: every config with workers "measured"; one over a budget before its first window
        # reads only the 0.0 that steers the sampler away
        if t.value is None and not a.get("windows") and not any(v > 0 for v in t.intermediate_values.values()):
            continue
        key = a.get("config")
        if not key:  # stopped before its config was set (a stop while the trial was being made): nothing ran
            continue
        measured[str(key)] = measured.get(str(key), False) or not a.get("role")
    role = trial_attrs(best).get("role")
    return {"configs_measured": len(measured), "sampled_measured": sum(measured.values()), "winner_from": str(role) if role else "search"}


def _trial_by_number(study: optuna.Study, number: int) -> optuna.trial.FrozenTrial:
    return next(t for t in study.get_trials(deepcopy=False) if t.number == number)


def winner(study: optuna.Study) -> tuple[optuna.trial.FrozenTrial, list[float]]:
    """The confirmed winner (or the best complete trial) and all its scores."""
    conf = study.user_attrs.get("confirmation")
    if conf:
        t = _trial_by_number(study, conf["winner_trial"])
        scores = next((c["scores"] for c in conf["candidates"] if c["trial"] == t.number), [t.value])
        return t, list(scores)
    complete = contenders(study)
    if not complete:
        raise UserError(f"study {study.study_name!r} has no completed trial yet; run 'autotune run' (or --resume it) first")
    best = max(complete, key=trial_value)
    return best, [trial_value(best)]


def _rate(t: optuna.trial.FrozenTrial) -> float | None:
    if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None:
        return float(t.value)
    return None


def _config_of(t: optuna.trial.FrozenTrial) -> str | None:
    """The loader a trial ran (or is queued to run), in one form whichever way it was stored; None if unknown."""
    params = trial_attrs(t).get("loader") or trial_attrs(t).get("loader_params")
    if not isinstance(params, dict):
        return None
    try:
        return LoaderConfig.from_params(params).describe()
    except Exception:  # noqa: BLE001 - another program's attribute
        return None


def baseline_trials(study: optuna.Study) -> dict[str, optuna.trial.FrozenTrial]:
    """Per baseline role, the trial that measured it: the last complete one (a baseline is measured again after a
    bad file was left out, or after a run was killed during it), else the last one. A role whose own trial has no
    rate (queued when the budget ended) takes a completed trial of the very same config (a warm start that was DALI's
    usual start): that config was measured, under another name."""
    trials = study.get_trials(deepcopy=False)
    out: dict[str, optuna.trial.FrozenTrial] = {}
    for t in trials:
        role = trial_attrs(t).get("role")
        if role and (_rate(t) is not None or role not in out or _rate(out[role]) is None):
            out[role] = t
    by_number = {t.number: t for t in trials}
    measured = {_config_of(o): o for o in measured_complete(study)}  # the last complete trial of each config
    for role, t in list(out.items()):
        if is_repeat(t) and trial_attrs(t).get("repeat_of") in by_number:  # its figures are the measuring trial's
            out[role] = t = by_number[trial_attrs(t)["repeat_of"]]
        if _rate(t) is None and (config := _config_of(t)) in measured:
            out[role] = measured[config]
    return out


def _remeasured(study: optuna.Study) -> dict[int, tuple[float, list[float]]]:
    """Per re-measured trial, its rate and spread as :func:`headline` states the winner's (one rounding for both)."""
    candidates = (study.user_attrs.get("confirmation") or {}).get("candidates", [])
    if not candidates:
        return {}
    windows = {t.number: trial_attrs(t).get("spread") for t in study.get_trials(deepcopy=False)}
    out = {}
    for c in candidates:
        scores = [float(x) for x in c.get("scores") or () if isinstance(x, (int, float))]
        out[c["trial"]] = headline(scores, windows.get(c["trial"])) if scores else (round(float(c["median"]), 1), [round(float(c["median"]), 1)] * 2)
    return out


def baseline_spreads(study: optuna.Study) -> dict[str, list[float]]:
    """The spread of each re-measured baseline's scores (the winner's spread is of its scores too)."""
    remeasured = _remeasured(study)
    return {role: remeasured[t.number][1] for role, t in baseline_trials(study).items() if t.number in remeasured}


def baseline_rates(study: optuna.Study) -> dict[str, float | None]:
    """The baselines' rates, like for like with the winner: the median of their scores where they were re-measured."""
    remeasured = _remeasured(study)
    trials = baseline_trials(study)
    out: dict[str, float | None] = {}
    for role in (*BASELINE_ROLES, *(r for r in trials if r not in BASELINE_ROLES)):
        t = trials.get(role)
        rate = _rate(t) if t is not None else None
        out[role] = (remeasured[t.number][0] if t.number in remeasured else round(rate, 1)) if t is not None and rate is not None else None
    return out


def headline(scores: list[float], window_spread: Any = None) -> tuple[float, list[float]]:
    """The one definition of the winner's ``samples_per_s`` and ``spread``.

    ``samples_per_s`` is the median of the scores (each score is one measurement's median of its steady windows);
    ``spread`` is the lowest and highest of those same scores. With a single score, the measurements are that
    score's steady windows, so ``spread`` is their lowest and highest. Either way the spread holds the value.
    """
    rate = round(float(statistics.median(scores)), 1)
    if len(scores) > 1:
        lo, hi = min(scores), max(scores)
    elif isinstance(window_spread, (list, tuple)) and len(window_spread) == 2 and all(isinstance(x, (int, float)) for x in window_spread):
        lo, hi = window_spread
    else:
        lo = hi = rate
    return rate, [round(min(float(lo), rate), 1), round(max(float(hi), rate), 1)]


def speedup(rate: float | None, base: float | None) -> float | None:
    """``rate / base`` to two decimals, or None without a baseline."""
    return round(rate / base, 2) if rate and base else None


def figures(study: optuna.Study) -> dict[str, Any]:
    """The winner's figures as the YAML, the report and ``autotune show`` all state them (one definition)."""
    best, scores = winner(study)
    rate, spread = headline(scores, trial_attrs(best).get("spread"))
    base = baseline_rates(study)
    out: dict[str, Any] = {
        "trial": best.number,
        "samples_per_s": rate,
        "spread": spread,
        "scores": [round(float(s), 1) for s in scores],
        "defaults_samples_per_s": base["defaults"],
        "heuristic_samples_per_s": base["heuristic"],
        "speedup_vs_defaults": speedup(rate, base["defaults"]),
        "speedup_vs_heuristic": speedup(rate, base["heuristic"]),
    }
    if "dali-heuristic" in baseline_trials(study):  # queued where the space offers DALI: stated, null or not
        out["dali_heuristic_samples_per_s"] = base["dali-heuristic"]
        out["speedup_vs_dali_heuristic"] = speedup(rate, base["dali-heuristic"])
    conf = study.user_attrs.get("confirmation")
    if conf:
        out["confirmed"] = {"method": confirmation_method(conf), "candidates": len(conf["candidates"])}
        alike = conf.get("indistinguishable")
        if isinstance(alike, list) and len(alike) > 1:  # the winner is the cheapest of these: say which they were
            # the median of all its scores, and of its re-measurements alone: what the noise rule judged (a lucky first
            # reading put a loser's all-scores median 16 % above the winner's where their re-measurements were equal)
            out["indistinguishable"] = [{"trial": c["trial"], "config": c.get("config"), "samples_per_s": c.get("median"),
                                         "remeasured_per_s": round(statistics.median(c["scores"][1:]), 1) if len(c.get("scores") or ()) > 1 else None}
                                        for c in conf["candidates"] if c["trial"] in alike]
    return out


def torch_fallback(study: optuna.Study) -> dict[str, Any]:
    """The best torch DataLoader config the study measured (its rate like the winner's), for a YAML whose winner is
    not torch: users with their own ``Dataset`` still get DataLoader keywords. Empty when none completed."""
    remeasured = _remeasured(study)
    best, best_rate = None, 0.0
    for t in contenders(study):
        params = trial_attrs(t).get("loader") or {}
        if backend_of(params) != FALLBACK_BACKEND:
            continue
        rate = remeasured[t.number][0] if t.number in remeasured else trial_value(t)
        if rate > best_rate:
            best, best_rate = t, rate
    if best is None:
        return {}
    loader = LoaderConfig.from_params(trial_attrs(best)["loader"]).to_dict()
    return {"batch_size": loader["batch_size"], "torch": loader["torch"], "samples_per_s": round(best_rate, 1), "trial": best.number}


def no_completion_message(study: optuna.Study) -> str:
    """Why no trial completed, by the dominant cause, and the fix for that cause (the final error of a run)."""
    trials = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and not is_told(t)]  # not the queued ones
    counts: dict[str, int] = {}
    for t in trials:
        o = trial_attrs(t).get("outcome") or t.state.name.lower()
        if trial_attrs(t).get("reference") and o == Outcome.COMPLETE.value:
            o = "complete outside the space (a reference)"
        counts[o] = counts.get(o, 0) + 1
    groups = {
        "memory": [o for o in counts if o in (Outcome.PREDICTED_OOM.value, Outcome.OOM_GPU.value, Outcome.OOM_HOST.value, Outcome.SHM.value)],
        "bad-data": [o for o in counts if o == Outcome.BAD_DATA.value],
        "timeout": [o for o in counts if o == Outcome.TIMEOUT.value],
    }
    groups["other"] = [o for o in counts if not any(o in g for g in groups.values())]
    sizes = {k: sum(counts[o] for o in v) for k, v in groups.items()}
    cause = max(sizes, key=lambda k: (sizes[k], k != "other"))
    n, total = sizes[cause], len(trials)
    listed = ", ".join(f"{k}: {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))
    head = f"no trial completed ({listed}); "
    if cause == "memory":
        shm = counts.get(Outcome.SHM.value, 0)
        gpu = counts.get(Outcome.OOM_GPU.value, 0)
        flag = "--shm-budget" if shm * 2 > n else ("--gpu-budget" if gpu * 2 > n else "--host-budget / --gpu-budget")
        return head + f"{n} of {total} went over the memory budget: raise {flag}, or tune a space with smaller batch sizes and fewer workers"
    if cause == "bad-data":
        bad = list(dict.fromkeys(trial_attrs(t)["bad_file"] for t in trials if trial_attrs(t).get("bad_file")))
        if not bad:
            return head + "images that cannot be decoded: remove them from the dataset"
        if len(bad) == 1:
            return head + f"{printable(bad[0])} cannot be decoded: remove it from the dataset"
        shown = ", ".join(printable(b) for b in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        return head + f"{len(bad)} files cannot be decoded ({shown}): remove them from the dataset, then run again " \
            "(autotune doctor --dataset DIR finds the rest)"
    if cause == "timeout":
        limit = "the time a trial may take (--trial-timeout; under --budget, at most half the budget)"
        if isinstance((study.user_attrs.get("dataset") or {}).get("function"), dict):  # the batch size is the user's: none smaller to tune
            return head + f"{n} of {total} ran past {limit}: look for a hang in your pipeline's code, or raise --trial-timeout and --budget"
        return head + f"{n} of {total} ran past {limit}: raise it, or tune a space with smaller batch sizes"
    same = _shared_failure(study, [t for t in trials if (trial_attrs(t).get("outcome") or t.state.name.lower()) in groups["other"]], total)
    if same is not None:
        return head + same
    return head + "see the messages with --verbose, or relax the budgets / --trial-timeout"


def _shared_failure(study: optuna.Study, failed: list[optuna.trial.FrozenTrial], total: int) -> str | None:
    """What more than half the trials, or the last :data:`FAILING_ALIKE`, failed alike, configs apart (the user's code,
    not a knob): its message and where its traceback is, or None."""
    messages = [str(trial_attrs(t).get("message") or "") for t in failed]
    common = max(set(messages), key=messages.count, default="")
    if not common or messages.count(common) * 2 <= total:
        common = failing_alike(study) or ""  # fewer than half, but the search ended on them (stop_failing_alike)
    if not common:
        return None
    configs = {trial_attrs(t).get("config") for t in failed if trial_attrs(t).get("message") == common}
    log = next((trial_attrs(t)["log"] for t in failed if trial_attrs(t).get("message") == common and trial_attrs(t).get("log")), None)
    alike = f"{messages.count(common)} of {total} trials ({len(configs)} config{'s' if len(configs) != 1 else ''}) failed alike"
    fix = "fix that"
    if "default_collate: batch must contain" in common:  # samples torch cannot batch (a PIL image, a string): the fix is known
        fix = "return tensors from your Dataset (torchvision.transforms.v2.ToImage turns a PIL image into one), or pass a collate_fn in autotune.DatasetSpec"
    return f"{alike}, so the cause is no loader knob: {common}; {fix}{f' (the traceback is in {log})' if log else ''}, then run again"


def config_from_study(study: optuna.Study, storage_url: str, *, as_written: bool = False) -> Config:
    """The YAML for a study's winner, built from what the study stored (any machine can do this).

    ``as_written``: stamped ``created`` as the YAML last written from the study was (``autotune show --study``),
    not now (a config about to be written).
    """
    if len(study.directions) != 1:  # another program's study in a shared storage: no single best to read
        raise UserError(
            f"study {study.study_name!r} in {mask_url(storage_url)} was not made by autotune (it has {len(study.directions)} objectives; "
            "autotune's maximize samples/s); pick an autotune study with 'autotune studies'"
        )
    best, _ = winner(study)
    if not isinstance(trial_attrs(best).get("loader"), dict):
        raise UserError(
            f"study {study.study_name!r} was not written by 'autotune run' (its best trial has no loader config); "
            "pick an autotune study with 'autotune studies'"
        )
    a = study.user_attrs
    fig = figures(study)
    result: dict[str, Any] = {
        "samples_per_s": fig["samples_per_s"],
        "spread": fig["spread"],
        "scores": fig["scores"],
        "startup_s": trial_attrs(best).get("startup_s"),
        "peak_gpu_mib": trial_attrs(best).get("peak_gpu_mib"),
        "peak_host_mib": trial_attrs(best).get("peak_host_mib"),
        **{
            k: fig[k]
            for k in (
                "defaults_samples_per_s",
                "heuristic_samples_per_s",
                "speedup_vs_defaults",
                "speedup_vs_heuristic",
                "dali_heuristic_samples_per_s",
                "speedup_vs_dali_heuristic",
            )
            if k in fig
        },
        "ranks": a.get("ranks", 1),
    }
    for k in ("per_rank_samples_per_s", "model_ceiling_samples_per_s", "fraction_of_ceiling", "headroom"):
        if k in trial_attrs(best):
            result[k] = trial_attrs(best)[k]
    for k in ("confirmed", "indistinguishable"):  # how the winner was chosen, and among which configs it could not tell apart
        if k in fig:
            result[k] = fig[k]
    for k, v in (a.get("result_extra") or {}).items():
        result[k] = v
    if too_busy(a.get("other_load")):  # the figures above moved with other jobs: said where they are read, not only once
        result["other_load"] = dict(a["other_load"])
    states = [t.state for t in study.get_trials(deepcopy=False)]
    counts = outcome_counts(study)
    study_section = {
        "name": study.study_name,
        "storage": mask_url(absolute_url(storage_url)),  # opens from any folder: show --storage, report --storage
        "trials": len(states),
        "complete": counts.get("complete", 0),
        "failed": {k: v for k, v in counts.items() if k not in ("complete", *TOLD, "waiting")},
        **({"repeats": counts[Outcome.REPEAT.value]} if counts.get(Outcome.REPEAT.value) else {}),
        **({"dominated": counts[Outcome.DOMINATED.value]} if counts.get(Outcome.DOMINATED.value) else {}),
        **({"later_start": later} if (later := sum(1 for t in study.get_trials(deepcopy=False) if told_later_start(t))) else {}),  # of them
        **({"queued_not_run": counts["waiting"]} if counts.get("waiting") else {}),  # queued, then the budget ran out
        "best_trial": best.number,
        **search_account(study, best),
        "sampler": a.get("sampler"),
        "pruner": a.get("pruner"),
        "space": a.get("space"),
        **({"retune_flags": list(a["retune_flags"])} if isinstance(a.get("retune_flags"), list) else {}),
    }
    loader = LoaderConfig.from_params(trial_attrs(best)["loader"])
    created: dict[str, Any] = {"created": str(a[CONFIG_CREATED])} if as_written and a.get(CONFIG_CREATED) else {}
    try:
        return Config(
            loader=loader,
            torch_fallback=torch_fallback(study) if loader.backend != FALLBACK_BACKEND else {},
            pipeline=a.get("pipeline", "imagenet-train"),
            device=a.get("device", "cpu"),
            dataset=a.get("dataset", {}),
            hardware=a.get("hardware", {}),
            result=result,
            study=study_section,
            budgets=a.get("budgets", {}),
            measurement=a.get("measurement", {}),
            **created,
        )
    except ConfigError as e:  # not "no config": an attribute edited by hand, which show and report name as such
        raise TypeError(f"the study's attributes: {e}") from None


#: the study attr with the ``created`` stamp of the YAML last written from the study
CONFIG_CREATED = "config_created"


def mark_written(study: optuna.Study, cfg: Config) -> None:
    """Remember the written YAML's ``created`` stamp, so that a config rebuilt from the study says the same."""
    study.set_user_attr(CONFIG_CREATED, cfg.created)
