"""From a study's trials to the training-rate view: the model's ceiling per batch size, each trial's fraction
of it, and the "enough" rule (among configs within a tolerance of the best training rate, the one with the
fewest CPU threads, then the least memory). Pure bookkeeping over stored trials: no torch here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from autotune.config.schema import backend_of
from autotune.errors import UserError
from autotune.loaders.backends import BACKENDS, backend_for
from autotune.study.evidence import trial_attrs

if TYPE_CHECKING:
    import optuna

logger = logging.getLogger(__name__)


# ------------------------------------------------------------------------------------------- ceiling
def ceiling_batch_sizes(space: Any) -> list[int]:
    """The batch sizes a study can try: each choice, or the ends of an int range."""
    p = space["batch_size"]
    if p.kind == "choices":
        return sorted({int(c) for c in p.choices})
    return sorted({int(p.low), int(p.high)})


def study_ceiling(attrs: dict[str, Any]) -> dict[str, Any] | None:
    """A study's ``model_ceiling`` (from its user attrs), with ``ranks``: a study written before the ceiling
    recorded its ranks takes the study's own, and its ``samples_per_s`` (one GPU's) becomes all ranks'."""
    c = attrs.get("model_ceiling")
    if not isinstance(c, dict):
        return None
    if "ranks" in c:
        return c
    ranks = max(1, int(attrs.get("ranks") or 1))
    one = c.get("samples_per_s")
    return {**c, "ranks": ranks, "per_gpu_samples_per_s": one, "samples_per_s": None if one is None else round(float(one) * ranks, 1)}


def ceiling_at(ceiling: dict[str, Any] | None, batch_size: int) -> float | None:
    """The ceiling at ``batch_size`` (the nearest measured batch size when that one was not), for all ranks
    together: the one-GPU rate times the ranks, as trials with several ranks are scored by their total."""
    if not ceiling:
        return None
    done = {int(b): v["samples_per_s"] for b, v in ceiling.get("per_batch_size", {}).items() if v.get("samples_per_s")}
    if not done:
        return None
    one = done.get(batch_size) or done[min(done, key=lambda b: abs(b - batch_size))]
    return one * max(1, int(ceiling.get("ranks") or 1))


def ceiling_attrs(ceiling: dict[str, Any] | None, batch_size: int, samples_per_s: float | None) -> dict[str, Any]:
    """A trial's ``model_ceiling_samples_per_s`` and ``fraction_of_ceiling`` (at its batch size)."""
    c = ceiling_at(ceiling, batch_size)
    if not c or not samples_per_s:
        return {}
    return {"model_ceiling_samples_per_s": round(c, 1), "fraction_of_ceiling": round(samples_per_s / c, 3)}


# ----------------------------------------------------------------------------------------- selection
def loader_threads(params: dict[str, Any]) -> int:
    """CPU threads/processes a config spends on loading: torch ``num_workers``; DALI ``num_threads`` (GPU decode too)."""
    return backend_for(params).threads(params)


def trial_rates(study: optuna.Study) -> dict[int, float]:
    """Each complete trial's training rate: the confirmation's median where it was re-measured, else its score."""
    import optuna

    conf = study.user_attrs.get("confirmation") or {}
    medians = {c["trial"]: float(c["median"]) for c in conf.get("candidates", [])}
    return {
        t.number: medians.get(t.number, float(t.value))
        for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
        if t.value is not None and trial_attrs(t).get("loader") and trial_attrs(t).get("outcome") != "repeat"
    }


def cost(t: optuna.trial.FrozenTrial, rate: float) -> tuple[float, float, float, float]:
    """What a config costs, cheapest first: loader CPU threads, peak host memory, GPU memory, then the faster."""
    a = trial_attrs(t)
    return (loader_threads(a["loader"]), a.get("peak_host_mib") or float("inf"), a.get("peak_gpu_mib") or 0.0, -rate)


def choose_enough(study: optuna.Study, tolerance: float) -> dict[str, Any]:
    """The "enough" rule: among configs within ``tolerance`` of the best training rate, the fewest loader CPU
    threads, then the least peak host memory, then the least GPU memory.

    Records the choice in the study: the ``confirmation`` attr's ``winner_trial`` (what the YAML is written
    from) and ``result_extra["selection"]`` (the rule, the fastest and chosen rates, the headroom), plus the
    chosen config's ``fraction_of_ceiling``.

    Returns:
        The ``selection`` record.
    """
    if not 0 <= tolerance < 1:
        raise UserError(f"--tolerance must be a fraction between 0 and 1 (0.02 = 2 %), but got {tolerance}")
    from autotune.study.evidence import contenders

    allowed = {t.number for t in contenders(study)}  # a reference outside the space is never handed over
    rates = {n: r for n, r in trial_rates(study).items() if n in allowed}
    if not rates:
        raise UserError(f"study {study.study_name!r} has no complete trial to choose from")
    trials = {t.number: t for t in study.get_trials(deepcopy=False) if t.number in rates}
    fastest = max(rates, key=lambda n: (rates[n], -n))
    floor = rates[fastest] * (1 - tolerance)
    within = sorted(n for n, r in rates.items() if r >= floor)
    chosen = min(within, key=lambda n: (*cost(trials[n], rates[n]), n))
    f, c = trial_attrs(trials[fastest]), trial_attrs(trials[chosen])
    cpus = (study.user_attrs.get("hardware") or {}).get("cpus")

    def saved(key: str) -> float | None:
        return round(f[key] - c[key], 1) if f.get(key) is not None and c.get(key) is not None else None

    selection: dict[str, Any] = {
        "rule": f"among configs within {tolerance:.0%} of the best training rate: fewest loader CPU threads "
                "(torch num_workers, DALI num_threads), then least peak host memory, then least GPU memory",
        "tolerance": tolerance,
        "fastest_trial": fastest,
        "fastest_config": f.get("config"),
        "fastest_samples_per_s": round(rates[fastest], 1),
        "chosen_trial": chosen,
        "chosen_config": c.get("config"),
        "chosen_samples_per_s": round(rates[chosen], 1),
        "within_tolerance": within,
        "headroom": {
            "cpu_workers_saved": loader_threads(f["loader"]) - loader_threads(c["loader"]),
            "host_mib_saved": saved("peak_host_mib"),
            "gpu_mib_saved": saved("peak_gpu_mib"),
            "cpu_threads_left": cpus - loader_threads(c["loader"]) if cpus else None,
        },
    }
    extra = dict(study.user_attrs.get("result_extra") or {})
    extra["selection"] = selection
    ceiling = study_ceiling(study.user_attrs)
    if ceiling:
        extra["model"] = ceiling.get("model")
        extra.update(ceiling_attrs(ceiling, int(c["loader"]["batch_size"]), rates[chosen]))
        if "fraction_of_ceiling" in extra:
            selection["headroom"]["model_bound"] = extra["fraction_of_ceiling"] >= 1 - tolerance
    study.set_user_attr("result_extra", extra)
    conf = dict(study.user_attrs.get("confirmation") or {"method": "best single trial (no re-measurement)", "candidates": []})
    conf["winner_trial"] = chosen
    conf["fastest_trial"] = fastest
    study.set_user_attr("confirmation", conf)
    logger.info("enough rule: trial %d (%s) at %.1f samples/s; fastest trial %d at %.1f", chosen, c.get("config"), rates[chosen], fastest, rates[fastest])
    return selection


# ------------------------------------------------------------------------------------------- summary
def training_summary(study: optuna.Study) -> dict[str, Any]:
    """Side by side from one study: the model's ceiling, the defaults, the best torch and best DALI configs
    and the chosen one, each with its training samples/s and fraction of the ceiling."""
    rates = trial_rates(study)
    trials = {t.number: t for t in study.get_trials(deepcopy=False) if t.number in rates}
    ceiling = study_ceiling(study.user_attrs) or {}

    def row(label: str, n: int | None) -> dict[str, Any]:
        if n is None:
            return {"label": label, "config": None, "samples_per_s": None}
        a = trial_attrs(trials[n])
        out = {"label": label, "trial": n, "config": a.get("config"), "samples_per_s": round(rates[n], 1),
               "cpu_threads": loader_threads(a["loader"]), "peak_host_mib": a.get("peak_host_mib"), "peak_gpu_mib": a.get("peak_gpu_mib")}
        out.update(ceiling_attrs(ceiling, int(a["loader"]["batch_size"]), rates[n]))
        return out

    def best(pred: Callable[[Any], bool]) -> int | None:
        ns = [n for n, t in trials.items() if pred(t)]
        return max(ns, key=lambda n: rates[n]) if ns else None

    defaults = best(lambda t: trial_attrs(t).get("role") == "defaults")
    def of_kind(name: str) -> Callable[[Any], bool]:
        return lambda t: backend_of(trial_attrs(t)["loader"]) == name

    best_of = {name: best(of_kind(name)) for name in BACKENDS}
    conf = study.user_attrs.get("confirmation") or {}
    chosen = conf.get("winner_trial", max(rates, key=rates.__getitem__) if rates else None)
    rows = [row("defaults", defaults), *(row(f"best {b.label}", best_of[name]) for name, b in BACKENDS.items()), row("chosen (enough rule)", chosen)]
    torch_n, dali_n = best_of.get("torch"), best_of.get("dali")
    ratio = rates[dali_n] / rates[torch_n] if dali_n is not None and torch_n is not None else None
    win = rows[-1]
    return {
        "model": ceiling.get("model") or study.user_attrs.get("model"),
        "ceiling": {b: ceiling_at(ceiling, int(b)) if v.get("samples_per_s") else None for b, v in ceiling.get("per_batch_size", {}).items()},
        "ceiling_ranks": ceiling.get("ranks", 1),
        "rows": rows,
        "dali_over_torch": round(ratio, 2) if ratio else None,
        "chosen_fraction_of_ceiling": win.get("fraction_of_ceiling"),
        "reaches_95_percent": (win.get("fraction_of_ceiling") or 0) >= 0.95,
        "selection": (study.user_attrs.get("result_extra") or {}).get("selection"),
    }
