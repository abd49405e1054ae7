"""Paired measurement in one process: the loaders timed in turn, round by round, what each prefetched while the others
ran taken untimed, no round begun past the deadline; and a paired spec run end to end in a trial process."""

from __future__ import annotations

import statistics

import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.trials.paired import _first_steady, measure_paired
from autotune.trials.runner import run_trial
from autotune.trials.spec import TrialSpec
from autotune.trials.warm import reuse_key
from tests.helpers import FakeClock


class Prefetching:
    """A loader on a fake clock: it makes a batch of ``batch`` samples every ``per`` seconds in the background, up to
    ``queue`` ready, also while other loaders are timed; a batch asked for is free when one is ready, else its wait."""

    def __init__(self, clock: FakeClock, name: str, per: float, queue: int, taken: list[str], batch: int = 8) -> None:
        self.clock, self.name, self.per, self.queue, self.taken, self.batch = clock, name, per, queue, taken, batch

    def __iter__(self):
        ready, since = 0.0, self.clock.now
        while True:
            ready = min(self.queue, ready + (self.clock.now - since) / self.per)
            if ready >= 1:
                ready -= 1
            else:
                self.clock.now += (1 - ready) * self.per
                ready = 0.0
            since = self.clock.now
            self.taken.append(self.name)
            yield None, range(self.batch)


def test_what_a_loader_prefetched_while_another_was_timed_is_not_counted():
    """Two loaders of the same speed (800 samples/s), one with a queue of 16 batches: timed as they come after a switch,
    the deep queue's ready batches read as speed (the measurement below, without the queue drained, shows it); drained
    untimed, both read their true rate in every round."""
    clock, taken = FakeClock(), []
    loaders = [Prefetching(clock, "a", 0.01, 1, taken), Prefetching(clock, "b", 0.01, 16, taken)]
    m = measure_paired(loaders, buffered=[1, 16], window_s=0.5, warmup_batches=2, max_rounds=4, clock=clock)
    assert len(m.rounds) == 4 and m.steady_from == 0
    for r in m.rounds:
        assert r == [pytest.approx(800.0, rel=0.03), pytest.approx(800.0, rel=0.03)]

    clock, taken = FakeClock(), []
    naive = measure_paired([Prefetching(clock, "a", 0.01, 1, taken), Prefetching(clock, "b", 0.01, 16, taken)], buffered=[0, 0], window_s=0.5,
                           warmup_batches=2, max_rounds=4, clock=clock)
    assert max(naive.rates(1)) > 1.2 * max(naive.rates(0))  # each round where b follows a: 16 of its batches free


def test_the_loaders_take_turns_and_no_round_is_begun_past_the_deadline():
    clock, taken = FakeClock(), []
    loaders = [Prefetching(clock, "a", 0.01, 2, taken), Prefetching(clock, "b", 0.02, 2, taken), Prefetching(clock, "c", 0.04, 2, taken)]
    deadline = clock.now + 10.0
    m = measure_paired(loaders, buffered=[2, 2, 2], window_s=0.5, warmup_batches=2, max_rounds=50, deadline=deadline, clock=clock)
    assert clock.now <= deadline
    assert 3 <= len(m.rounds) < 50
    runs = [k for i, k in enumerate(taken) if i == 0 or taken[i - 1] != k]  # the order the loaders were read in
    turns = [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]  # the order turns each round
    assert runs == ["a", "b", "c"] + [x for r in range(len(m.rounds)) for x in turns[r % 3]]  # each started and warmed up, then a window each
    for r in m.rounds:  # rates in the loaders' order, whatever order they ran in
        assert r == [pytest.approx(800.0, rel=0.05), pytest.approx(400.0, rel=0.05), pytest.approx(200.0, rel=0.05)]


@pytest.mark.parametrize("seconds", [2.0, 3.5, 4.2, 5.0, 6.3, 7.7, 10.0])
def test_the_rounds_end_before_the_deadline_whatever_the_switches_keep_untimed(seconds):
    """Queues of 4 at 0.05 s a batch: each switch keeps up to a second untimed (three times a queue's refill, at most
    two windows). The first round is priced with it, and a round the deadline would cut is left, not counted."""
    clock, taken = FakeClock(), []
    loaders = [Prefetching(clock, "a", 0.05, 4, taken), Prefetching(clock, "b", 0.06, 4, taken)]
    deadline = clock.now + seconds
    m = measure_paired(loaders, buffered=[4, 4], window_s=0.5, warmup_batches=2, max_rounds=50, deadline=deadline, clock=clock)
    assert clock.now <= deadline + 0.06  # at most one batch past it
    assert all(len(r) == 2 for r in m.rounds)


def test_a_first_round_still_speeding_up_is_cut_when_two_rounds_are_left():
    assert _first_steady([[300.0, 900.0], [1000.0, 900.0], [1000.0, 910.0]]) == 1
    assert _first_steady([[1000.0, 900.0], [1000.0, 900.0], [990.0, 910.0]]) == 0
    assert _first_steady([[300.0, 900.0], [1000.0, 900.0]]) == 0  # one round would be left: kept


@pytest.mark.slow
def test_a_paired_spec_is_measured_in_one_fresh_process(tiny_dataset):
    """Two torch configs in one trial process: each round has both rates, the first loader's figures are its own."""
    a = LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 0})
    b = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1})
    spec = TrialSpec(dataset=scan(tiny_dataset), loader=a, paired=(b,), window_s=0.2, warmup_batches=1, max_rounds=3, paired_s=30.0)
    assert reuse_key(spec) is None  # never sent to a warm process of the search
    r = run_trial(spec, timeout_s=60)
    assert r.outcome is Outcome.COMPLETE, r.message
    p = r.extra["paired"]
    assert len(p["rounds"]) == 3 and all(len(x) == 2 and min(x) > 0 for x in p["rounds"])
    assert len(p["build_s"]) == 2 and p["window_s"] == 0.2
    assert r.samples_per_s == pytest.approx(statistics.median(x[0] for x in p["rounds"][p["steady_from"]:]), rel=0.01)
