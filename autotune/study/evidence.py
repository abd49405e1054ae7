"""What the trial records say about a config: measured or a repeat, and what the confirmation stage did.

Shared by the tuner (which writes these records) and the result (which reads them), below both.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import optuna

from autotune.config.schema import LoaderConfig
from autotune.loaders.backends import backend_for
from autotune.outcomes import TOLD, Outcome
from autotune.trials.owner import owner_gone

logger = logging.getLogger(__name__)


#: a config below this fraction of the best trial's rate is no contender: noise (about +-8 %) cannot close a gap
#: that wide, so re-measuring it would only spend the budget (the torch defaults are often a fifth of the best)
CONTENDER_FLOOR = 1 / 3

#: after the planned re-measurement, two leaders closer than this (relative) are re-measured again, alternately,
#: up to TIEBREAK_ROUNDS more times each: with +-8 % noise a single round of three cannot tell a 10 % gap
CLOSE_CALL = 0.03
TIEBREAK_ROUNDS = 2
#: re-measured configs whose scores overlap the fastest's and whose median is within this (relative) of it cannot be
#: told apart from it: the cheapest of them wins
INDISTINGUISHABLE = 0.03


#: the user attribute that holds a trial's measurement (outcome, rate, spread, windows, peaks, message): one write
#: per trial, where a write per field made 20 trials some 600 commits of a SQLite database
RESULT_ATTR = "result"


def trial_attrs(t: optuna.trial.FrozenTrial | optuna.Trial) -> dict[str, Any]:
    """A trial's user attributes with its measurement's fields among them: ``trial_attrs(t)["samples_per_s"]``.

    The measurement is stored as one attribute (:data:`RESULT_ATTR`); a study written before that kept each field
    as an attribute of its own, and reads the same.
    """
    attrs = t.user_attrs
    result = attrs.get(RESULT_ATTR)
    return {**attrs, **result} if isinstance(result, dict) else attrs


def fresh_duration(attrs: dict[str, Any]) -> float:
    """A trial's seconds as a fresh process takes them: its duration, plus the start-up a warm process saved it, less
    the wait for a build beside it (a re-measurement has none)."""
    return float(attrs["duration_s"]) + float(attrs.get("saved_s") or 0.0) - float(attrs.get("beside_wait_s") or 0.0)


def record_result(trial: optuna.Trial, result: dict[str, Any]) -> None:
    """Store a trial's measurement in one write: :func:`trial_attrs` reads its fields."""
    trial.set_user_attr(RESULT_ATTR, result)


def fail_interrupted(study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
    """Mark a trial left RUNNING failed, its outcome ``interrupted`` (in place of any result recorded before: a repeat
    whose telling was stopped is no repeat in the study)."""
    study._storage.set_trial_user_attr(t._trial_id, RESULT_ATTR, {"outcome": Outcome.INTERRUPTED.value})
    study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)


def trial_loader(t: optuna.trial.FrozenTrial) -> LoaderConfig | None:
    """The config a trial measured (None: a trial that recorded none)."""
    params = trial_attrs(t).get("loader")
    return LoaderConfig.from_params(params) if params else None


def is_repeat(t: optuna.trial.FrozenTrial) -> bool:
    """A sampled config that an earlier trial already measured: told to Optuna, never measured."""
    return trial_attrs(t).get("outcome") == Outcome.REPEAT.value


def is_told(t: optuna.trial.FrozenTrial) -> bool:
    """A sampled config told to Optuna without a measurement: a repeat, or one of a dominated kind (:func:`dominated`)."""
    return trial_attrs(t).get("outcome") in TOLD


def measured_complete(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The complete trials that measured their config (repeats of an earlier trial left out)."""
    return [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.value is not None and not is_told(t)]


def trial_value(t: optuna.trial.FrozenTrial) -> float:
    """A complete trial's score: Optuna gives every complete trial of a single-objective study one."""
    if t.value is None:
        raise ValueError(f"trial {t.number} has no value; only a complete trial has a score")
    return float(t.value)


def contenders(study: optuna.Study) -> list[optuna.trial.FrozenTrial]:
    """The measured complete trials that may win: those of the space (a baseline outside it, the torch defaults in
    a DALI-only space, is a ``reference`` the YAML states, never the config it hands over)."""
    return [t for t in measured_complete(study) if not trial_attrs(t).get("reference")]


def confirmation_method(record: dict[str, Any]) -> str:
    """What the confirmation stage did, in words that match what happened (failed re-measurements included, and
    those of an earlier run of a resumed study, kept with this run's; why the candidates were not paired), and how the
    winner was picked of them."""
    said = _with_earlier(record)
    if isinstance(record.get("not_paired"), str) and "; winner by median" in said:
        head, sep, tail = said.rpartition("; winner by median")
        said = f"{head} ({record['not_paired']}){sep}{tail}"
    alike = record.get("indistinguishable")
    head, sep, _ = said.rpartition("; winner by median")
    if isinstance(alike, list) and len(alike) > 1 and sep:
        return f"{head}; winner: the cheapest of the {len(alike)} the re-measurement cannot tell apart from the fastest"
    if isinstance(alike, list) and len(alike) == 1 and sep:  # the noise rule chose, on the re-measurements alone
        return f"{head}; winner: the fastest by the median of its re-measurements, the others told apart from it"
    return said


def _with_earlier(record: dict[str, Any]) -> str:
    earlier = int(record.get("earlier") or 0)
    said = _this_run(record, earlier)
    if not earlier:
        return said
    kept = f"{earlier} re-measurement{'s' if earlier != 1 else ''} of an earlier run of this study kept"
    if said.startswith("best single trial"):  # none of this run's counted: the earlier ones decide with the trials
        return f"{kept}; none counted in this run ({said.removeprefix('best single trial').strip(' :()')}); winner by median of all scores"
    head, sep, tail = said.rpartition("; winner by median")
    return f"{head}; {kept}{sep}{tail}"


def _this_run(record: dict[str, Any], earlier: int) -> str:
    """What this run's confirmation did; ``earlier``: the scores of an earlier run's among the candidates'."""
    cands = record.get("candidates") or []
    set_aside = record.get("set_aside")
    aside: list[Any] = set_aside if isinstance(set_aside, list) else []
    done = sum(max(0, len(c.get("scores") or []) - 1) for c in cands) + len(aside) - earlier
    attempted = record.get("attempted")
    if attempted is None:  # a record written before the counts were stored: trust its words unless nothing was re-measured
        method = str(record.get("method", ""))
        return "best single trial: every re-measurement failed" if method.startswith("top") and done == 0 else method
    if attempted == 0:
        return "best single trial (no re-measurement)"
    paired = record.get("paired")
    if isinstance(paired, dict) and isinstance(paired.get("rounds"), list):
        n, cut = len(paired["rounds"]), int(paired.get("steady_from") or 0)
        window = f"{paired['window_s']:g} s " if isinstance(paired.get("window_s"), (int, float)) else ""
        counted = f" ({n - cut} counted, the first still speeding up)" if cut else ""
        where = "the search's process of their kind" if paired.get("warm_process") else "one fresh process"
        return (f"top {len(cands)} re-measured together in {where}, {n} {'round' if n == 1 else 'rounds'} of alternating "
                f"{window}windows{counted}, compared round by round; winner by median of all scores")
    if done == 0:
        return f"best single trial: all {attempted} re-measurements of the top {len(cands)} failed"
    if attempted == len(aside):  # every re-measurement was of the round the budget cut short: none counted
        return (f"best single trial: the time budget ended the one re-measurement round part-way, its "
                f"{len(aside)} {'score' if len(aside) == 1 else 'scores'} set aside (like for like)")
    failed = attempted - done
    extra = int(record.get("tiebreak") or 0)
    close = f"; the two leaders, within {100 * CLOSE_CALL:g} % of each other, {extra} times more" if extra else ""
    if attempted - extra < len(cands) * int(record.get("repeats") or 0):  # a time budget ended the re-measurement early
        kept = (f"; the {len(aside)} of the round it cut short set aside (like for like)" if aside else "")
        return (f"top {len(cands)} re-measured {attempted} {'time' if attempted == 1 else 'times'} in all, interleaved, until the time budget ran out"
                + (f" ({failed} failed)" if failed else "") + kept + "; winner by median of the scores kept")
    return (f"top {len(cands)} re-measured {record.get('repeats')}x each, interleaved" + close
            + (f" ({failed} of {attempted} re-measurements failed)" if failed else "") + "; winner by median of all scores")


# ------------------------------------------------------------------------------------------- repeats
def measured_before(study: optuna.Study, loader: LoaderConfig, number: int) -> optuna.trial.FrozenTrial | None:
    """An earlier trial that measured this same config to a result: complete, or pruned (by the pruner, over a
    memory budget, past the time limit). Failed trials (a crash, a bad file, an interrupt) measured nothing."""
    key = loader.to_params()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)):
        if t.number != number and trial_attrs(t).get("loader") == key and not is_told(t):
            return t
    return None


def being_measured(study: optuna.Study, loader: LoaderConfig, number: int, owner: str) -> optuna.trial.FrozenTrial | None:
    """An earlier trial that another live process is measuring this same config in right now (processes sharing a
    study with ``--resume``): the config is taken, and measured once.

    Only a trial numbered before ``number`` counts: of two processes that sampled the same config at once, the
    earlier trial measures it and the later one leaves it, never both the other. A trial whose process is gone
    (killed on this host) is no one's; one of another host counts as live.
    """
    key = loader.to_params()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        attrs = trial_attrs(t)
        owner_of = str(attrs.get("owner", ""))
        if t.number >= number or attrs.get("loader") != key or owner_of == owner:
            continue
        if not owner_gone(owner_of, since=t.datetime_start.timestamp() if t.datetime_start else None):
            return t
    return None


def tell_taken(trial: optuna.Trial, running: optuna.trial.FrozenTrial) -> str:
    """A sampled config that ``running`` measures in another process now: recorded as a repeat of it, not measured.

    Its result is not known yet, so none is told: the caller fails the trial (the sampler ignores failed trials,
    where a pruned one with no value would read as the worst config), and it is never a contender. Returns the message.
    """
    message = f"being measured by trial #{running.number} in another process"
    record_result(trial, {"outcome": Outcome.REPEAT.value, "repeat_of": running.number, "message": message})
    logger.info("trial %d %s: %s, not measured again", trial.number, trial_attrs(trial).get("config"), message)
    return message


def tell_repeat(trial: optuna.Trial, earlier: optuna.trial.FrozenTrial) -> float:
    """A sampled config that ``earlier`` measured: tell Optuna the same result without measuring again.

    Samplers (TPE above all) propose a config again as they narrow in; checking the history in the objective
    and telling the known result is how Optuna's maintainers suggest handling it. A complete trial's value is
    returned; a pruned one is told as pruned again, with its intermediate values and memory constraint.
    """
    record_result(
        trial, {"outcome": Outcome.REPEAT.value, "repeat_of": earlier.number, "message": f"same config as trial #{earlier.number}: not measured again"}
    )
    logger.info("trial %d %s: same config as trial %d, not measured again", trial.number, trial_attrs(trial).get("config"), earlier.number)
    if earlier.state == optuna.trial.TrialState.COMPLETE:
        return trial_value(earlier)
    for step, value in sorted(earlier.intermediate_values.items()):
        trial.report(value, step)
    for key, value in earlier.system_attrs.items():
        if key.startswith("constraints:"):
            trial.set_constraint(key.partition(":")[2], value)
    raise optuna.TrialPruned(f"same config as trial #{earlier.number}")


#: repeats in a row after which the space counts as exhausted: a sampler that still finds new configs rarely
#: proposes this many measured ones running (a resumed study of a small space otherwise filled itself with
#: hundreds of repeats up to the trial cap of a --budget run)
REPEATS_IN_A_ROW = 20


class MeasuredTrials:
    """A study callback: stops after ``n`` trials that measured something (repeats and configs of a dominated kind
    are not counted), or after
    ``max_repeats`` repeats, or :data:`REPEATS_IN_A_ROW` in a row, when the sampler has hardly a config left that
    was not measured."""

    def __init__(self, n: int, max_repeats: int) -> None:
        self.left = n
        self.repeats_left = max_repeats
        self.in_a_row = 0

    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if is_told(trial):  # a repeat spends the repeats allowed; either kind counts toward the run of told ones
            self.repeats_left -= is_repeat(trial)
            self.in_a_row += 1
        else:
            self.left -= 1
            self.in_a_row = 0
        if self.left <= 0 or self.repeats_left <= 0 or self.in_a_row >= REPEATS_IN_A_ROW:
            if self.left > 0:
                logger.info("stopping: the sampler keeps proposing configs that were measured already, or are not worth measuring")
            study.stop()


def unless_repeat(callback: Callable[[optuna.Study, optuna.trial.FrozenTrial], None]) -> Callable[[optuna.Study, optuna.trial.FrozenTrial], None]:
    """``callback``, not called for repeats (a progress bar counts measured trials); a repeat goes to the
    callback's ``repeat(trial)`` where it has one (a progress line says why a trial number is not counted)."""

    def call(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if not is_told(trial):
            callback(study, trial)
        elif hasattr(callback, "repeat"):
            callback.repeat(trial)

    return call


# ------------------------------------------------------------------------------------------- dominated kinds
#: a kind of loader (``torch``, ``dali-gpu``, ``dali-cpu``) whose best measured rate is this many times below another
#: kind's is dominated: its sampled configs are told the worst score without a measurement. Within a kind the
#: knobs seldom move the rate by half that much from its starting point (on the H200, DALI's GPU decode ran 6x
#: the best torch config and 5x the best DALI CPU one), while the +-30 % noise of one reading cannot make a 3x gap
DOMINANCE = 3.0
#: a kind without a measured starting point is judged only after this many measured configs (one unlucky config
#: is not the kind's level)
DOMINANCE_EVIDENCE = 2


def kind_of(config: str) -> str:
    """The kind of a config from its description (``dali-gpu b=256 threads=4 ...`` -> ``dali-gpu``)."""
    return config.split(" ", 1)[0]


def dominated(study: optuna.Study, loader: LoaderConfig, number: int, cores: int | None = None) -> str | None:
    """Why ``loader``'s kind is not worth a measurement, or None: the study measured that kind (a starting point of
    it, or :data:`DOMINANCE_EVIDENCE` configs) at best :data:`DOMINANCE` times below another kind's best.

    With ``cores`` (the CPU cores a trial may use), one measured config of a kind that decodes on the CPU is enough
    when even its most (its rate grown in proportion to ``cores`` over its decoding threads) stays that far below:
    on the H200 a DALI CPU config of 2 threads read 1,008 samples/s against 26,769 for DALI's GPU decode, and a
    second DALI CPU config was measured before its kind was left."""
    best: dict[str, float] = {}
    most: dict[str, float] = {}  # a kind's rate with every core decoding, at most (where its configs say)
    seen: dict[str, int] = {}
    started: set[str] = set()
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)):
        a = trial_attrs(t)
        if t.number == number or is_told(t) or not a.get("config") or a.get("outside_space") or a.get("reference"):
            continue  # a config the search cannot pick (the torch defaults in a DALI space) leads nothing
        if a.get("outcome") not in (Outcome.COMPLETE.value, Outcome.PRUNED.value):
            continue  # over a memory budget or cut by the time limit: its windows are no kind's level
        rates = [t.value] if t.state == optuna.trial.TrialState.COMPLETE else list(t.intermediate_values.values())
        rate = max((float(r) for r in rates if r is not None and r > 0), default=None)
        if rate is None:
            continue
        k = kind_of(str(a["config"]))
        best[k] = max(best.get(k, 0.0), rate)
        seen[k] = seen.get(k, 0) + 1
        if a.get("role"):
            started.add(k)
        threads = backend_for(a["loader"]).decode_threads(a["loader"]) if cores and isinstance(a.get("loader"), dict) else None
        most[k] = max(most.get(k, 0.0), rate * max(1.0, cores / threads) if cores and threads else float("inf"))
    mine = kind_of(loader.describe())
    if mine not in best:
        return None
    leader = max(best, key=lambda k: best[k])
    if leader == mine or best[leader] < DOMINANCE * best[mine]:
        return None
    if mine not in started and seen[mine] < DOMINANCE_EVIDENCE:
        if best[leader] < DOMINANCE * most[mine]:  # one config could be the kind's unlucky one
            return None
        return (f"{mine} is dominated: its one measured config read {best[mine]:,.0f} samples/s, at most {most[mine]:,.0f} with all "
                f"{cores} cores decoding, against {best[leader]:,.0f} for {leader} (over {DOMINANCE:g}x): told the worst score, not measured")
    return (f"{mine} is dominated: its best measured {best[mine]:,.0f} samples/s against {best[leader]:,.0f} for {leader} "
            f"(over {DOMINANCE:g}x): told the worst score, not measured")


def tell_dominated(trial: optuna.Trial, why: str) -> None:
    """Record a sampled config of a dominated kind: the worst score at step 0, so the sampler leaves that kind
    (the caller ends the trial as pruned)."""
    record_result(trial, {"outcome": Outcome.DOMINATED.value, "message": why})
    trial.report(0.0, 0)
    logger.info("trial %d %s: %s", trial.number, trial_attrs(trial).get("config"), why)


#: how the message of a sampled config told for :func:`later_start` begins (the run's last lines count them apart)
LATER_START = "only starts later"


def told_later_start(t: optuna.trial.FrozenTrial) -> bool:
    """Whether ``t`` was told, not measured, for :func:`later_start`."""
    a = trial_attrs(t)
    return a.get("outcome") == Outcome.DOMINATED.value and LATER_START in str(a.get("message") or "")


def later_start(study: optuna.Study, loader: LoaderConfig, number: int) -> str | None:
    """Why ``loader`` is not worth a measurement, or None: it sets a knob that changes only how its loading starts
    (the backend's ``start_up_only``: a Dataset's workers started by spawn or forkserver) otherwise than the value
    that starts soonest, and the study completed a config of its backend with every such knob at that value, so that
    value works for this data and the other can only start later.

    Told as a dominated kind is (:func:`tell_dominated`: the worst score). Failed instead (which the sampler ignores,
    where the worst score also marks the prefetch and order it shares with fork configs), a later start was proposed
    again and again: on the 2-core CPU the search stopped after 20 such in a row, with 3-5 configs measured where the
    worst score let it measure 12-14 (benchmarks/cpu-logs/2026-12-06-later-start/compare-failed.txt)."""
    params = loader.to_params()
    soonest = backend_for(params).start_up_only(params)
    off = {k: params[k] for k, v in soonest.items() if params.get(k) is not None and params.get(k) != v}
    if not off:
        return None
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)):
        a = trial_attrs(t)
        done = a.get("loader")
        if t.number == number or is_told(t) or a.get("outcome") != Outcome.COMPLETE.value or not isinstance(done, dict) \
                or a.get("reference") or a.get("outside_space"):
            continue  # a config the search cannot pick (a warm start outside a narrowed space) is no proof that the start works
        if done.get("backend") == params["backend"] and all(done.get(k) == v for k, v in soonest.items()):
            said, soon = (", ".join(f"{k}={v}" for k, v in d.items()) for d in (off, soonest))
            return f"{said} {LATER_START} than {soon} (trial {t.number} completed with it) and loads alike once started"
    return None


def sampled_dominated(study: optuna.Study, trial: optuna.Trial, loader: LoaderConfig, cores: int | None = None) -> str | None:
    """Why the sampled ``trial`` is not measured, its kind :func:`dominated` or its start :func:`later_start`, or None:
    a queued one (a starting point, a warm start) is always measured."""
    a = trial_attrs(trial)
    if a.get("role") is not None or "loader_params" in a:
        return None
    return later_start(study, loader, trial.number) or dominated(study, loader, trial.number, cores)


#: sampled trials of a dominated kind told in a row while the next trial is asked for ahead, before one is kept as it
#: is (its own objective tells it): asking takes milliseconds, so the one built ahead is of a kind worth measuring
DOMINATED_ASKS = 8


def ask_worth_measuring(study: optuna.Study, loader_of: Callable[[optuna.Trial], LoaderConfig],
                        keep: Callable[[optuna.Trial | None], None], cores: int | None = None) -> tuple[optuna.Trial, LoaderConfig, str | None]:
    """The next trial, its config, and why it is still of a dominated kind (None: worth measuring), asked for ahead
    (each trial handed to ``keep`` as soon as it is asked for): one of a dominated kind is told (pruned, not measured),
    and a sampled repeat of a config measured before is told that result, and another asked for in its place, up to
    :data:`DOMINATED_ASKS` times (a repeat asked for ahead left nothing built for the trial after it); the last is left
    to its own objective.
    Each trial's ``config`` attribute is set, should the search end before it is measured."""

    def asked() -> tuple[optuna.Trial, LoaderConfig]:
        keep(None)  # nothing kept while asking: a told trial is never handed on, should the ask fail
        trial = optuna.Study.ask(study)  # the class's own ask: the tuner's study gives the trial asked for ahead from its own
        keep(trial)
        loader = loader_of(trial)
        trial.set_user_attr("config", loader.describe())
        return trial, loader

    trial, loader = asked()
    for _ in range(DOMINATED_ASKS - 1):
        why = sampled_dominated(study, trial, loader, cores)
        earlier = measured_before(study, loader, trial.number) if why is None and trial_attrs(trial).get("role") is None else None
        if why is None and earlier is None:
            return trial, loader, None
        if why is not None:
            tell_dominated(trial, why)
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        elif earlier is not None:  # a sampled config measured before: told its result as its objective would
            trial.set_user_attr("loader", loader.to_params())
            try:
                value = tell_repeat(trial, earlier)
            except optuna.TrialPruned:
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, value)
        trial, loader = asked()
    return trial, loader, sampled_dominated(study, trial, loader, cores)


#: this many measured trials in a row, of at least two configs, that failed with one message while none has completed
#: end the search (:func:`stop_failing_alike`): the user's code fails whatever the knobs (28 trials of a collate_fn
#: returning a string took a 15 s budget)
FAILING_ALIKE = 3


def failing_alike(study: optuna.Study) -> str | None:
    """The message the last :data:`FAILING_ALIKE` measured trials, of at least two configs, crashed with while none has
    completed, or None."""
    ran = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL,
                                                               optuna.trial.TrialState.PRUNED)) if not is_told(t)]
    last = ran[-FAILING_ALIKE:]
    if len(last) < FAILING_ALIKE or any(t.state == optuna.trial.TrialState.COMPLETE for t in ran):
        return None
    said = {(trial_attrs(t).get("outcome"), trial_attrs(t).get("message")) for t in last}
    (outcome, message), *others = said
    if others or outcome != Outcome.CRASH.value or not message or len({trial_attrs(t).get("config") for t in last}) < 2:
        return None
    return str(message)


def stop_failing_alike(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
    """An Optuna callback: stop the search where the trials fail alike (:func:`failing_alike`) and no starting point is
    still queued (the torch defaults, measured last, are the config most likely to run where a GPU briefly failed)."""
    if any(trial_attrs(t).get("role") for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,))):
        return
    message = failing_alike(study)
    if message is not None:
        logger.info("the last %d trials, of several configs, failed alike (%s): the search stops", FAILING_ALIKE, message)
        study.stop()
