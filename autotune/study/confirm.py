"""The confirmation: the top candidates re-measured, interleaved, and the winner picked by the median of its scores.

One measurement per config is noisy (a busy machine, DALI's start-up): the best few complete trials are measured
again, round by round, and a close call between the two leaders gets a few more rounds. What the re-measurement
found is the study attr ``confirmation``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

import optuna

from autotune.errors import UserError
from autotune.outcomes import Outcome
from autotune.study.evidence import (
    CLOSE_CALL,
    CONTENDER_FLOOR,
    INDISTINGUISHABLE,
    TIEBREAK_ROUNDS,
    confirmation_method,
    contenders,
    fresh_duration,
    trial_attrs,
)
from autotune.study.paired import Paired, Rounds, choose_paired, rounds_of
from autotune.trials.spec import TrialResult

#: ``on_step(k, n, trial, result)``: re-measurement k of n (from 1) of ``trial`` starts (``result`` None) or ended
OnStep = Callable[[int, int, optuna.trial.FrozenTrial, TrialResult | None], None]
#: ``remeasure(trial, repeat)``: measure the trial's config again, its ``repeat``-th re-measurement (from 1)
Remeasure = Callable[[optuna.trial.FrozenTrial, int], TrialResult]


def _value(t: optuna.trial.FrozenTrial) -> float:
    """A complete trial's value (its rate)."""
    return float(t.value or 0.0)


def candidates(study: optuna.Study, k: int) -> list[optuna.trial.FrozenTrial]:
    """The best ``k`` complete trials with distinct configs, at least CONTENDER_FLOOR of the best's rate, the last of
    them the best starting point (a config the run queued itself) where none of the others is one; configs outside
    the space (baselines measured for reference) are no contenders."""
    out: list[optuna.trial.FrozenTrial] = []
    seen = set()
    for t in sorted(contenders(study), key=_value, reverse=True):
        key = trial_attrs(t).get("config")
        if key in seen:
            continue
        if out and _value(t) < CONTENDER_FLOOR * _value(out[0]):
            break
        seen.add(key)
        out.append(t)
        if len(out) >= k:
            break
    if len(out) > 1 and not any(trial_attrs(t).get("role") for t in out):
        # the best starting point takes the last place: a winner is never one the re-measurement shows slower than a
        # start, and the re-measurement costs what the budget planned for (``top`` candidates)
        starts = [t for t in contenders(study) if trial_attrs(t).get("role") and trial_attrs(t).get("config") not in seen]
        best = max(starts, key=_value, default=None)
        if best is not None and _value(best) >= CONTENDER_FLOOR * _value(out[0]):
            out[-1] = best
    return out


def told_apart(slower: list[float], faster: list[float]) -> bool:
    """Whether every score of ``faster`` is above every score of ``slower``: a gap no noise seen in them explains.

    A single reading on either side shows no noise at all (any two single readings differ, so every gap would count):
    it is told apart only by more than :data:`INDISTINGUISHABLE` (a 60 s run re-measures each candidate once, and
    0.4 % between single readings had called a config slower)."""
    if len(slower) < 2 or len(faster) < 2:
        return statistics.median(slower) < (1 - INDISTINGUISHABLE) * statistics.median(faster)
    return min(faster) > max(slower)


Trial = optuna.trial.FrozenTrial


def choose(cands: list[Trial], scores: dict[int, list[float]]) -> tuple[Trial, Trial, list[int] | None]:
    """The winner among re-measured ``cands`` (``scores``: each one's, its trial's first), the fastest, and the
    candidates that cannot be told apart from the fastest (None where too few were measured again: single readings
    cannot tell noise; the best median of all scores then wins).

    The fastest is the best median of the re-measurements. Another cannot be told apart from it when their re-measurements overlap
    (:func:`told_apart` says no) and its median is within :data:`INDISTINGUISHABLE` of the fastest's. Of those, the
    cheapest wins (fewest loader threads, then least host and GPU memory), unless its scores are told apart from a
    starting point's (a config the run queued itself, not sampled): a run never hands over a config its own
    re-measurement shows slower than one it started from.
    """
    from autotune.study.selection import cost

    # judged on the re-measurements alone, which ran interleaved: a candidate's first score is why it was picked (a
    # lucky reading), and it was measured at another time than the others
    again = {t.number: scores[t.number][1:] for t in cands if len(scores[t.number]) > 1}
    if len(again) < 2:
        best = max(cands, key=lambda t: statistics.median(scores[t.number]))
        return best, best, None
    judged = [t for t in cands if t.number in again]
    medians = {n: statistics.median(v) for n, v in again.items()}
    fastest = max(judged, key=lambda t: medians[t.number])
    top, floor = again[fastest.number], (1 - INDISTINGUISHABLE) * medians[fastest.number]
    alike = [t for t in judged if t is fastest or (not told_apart(again[t.number], top) and medians[t.number] >= floor)]
    starts = [t for t in judged if trial_attrs(t).get("role")]
    # never empty: no start is told apart above the fastest, whose median is the highest
    safe = [t for t in alike if not any(told_apart(again[t.number], again[s.number]) for s in starts)]
    winner = min(safe, key=lambda t: (*cost(t, medians[t.number]), t.number))
    return winner, fastest, sorted(t.number for t in alike)


def earlier_scores(record: Any, cands: list[optuna.trial.FrozenTrial]) -> dict[int, list[float]]:
    """What an earlier run of a resumed study re-measured of each of ``cands`` (its ``confirmation`` record): kept, and
    counted with this run's re-measurements (a resume once left the winner two scores of four). A score set aside
    then stays aside; a candidate's first score is its trial's own, which the candidate brings itself."""
    numbers = {t.number for t in cands}
    out: dict[int, list[float]] = {}
    before = record.get("candidates") if isinstance(record, dict) else None
    for c in before if isinstance(before, list) else ():
        scores = c.get("scores") if isinstance(c, dict) else None
        if isinstance(scores, list) and len(scores) > 1 and c.get("trial") in numbers:
            out[c["trial"]] = [float(x) for x in scores[1:] if isinstance(x, (int, float))]
    return out


class _Rounds:
    """The re-measurements so far: each candidate's scores, and each re-measurement in the order it ran."""

    def __init__(self, cands: list[optuna.trial.FrozenTrial], repeats: int, remeasure: Remeasure, on_step: OnStep | None,
                 fits: Callable[[float], bool] | None, earlier: dict[int, list[float]] | None = None) -> None:
        self.cands, self.remeasure, self.on_step, self.fits = cands, remeasure, on_step, fits
        # each candidate's trial, then what an earlier run of the study re-measured of it: counted with this run's
        self.scores: dict[int, list[float]] = {t.number: [_value(t), *(earlier or {}).get(t.number, [])] for t in cands}
        self.repeats: dict[int, int] = dict.fromkeys(self.scores, 0)  # re-measurements of each candidate so far
        self.planned = len(cands) * repeats
        self.k = 0  # re-measurements begun
        self.done: list[tuple[int, float | None]] = []  # each re-measurement in order: the candidate, its score (None: failed)

    def again(self, t: optuna.trial.FrozenTrial) -> bool:
        """Re-measure ``t`` once; False (nothing measured) when the time budget has no room for it."""
        # at a fresh process's time: a trial measured in a warm one saved its start-up, the re-measurement does not
        if self.fits is not None and not self.fits(fresh_duration(trial_attrs(t))):
            return False
        self.repeats[t.number] += 1
        self.k += 1
        n = max(self.planned, self.k)
        if self.on_step is not None:
            self.on_step(self.k, n, t, None)
        r = self.remeasure(t, self.repeats[t.number])
        rate = float(r.samples_per_s) if r.outcome is Outcome.COMPLETE and r.samples_per_s else None
        if rate is not None:
            self.scores[t.number].append(rate)
        self.done.append((t.number, rate))
        if self.on_step is not None:
            self.on_step(self.k, n, t, r)
        return True

    def round_fits(self, ts: list[optuna.trial.FrozenTrial]) -> bool:
        """Whether a whole round of ``ts`` fits the time left: one that does not is not begun (it would be cut
        short, and its scores set aside)."""
        return self.fits is None or self.fits(sum(fresh_duration(trial_attrs(t)) for t in ts))

    def run(self, repeats: int) -> tuple[int, int]:
        """``repeats`` interleaved rounds, then a tie-break while the two leaders stay within CLOSE_CALL of each
        other. Returns the re-measurements of the tie-break, and those of a round the time budget cut short."""
        cands, tiebreak = self.cands, 0
        # interleaved, round by round; the time budget may end it early (the scores so far are kept)
        in_time = all(self.round_fits(cands) and all(self.again(t) for t in cands) for _ in range(repeats))
        partial = 0 if in_time else self.k % len(cands)
        # a close call: the two leaders again, alternately, while they stay within CLOSE_CALL of each other
        for _ in range(TIEBREAK_ROUNDS if in_time else 0):
            med = {m: statistics.median(v) for m, v in self.scores.items()}
            first, second = sorted(cands, key=lambda t: med[t.number], reverse=True)[:2]
            if med[first.number] - med[second.number] > CLOSE_CALL * med[first.number]:
                break
            before = self.k
            in_time = self.round_fits([second, first]) and self.again(second) and self.again(first)
            tiebreak += self.k - before
            if not in_time:
                partial = (self.k - before) % 2
                break
        return tiebreak, partial

    def set_aside(self, partial: int) -> list[dict[str, Any]]:
        """Take out the scores of the last ``partial`` re-measurements (a round cut short), and say which."""
        out = []
        for number, score in self.done[len(self.done) - partial:] if partial else ():
            if score is not None:
                self.scores[number].remove(score)
                out.append({"trial": number, "score": round(score, 1)})
        return out


def confirm(study: optuna.Study, top: int, repeats: int, remeasure: Remeasure, *, close: Callable[[], None],
            on_step: OnStep | None = None, fits: Callable[[float], bool] | None = None, paired: Paired | None = None,
            left: Callable[[], float] | None = None) -> dict[str, Any]:
    """Re-measure the ``top`` candidates, paired in one process where ``paired`` is given and measures them, else
    ``repeats`` times each in fresh processes, interleaved; and pick the winner. The record is also the study attr
    ``confirmation``. A resumed study's earlier re-measurements (its ``confirmation`` record) count with this run's:
    ``earlier`` in the record says how many.

    Args:
        study: the study whose complete trials are the candidates.
        top, repeats: how many candidates, and how many rounds of re-measurement.
        remeasure: measures a candidate's config again.
        close: called once the re-measurement is over (it ends the process that trials are forked from).
        on_step: called as ``on_step(k, n, trial, None)`` when re-measurement k of n (from 1) starts, and as
            ``on_step(k, n, trial, result)`` when it ends; ``trial`` is the candidate re-measured.
        fits: with a time budget, says whether a re-measurement of that many seconds (the candidate's own
            trial time) still fits; the re-measurement stops at the first that does not.
        paired: measures the candidates side by side in one process, in the seconds ``left`` says (None: no
            time budget); where it does not (it fails, or its first round does not fit), the fresh re-measurement runs.

    Raises:
        UserError: no trial completed, so there is no config to write.
    """
    cands = candidates(study, max(1, top))
    if not cands:
        raise UserError(f"no trial of study {study.study_name!r} completed, so there is no config to write; see the trial outcomes with "
                        "'autotune show --storage ... --study ...' or run with --verbose")
    earlier = earlier_scores(study.user_attrs.get("confirmation"), cands)
    rounds = _Rounds(cands, repeats, remeasure, on_step, fits, earlier)
    tiebreak = partial = 0  # partial: re-measurements of a round the time budget cut short
    together: Rounds | None = None
    failed: str | None = None  # why the candidates were not paired, or how their paired measurement failed
    if len(cands) > 1 and repeats > 0:
        try:
            if paired is not None:
                together, failed = _paired(cands, paired, left, on_step, rounds.scores)
            if together is None and repeats > 0:
                tiebreak, partial = rounds.run(repeats)
        finally:
            close()
    if together is not None:
        return _record(study, cands, rounds.scores, {"attempted": 1, "paired": together.record}, choose_paired(cands, together.steady), earlier)
    # like for like: a round the budget cut short re-measured some candidates and not the others; one low reading
    # of DALI's noise then lost a leader to a config measured once. Its scores are set aside, not counted.
    set_aside = rounds.set_aside(partial)
    how: dict[str, Any] = {"repeats": repeats, "attempted": rounds.k, "tiebreak": tiebreak}
    if set_aside:
        how["set_aside"] = set_aside
    if failed:
        how["not_paired"] = failed
    return _record(study, cands, rounds.scores, how, choose(cands, rounds.scores), earlier)


def _paired(cands: list[Trial], paired: Paired, left: Callable[[], float] | None, on_step: OnStep | None,
            scores: dict[int, list[float]]) -> tuple[Rounds | None, str | None]:
    """The paired re-measurement of ``cands``, its steady rounds added to their ``scores``; None where it measured no
    round, with how it failed (None: it did not fit, and was not begun)."""
    def begin() -> None:  # all at once
        for i, t in enumerate(cands):
            if on_step is not None:
                on_step(i + 1, len(cands), t, None)

    result = paired(cands, left() if left is not None else None, begin)
    if result is None or isinstance(result, str):
        return None, result
    together = rounds_of(result, len(cands))
    if together is None:
        failed = result.outcome is not Outcome.COMPLETE
        return None, f"the paired measurement {'failed, ' + result.outcome.value + ': ' + result.message if failed else 'measured no round'}"
    for i, t in enumerate(cands):
        mine = [r[i] for r in together.steady]
        scores[t.number].extend(mine)
        if on_step is not None:
            on_step(i + 1, len(cands), t, TrialResult(Outcome.COMPLETE, samples_per_s=statistics.median(mine), spread=(min(mine), max(mine))))
    return together, None


def _record(study: optuna.Study, cands: list[Trial], scores: dict[int, list[float]], how: dict[str, Any],
            chosen: tuple[Trial, Trial, list[int] | None], earlier: dict[int, list[float]]) -> dict[str, Any]:
    """The ``confirmation`` record of the winner, the fastest and the alike ``chosen`` of ``cands``, with ``how`` they were
    re-measured; also set as the study attr."""
    winner, fastest, alike = chosen
    medians = {n: statistics.median(v) for n, v in scores.items()}
    record: dict[str, Any] = {
        "winner_trial": winner.number,
        "fastest_trial": fastest.number,
        **how,
        "candidates": [{"trial": t.number, "config": trial_attrs(t).get("config"), "scores": [round(x, 1) for x in scores[t.number]],
                        "median": round(medians[t.number], 1)} for t in cands],
    }
    if alike is not None:
        record["indistinguishable"] = alike
    if kept := sum(map(len, earlier.values())):
        record["earlier"] = kept
    record = {"method": confirmation_method(record), **record}
    study.set_user_attr("confirmation", record)
    return record
