"""The paired re-measurement from the study's side: the winner its rounds pick, the record it leaves, and the fresh
re-measurement when it measures nothing."""

from __future__ import annotations

import time

import pytest

from autotune.errors import UserError
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.study.paired import build_cost, choose_paired, paired_trial
from autotune.trials.spec import TrialResult
from tests.study.test_confirm import _tuner_with


def _paired_replay(tuner, monkeypatch, rounds: list[dict[int, float]], steady_from: int = 0, outcome: Outcome = Outcome.COMPLETE):
    """The paired process reads ``rounds`` (``num_workers`` -> rate, each round); a fresh re-measurement reads 100 a
    worker.
    Returns the calls: ``("paired", [workers...])`` or ``("fresh", workers)``."""
    calls: list[tuple[str, object]] = []

    def measure(loader, *a, **k):
        if k.get("paired"):
            order = [loader.torch.num_workers, *(ld.torch.num_workers for ld in k["paired"])]
            calls.append(("paired", order))
            got = [[r[w] for w in order] for r in rounds]
            return TrialResult(outcome, samples_per_s=got[0][0] if got else None, duration_s=3.0, message="boom" if outcome is not Outcome.COMPLETE else "",
                               extra={"paired": {"rounds": got, "steady_from": steady_from, "window_s": 0.5}} if outcome is Outcome.COMPLETE else {})
        calls.append(("fresh", loader.torch.num_workers))
        return TrialResult(Outcome.COMPLETE, samples_per_s=100.0 * loader.torch.num_workers)

    monkeypatch.setattr(tuner, "measure", measure)
    return calls


def _workers(tuner, number: int) -> int:
    return trial_attrs(tuner.study.trials[number])["loader"]["num_workers"]


def test_a_config_faster_in_every_round_wins_over_a_cheaper_one_within_the_noise_of_fresh_processes(tiny_dataset, tmp_path, monkeypatch):
    """The H200's case: a config 7 % faster than DALI's usual start (more threads) was handed over to the cheaper start,
    one fresh reading each within the spread of fresh processes. Paired, it is faster in every round, while the rounds
    themselves swing by 30 %: it wins."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (950.0, "heuristic")}, top=2, repeats=1, paired=True)
    swing = [1.0, 0.7, 1.3, 0.85, 1.1]
    calls = _paired_replay(tuner, monkeypatch, [{4: 1070.0 * s, 2: 1000.0 * s} for s in swing])
    record = tuner.confirm()
    assert calls == [("paired", [4, 2])]  # one process for both, the leader first
    assert _workers(tuner, record["winner_trial"]) == 4 and record["indistinguishable"] == [record["winner_trial"]]
    assert record["attempted"] == 1 and len(record["paired"]["rounds"]) == 5
    assert record["method"] == ("top 2 re-measured together in one fresh process, 5 rounds of alternating 0.5 s windows, compared round by round; "
                                "winner: the fastest by the median of its re-measurements, the others told apart from it")
    # each candidate's scores: its trial's, then one a round
    assert [len(c["scores"]) for c in record["candidates"]] == [6, 6]


def test_the_terminal_says_both_began_then_what_each_read(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (950.0, None)}, top=2, repeats=1, paired=True)
    _paired_replay(tuner, monkeypatch, [{4: 1000.0, 2: 900.0}, {4: 1010.0, 2: 910.0}])
    steps: list[tuple[int, int, int, float | None]] = []
    tuner.confirm(on_step=lambda k, n, t, r: steps.append((k, n, _workers(tuner, t.number), None if r is None else r.samples_per_s)))
    assert steps == [(1, 2, 4, None), (2, 2, 2, None), (1, 2, 4, 1005.0), (2, 2, 2, 905.0)]


def test_the_cheapest_of_the_configs_the_rounds_cannot_tell_apart_wins(tiny_dataset, tmp_path, monkeypatch):
    """4 workers and 2 workers trade places round by round, within 3 % on the median ratio: 2 workers (two processes
    fewer) win, and both are named as indistinguishable."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True)
    _paired_replay(tuner, monkeypatch, [{4: 1000.0, 2: 990.0}, {4: 980.0, 2: 1000.0}, {4: 1010.0, 2: 995.0}, {4: 1000.0, 2: 1002.0}])
    record = tuner.confirm()
    assert _workers(tuner, record["fastest_trial"]) == 4 and _workers(tuner, record["winner_trial"]) == 2
    assert len(record["indistinguishable"]) == 2 and record["method"].endswith("the cheapest of the 2 the re-measurement cannot tell apart from the fastest")


def test_a_round_still_speeding_up_is_not_counted(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True)
    _paired_replay(tuner, monkeypatch, [{4: 300.0, 2: 900.0}, {4: 1000.0, 2: 900.0}, {4: 1000.0, 2: 905.0}], steady_from=1)
    record = tuner.confirm()
    assert _workers(tuner, record["winner_trial"]) == 4  # the first round alone had 4 workers slower
    assert [c["scores"] for c in record["candidates"]] == [[1000.0, 1000.0, 1000.0], [990.0, 900.0, 905.0]]
    assert "3 rounds of alternating 0.5 s windows (2 counted, the first still speeding up)" in record["method"]


def test_a_paired_measurement_that_fails_falls_back_to_fresh_processes(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=2, paired=True)
    calls = _paired_replay(tuner, monkeypatch, [], outcome=Outcome.CRASH)
    record = tuner.confirm()
    assert calls[0] == ("paired", [4, 2]) and [c[0] for c in calls[1:]] == ["fresh"] * 4  # two rounds of the two, as --remeasure fresh does
    assert "paired" not in record and record["method"].startswith("top 2 re-measured 2x each, interleaved")
    assert record["not_paired"] == "the paired measurement failed, crash: boom" and "(the paired measurement failed, crash: boom)" in record["method"]


def test_loaders_whose_queues_refill_slowly_are_not_paired(tiny_dataset, tmp_path, monkeypatch):
    """4 workers x prefetch 2 at batch 8 hold 64 samples: at 10 samples/s their queue refills for 6 s, into the other
    config's window. Such candidates are re-measured in fresh processes, and the record says why."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (10.0, None), 2: (9.9, None)}, top=2, repeats=1, paired=True)
    calls = _paired_replay(tuner, monkeypatch, [{4: 1.0, 2: 1.0}])
    record = tuner.confirm()
    assert [c[0] for c in calls] == ["fresh", "fresh"]
    why = "not paired: torch b=8 workers=4 refills its queue in about 19.2 s, more than the 2 s kept at a switch"
    assert record["not_paired"] == why and f"({why})" in record["method"]


def test_no_re_measurement_when_none_is_asked(tiny_dataset, tmp_path, monkeypatch):
    """``--confirm-repeats 0``: the best single trial wins, paired or not."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=0, paired=True)
    calls = _paired_replay(tuner, monkeypatch, [{4: 1.0, 2: 1.0}])
    record = tuner.confirm()
    assert calls == [] and record["attempted"] == 0 and record["method"] == "best single trial (no re-measurement)"


def test_loaders_of_two_kinds_are_not_paired(tiny_dataset, tmp_path):
    from autotune.study.paired import not_paired

    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, paired=True)
    cands = tuner.candidates(2)
    assert not_paired(cands, 0.5) is None
    attrs = trial_attrs(cands[1])
    cands[1].user_attrs["loader"] = {**attrs["loader"], "backend": "dali", "dali_device": "cpu", "num_threads": 2}
    assert not_paired(cands, 0.5) == "not paired: dali and torch loaders would share one process"


def test_contenders_that_fit_a_memory_budget_alone_but_not_together_are_not_paired(tiny_dataset, tmp_path, monkeypatch):
    """Two torch configs whose workers' batches each fit the /dev/shm budget, but not both at once: fresh processes."""
    import dataclasses

    from autotune.config.schema import LoaderConfig
    from autotune.loaders.memory import estimate
    from autotune.trials.guard import Budgets

    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 3: (990.0, None)}, top=2, repeats=1, paired=True)
    shm = [estimate(LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": w}), tuner.dataset)["shm_mib"] for w in (4, 3)]
    assert 0 < max(shm) < sum(shm)
    tuner.settings = dataclasses.replace(tuner.settings, budgets=Budgets(shm_mib=max(shm) + 0.1))
    calls = _paired_replay(tuner, monkeypatch, [{4: 1.0, 3: 1.0}])
    record = tuner.confirm()
    assert [c[0] for c in calls] == ["fresh", "fresh"]  # each alone fits, as its trial did
    assert record["not_paired"].startswith("not paired: together they are predicted to need ") and "of /dev/shm, over the " in record["not_paired"]

    tuner.settings = dataclasses.replace(tuner.settings, budgets=Budgets(shm_mib=sum(shm) + 0.1))
    calls = _paired_replay(tuner, monkeypatch, [{4: 1.0, 3: 1.0}])
    assert tuner.confirm().get("not_paired") is None and calls == [("paired", [4, 3])]  # room for both: paired


def test_the_re_measurement_is_fresh_processes_when_asked(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=False)
    calls = _paired_replay(tuner, monkeypatch, [{4: 1.0, 2: 1.0}])
    tuner.confirm()
    assert [c[0] for c in calls] == ["fresh", "fresh"]


def test_a_contender_built_ahead_is_priced_with_its_build_once(tiny_dataset, tmp_path):
    """A trial built ahead records its build in its start-up and again in the seconds it saved (the set-up and build the
    trial before it hid): priced twice, two such DALI contenders on the H200 (2.46 s start-up with a 2.19 s build, 2.74 s
    built ahead) came to 13.4 s, over the 12.75 s kept for their re-measurement, and were never paired."""
    h200 = {"startup_s": 2.459, "build_s": 2.187, "built_ahead_s": 2.744, "saved_s": 2.74, "warmup_s": 0.015}
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True, **h200)
    cands = tuner.candidates(2)
    fresh = 2.459 + (2.74 - 2.187) + 0.015  # its build, its first batch and the process set-up it saved, each once
    assert build_cost(cands, 0.5) == pytest.approx(1.0 + 2 * (fresh + 3 * 0.5))
    assert build_cost(cands, 0.5) < 12.75 - 2 * 2 * 0.5  # room for two rounds in the reserve that priced them
    warm = {"startup_s": 2.459, "build_s": 2.187, "saved_s": 0.55, "warmup_s": 0.015}  # a warm process, not built ahead: its build happened in its time
    tuner = _tuner_with(tiny_dataset, tmp_path / "warm", {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True, **warm)
    assert build_cost(tuner.candidates(2), 0.5) == pytest.approx(1.0 + 2 * (2.459 + 0.55 + 0.015 + 3 * 0.5))


def test_a_contender_first_in_its_readied_process_is_priced_with_the_readying_a_paired_build_pays(tiny_dataset, tmp_path):
    """A kept DALI trial process holds a GPU decoder as it starts (``ready_s``), so its first trial's build skips the
    codecs' set-up; the paired process holds none, and each of its builds pays it: priced back once per contender. One
    built ahead has it in its ``built_ahead_s`` already."""
    first = {"startup_s": 0.2, "build_s": 0.17, "ready_s": 1.7, "warmup_s": 0.015}
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True, **first)
    assert build_cost(tuner.candidates(2), 0.5) == pytest.approx(1.0 + 2 * (0.2 + 1.7 + 0.015 + 3 * 0.5))
    ahead = {"startup_s": 0.2, "build_s": 0.17, "ready_s": 1.7, "built_ahead_s": 3.0, "saved_s": 3.0, "warmup_s": 0.015}
    tuner = _tuner_with(tiny_dataset, tmp_path / "ahead", {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True, **ahead)
    assert build_cost(tuner.candidates(2), 0.5) == pytest.approx(1.0 + 2 * (0.2 + 3.0 - 0.17 + 0.015 + 3 * 0.5))


def test_no_paired_process_starts_when_its_first_round_does_not_fit(tiny_dataset, tmp_path):
    """Each candidate's start-up as a fresh trial had it (a warm one's saved seconds added back), a window each and the
    process: a paired measurement that could not end one round in the time left is not begun."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, repeats=1, paired=True, startup_s=1.5, saved_s=1.0)
    cands = tuner.candidates(2)
    # a window and the most a switch keeps untimed (two windows) for each
    assert tuner.settings.window_s == 1.0 and build_cost(cands, 1.0) == pytest.approx(1.0 + 2 * (1.5 + 1.0 + 3 * 1.0))
    asked: list[dict] = []

    def measure(loader, **k):
        asked.append(k)
        return TrialResult(Outcome.COMPLETE)

    assert paired_trial(measure, tuner.settings, tuner.dataset, cands, 11.9, begin=lambda: asked.append({})) is None and not asked
    paired_trial(measure, tuner.settings, tuner.dataset, cands, 12.0)
    (k,) = asked
    assert k["paired_s"] == 12.0 and k["timeout_s"] == pytest.approx(14.0) and len(k["paired"]) == 1 and k["max_rounds"] == 8
    assert k["sent_at"] == pytest.approx(time.time(), abs=5.0)  # the child's deadline counts from here, not from its start
    paired_trial(measure, tuner.settings, tuner.dataset, cands, None)  # no time budget: 3 rounds for each repeat, in the trial's time limit
    assert asked[-1]["max_rounds"] == 3 and asked[-1]["paired_s"] == tuner.settings.trial_timeout - 2.0
    assert asked[-1]["timeout_s"] == tuner.settings.trial_timeout


def test_never_a_config_slower_in_every_round_than_a_start(tiny_dataset, tmp_path):
    """1 worker (sampled, the cheapest) is within 3 % of the fastest and not slower than it in every round, but slower
    than the heuristic (a starting point) in every round: the heuristic wins."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 3: (995.0, "heuristic"), 1: (990.0, None)}, top=3, paired=True)
    cands = tuner.candidates(3)
    order = [trial_attrs(t)["loader"]["num_workers"] for t in cands]
    by = {4: [1000.0, 1040.0, 960.0, 1000.0], 3: [990.0, 1000.0, 985.0, 995.0], 1: [980.0, 990.0, 975.0, 985.0]}
    rounds = [[by[w][r] for w in order] for r in range(4)]
    winner, fastest, alike = choose_paired(cands, rounds)
    assert trial_attrs(fastest)["loader"]["num_workers"] == 4 and len(alike) == 3
    assert trial_attrs(winner)["loader"]["num_workers"] == 3


def test_one_round_tells_configs_apart_only_beyond_the_margin(tiny_dataset, tmp_path):
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1000.0, None), 2: (990.0, None)}, top=2, paired=True)
    cands = tuner.candidates(2)
    assert len(choose_paired(cands, [[1000.0, 980.0]])[2]) == 2  # 2 % on one round: alike, the cheaper wins
    assert choose_paired(cands, [[1000.0, 980.0]])[0] is cands[1]
    assert choose_paired(cands, [[1000.0, 960.0]])[0] is cands[0]  # 4 %: told apart


def test_two_rounds_that_disagree_do_not_tell_configs_apart(tiny_dataset, tmp_path):
    """2 cores, DALI's CPU decode: batch 256 (4 workers here, the costlier) read 1,654 then 1,289; batch 128 read 1,019
    (beside the other's refill) then 1,356. The median of two ratios is their mean (0.83), which the one disturbed
    round decides; faster in one round each, the two are not told apart, and the cheaper wins. Slower in both rounds,
    it is told apart still; over three rounds and more, the median ratio decides as before."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1663.0, None), 2: (1405.0, None)}, top=2, paired=True)
    cands = tuner.candidates(2)
    assert [trial_attrs(t)["loader"]["num_workers"] for t in cands] == [4, 2]
    winner, fastest, alike = choose_paired(cands, [[1654.4, 1019.1], [1288.9, 1356.1]])
    assert fastest is cands[0] and winner is cands[1] and len(alike) == 2
    assert choose_paired(cands, [[1654.4, 1019.1], [1288.9, 1256.1]])[0] is cands[0]  # slower in both: told apart
    three = [[1654.4, 1019.1], [1288.9, 1356.1], [1650.0, 1300.0]]  # a median ratio of 0.79 over three rounds
    assert choose_paired(cands, three)[0] is cands[0]


def test_of_two_rounds_the_cheaper_is_not_handed_over_below_a_start_by_their_mean(tiny_dataset, tmp_path):
    """The other way round: the fastest (4 workers) is a starting point and the cheaper sampled config read 0.60 of it,
    then 1.01. Not told apart from it, but below it by 20 % on the mean of the two rounds: the start wins."""
    tuner = _tuner_with(tiny_dataset, tmp_path, {4: (1663.0, "heuristic"), 2: (1405.0, None)}, top=2, paired=True)
    cands = tuner.candidates(2)
    winner, _, alike = choose_paired(cands, [[1000.0, 600.0], [1000.0, 1010.0]])
    assert len(alike) == 2 and winner is cands[0]
    assert choose_paired(cands, [[1000.0, 980.0], [1000.0, 1010.0]])[0] is cands[1]  # within 3 % on the mean: the cheaper


def test_an_unknown_remeasure_is_one_line():
    from autotune.tuning.prepare import _paired

    assert _paired("paired") and not _paired("fresh")
    with pytest.raises(UserError, match="remeasure must be one of paired, fresh, but got 'twice'"):
        _paired("twice")


def test_two_dali_configs_in_one_process_count_its_cuda_context_and_held_decoder_once(tiny_dataset):
    """A paired process has one CUDA context and holds at most one GPU decoder, whatever number of loaders it builds."""
    import dataclasses as dc

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import scan
    from autotune.loaders.memory import estimate
    from autotune.study.paired import over_together
    from autotune.study.settings import TuneSettings
    from autotune.trials.guard import Budgets

    loaders = [LoaderConfig.from_params({"backend": "dali", "batch_size": b, "dali_device": "gpu", "num_threads": 4, "prefetch_queue_depth": 2,
                                         "hw_decoder_load": 0.65}) for b in (8, 16)]
    dataset = scan(tiny_dataset)
    est = [estimate(ld, dataset, "imagenet-train", "cuda") for ld in loaders]
    once = est[0]["parts"]["gpu_cuda_context"] + est[0]["parts"]["gpu_held_decoder"]
    together = sum(e["gpu_mib"] for e in est) - once
    s = dc.replace(TuneSettings(), device="cuda", budgets=Budgets(gpu_mib=together + 1))
    assert over_together(loaders, dataset, s) is None
    s = dc.replace(s, budgets=Budgets(gpu_mib=together - 1))
    assert "of GPU memory" in (over_together(loaders, dataset, s) or "")


def _dali_cands(n: int, **attrs) -> list:
    """``n`` complete DALI trials (CPU decode, batch 8, a queue of 2), the best first, each with ``attrs`` in its result."""
    import optuna

    from autotune.config.schema import LoaderConfig

    out = []
    for i in range(n):
        loader = LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": i + 1, "prefetch_queue_depth": 2})
        result = {"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", **attrs}
        out.append(optuna.trial.create_trial(value=1000.0 - i, user_attrs={"result": result}))
    return out


class _Kept:
    """A process the pool kept, as the pool sees it."""

    def __init__(self, key: tuple[str, str]) -> None:
        self.key, self.ended = key, False

    def alive(self) -> bool:
        return not self.ended

    def end(self) -> None:
        self.ended = True


def test_contenders_paired_in_a_kept_process_are_priced_without_its_start_up():
    """The H100's case: two DALI contenders measured warm (2.1 s each, 3.2 s of start-up saved) were kept 13 s, of
    which a fresh paired process spent 5 s before its first round. With a process of their kind kept, each is priced at
    its build and first batch, and four rounds of a window and its switch's refill; without one, as before."""
    from autotune.study.budget import REMEASURE_MARGIN, TimeBudget
    from autotune.study.paired import PRICED_ROUNDS, WARM_PROCESS_S, refill_s, warm_price
    from autotune.study.settings import TuneSettings
    from autotune.trials.warm import WarmPool

    cands = _dali_cands(2, startup_s=0.4, warmup_s=0.05, duration_s=2.1, saved_s=3.2)
    s = TuneSettings(window_s=0.5, paired=True, device="cpu")
    pool = WarmPool()
    assert warm_price(cands, s, pool) is None, "no process of their kind kept"
    kept = _Kept(("dali", "cpu"))
    pool.give(kept)
    switch = [min(refill_s(t), 2 * 0.5) for t in cands]
    want = (WARM_PROCESS_S + 2 * (0.4 + 0.05) + PRICED_ROUNDS * sum(0.5 + x for x in switch)) / 2
    assert warm_price(cands, s, pool) == pytest.approx(want)
    import dataclasses

    assert warm_price(cands, dataclasses.replace(s, paired=False), pool) is None  # --remeasure fresh
    assert warm_price(cands, dataclasses.replace(s, device="cuda"), pool) is None  # no process of their kind on that device
    # the budget prices the re-measurement so, and keeps that much less from the trials
    import optuna

    study = optuna.create_study(direction="maximize")
    for t in cands:
        study.add_trial(t)
    budget = TimeBudget(60.0, clock=lambda: 0.0)
    budget.record_trial(2.1)
    fresh = budget.contender_cost(study, 2)
    assert fresh == pytest.approx(2.1 + 3.2)
    budget.paired_price = lambda best: warm_price(best, s, pool)
    assert budget.contender_cost(study, 2) == pytest.approx(want) and want < fresh
    assert budget.another_trial_fits(2, 1, budget.contender_cost(study, 2)) and budget.reserved_s == pytest.approx(2 * want * REMEASURE_MARGIN)
    kept.ended = True  # the process died: priced fresh again
    assert warm_price(cands, s, pool) is None and budget.contender_cost(study, 2) == pytest.approx(fresh)
    # where the fresh trials' time is less (a fresh DALI CPU process forked in a second), that is kept: the rounds fill it
    budget.paired_price = lambda best: fresh + 1.0
    assert budget.contender_cost(study, 2) == pytest.approx(fresh)


def test_the_paired_measurement_takes_the_kept_process_of_their_kind_and_ends_the_others(tiny_dataset):
    """Before the paired measurement, every idle process but the newest of the contenders' kind ends (none measures
    beside another's memory); its first round is priced without the start-up that process has behind it."""
    from autotune.dataset.scan import scan
    from autotune.study.paired import WARM_PROCESS_S
    from autotune.study.settings import TuneSettings
    from autotune.trials.warm import WarmPool

    cands = _dali_cands(2, startup_s=0.4, warmup_s=0.05, duration_s=2.1, saved_s=3.2)
    s = TuneSettings(window_s=0.5, paired=True, device="cpu")
    pool = WarmPool(per_kind=2)
    old, new, torch_one = _Kept(("dali", "cpu")), _Kept(("dali", "cpu")), _Kept(("torch", "cpu"))
    for p in (old, new, torch_one):
        pool.give(p)
    warm_first = WARM_PROCESS_S + 2 * (0.4 + 0.05 + 3 * 0.5)
    assert build_cost(cands, 0.5, warm=True) == pytest.approx(warm_first) and warm_first < build_cost(cands, 0.5)
    asked: list[dict] = []

    def measure(loader, **k):
        asked.append(k)
        return TrialResult(Outcome.COMPLETE)

    ds = scan(tiny_dataset)
    assert paired_trial(measure, s, ds, cands, warm_first - 0.01, warm=pool) is None and not asked and not old.ended
    paired_trial(measure, s, ds, cands, warm_first, warm=pool)
    assert len(asked) == 1 and old.ended and torch_one.ended and not new.ended
    assert pool.take(("dali", "cpu")) is new, "the newest of their kind is left for the measurement"


def test_the_record_says_which_process_the_paired_rounds_ran_in():
    from autotune.study.evidence import confirmation_method

    record = {"attempted": 1, "candidates": [{"scores": [1.0, 2.0]}, {"scores": [1.0, 2.0]}],
              "paired": {"rounds": [[1.0, 1.0]], "window_s": 0.5, "warm_process": 7}}
    assert confirmation_method(record).startswith("top 2 re-measured together in the search's process of their kind, 1 round")
    del record["paired"]["warm_process"]
    assert confirmation_method(record).startswith("top 2 re-measured together in one fresh process")


def test_the_budget_prices_the_contenders_the_re_measurement_takes(tiny_dataset, tmp_path):
    """The two best trials are DALI's, but the re-measurement puts the best start, a torch config within reach, in the
    last place: torch and DALI are not paired, so each is re-measured in a fresh process, and the kept process's
    price would leave them too little. Two DALI contenders (a DALI start in the last place) are priced warm."""
    import optuna

    from autotune.study.paired import warm_price

    tuner = _tuner_with(tiny_dataset, tmp_path, {2: (600.0, "heuristic")}, top=2, repeats=1, paired=True, startup_s=0.4, warmup_s=0.05, saved_s=3.0)
    for t in _dali_cands(2, startup_s=0.4, warmup_s=0.05, duration_s=2.1, saved_s=3.2):
        tuner.study.add_trial(t)
    pool = tuner._warm
    assert pool is not None
    pool.give(_Kept(("dali", tuner.settings.device)))
    dali = [t for t in tuner.study.trials if trial_attrs(t)["loader"]["backend"] == "dali"]
    assert warm_price(dali, tuner.settings, pool) is not None, "the two best alone would be paired in the kept process"
    assert [trial_attrs(t)["loader"]["backend"] for t in tuner.candidates(2)] == ["dali", "torch"]
    assert tuner.paired_price(dali) is None
    start = {**trial_attrs(dali[1]), "role": "dali-heuristic"}
    tuner.study.add_trial(optuna.trial.create_trial(value=990.0, user_attrs={"result": {**start, "config": "a DALI start"}}))
    assert tuner.paired_price(dali) is not None
