"""The search: an Optuna study over a search space, scored by trials run in isolated child processes.

:class:`Tuner` enqueues the baselines (:mod:`~autotune.study.baselines`: the framework defaults, the common
heuristic, and a previous best when warm-starting), samples the rest, measures each trial in a child process
(:mod:`autotune.trials`), and re-measures the top candidates interleaved (:mod:`~autotune.study.confirm`) to
pick the winner by median. It never imports torch or DALI and never touches a GPU.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections.abc import Callable
from typing import Any, Literal

import optuna

from autotune.config.schema import FALLBACK_BACKEND, LoaderConfig, backend_of
from autotune.dataset import pagecache
from autotune.dataset.paths import printable
from autotune.dataset.scan import Dataset
from autotune.errors import UserError, interrupt_behind
from autotune.loaders.memory import fit_shm
from autotune.outcomes import Outcome
from autotune.study.baselines import baseline_configs, fit_to_space, neighbours
from autotune.study.budget import REFERENCE_ROLE, WRITE_RESERVE_S
from autotune.study.confirm import OnStep, candidates
from autotune.study.confirm import confirm as confirm_candidates
from autotune.study.evidence import (
    MeasuredTrials,
    ask_worth_measuring,
    being_measured,
    contenders,
    fail_interrupted,
    measured_before,
    record_result,
    sampled_dominated,
    stop_failing_alike,
    tell_dominated,
    tell_repeat,
    tell_taken,
    trial_attrs,
    trial_loader,
    unless_repeat,
)
from autotune.study.opening import another_live_owner, check_resumable, fail_stale_trials, open_study
from autotune.study.paired import applies, paired_trial, warm_price
from autotune.study.settings import PRUNERS, SAMPLERS, TuneSettings, make_pruner, make_sampler
from autotune.study.space import SearchSpace
from autotune.study.storage import is_storage_error, open_storage, storage_failure
from autotune.trials import guard
from autotune.trials.ahead import build_ahead, halved
from autotune.trials.logs import append_line, remeasure_log, trial_log
from autotune.trials.measure import STEADY_TOL
from autotune.trials.owner import this_owner
from autotune.trials.runner import OnIntermediate, WindowVerdict, deferred_signals, remove_stale_tmpdirs, run_trial
from autotune.trials.spec import TrialResult, TrialSpec
from autotune.trials.warm import WarmPool, reuse_key
from autotune.trials.zygote import Zygote

__all__ = [  # the study's parts, importable from here as before
    "PRUNERS",
    "SAMPLERS",
    "TrialFailure",
    "TuneSettings",
    "Tuner",
    "baseline_configs",
    "fail_stale_trials",
    "fit_to_space",
    "judged",
    "make_pruner",
    "make_sampler",
    "neighbours",
    "trial_loader",
]

logger = logging.getLogger(__name__)

#: the least time a trial gets when the time budget is nearly spent (its first window may still come)
MIN_TRIAL_S = 3.0
#: how far past ``time_left`` a trial may run before it is cut (a window may end it complete): 2 s stay for the YAML and the exit
CUT_GRACE_S = WRITE_RESERVE_S - 2.0


class TrialFailure(Exception):
    """A trial that says nothing about the config's speed (crash, bad data): told to Optuna as FAILED."""


def _removed(files: tuple[str, ...]) -> list[str]:
    """The files no longer there, read one folder listing at a time (a stat per file is over a million calls on a
    network file system for ImageNet)."""
    by_folder: dict[str, list[str]] = {}
    for f in files:
        by_folder.setdefault(os.path.dirname(f), []).append(f)
    gone = []
    for folder, inside in by_folder.items():
        try:
            names = set(os.listdir(folder))
        except OSError:
            names = set()
        gone += [f for f in inside if os.path.basename(f) not in names]
    return gone


def judged(step: int, values: list[float], windows: int) -> bool:
    """Whether the pruner may judge a trial at window ``step``, given its values so far (``values[-1]`` at ``step``).

    The pruner compares a trial with the complete trials' values at the same window. Only the planned ``windows``
    are comparable: every complete trial has them, while later windows exist only for the slow starters whose
    ramp was cut, so a trial there would be judged against one or two of those. And a trial is judged once its
    value stopped climbing (within :data:`~autotune.trials.measure.STEADY_TOL` of the one before): a slow
    starter's first windows are its ramp, not its speed.
    """
    return 0 < step < windows and len(values) > 1 and values[-1] <= values[-2] * (1 + STEADY_TOL)


class Tuner:
    """Owns one Optuna study for one dataset on one machine."""

    def __init__(self, dataset: Dataset, space: SearchSpace, settings: TuneSettings, *, storage: str, study_name: str, resume: bool = False,
                 attrs: dict[str, Any] | None = None, zygote: Zygote | None = None, made_up_name: bool = False) -> None:
        """``made_up_name``: ``study_name`` was made up (from the dataset, the machine and the second), not asked for:
        a study of that name started by another run in the same second makes this one ``NAME-2``."""
        self.dataset = dataset
        self.space = space
        self.settings = settings
        self.storage_url = storage
        self.study, exists = open_study(open_storage(storage), storage, study_name, settings, resume=resume, made_up_name=made_up_name)
        self.created = not exists  # with --resume too: processes sharing --study-name NAME --resume start it together
        self._owner = this_owner()
        remove_stale_tmpdirs()  # the trial temp folders of runs killed (SIGKILL) before their trials could remove them
        self._stamp_owner_first()
        if not exists:
            for k, v in (attrs or {}).items():
                self.study.set_user_attr(k, v)
        else:
            excluded = (self.study.user_attrs.get("dataset") or {}).get("excluded")
            if excluded:  # files an earlier run of this study found undecodable stay out
                self.dataset = dataset.without(excluded, "cannot be decoded")
            check_resumable(self.study, self.dataset, self.space, self.settings, attrs or {})
            fail_stale_trials(self.study)
            for k, v in (attrs or {}).items():  # a run stopped between making the study and recording it left them out
                if k not in self.study.user_attrs:
                    self.study.set_user_attr(k, v)
        self.context = {"device": "cuda" if settings.device.startswith("cuda") else "cpu"}
        # None: not started; False: could not start (trials are spawned); a Zygote, perhaps still importing
        # (one started early by Zygote.launch: the first trial waits for it)
        self._zygote: Zygote | Literal[False] | None = zygote
        #: the search's warm trial processes (:mod:`autotune.trials.warm`); None: every trial in a fresh process
        self._warm: WarmPool | None = WarmPool(2 if settings.build_ahead else 1) if settings.reuse_processes else None
        self._searching = False  # within optimize: the only time a trial may go to a warm process
        #: the trial asked for while the one before it measured (:meth:`_build_next`): the study's next ``ask`` gives it
        self._asked: optuna.Trial | None = None
        self._built_for: int | None = None  # the trial whose loader is built ahead, held in the warm pool
        self._counter: MeasuredTrials | None = None
        self._ask_ahead_first()

    def _stamp_owner_first(self) -> None:
        """Record the trial's owner as soon as Optuna has made the trial (its sampler's ``before_trial``), so that
        a trial left RUNNING by a stop is told from another node's in a shared storage (see _fail_own_running)."""
        sampler, storage, owner = self.study.sampler, self.study._storage, self._owner

        def before_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
            storage.set_trial_user_attr(trial._trial_id, "owner", owner)
            type(sampler).before_trial(sampler, study, trial)

        sampler.before_trial = before_trial  # type: ignore[method-assign]  # wraps this sampler's own hook, on this instance only

    def _ask_ahead_first(self) -> None:
        """Make this study's ``ask`` (the one ``optimize`` calls for each trial) give the trial asked for ahead, if any."""
        study, plain = self.study, self.study.ask

        def ask(fixed_distributions: Any = None) -> optuna.Trial:
            if self._asked is not None and not fixed_distributions:
                trial, self._asked = self._asked, None
                return trial
            return plain(fixed_distributions)

        study.ask = ask  # type: ignore[method-assign]  # this instance only, as _stamp_owner_first does with its sampler

    # -- enqueueing ------------------------------------------------------------------------------------
    def _enqueue(self, params: dict[str, Any], role: str) -> None:
        """Queue a fixed config (a baseline, a warm start). One of a backend the space does not tune (the torch
        baselines in a DALI-only space) is measured as it is, with no sampled parameters, so the sampler learns nothing
        false. Any config with a value outside the space (``num_workers = cores`` where the space allows fewer) is a
        ``reference``: the YAML states its rate, and it is never a contender, the winner or the ``torch_fallback``."""
        inside = backend_of(params) in self.space.backends()
        fixed = {k: v for k, v in params.items() if k in self.space and self.space[k].contains(v)} if inside else {}
        attrs: dict[str, Any] = {"role": role, "loader_params": params}
        if not inside:
            attrs["outside_space"] = True
        if not inside or any(k in self.space and not self.space[k].contains(v) for k, v in params.items() if k != "backend"):
            attrs["reference"] = True
        self.study.enqueue_trial(fixed, user_attrs=attrs, skip_if_exists=False)

    def enqueue_baselines(self) -> None:
        """Queue each baseline that has no measurement yet: never run, or failed without saying anything about its
        speed (killed mid-run, a crash, a bad file since left out). Measured ones (complete, or pruned for memory or
        time) and queued or running ones are not queued again."""
        have = {
            trial_attrs(t).get("role") for t in self.study.get_trials(deepcopy=False)
            if t.state != optuna.trial.TrialState.FAIL
        }
        # the likeliest winner first, the defaults (the reference of the speedup, rarely a contender) last:
        # a short --budget may end the search before all of them are measured
        for role, params in reversed(baseline_configs(self.space, self.settings).items()):
            if role not in have:
                self._enqueue(params, role)

    def enqueue_warm_start(self, params: dict[str, Any], n_neighbours: int = 2) -> None:
        """The previous winner first (fitted into this space), then its close neighbours. When that winner is not
        a torch DataLoader, the torch heuristic comes second: the YAML's ``torch_fallback`` (what
        ``cfg.dataloader_kwargs()`` returns) needs one measured DataLoader, and a short re-tune may end before the
        baselines, which come after the warm start."""
        params = fit_to_space(params, self.space)
        self._enqueue(params, "warm-start")
        if self.settings.baselines and backend_of(params) != FALLBACK_BACKEND and FALLBACK_BACKEND in self.space.backends():
            self._enqueue(baseline_configs(self.space, self.settings)["heuristic"], "heuristic")  # enqueue_baselines skips it then
        for p in neighbours(params, self.space, n_neighbours):
            self._enqueue(p, "warm-start-neighbour")

    # -- one trial ---------------------------------------------------------------------------------------
    def spec(self, loader: LoaderConfig, number: int | None = None, log: str | None = None) -> TrialSpec:
        """The trial's spec; its output goes to ``log`` (a file path), by default ``<log_dir>/<number>.log``."""
        s = self.settings
        return TrialSpec(
            dataset=self.dataset, loader=loader, pipeline=s.pipeline, device=s.device, warmup_batches=s.warmup_batches,
            window_s=s.window_s, windows=s.windows, seed=s.seed, ranks=s.ranks, model=s.model,
            inject=s.inject.get(number) if number is not None else None,
            log=log or (trial_log(s.log_dir, number) if number is not None else None),
        )

    def _budget_cut(self) -> float | None:
        """A trial's time limit where the time budget ends before ``trial_timeout`` does (None otherwise): a slow
        starter (the torch defaults on a busy machine) no longer runs past the budget, nor into the time kept for the
        planned re-measurement (``measure_left``). Not before a trial completed: the YAML needs one (a reference
        outside the space is no YAML)."""
        s = self.settings
        if s.time_left is None or not any(t.value is not None for t in contenders(self.study)):
            return None
        before_reserve = s.measure_left() if s.measure_left is not None else None
        if before_reserve is not None and before_reserve < s.time_left():
            # a re-measurement is planned: its time is never a trial's. A slow starter with no window yet is cut where
            # its reserve begins (a demo's last trial ran into it for 21 s, and the winner was picked on single readings)
            left = max(0.0, before_reserve)
        else:
            left = max(MIN_TRIAL_S, s.time_left() + CUT_GRACE_S)
        return left if left < s.trial_timeout else None

    def measure(self, loader: LoaderConfig, number: int | None = None, on_intermediate: OnIntermediate | None = None, log: str | None = None,
                timeout_s: float | None = None, after_begin: Callable[[str], bool] | None = None, **spec: Any) -> TrialResult:
        """Measure ``loader`` in its own trial process, or (during :meth:`optimize`) in the warm process of its kind where
        the kind allows (:mod:`autotune.trials.warm`), as the paired re-measurement; fresh ones are fresh. ``spec``: more of the trial's
        :class:`TrialSpec` fields (the paired loaders of the re-measurement, :mod:`autotune.study.paired`)."""
        from autotune.errors import raise_if_stopped
        from autotune.trials import guard

        raise_if_stopped()  # a stop signal whose exception was lost on its way: it ends the run here
        if self.settings.cache == "cold":
            pagecache.evict(self.dataset)
        st = self.settings
        over = guard.check_estimate(loader, self.dataset, st.budgets, pipeline=st.pipeline, device=st.device, ranks=st.ranks, model=st.model)
        if over is not None:
            return over
        if self._zygote is None and self.settings.fork_trials:
            self._zygote = Zygote.start(log=trial_log(st.log_dir, "zygote")) or False  # False: could not start; spawn every trial instead
        elif self._zygote:
            self._zygote = self._zygote.ready() or False
        zygote = self._zygote or None
        timeout_s = self.settings.trial_timeout if timeout_s is None else timeout_s
        warm = self._warm if self._searching or spec.get("paired") else None  # the paired re-measurement: study.paired
        return run_trial(dataclasses.replace(self.spec(loader, number, log), **spec), timeout_s=timeout_s, budgets=self.settings.budgets,
                         on_intermediate=on_intermediate, zygote=zygote, warm=warm, after_begin=after_begin if warm is not None else None)

    def end_warm(self, keep: bool = False) -> None:
        """End the search's warm trial processes (``keep``: only the trial built ahead; the idle ones stay for the paired
        re-measurement), and note what they saved (the study attr ``warm_processes``)."""
        if self._warm is None:
            return
        with deferred_signals():  # every idle process and its temp folder go, even on a Ctrl-C meanwhile
            self._warm.drop_ahead() if keep else self._warm.close()
        if self._warm.reused or self._warm.built_ahead:
            with contextlib.suppress(Exception):  # a storage that fails here has failed the run already: that error is told
                self.study.set_user_attr("warm_processes", self._warm.summary())

    def close(self) -> None:
        """End the process that trials are forked from (also one started early and never used), and a warm one."""
        self.end_warm()
        if self._zygote:
            self._zygote.close()
        self._zygote = None

    def exclude_file(self, path: str) -> None:
        """Leave an undecodable file out of the following trials: it fails every config, not just this one.

        The study's ``dataset`` summary then describes the files that remain and names the excluded ones
        (``dataset.excluded`` in the YAML), which ``build_loader`` and ``autotune check`` leave out too.
        """
        d = self.dataset
        if path not in d.files:
            return
        if self._warm is not None:  # a trial built ahead reads the files as they were
            with deferred_signals():
                self._warm.drop_ahead()
        if not os.path.lexists(path):  # removed while the run measured: the others removed with it go at once, not a trial each
            gone = _removed(d.files)
            self.dataset = d.without([d.name_of(f) for f in gone], "removed during the run")
            self.study.set_user_attr("dataset", self.dataset.summary())
            logger.warning("%d file(s) of the dataset were removed while the run measured it (first %s): left out of the following trials",
                           len(gone), printable(gone[0]))
            return
        self.dataset = d.without([d.name_of(path)], "cannot be decoded")
        self.study.set_user_attr("bad_files", [*self.study.user_attrs.get("bad_files", []), path])
        self.study.set_user_attr("dataset", self.dataset.summary())
        logger.info("%s cannot be decoded: left out of the following trials; fix or remove it before training", path)

    def objective(self, trial: optuna.Trial) -> float:
        try:
            # stamped already when the trial was made (_stamp_owner_first); again here for a sampler set after that
            trial.set_user_attr("owner", self._owner)
            return self._objective(trial)
        except (KeyboardInterrupt, Exception) as e:  # Ctrl-C or SIGTERM anywhere in the trial (the sampler's work too), or
            if isinstance(e, KeyboardInterrupt) or interrupt_behind(e) is not None:  # an error code there made of one
                record_result(trial, {"outcome": Outcome.INTERRUPTED.value})
            raise
        finally:
            if self._built_for == trial.number:  # built ahead for this trial and not measured (a repeat, a predicted failure)
                self._built_for = None
                if self._warm is not None:
                    with deferred_signals():  # its process goes, even on a Ctrl-C meanwhile
                        self._warm.drop_ahead()

    def _loader_of(self, trial: optuna.Trial) -> LoaderConfig:
        """The config ``trial`` measures: a queued one as it was queued, else the space's sample; fitted to /dev/shm
        (``fit_shm``: workers whose whole batches it cannot hold hand over smaller ones, where the kind joins them)."""
        if trial_attrs(trial).get("outside_space"):
            params = trial_attrs(trial)["loader_params"]
        else:
            try:
                params = self.space.suggest(trial, self.context)  # enqueued values are taken as they are
            except ValueError as e:
                if "dynamic value space" not in str(e):
                    raise
                raise UserError(f"a parameter's choices differ from those study {self.study.study_name!r} began with (the space file, --batch-size, "
                                "--gpus, the cores, or the dataset's size changed), which Optuna cannot continue; resume with the same, "
                                "or tune under another --study-name") from None
            # a queued config as it was queued; a knob it does not name (a warm start from another backend), as sampled:
            # what is measured is what the trial's params say
            params = {**params, **trial_attrs(trial)["loader_params"]} if "loader_params" in trial_attrs(trial) else params
        return fit_shm(LoaderConfig.from_params(params), self.dataset, (s := self.settings).budgets.shm_mib, s.pipeline, s.device, s.ranks)

    def _two_at_once(self, loader: LoaderConfig) -> bool:
        """Whether ``loader`` may run while another trial builds or measures: a kind built ahead (its process reused),
        within half of each memory budget."""
        s = self.settings
        if reuse_key(self.spec(loader)) is None:
            return False
        return guard.check_estimate(loader, self.dataset, halved(s.budgets), pipeline=s.pipeline, device=s.device, ranks=s.ranks, model=s.model) is None

    def _may_build_ahead(self, loader: LoaderConfig) -> bool:
        """Whether the next trial may be built while ``loader``'s trial measures: the settings ask for it, the search
        runs, and this trial is one of a kind built ahead itself (a build beside a torch trial, the torch defaults
        that the speedup is measured against among them, would slow it) that fits half of each memory budget."""
        s = self.settings
        return s.build_ahead and self._searching and self._warm is not None and self._two_at_once(loader)

    def _queue_allows_ask(self) -> bool:
        """Whether the next trial may be asked for ahead, given the queue: yes when it is empty (the next is sampled),
        or when its next is a starting point of a kind built ahead (DALI's usual start while DALI's other start
        measures) that is not the speedup's reference, nor followed by it: the time budget's last-trial rule reads the
        queue's next role, and asked for ahead, a trial has left the queue."""
        waiting = sorted(self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)), key=lambda t: t.number)
        if not waiting:
            return True
        if any(trial_attrs(t).get("role") == REFERENCE_ROLE for t in waiting[:2]):
            return False
        params = trial_attrs(waiting[0]).get("loader_params")
        try:
            return params is not None and self._two_at_once(LoaderConfig.from_params(params))
        except Exception:  # noqa: BLE001 - a queued config that does not parse is its own trial's to tell
            return False

    def _build_next(self, current: LoaderConfig, signal: str | None = None) -> bool:
        """While the trial of ``current`` builds, ask for the next one and have its loader built, to be measured as
        soon as this one ends (:mod:`autotune.trials.ahead`); whether it is. It creates ``signal`` once its build ends,
        and the trial of ``current`` times no window before that.

        Only a sampled trial, or a queued starting point of a kind built ahead that the queue allows
        (:meth:`_queue_allows_ask`), is asked for ahead; and only while the time budget has room for it after this
        trial, and before the last of ``--n-trials``. Asked for, it is built unless it is of a kind that is not, this same config, one
        measured before, or over half of a memory budget; its trial then runs as usual. A failure here is the next
        trial's own to tell, never this one's.
        """
        s, warm = self.settings, self._warm
        if warm is None or self._asked is not None or not self._queue_allows_ask() or (self._counter is not None and self._counter.left <= 1) \
                or (s.ahead_fits is not None and not s.ahead_fits()):
            return False
        try:
            # the trial asked for is kept at once (a stop fails it); one of a dominated kind is told, and another asked for
            trial, loader, still = ask_worth_measuring(self.study, self._loader_of, keep=lambda t: setattr(self, "_asked", t), cores=s.cores)
            if still is not None:
                return False  # still of a dominated kind after the asks: its own objective tells it, nothing is built
            if loader == current or measured_before(self.study, loader, trial.number) is not None or \
                    being_measured(self.study, loader, trial.number, self._owner) or not self._two_at_once(loader):
                return False
            if build_ahead(dataclasses.replace(self.spec(loader, trial.number), signal=signal), warm=warm, zygote=self._zygote or None):
                self._built_for = trial.number
                logger.info("trial %d %s: built while the trial before it builds", trial.number, loader.describe())
                return True
        except Exception as e:  # noqa: BLE001 - the next trial's own objective meets it again, and tells it
            logger.info("the next trial was not built ahead: %s: %s", type(e).__name__, e)
        return False

    def _objective(self, trial: optuna.Trial) -> float:
        loader = self._loader_of(trial)
        trial.set_user_attr("loader", loader.to_params())
        trial.set_user_attr("config", loader.describe())
        # each config is measured once: a sampled one, and a queued one that an earlier trial completed (a warm start
        # that was DALI's usual start is that baseline too; its queued trial states the same result, in no time).
        # A queued config pruned before is measured as asked (a memory budget or a fault may be gone)
        earlier = measured_before(self.study, loader, trial.number)
        if earlier is not None and (trial_attrs(trial).get("role") is None or earlier.state == optuna.trial.TrialState.COMPLETE):
            return tell_repeat(trial, earlier)
        # and one that another process measures right now (processes sharing the study): taken, not measured twice at once
        running = being_measured(self.study, loader, trial.number, self._owner)
        if running is not None:
            raise TrialFailure(tell_taken(trial, running))
        # a sampled config of a kind measured far below another kind: its time goes to the kind that leads
        if (why := sampled_dominated(self.study, trial, loader, self.settings.cores)) is not None:
            tell_dominated(trial, why)
            raise optuna.TrialPruned(why)

        reported: list[float] = []
        stopped: list[bool] = []  # the budget ended it after a window: its process was stopped before it logged its rate

        def intermediate(step: int, value: float) -> WindowVerdict:
            trial.report(value, step)
            reported.append(value)
            left = self.settings.measure_left or self.settings.time_left
            if left is not None and left() <= 0:
                stopped.append(True)
                return WindowVerdict.ENOUGH  # the budget is spent (a slow trial such as the torch defaults): keep what was measured
            prune = trial_attrs(trial).get("role") is None and judged(step, reported, self.settings.windows) and trial.should_prune()
            return WindowVerdict.PRUNE if prune else WindowVerdict.GO_ON

        log = trial_log(self.settings.log_dir, trial.number)
        if log is not None:
            trial.set_user_attr("log", log)  # the trial process's output: tracebacks, native libraries' lines
        cut = self._budget_cut()
        limit: dict[str, Any] = {"timeout_s": cut} if cut is not None else {}  # none: the measure's own (a stand-in may take none)
        if self._may_build_ahead(loader) and self._built_for != trial.number:  # none beside one built ahead (trials.ahead)
            limit["after_begin"] = lambda flag: self._build_next(loader, flag)
        result = self.measure(loader, trial.number, intermediate, **limit)
        if cut is not None and result.outcome is Outcome.TIMEOUT:  # the budget's end, not the config's speed: nothing to learn
            result.outcome, result.message = Outcome.INTERRUPTED, f"the time budget ran out {cut:.0f} s into the trial, before a window ended it"
        record = result.to_attrs()
        if self.settings.model is not None and result.outcome is Outcome.COMPLETE:
            from autotune.study.selection import ceiling_attrs, study_ceiling  # no torch on this side

            record.update(ceiling_attrs(study_ceiling(self.study.user_attrs), loader.batch_size, result.samples_per_s))
        record_result(trial, record)
        if stopped and log is not None and result.outcome is Outcome.COMPLETE:  # the log ends with its rate, as every other
            # not twice, if it wrote its own as it was stopped
            append_line(log, f"complete: {result.samples_per_s:.1f} samples/s ({result.message})", unless=": complete: ")
        logger.info("trial %d %s: %s %s", trial.number, loader.describe(), result.outcome.value,
                    f"{result.samples_per_s:.1f} samples/s" if result.samples_per_s else result.message)
        if result.outcome is Outcome.COMPLETE:
            if result.samples_per_s is None:
                raise RuntimeError(f"trial {trial.number} is complete but has no samples/s; a measure's complete result carries its rate")
            return float(result.samples_per_s)
        if result.outcome is Outcome.BAD_DATA and result.bad_file:
            self.exclude_file(result.bad_file)
            role = trial_attrs(trial).get("role")
            if role in baseline_configs(self.space, self.settings):  # measure the baseline again without the file
                self._enqueue(trial_attrs(trial).get("loader_params") or loader.to_params(), role)
        if result.outcome.steers_sampler:
            if not reported and result.outcome is not Outcome.PRUNED:
                trial.report(0.0, 0)  # no rate at all: the worst value, so the sampler avoids the region
            if result.outcome.is_memory:
                # infeasible: TPE ranks it below every feasible trial, even one pruned after a few windows
                trial.set_constraint("memory", guard.violation(result, self.settings.budgets))
            raise optuna.TrialPruned(f"{result.outcome.value}: {result.message}")
        raise TrialFailure(f"{result.outcome.value}: {result.message}")

    # -- the study ---------------------------------------------------------------------------------------
    def optimize(self, callbacks: list[Callable] | None = None, *, keep_warm: bool = False) -> None:
        """Run the study's trials (the baselines queued first) until ``n_trials``, the timeout or a callback stops it.

        ``keep_warm``: leave the pre-imported trial process running for the re-measurement that follows (the
        caller then calls :meth:`close`); started again, it cost a 60 s run on an H200 7 s, and with them the
        re-measurement round it had planned.
        """
        s = self.settings
        if s.cache == "warm":
            pagecache.warm(self.dataset)
        if s.baselines:
            self.enqueue_baselines()
        # Optuna's own lines (a traceback for every failed trial) only with diagnostics on: the outcome and the
        # message are in each trial's user attributes, its output in its log file
        optuna.logging.set_verbosity(optuna.logging.INFO if logger.isEnabledFor(logging.INFO) else optuna.logging.ERROR)
        budget = self._counter = MeasuredTrials(s.n_trials, max_repeats=max(10, s.n_trials))
        shown = [*(unless_repeat(cb) for cb in callbacks or []), stop_failing_alike]  # the user's code failing every config ends it
        running_before = {t._trial_id for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))}
        self._searching = True
        try:
            self.study.optimize(self.objective, n_trials=None, timeout=s.timeout, catch=(TrialFailure,), callbacks=[*shown, budget], gc_after_trial=False)
        except KeyboardInterrupt:
            with deferred_signals():  # a second Ctrl-C waits until the study is consistent
                self._fail_own_running(running_before)
            raise
        except UserError:
            raise
        except Exception as e:
            stop = interrupt_behind(e)
            if stop is not None:  # Optuna's _run_trial turns a Ctrl-C while it stores a result into an UnboundLocalError
                with deferred_signals():
                    self._fail_own_running(running_before)
                raise stop from None
            if is_storage_error(e):  # e.g. the disk filled up: one line; the trials stored so far stay
                raise storage_failure(self.storage_url, e) from None
            raise
        finally:
            self._searching = False
            try:
                self._unasked()
            finally:
                self.end_warm(keep=keep_warm)  # kept: the paired re-measurement takes one (study.paired)
            if not keep_warm:
                self.close()

    def _unasked(self) -> None:
        """A trial asked for ahead (:meth:`_build_next`) that the search ended before measuring: failed, its outcome
        ``interrupted`` (Optuna cannot take a trial back)."""
        trial, self._asked = self._asked, None
        if trial is None:
            return
        with contextlib.suppress(Exception):  # a stop may have failed it already (_fail_own_running)
            if self.study._storage.get_trial(trial._trial_id).state == optuna.trial.TrialState.RUNNING:
                record_result(trial, {"outcome": Outcome.INTERRUPTED.value, "message": "asked for ahead; the search ended before it was measured"})
                self.study.tell(trial, state=optuna.trial.TrialState.FAIL)

    def _fail_own_running(self, running_before: set[int]) -> list[int]:
        """Mark failed (outcome ``interrupted``) the trial that a Ctrl-C or SIGTERM left RUNNING.

        Optuna marks the trial failed when the signal lands in the objective, but not when it lands in its own
        code around it (creating the trial, or storing its result), which leaves it RUNNING for ever. Trials that
        were running before this search began, and those another process owns, are left alone.
        """
        left = []
        others: bool | None = None
        for t in self.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            owner = trial_attrs(t).get("owner")
            if t._trial_id in running_before or (owner and owner != self._owner):
                continue
            if not owner:  # stopped between Optuna's RUNNING and the owner's stamp: ours unless another live process may own it
                if others is None:
                    others = another_live_owner(self.study, self._owner)
                if others:
                    continue
            fail_interrupted(self.study, t)
            left.append(t.number)
        if left:
            logger.info("trial(s) %s stopped outside the objective: marked failed", left)
        return left

    def paired_price(self, best: list[optuna.trial.FrozenTrial]) -> float | None:
        """A contender's seconds in a paired re-measurement in a kept process (:func:`~autotune.study.paired.warm_price`)
        of as many contenders as ``best`` holds, as :meth:`confirm` takes them (a start in the last place, one a config)."""
        return warm_price(self.candidates(len(best)), self.settings, self._warm, self.dataset)

    def complete_trials(self) -> list[optuna.trial.FrozenTrial]:
        """The complete trials that may win (:func:`~autotune.study.evidence.contenders`)."""
        return contenders(self.study)

    def candidates(self, k: int) -> list[optuna.trial.FrozenTrial]:
        """The best ``k`` complete trials with distinct configs (:func:`~autotune.study.confirm.candidates`)."""
        return candidates(self.study, k)

    def confirm(self, on_step: OnStep | None = None, fits: Callable[[float], bool] | None = None) -> dict[str, Any]:
        """Re-measure the top candidates, paired in one process (:mod:`autotune.study.paired`) or each in fresh ones,
        and pick the winner (:func:`~autotune.study.confirm.confirm`, which says what ``on_step`` and ``fits`` are)."""
        s = self.settings

        def remeasure(t: optuna.trial.FrozenTrial, repeat: int) -> TrialResult:
            self.end_warm()  # a fresh process each, beside none kept: the winner's figure is what training's own process will see
            return self.measure(trial_loader(t), log=remeasure_log(s.log_dir, t.number, repeat))  # type: ignore[arg-type]  # a contender has its loader

        paired = (lambda cands, left, begin: paired_trial(self.measure, s, self.dataset, cands, left, begin, self._warm)) if applies(s) else None
        return confirm_candidates(self.study, s.confirm_top, s.confirm_repeats, remeasure, close=self.close, on_step=on_step, fits=fits,
                                  paired=paired, left=s.time_left)
