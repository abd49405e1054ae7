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

from autotune.config.schema import LoaderConfig
from autotune.errors import UserError
from autotune.outcomes import Outcome
from autotune.study.evidence import CLOSE_CALL, CONTENDER_FLOOR, TIEBREAK_ROUNDS, confirmation_method, contenders, trial_attrs
from autotune.trials.spec import TrialResult

#: ``on_step(k, n, trial, result)``: re-measurement k of n (from 1) of ``trial`` starts (``result`` None) or ended
OnStep = Callable[[int, int, optuna.trial.FrozenTrial, TrialResult | None], None]
#: ``remeasure(trial, repeat)``: measure the trial's config again, its ``repeat``-th re-measurement (from 1)
Remeasure = Callable[[optuna.trial.FrozenTrial, int], TrialResult]


def trial_loader(t: optuna.trial.FrozenTrial) -> LoaderConfig | None:
    params = trial_attrs(t).get("loader")
    return LoaderConfig.from_params(params) if params else None


def _value(t: optuna.trial.FrozenTrial) -> float:
    """A complete trial's value (its rate)."""
    return float(t.value or 0.0)


def candidates(study: optuna.Study, k: int) -> list[optuna.trial.FrozenTrial]:
    """The best ``k`` complete trials with distinct configs, at least CONTENDER_FLOOR of the best's rate; configs
    outside the space (baselines measured for reference) are no contenders."""
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
    return out


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
        if self.fits is not None and not self.fits(float(trial_attrs(t).get("duration_s") or 0.0)):
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
        return self.fits is None or self.fits(sum(float(trial_attrs(t).get("duration_s") or 0.0) for t in ts))

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
            on_step: OnStep | None = None, fits: Callable[[float], bool] | None = None) -> dict[str, Any]:
    """Re-measure the ``top`` candidates ``repeats`` times, interleaved, and pick the winner by the median of all
    its scores; the record is also the study attr ``confirmation``. A resumed study's earlier re-measurements
    (its ``confirmation`` record) count with this run's: ``earlier`` in the record says how many.

    Args:
        study: the study whose complete trials are the candidates.
        top, repeats: how many candidates, and how many rounds of re-measurement.
        remeasure: measures a candidate's config again.
        close: called once the re-measurement is over (it ends the process that trials are forked from).
        on_step: called as ``on_step(k, n, trial, None)`` when re-measurement k of n (from 1) starts, and as
            ``on_step(k, n, trial, result)`` when it ends; ``trial`` is the candidate re-measured.
        fits: with a time budget, says whether a re-measurement of that many seconds (the candidate's own
            trial time) still fits; the re-measurement stops at the first that does not.

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
    if len(cands) > 1 and repeats > 0:
        try:
            tiebreak, partial = rounds.run(repeats)
        finally:
            close()
    # like for like: a round the budget cut short re-measured some candidates and not the others; one low reading
    # of DALI's noise then lost a leader to a config measured once. Its scores are set aside, not counted.
    set_aside = rounds.set_aside(partial)
    scores = rounds.scores
    medians = {n: statistics.median(v) for n, v in scores.items()}
    winner = max(cands, key=lambda t: medians[t.number])
    record: dict[str, Any] = {
        "winner_trial": winner.number,
        "repeats": repeats,
        "attempted": rounds.k,
        "tiebreak": tiebreak,
        "candidates": [{"trial": t.number, "config": trial_attrs(t).get("config"), "scores": [round(x, 1) for x in scores[t.number]],
                        "median": round(medians[t.number], 1)} for t in cands],
    }
    if set_aside:
        record["set_aside"] = set_aside
    if kept := sum(map(len, earlier.values())):
        record["earlier"] = kept
    record = {"method": confirmation_method(record), **record}
    study.set_user_attr("confirmation", record)
    return record
