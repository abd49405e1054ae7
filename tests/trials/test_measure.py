"""Measurement: a loader of known rate, robust statistics, steady-state detection."""

from __future__ import annotations

import pytest
import torch

from autotune.trials.measure import measure, robust_rate, steady_start


class Clock:
    """A clock that moves only when told: the loaders below take their time on it, so a rate is exact whatever
    else runs on the machine (a real sleep under load wakes up late, and the loader really is slower)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


class SleepLoader:
    """Yields ``batch`` samples every ``period`` seconds of its clock: a loader whose true rate is batch / period.
    Measure it with ``clock=loader.clock``."""

    def __init__(self, batch: int = 8, period: float = 0.01, batches_per_epoch: int = 50) -> None:
        self.batch, self.period, self.n = batch, period, batches_per_epoch
        self.images = torch.zeros(batch, 3, 4, 4)
        self.labels = torch.zeros(batch, dtype=torch.int64)
        self.clock = Clock()

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for _ in range(self.n):
            self.clock.sleep(self.period)
            yield self.images, self.labels


def test_known_rate_within_ten_percent():
    loader = SleepLoader(batch=8, period=0.01)  # 800 samples/s
    m = measure(loader, "cpu", warmup_batches=2, window_s=0.2, windows=3, clock=loader.clock)
    assert m.samples_per_s == pytest.approx(800, rel=0.10)
    assert m.spread[0] <= m.samples_per_s <= m.spread[1]
    assert len(m.windows) - m.steady_from >= 3


def test_epochs_restart_inside_the_clock():
    loader = SleepLoader(batch=4, period=0.005, batches_per_epoch=3)
    m = measure(loader, "cpu", warmup_batches=0, window_s=0.1, windows=2, clock=loader.clock)
    assert m.epochs > 1
    assert m.samples_per_s == pytest.approx(800, rel=0.15)


def test_startup_timed_apart():
    class SlowStart(SleepLoader):
        def __iter__(self):
            self.clock.sleep(0.3)  # worker start-up
            yield from super().__iter__()

    loader = SlowStart(batch=8, period=0.01, batches_per_epoch=1000)
    m = measure(loader, "cpu", window_s=0.2, windows=3, clock=loader.clock)
    assert m.startup_s >= 0.3
    assert m.samples_per_s == pytest.approx(800, rel=0.10)  # start-up is not in the score


def test_on_window_can_stop_early():
    seen = []
    loader = SleepLoader()
    m = measure(loader, "cpu", window_s=0.05, windows=10, on_window=lambda i, v, s: seen.append(i) or i >= 1, clock=loader.clock)
    assert seen == [0, 1]
    assert len(m.windows) == 2


def test_on_window_gets_the_lowest_and_highest_window_not_running_medians():
    """A trial stopped at a window by the time budget keeps what on_window last said: its spread must be the
    steady windows' own range (it was the range of the running medians, which no window measured)."""

    class Uneven(SleepLoader):  # windows alternate between 800 and 400 samples/s
        def __iter__(self):
            for _i in range(self.n):
                self.clock.sleep(self.period * (2 if (self.clock.now // 0.2) % 2 else 1))
                yield self.images, self.labels

    told = []
    loader = Uneven(batch=8, period=0.01, batches_per_epoch=1000)
    m = measure(loader, "cpu", warmup_batches=0, window_s=0.2, windows=4, max_windows=4,
                on_window=lambda i, v, s: told.append((v, s)) and False, clock=loader.clock)
    median, spread = told[-1]
    assert (median, spread) == (m.samples_per_s, m.spread)
    assert spread[0] == min(m.windows[m.steady_from:]) and spread[1] == max(m.windows[m.steady_from:])
    assert spread[1] / spread[0] > 1.5, m.windows  # the slow and the fast windows, not two medians between them


def test_median_ignores_outlier_windows():
    rates = [1000, 1010, 990, 120, 1005, 3000, 995]  # one stall, one burst
    median, spread = robust_rate(rates)
    assert median == pytest.approx(1000, rel=0.01)
    assert spread == (120, 3000)
    assert sum(rates) / len(rates) != pytest.approx(1000, rel=0.05)  # the mean would be fooled


def test_steady_state_cuts_a_slow_start():
    rates = [100, 300, 650, 980, 1000, 1010, 995, 1003]
    start = steady_start(rates, min_windows=3)
    assert start == 3
    assert robust_rate(rates[start:])[0] == pytest.approx(1000, rel=0.01)


def test_steady_state_keeps_a_flat_stream_and_a_late_dip():
    assert steady_start([1000, 1003, 997, 1001]) == 0
    assert steady_start([1000, 1003, 500, 1001, 999]) == 0  # a dip later is left to the median


def test_steady_state_keeps_min_windows():
    rates = [10, 20, 40, 80, 160]  # never settles: keep the last ones
    assert steady_start(rates, min_windows=3) <= 2


def test_measure_rejects_zero_windows():
    with pytest.raises(ValueError, match="windows must be at least 1"):
        measure(SleepLoader(), windows=0)


def test_slow_start_is_cut_and_replaced_by_steady_windows():
    class Ramp(SleepLoader):
        """Four times slower for the first 0.25 s of every iterator, then 800 samples/s."""

        def __iter__(self):
            t0 = self.clock()
            for _ in range(self.n):
                self.clock.sleep(self.period * (4 if self.clock() - t0 < 0.25 else 1))
                yield self.images, self.labels

    loader = Ramp(batch=8, period=0.01, batches_per_epoch=10_000)
    m = measure(loader, "cpu", warmup_batches=0, window_s=0.2, windows=3, clock=loader.clock)
    assert m.steady_from >= 1  # the slow first window(s) are left out ...
    assert len(m.windows) - m.steady_from >= 3  # ... and replaced
    assert m.samples_per_s == pytest.approx(800, rel=0.10)


@pytest.mark.parametrize("warmup", [0, 1, 2])
def test_epoch_used_up_by_startup_and_warmup(warmup):
    # one epoch = exactly the first batch plus the warm-up batches: the next epoch must start, not fail
    loader = SleepLoader(batch=4, period=0.002, batches_per_epoch=1 + warmup)
    m = measure(loader, "cpu", warmup_batches=warmup, window_s=0.05, windows=2, clock=loader.clock)
    assert m.samples_per_s > 0 and m.epochs > 1


class CountingLoader(SleepLoader):
    """A SleepLoader that counts its epochs started and the batches it yielded."""

    def __init__(self, **kw) -> None:
        super().__init__(**kw)
        self.iters = 0
        self.yielded = 0
        self.unfinished = 0  # epochs left half-read when the next one started

        self.active = False

    def __iter__(self):
        self.iters += 1
        if self.active:
            self.unfinished += 1
        self.active = True
        for b in super().__iter__():
            self.yielded += 1
            yield b
        self.active = False


def test_after_warmup_runs_once_before_the_first_window():
    calls = []
    loader = SleepLoader(batch=4, period=0.002)
    m = measure(
        loader, "cpu", warmup_batches=3, window_s=0.05, windows=2,
        after_warmup=lambda: calls.append("ready"), on_window=lambda k, v, s: calls.append(k) and False,
    )
    assert calls[0] == "ready" and calls.count("ready") == 1
    assert calls[1:] == list(range(len(m.windows)))


def test_keep_loading_goes_on_with_the_same_iterator():
    """The untimed tail after the windows reads on from the same epoch: no epoch is restarted half-read."""
    loader = CountingLoader(batch=4, period=0.001, batches_per_epoch=7)
    seen = []

    def keep_loading(m):
        seen.append(m)
        return len(seen) <= 20

    m = measure(loader, "cpu", warmup_batches=1, window_s=0.02, windows=2, keep_loading=keep_loading)
    timed = 1 + 1 + m.batches  # start-up, warm-up, windows
    assert loader.yielded == timed + 20
    assert len(seen) == 21 and all(s is m for s in seen)
    assert loader.unfinished == 0


class BufferedLoader:
    """Workers that produced ``ready`` batches while the first step ran, then one batch every ``period``: a loader
    whose true rate is batch / period, with a buffer that a slow step hides behind."""

    def __init__(self, batch: int = 10, period: float = 0.05, ready: int = 40) -> None:
        self.batch, self.period, self.ready = batch, period, ready
        self.images = torch.zeros(batch, 3, 4, 4)
        self.labels = torch.zeros(batch, dtype=torch.int64)
        self.clock = Clock()

    def __len__(self) -> int:
        return 10_000

    def __iter__(self):
        t0 = self.clock()
        for i in range(len(self)):
            made = t0 + max(0, i - self.ready + 1) * self.period  # when batch i is ready
            self.clock.now = max(self.clock.now, made)
            yield self.images, self.labels


@pytest.mark.parametrize("drain", [0, 40])
def test_batches_buffered_during_a_slow_step_are_not_counted_as_loading_speed(drain):
    loader = BufferedLoader(batch=10, period=0.05, ready=40)  # 200 samples/s; the step alone could take 500/s

    def step(batch):
        loader.clock.sleep(0.02)

    m = measure(loader, "cpu", warmup_batches=1, window_s=0.2, windows=3, consume=step, clock=loader.clock, drain_batches=drain, drain_s=5.0)
    if drain:
        assert m.samples_per_s == pytest.approx(200, rel=0.1)  # the loader's own rate
    else:
        assert m.samples_per_s > 400  # what a buffer of 400 samples makes of a 200 samples/s loader


def test_the_buffer_of_a_config_is_its_workers_times_prefetch_or_dali_queue():
    from autotune.config.schema import LoaderConfig
    from autotune.trials.one_rank import buffered_batches

    assert buffered_batches(LoaderConfig.from_params({"backend": "torch", "batch_size": 512, "num_workers": 16})) == 32
    assert buffered_batches(LoaderConfig.from_params({"backend": "torch", "batch_size": 64, "num_workers": 4, "prefetch_factor": 4})) == 16
    assert buffered_batches(LoaderConfig.from_params({"backend": "torch", "batch_size": 64, "num_workers": 0})) == 0
    assert buffered_batches(LoaderConfig.from_params({"backend": "dali", "batch_size": 64, "num_threads": 2, "prefetch_queue_depth": 3})) == 3
