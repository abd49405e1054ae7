"""What to try next: an ordinary Optuna study over a search space, asked and told from inside training.

The study lives in the usual storage (``sqlite:///autotune.db`` by default, like ``autotune run``), so it shows
in ``autotune studies``, ``autotune report`` and optuna-dashboard. The starting points are the user's own
candidates, then the usual heuristics (DALI's usual start first where a GPU and DALI are there, then the common
torch heuristic); the sampler proposes the rest. Only rank 0 opens the study.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna

from autotune.autoloader._explore import loop_rate
from autotune.config.files import save_config
from autotune.config.schema import Config, LoaderConfig, backend_of
from autotune.dataset.paths import safe_name
from autotune.dataset.scan import Dataset
from autotune.dataset.user import shown_root
from autotune.outcomes import Outcome
from autotune.study.result import config_from_study, mark_written
from autotune.study.space import SearchSpace
from autotune.study.storage import mask_url, open_storage
from autotune.study.tuner import TuneSettings, baseline_configs, make_sampler

logger = logging.getLogger(__package__)  # autotune.autoloader, not its private modules

#: the outcome of a trial queued and never run, as the study's counts name a WAITING one
QUEUED_NOT_RUN = "waiting"

#: proposals in a row that repeat a measured config before the space counts as exhausted
_MAX_REPEATS = 5


@dataclasses.dataclass
class Candidate:
    number: int
    params: dict[str, Any]
    trial: optuna.Trial | None = None

    @property
    def loader(self) -> LoaderConfig:
        return LoaderConfig.from_params(self.params)


def study_name_for(dataset: Dataset, key: str) -> str:
    return f"{safe_name(Path(shown_root(dataset.root)).name)}-{key}-autoloader-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"


def _on_grid(param: Any, value: Any) -> bool:
    """Whether the sampler could suggest ``value`` for ``param``: in its range and on its step (0.63 is not, on a
    0.05 step; Optuna would warn and record it anyway)."""
    if not param.contains(value):
        return False
    dist = param.distribution()
    try:
        return bool(dist._contains(dist.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


class CandidateSource:
    """Ask for candidates, tell how they did, and write the winner's YAML."""

    def __init__(
        self,
        space: SearchSpace,
        *,
        storage: str | None,
        study_name: str,
        attrs: dict[str, Any],
        seed: int | None,
        device: str,
        cores: int,
        first: list[dict[str, Any]],
        named: bool = False,
        carry_on: str | None = None,
        fit: Callable[[LoaderConfig], LoaderConfig | None] | None = None,
    ) -> None:
        """``named``: ``study_name`` was the user's (a study of that name already there is said, not passed over quietly).
        ``carry_on``: the study of an exploration that training cut short, to go on with (a new one when the storage
        does not hold it). ``fit``: what each candidate is fitted with before it is tried (to this node's /dev/shm; None: not tried)."""
        self.space = space
        self.fit = fit
        self.storage_url = storage or "memory"  # the YAML and its log say "study NAME in memory"
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        storage_obj = open_storage(storage) if storage else None
        self.context = {"device": "cuda" if device.startswith("cuda") else "cpu"}
        # config description -> (the trial that measured it, its samples/s; None: failed or abandoned)
        self.measured: dict[str, tuple[int, float | None]] = {}
        base = baseline_configs(space, TuneSettings(device=device, cores=cores))
        # the torch defaults are not queued (a loop at their pace costs training time), but when the sampler or a
        # user candidate measures them they are the YAML's defaults figure, as in `autotune run`'s
        self._defaults = LoaderConfig.from_params(base["defaults"]).describe() if backend_of(base["defaults"]) in space.backends() else None
        self.carried_on = False
        if carry_on is not None:
            try:
                if storage_obj is None:  # a study kept in memory ended with its process
                    raise KeyError(carry_on)
                self.study = optuna.load_study(study_name=carry_on, storage=storage_obj, sampler=make_sampler("tpe", seed))
            except KeyError:
                logger.warning("study %r is not in %s: exploring from the start in a new study", carry_on, mask_url(self.storage_url))
            else:
                self.carried_on = True
                self._carry_on()
                return
        for attempt in range(1, 100):  # two loaders started in the same second: the second name gets -2
            name = study_name if attempt == 1 else f"{study_name}-{attempt}"
            try:
                self.study = optuna.create_study(storage=storage_obj, study_name=name, direction="maximize", sampler=make_sampler("tpe", seed))
                break
            except optuna.exceptions.DuplicatedStudyError:
                continue
        if named and self.study.study_name != study_name:
            logger.warning("study %r already exists in %s: this exploration is kept as study %r (AutoLoader starts a study each time it explores)",
                           study_name, mask_url(self.storage_url), self.study.study_name)
        for k, v in attrs.items():
            self.study.set_user_attr(k, v)
        for params in first:
            self._enqueue(params, "user")
        # on a GPU, DALI's other start first (mixed decode on 16 cores and more, else every JPEG on the hardware
        # decoder: the loader's starting_points), then DALI's usual start, then the torch heuristic; the user's step
        # scores them all
        order = ("dali-mixed", "dali-hw", "dali-heuristic", "heuristic") if self.context["device"] == "cuda" else ("heuristic", "dali-heuristic")
        for role in order:
            if role in base and backend_of(base[role]) in space.backends():
                self._enqueue(base[role], role)

    def _carry_on(self) -> None:
        """Go on with a study whose exploration training cut short: what it measured counts (a config is not measured
        twice), and the candidates it queued and never ran, or interrupted, are queued again."""
        requeue = []
        for t in self.study.get_trials(deepcopy=False):
            outcome, desc = t.user_attrs.get("outcome"), t.user_attrs.get("config")
            params = t.user_attrs.get("loader_params") or t.user_attrs.get("loader")
            if outcome in (QUEUED_NOT_RUN, Outcome.INTERRUPTED.value) and params:  # never run, or cut short while it ran
                requeue.append((params, t.user_attrs.get("role")))
            elif desc and outcome == Outcome.COMPLETE.value and t.value is not None:
                self.measured[desc] = (t.number, float(t.value))
            elif desc and outcome in (Outcome.CRASH.value, Outcome.PRUNED.value):
                self.measured.setdefault(desc, (t.number, t.user_attrs.get("samples_per_s") if outcome == Outcome.PRUNED.value else None))
        for params, role in requeue:
            if LoaderConfig.from_params(params).describe() not in self.measured:
                self._enqueue(dict(params), role)  # a sampled one keeps no role

    def best_measured(self) -> tuple[int, dict[str, Any], float] | None:
        """The fastest config measured in full so far: its trial, its loader parameters and its samples/s."""
        done = [t for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,))
                if t.user_attrs.get("outcome") == Outcome.COMPLETE.value and t.value is not None and t.user_attrs.get("loader")]
        if not done:
            return None
        best = max(done, key=lambda t: float(t.value or 0.0))
        return best.number, dict(best.user_attrs["loader"]), float(best.value or 0.0)

    def _enqueue(self, params: dict[str, Any], role: str | None) -> None:
        fixed = {k: v for k, v in params.items() if k in self.space and _on_grid(self.space[k], v)}
        values = {**self.context, **params}
        # a value outside the space, or a knob the space would sample that the config leaves at its default: the
        # sampler's params would not be this config, so it is measured as it is, without params
        outside = any(k in self.space and k not in fixed for k in params) or any(p.applies(values) and p.name not in fixed for p in self.space.params)
        attrs = {**({"role": role} if role else {}), "loader_params": dict(params), **({"outside_space": True} if outside else {})}
        self.study.enqueue_trial(fixed, user_attrs=attrs, skip_if_exists=False)

    def ask(self) -> Candidate | None:
        """The next config to try, or None when the sampler only repeats configs already measured."""
        for _ in range(_MAX_REPEATS):
            trial = self.study.ask()
            # a queued config is suggested too (its values are taken as they are), so that the trial has its params:
            # the sampler learns from it, and importance and optuna-dashboard count it
            suggested = None if trial.user_attrs.get("outside_space") else self.space.suggest(trial, self.context)
            params = trial.user_attrs.get("loader_params") or suggested
            try:
                loader = LoaderConfig.from_params(params)
            except Exception as e:  # noqa: BLE001 - a user candidate that does not describe a loader
                logger.warning("candidate %s is not a loader config (%s): skipped", params, e)
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                continue
            if self.fit is not None:  # what runs, and so what the study and the YAML record
                fitted = self.fit(loader)
                if fitted is None:
                    msg = "not tried: /dev/shm here cannot hold its workers' batches, not even one sample at a time"
                    logger.info("candidate %s %s: %s", trial.number, loader.describe(), msg)
                    for k, v in (("loader", loader.to_params()), ("config", loader.describe()), ("outcome", Outcome.SHM.value), ("message", msg)):
                        trial.set_user_attr(k, v)
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                    continue
                loader = fitted
            desc = loader.describe()
            trial.set_user_attr("loader", loader.to_params())
            trial.set_user_attr("config", desc)
            if desc in self.measured:  # the sampler proposed a config already measured: tell it the same again
                earlier, value = self.measured[desc]
                trial.set_user_attr("outcome", "repeat")
                trial.set_user_attr("repeat_of", earlier)
                trial.set_user_attr("message", f"same config as trial #{earlier}: not measured again")
                if value is None:
                    self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
                else:
                    self.study.tell(trial, value)
                continue
            if desc == self._defaults and trial.user_attrs.get("role") in (None, "user"):  # measured, not a repeat
                trial.set_user_attr("role", "defaults")
            return Candidate(trial.number, loader.to_params(), trial)
        return None

    def tell(self, cand: Candidate, verdict: str, *, per_sample: float, wait_fraction: float, measured: int, message: str = "") -> None:
        """Store how a candidate did: complete (its samples/s), pruned (abandoned as too slow) or failed."""
        from autotune.autoloader._explore import BUDGET, DONE, FAILED

        trial = cand.trial
        if trial is None:
            return
        rate = loop_rate(per_sample)
        desc = cand.loader.describe()
        attrs: dict[str, Any] = {"measured_batches": measured, "loop_wait_fraction": round(wait_fraction, 4) if math.isfinite(wait_fraction) else None}
        if rate is not None:
            attrs["samples_per_s"] = round(rate, 1)
        if message:
            attrs["message"] = message[:500]
        for k, v in attrs.items():
            trial.set_user_attr(k, v)
        if verdict in (DONE, BUDGET) and rate is not None:
            trial.set_user_attr("outcome", Outcome.COMPLETE.value)
            self.study.tell(trial, rate)
            self.measured[desc] = (trial.number, rate)
        elif verdict == FAILED:
            trial.set_user_attr("outcome", Outcome.CRASH.value)
            self.study.tell(trial, state=optuna.trial.TrialState.FAIL)
            self.measured[desc] = (trial.number, None)
        else:  # too slow against the best so far (or ended before it was measured)
            trial.set_user_attr("outcome", Outcome.PRUNED.value)
            if rate is not None:
                trial.report(rate, measured)
            self.study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            self.measured[desc] = (trial.number, rate)

    def write_config(self, path: str | None, extra: dict[str, Any]) -> Config | None:
        """The winner's YAML (the shape ``autotune run`` writes), atomically; None when no candidate completed."""
        complete = [t for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.user_attrs.get("outcome") == "complete"]
        if not complete:
            return None
        self.study.set_user_attr("result_extra", extra)
        cfg = config_from_study(self.study, self.storage_url)
        if path is not None:
            save_config(cfg, path)
            try:
                mark_written(self.study, cfg)
            except Exception as e:  # noqa: BLE001 - the file is written; the study's note of it is a nicety
                logger.debug("could not note the YAML's stamp in the study: %s", e)
            logger.info("wrote %s (study %s in %s)", path, self.study.study_name, mask_url(self.storage_url))
        return cfg

    def abandon_open_trials(self) -> None:
        """Once exploration has settled no trial stays open. One asked but not told (the candidate running when training
        ended) is marked failed, ``outcome: interrupted``. One queued and never asked (a starting point exploration did
        not reach) is taken off the queue: failed in Optuna (so no later ``ask`` runs it), ``outcome: waiting`` as a
        trial an ``autotune run`` queued and never ran is counted (``queued_not_run``; "queued, not run" in reports)."""
        storage = self.study._storage
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            storage.set_trial_user_attr(t._trial_id, "outcome", Outcome.INTERRUPTED.value)
            storage.set_trial_user_attr(t._trial_id, "message", "training ended, or exploration stopped, before it was measured")
            self.study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)):
            storage.set_trial_user_attr(t._trial_id, "outcome", QUEUED_NOT_RUN)
            storage.set_trial_user_attr(t._trial_id, "message", "queued, not run: exploration settled first")
            storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
