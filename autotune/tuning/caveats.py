"""The warnings at the end of a run: what a run too short for this machine left out, and a machine other jobs
kept busy. Each names its fix."""

from __future__ import annotations

from typing import Any

import optuna

from autotune.config.schema import Config
from autotune.outcomes import TOLD, Outcome
from autotune.study.budget import TimeBudget
from autotune.study.evidence import trial_attrs
from autotune.study.space import SearchSpace
from autotune.trials.guard import cores_taken, too_busy

#: the baselines whose absence the end of a run names: (role, result figure, name, what is missing without it)
BASELINE_WARNINGS = (
    ("defaults", "defaults_samples_per_s", "the torch DataLoader defaults", "there is no speedup over them"),
    ("heuristic", "heuristic_samples_per_s", "the common torch settings (num_workers = cores)", "the winner was not compared with them"),
    ("dali-heuristic", "dali_heuristic_samples_per_s", "DALI's usual start", "the winner was not compared with it"),
)


def short_run_warnings(cfg: Config, space: SearchSpace, budget: TimeBudget | None, study: optuna.Study | None = None,
                       elapsed: float | None = None) -> list[str]:
    """What a run too short for this machine left out, each with its fix (printed after the summary). ``elapsed``:
    the run's time as the summary states it (default: now)."""
    out = []
    if budget is not None and elapsed is None:
        elapsed = budget.elapsed()
    longer = f"--budget {max(60, int(2 * (elapsed or 0.0)) // 10 * 10)}" if budget is not None else "a larger --n-trials"
    if budget is not None and elapsed is not None and elapsed > budget.total_s + 5:
        out.append(f"the run took {elapsed:.0f} s, over its {budget.total_s:.0f} s budget (setting up alone took "
                   f"{budget.spent.get('setup', 0.0):.0f} s on this machine); pass {longer}")
    if "torch" in space.backends() and cfg.loader.backend.value != "torch" and not cfg.torch_fallback:
        ran = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and (trial_attrs(t).get("loader") or {}).get("backend") == "torch"
               and trial_attrs(t).get("outcome") not in (Outcome.INTERRUPTED.value, Outcome.DOMINATED.value)] if study else []  # cut, or told: not run
        if not ran:  # torch trials that ran and failed have their own cause, in the report: a longer budget is no fix
            out.append(f"no torch DataLoader was measured in this run, so cfg.dataloader_kwargs() has nothing to give "
                       f"(autotune.build_loader works); for both, pass {longer}")
    unmeasured = _unmeasured_baselines(cfg, study)
    if unmeasured:  # one line for them all: each has the same fix
        ran_out = f"the {budget.total_s:.0f} s budget left too little time to measure" if budget is not None else "the trials ended before measuring"
        roles = [r for r, _, _ in unmeasured]
        lost = (unmeasured[0][2] if len(unmeasured) == 1
                else "there is no speedup over them" if "defaults" in roles else "the winner was not compared with them")
        out.append(f"{ran_out} {' or '.join(n for _, n, _ in unmeasured)}, so {lost}; pass {longer}")
    return out


def _unmeasured_baselines(cfg: Config, study: optuna.Study | None) -> list[tuple[str, str, str]]:
    """The baselines the run queued but never measured: (role, name, what is missing without it)."""
    unmeasured: list[tuple[str, str, str]] = []
    every = study.get_trials(deepcopy=False) if study is not None else []
    dali_measured = any(t.state == optuna.trial.TrialState.COMPLETE and (trial_attrs(t).get("loader") or {}).get("backend") == "dali" for t in every)
    for role, figure, name, lost in BASELINE_WARNINGS:
        if study is None or (cfg.result or {}).get(figure):
            continue
        if role == "dali-heuristic" and dali_measured:
            continue  # DALI was measured in another config: the choice saw it
        trials = [t for t in every if trial_attrs(t).get("role") == role]
        # queued and never run, or cut by the budget's end (one that failed otherwise says why in the report); a
        # first trial that met an undecodable file is measured again without it, if the budget leaves the time
        unrun = [t for t in trials if not t.state.is_finished() or trial_attrs(t).get("outcome") == Outcome.INTERRUPTED.value]
        bad = [t for t in trials if trial_attrs(t).get("outcome") == Outcome.BAD_DATA.value]
        if unrun and len(unrun) + len(bad) == len(trials):
            unmeasured.append((role, name + (" again without the undecodable file its first trial met" if bad else ""), lost))
    return unmeasured


def busy_warnings(load: dict[str, Any] | None) -> list[str]:
    """A warning when other processes took a fair share of the cores the run may use (study attr ``other_load``)."""
    if load is None or not too_busy(load):
        return []
    of = int(load.get("cpus") or load["usable_cores"])
    quota = f", {cores_taken(load):.1f} of the {float(load['usable_cores']):g} it may use" if of != load["usable_cores"] else ""
    return [f"other processes kept about {float(load['cores']):.1f} of the {of} cores busy during the run{quota}: "
            "every figure, the speedups above all, moved with them; tune again when the machine is idle"]


def keep_busier(study: optuna.Study, load: dict[str, Any] | None) -> None:
    """Store this run's ``other_load``; a resumed study keeps the busier of its runs (its trials saw both)."""
    if load is None:
        return
    before = study.user_attrs.get("other_load")
    if isinstance(before, dict) and cores_taken(before) > cores_taken(load):
        return
    study.set_user_attr("other_load", load)


def workers_failed_warnings(cfg: Config, study: optuna.Study) -> list[str]:
    """A warning when the winner loads in the main process (no workers) because every config with workers crashed
    alike: the user's ``worker_init_fn`` raising, a Dataset that breaks once forked. The run chose what worked, and its
    exit 0 alone would hide that workers never could."""
    if getattr(cfg.loader.options, "num_workers", None) != 0:
        return []

    def workers(t: optuna.trial.FrozenTrial) -> int:
        params = trial_attrs(t).get("loader")
        return int(params.get("num_workers") or 0) if isinstance(params, dict) else 0

    # configs with workers that ran: one the budget stopped, a repeat or one told without a measurement says nothing
    skipped = (*TOLD, Outcome.INTERRUPTED.value, Outcome.PREDICTED_OOM.value)
    tried = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and workers(t) > 0 and trial_attrs(t).get("outcome") not in skipped]
    if len(tried) < 2 or any(t.state == optuna.trial.TrialState.COMPLETE for t in tried):
        return []
    messages = [str(trial_attrs(t).get("message") or "") for t in tried if trial_attrs(t).get("outcome") == Outcome.CRASH.value]
    if len(messages) < len(tried) or len(set(messages)) != 1 or not messages[0]:
        return []
    return [f"every config with workers crashed alike ({len(tried)} trials): {messages[0]}; the YAML loads in the main process "
            "(num_workers 0): fix that and tune again to load in parallel"]
