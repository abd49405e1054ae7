"""The paired re-measurement seen from the study: how many rounds fit, the trial that runs them, and the winner they pick.

The contenders are built in one process (the idle one of their kind that the search kept, else a fresh one) and
timed in alternating windows, round by round (:mod:`autotune.trials.paired`). A config is told apart as slower than another when it was slower in every round (a
single round: by more than :data:`~autotune.study.evidence.INDISTINGUISHABLE`); of those within that margin of the
fastest (by the median of the per-round ratios; over exactly two rounds, any that disagree) and not told apart from it,
the cheapest wins, as with fresh re-measurements (:func:`~autotune.study.confirm.choose`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import optuna

from autotune.outcomes import Outcome
from autotune.study.evidence import INDISTINGUISHABLE, trial_attrs, trial_loader

if TYPE_CHECKING:
    from autotune.study.settings import TuneSettings
    from autotune.trials.spec import TrialResult
    from autotune.trials.warm import WarmPool

Trial = optuna.trial.FrozenTrial

#: rounds without a time budget: this many for each of ``--confirm-repeats``
ROUNDS_PER_REPEAT = 3
#: rounds at most under a time budget (its planned re-measurement time bounds them first)
MAX_ROUNDS = 8
#: seconds a paired process takes beyond its loaders' builds and windows (its fork and device set-up)
PROCESS_S = 1.0
#: the same, for the idle warm process of the candidates' kind (:mod:`autotune.trials.warm`): the spec's trip and the
#: loaders' close
WARM_PROCESS_S = 0.3
#: rounds a paired re-measurement in a warm process is priced at (:func:`warm_price`); it measures as many as its
#: time then holds, up to :data:`MAX_ROUNDS`
PRICED_ROUNDS = 4
#: seconds past its deadline before the paired process is stopped (a round begun in time ends a little after it)
GRACE_S = 2.0

#: ``paired(cands, seconds, begin)``: measure the candidates' configs paired, in at most ``seconds`` (None: no time
#: budget), calling ``begin()`` as the process starts; None where its first round does not fit, or why they are not
#: paired (a line)
Paired = Callable[[list[Trial], "float | None", Callable[[], None]], "TrialResult | str | None"]


def refill_s(t: Trial) -> float:
    """Seconds the untimed switch gives ``t``'s loader to refill its queue, by its own trial's rate:
    :data:`~autotune.trials.paired.REFILL_FACTOR` times its queue's batches."""
    from autotune.loaders.backends import get_backend
    from autotune.trials.paired import REFILL_FACTOR

    loader = trial_loader(t)
    if loader is None:
        return float("inf")
    rate = float(t.value or 0.0)
    queue = get_backend(loader.backend.value).buffered_batches(loader)
    return REFILL_FACTOR * queue * loader.batch_size / rate if rate > 0 else float("inf")


def not_paired(cands: list[Trial], window_s: float) -> str | None:
    """Why ``cands`` cannot be compared fairly side by side (None: they can): loaders of different kinds; or a loader
    whose queue takes longer to refill than a switch keeps untimed, which goes on refilling into the next one's window,
    and that one reads slow. On 2 cores, DALI's CPU decode at batch 256 with a queue of 4 (about 3 s at 1,000
    samples/s) made a config of batch 128 read half its fresh-process rate beside it."""
    from autotune.trials.paired import MAX_SETTLE_WINDOWS

    kinds = sorted({str(trial_attrs(t)["loader"].get("backend")) for t in cands})
    if len(kinds) > 1:  # a torch worker forked beside DALI's running threads: never done in a trial, and a risk of deadlock
        return f"not paired: {' and '.join(kinds)} loaders would share one process"
    keep = MAX_SETTLE_WINDOWS * window_s
    seconds, slow = max(((refill_s(t), t) for t in cands), key=lambda pair: pair[0])
    if seconds > keep:
        return f"not paired: {trial_attrs(slow).get('config')} refills its queue in about {seconds:.1f} s, more than the {keep:g} s kept at a switch"
    return None


def build_cost(cands: list[Trial], window_s: float, warm: bool = False) -> float:
    """Seconds before the first round ends, as the paired process prices it: the process, each candidate's start-up as
    a fresh trial had it (its build and first batch), and one window each with the most a switch keeps untimed.
    ``warm``: in an idle process of their kind (:func:`warm_price`), which has its start-up behind it: each
    candidate's build and first batch as its trial had them.

    A trial built ahead (:mod:`autotune.trials.ahead`) counts its build twice in its record: in ``startup_s`` (the
    build is timed before the hold) and in ``saved_s`` (its ``built_ahead_s``: the set-up and build the trial before
    it overlapped). Counted once here: on the H200 a DALI build is about 2.2 s, and two such contenders priced twice
    came to more than the re-measurement the budget keeps, so they were never paired."""
    from autotune.trials.paired import MAX_SETTLE_WINDOWS

    def start(t: Trial) -> float:
        if warm:
            return _warm_start(t)
        a = trial_attrs(t)
        twice = min(float(a.get("build_s") or 0.0), float(a.get("built_ahead_s") or 0.0))
        # the first trial of a warm process readied it before its build (a DALI process holds a GPU decoder, and its
        # builds skip the codecs' set-up): the paired process is not readied, so each of its builds pays it. A later
        # trial has it in ``saved_s`` (the process's start-up), one built ahead in ``built_ahead_s``
        ready = 0.0 if a.get("built_ahead_s") else float(a.get("ready_s") or 0.0)
        return float(a.get("startup_s") or 0.0) + float(a.get("saved_s") or 0.0) - twice + ready + float(a.get("warmup_s") or 0.0)

    return (WARM_PROCESS_S if warm else PROCESS_S) + sum(start(t) + (1 + MAX_SETTLE_WINDOWS) * window_s for t in cands)


def _warm_start(t: Trial) -> float:
    """A candidate's build and first batch, and its warm-up, as its trial had them: its start in a process that has its
    own start-up behind it."""
    a = trial_attrs(t)
    return float(a.get("startup_s") or 0.0) + float(a.get("warmup_s") or 0.0)


def applies(s: TuneSettings) -> bool:
    """Whether the settings re-measure paired: one rank, no model's step, and not a cold cache (evicted before each)."""
    return s.paired and s.ranks == 1 and s.model is None and s.cache != "cold"


def warm_key(cands: list[Trial], s: TuneSettings) -> tuple[str, str] | None:
    """The warm processes' kind (and device) that may take the paired measurement of ``cands``; None where none may."""
    from autotune.trials.warm import kind_key

    keys = {kind_key(trial_attrs(t)["loader"].get("backend"), s.device) for t in cands}
    return keys.pop() if len(keys) == 1 else None


def warm_price(cands: list[Trial], s: TuneSettings, warm: WarmPool | None, dataset: Any = None) -> float | None:
    """Seconds a contender adds to a paired re-measurement of ``cands`` in the warm process of their kind, that process
    priced once among them: its build and first batch as its trial had them, and :data:`PRICED_ROUNDS` rounds of a
    window and the switch's untimed refill (:func:`refill_s`). None where it would not be paired in one: another kind
    or a kind that keeps no process, no process of it kept, or not paired at all (nor, given the ``dataset``, where
    together they would be over a memory budget: :func:`over_together`). The budget prices each contender
    at the less of this and its trial's time as a fresh process takes it (``TimeBudget.contender_cost``).

    On an H100 the fresh paired process took 5 s before its first round (the process, 3 s, and the GPU decoder's
    set-up, 2 s) of the 13 s the budget kept for two contenders at their fresh trials' time."""
    from autotune.trials.paired import MAX_SETTLE_WINDOWS

    key = warm_key(cands, s)
    if warm is None or key is None or len(cands) < 2 or not applies(s) or not_paired(cands, s.window_s) is not None or not warm.live(key):
        return None
    if dataset is not None and over_together([trial_loader(t) for t in cands], dataset, s) is not None:
        return None
    rounds = sum(s.window_s + min(refill_s(t), MAX_SETTLE_WINDOWS * s.window_s) for t in cands) * PRICED_ROUNDS
    return (WARM_PROCESS_S + sum(map(_warm_start, cands)) + rounds) / len(cands)


def over_together(loaders: list[Any], dataset: Any, s: TuneSettings) -> str | None:
    """Why ``loaders`` may not share one process under the memory budgets (None: they may): their estimates
    (:func:`autotune.loaders.memory.estimate`) added up, the process and its CUDA context counted once: each fitted
    alone in its trial, but here all of them live at once (the workers' batches in flight of each, in /dev/shm)."""
    from autotune.loaders.memory import estimate

    est = [estimate(ld, dataset, s.pipeline, s.device) for ld in loaders]
    shared = {"host_mib": est[0]["parts"].get("process", 0.0), "shm_mib": 0.0,
              "gpu_mib": est[0]["parts"].get("gpu_cuda_context", 0.0) + est[0]["parts"].get("gpu_held_decoder", 0.0)}
    for key, budget, what in (("shm_mib", s.budgets.shm_mib, "/dev/shm"), ("host_mib", s.budgets.host_mib, "host memory"),
                              ("gpu_mib", s.budgets.gpu_mib, "GPU memory")):
        needs = [e[key] for e in est]
        if budget is None or any(n is None for n in needs):
            continue
        total = sum(needs) - (len(needs) - 1) * shared[key]
        if total > budget:
            return f"not paired: together they are predicted to need {total:,.0f} MiB of {what}, over the {budget:,.0f} MiB budget"
    return None


def paired_trial(measure: Callable[..., TrialResult], s: TuneSettings, dataset: Any, cands: list[Trial], seconds: float | None,
                 begin: Callable[[], None] | None = None, warm: WarmPool | None = None) -> TrialResult | str | None:
    """Run the paired measurement of ``cands`` (in their order) in one process, through the tuner's ``measure`` with its
    settings ``s``, calling ``begin()`` first: the idle process of their kind that ``warm`` kept, the others ended
    (``measure`` sends it there), else a fresh one. None when not even its first round fits ``seconds``; a line
    saying why where they are not paired (:func:`not_paired`, :func:`over_together`)."""
    from autotune.trials.logs import trial_log

    loaders = [trial_loader(t) for t in cands]
    why = not_paired(cands, s.window_s) or over_together(loaders, dataset, s)
    if why is not None:
        return why
    key = warm_key(cands, s)
    in_warm = warm is not None and key is not None and warm.idle(key)
    if seconds is not None and build_cost(cands, s.window_s, warm=in_warm) > seconds:
        return None
    if warm is not None:  # beside no other idle process's memory
        warm.only(key) if key is not None else warm.close()
    rounds = MAX_ROUNDS if seconds is not None else max(2, ROUNDS_PER_REPEAT * s.confirm_repeats)
    # the rounds end inside the trial's time limit too, so that the process is never stopped with rounds measured
    paired_s = max(0.0, min(seconds if seconds is not None else float("inf"), s.trial_timeout - GRACE_S))
    log = trial_log(s.log_dir, "remeasure-paired")
    if begin is not None:
        begin()
    return measure(loaders[0], log=log, timeout_s=paired_s + GRACE_S, paired=tuple(loaders[1:]), max_rounds=rounds, paired_s=paired_s,
                   sent_at=time.time())


@dataclasses.dataclass
class Rounds:
    """What a paired measurement measured: every round (``all[r][i]``: candidate i in round r), and the first steady one."""

    all: list[list[float]]
    steady_from: int
    record: dict[str, Any]

    @property
    def steady(self) -> list[list[float]]:
        return self.all[self.steady_from:]


def rounds_of(result: TrialResult | None, n: int) -> Rounds | None:
    """The rounds of a complete paired measurement of ``n`` candidates; None when it failed or measured no round."""
    if result is None or result.outcome is not Outcome.COMPLETE:
        return None
    p = result.extra.get("paired")
    if not isinstance(p, dict):
        return None
    got = p.get("rounds")
    if not isinstance(got, list) or not got or any(not isinstance(r, list) or len(r) != n for r in got):
        return None
    steady = int(p.get("steady_from") or 0)
    record = {"rounds": got, "steady_from": steady, "window_s": p.get("window_s"), "build_s": p.get("build_s"),
              "seconds": round(result.duration_s, 2), **({"warm_process": result.extra["warm_process"]} if result.extra.get("warm_process") else {})}
    return Rounds([[float(x) for x in r] for r in got], steady if steady < len(got) else 0, record)


def slower_in_every_round(rounds: list[list[float]], i: int, j: int) -> bool:
    """Whether candidate ``i`` is told apart as slower than ``j``: slower in every round, or in a single round by more
    than :data:`INDISTINGUISHABLE` (one round shows no noise)."""
    ratios = [r[i] / r[j] for r in rounds if r[j] > 0]
    if not ratios:
        return False
    if len(ratios) == 1:
        return ratios[0] < 1 - INDISTINGUISHABLE
    return max(ratios) < 1


def choose_paired(cands: list[Trial], rounds: list[list[float]]) -> tuple[Trial, Trial, list[int]]:
    """The winner of the paired ``rounds`` (``rounds[r][i]`` for ``cands[i]``), the fastest (best median), and the
    candidates that cannot be told apart from the fastest: not slower in every round, and within
    :data:`INDISTINGUISHABLE` of it by the median of their per-round ratios, except over exactly two (counted) rounds,
    where that median is their mean, which one disturbed round decides: two rounds that disagree are enough. Of those,
    the cheapest wins, unless it is told apart as slower than a starting point (a config the run queued itself:
    slower in every round, or over two rounds by their mean ratio beyond the margin): a run never hands over a config
    its own re-measurement shows slower than one it started from."""
    from autotune.study.selection import cost

    k = len(cands)
    medians = [statistics.median(r[i] for r in rounds) for i in range(k)]
    f = max(range(k), key=lambda i: medians[i])

    def alike(i: int) -> bool:
        ratio = statistics.median(r[i] / r[f] for r in rounds) if all(r[f] > 0 for r in rounds) else 0.0
        # of two rounds the median ratio is their mean, which one disturbed round decides: where they disagree, the
        # configs are not told apart (2 cores: 0.62 beside the other's refill, then 1.05, handed over a config that
        # read 20 % below in the fresh processes that followed)
        return i == f or (not slower_in_every_round(rounds, i, f) and (len(rounds) == 2 or ratio >= 1 - INDISTINGUISHABLE))

    def below_start(i: int, s: int) -> bool:  # told apart as slower than start s; of two rounds, by their mean ratio too
        two = len(rounds) == 2 and all(r[s] > 0 for r in rounds) and statistics.fmean(r[i] / r[s] for r in rounds) < 1 - INDISTINGUISHABLE
        return i != s and (slower_in_every_round(rounds, i, s) or two)

    near = [i for i in range(k) if alike(i)]
    starts = [i for i in range(k) if trial_attrs(cands[i]).get("role")]
    # the fastest is never slower than a start in every round (its median would be below that start's); below one by
    # the mean of two rounds, that start is alike to it (not slower in both): empty only where such starts are each
    # below another in turn
    safe = [i for i in near if not any(below_start(i, s) for s in starts)] or near
    w = min(safe, key=lambda i: (*cost(cands[i], medians[i]), cands[i].number))
    return cands[w], cands[f], sorted(cands[i].number for i in near)
