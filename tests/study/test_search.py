"""The search on synthetic rate streams: each config has a true rate, and each measurement of it is a stream of
windows on a fake clock (start-up, a ramp for slow starters, noise) scored by the real steady-state measurement.

No trial process runs: :class:`Replay` stands in for ``Tuner.measure``. It feeds the pruner window by window
as the trial runner does, and stops a trial the pruner prunes.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import random
import statistics
import types
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.storages.journal import JournalFileBackend

from autotune.cli import main
from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study import budget as budget_mod
from autotune.study.evidence import trial_attrs
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.measure import measure
from autotune.trials.paired import measure_paired
from autotune.trials.runner import OnIntermediate, WindowVerdict
from autotune.trials.spec import TrialResult
from tests.helpers import FakeClock

#: torch and DALI (CPU decode), 6 + 24 configs
SPACE = {
    "params": {
        "backend": {"choices": ["torch", "dali"]},
        "batch_size": {"choices": [4, 8, 16]},
        "num_workers": {"int": [0, 1], "when": {"backend": "torch"}},
        "dali_device": {"choices": ["cpu"], "when": {"backend": "dali"}},
        "num_threads": {"int": [1, 8], "when": {"backend": "dali"}},
    }
}


@dataclasses.dataclass
class Landscape:
    """What measuring a config shows: its true rate, its start-up seconds (before the first batch) and its ramp
    (seconds from ``floor`` of the rate at the first batch to the full rate)."""

    rate: Callable[[LoaderConfig], float]
    startup_s: Callable[[LoaderConfig], float] = lambda c: 0.5
    ramp_s: Callable[[LoaderConfig], float] = lambda c: 0.0
    floor: float = 1 / 3


class Stream:
    """An endless loader: batches of ``batch_size`` delivered at ``level`` samples/s on the fake clock, with a
    per-batch jitter, climbing from ``floor`` of it to all of it over ``ramp_s`` seconds."""

    def __init__(self, clock: FakeClock, batch_size: int, level: float, ramp_s: float, floor: float, jitter: float, rng: random.Random) -> None:
        self.clock, self.batch_size, self.level, self.ramp_s, self.floor, self.jitter, self.rng = clock, batch_size, level, ramp_s, floor, jitter, rng

    def __iter__(self) -> Iterator[tuple[None, range]]:
        t0 = self.clock.now
        while True:
            up = 1.0 if self.ramp_s <= 0 else min(1.0, self.floor + (1 - self.floor) * (self.clock.now - t0) / self.ramp_s)
            self.clock.now += self.batch_size / (self.level * up * (1 + self.rng.uniform(-self.jitter, self.jitter)))
            yield None, range(self.batch_size)


class Replay:
    """Stands in for ``Tuner.measure``: each call measures a synthetic stream for the config.

    Each measurement draws the config's level once (true rate times 1 +- ``noise``), then runs the real
    :func:`~autotune.trials.measure.measure` over the stream on the fake clock: the pruner sees the same window
    values, at the same steps, as from a trial process, and a pruned trial ends there.

    Attributes:
        searched: configs measured by the study's trials (``describe()`` -> times).
        remeasured: configs measured again by the confirmation stage.
        pruned: configs the pruner stopped.
        configs: each config measured, by ``describe()``.
    """

    def __init__(self, landscape: Landscape, *, noise: float = 0.0, jitter: float = 0.02, seed: int = 0, clock: FakeClock | None = None) -> None:
        self.landscape = landscape
        self.noise, self.jitter = noise, jitter
        self.rng = random.Random(seed)
        self.clock = clock or FakeClock()
        self.searched: collections.Counter[str] = collections.Counter()
        self.remeasured: collections.Counter[str] = collections.Counter()
        self.pruned: list[str] = []
        self.configs: dict[str, LoaderConfig] = {}

    def install(self, monkeypatch: pytest.MonkeyPatch) -> Replay:
        replay = self

        def fake_measure(tuner: Tuner, loader: LoaderConfig, number: int | None = None, on_intermediate: OnIntermediate | None = None, log: str | None = None,
                         timeout_s: float | None = None, **spec: Any) -> TrialResult:
            if spec.get("paired"):
                return replay.paired(tuner.settings, [loader, *spec["paired"]], spec["max_rounds"], spec.get("paired_s"))
            return replay(tuner.settings, loader, number, on_intermediate, timeout_s)

        monkeypatch.setattr(Tuner, "measure", fake_measure)
        return self

    def true_rate(self, loader: LoaderConfig) -> float:
        return self.landscape.rate(loader)

    def paired(self, settings: TuneSettings, loaders: list[LoaderConfig], max_rounds: int, paired_s: float | None) -> TrialResult:
        """The paired re-measurement: one process (one level of noise, shared), each loader started in turn, then the
        real :func:`~autotune.trials.paired.measure_paired` over their streams on the fake clock."""
        start = self.clock.now
        shared = 1 + self.rng.uniform(-self.noise, self.noise)
        streams = []
        for ld in loaders:
            self.remeasured[ld.describe()] += 1
            self.clock.now += self.landscape.startup_s(ld)
            level = self.true_rate(ld) * shared
            streams.append(Stream(self.clock, ld.batch_size, level, self.landscape.ramp_s(ld), self.landscape.floor, self.jitter, self.rng))
        m = measure_paired(streams, buffered=[0] * len(streams), window_s=settings.window_s, warmup_batches=settings.warmup_batches, max_rounds=max_rounds,
                           deadline=None if paired_s is None else start + paired_s, clock=self.clock)
        first = m.rates(0) or [0.0]
        return TrialResult(Outcome.COMPLETE, samples_per_s=statistics.median(first), duration_s=self.clock.now - start,
                           extra={"paired": {"rounds": m.rounds, "steady_from": m.steady_from, "window_s": settings.window_s}})

    def __call__(self, settings: TuneSettings, loader: LoaderConfig, number: int | None, on_intermediate: OnIntermediate | None,
                 timeout_s: float | None = None) -> TrialResult:
        key = loader.describe()
        self.configs[key] = loader
        (self.searched if number is not None else self.remeasured)[key] += 1  # re-measurements have no trial number
        start = self.clock.now
        self.clock.now += self.landscape.startup_s(loader)
        level = self.true_rate(loader) * (1 + self.rng.uniform(-self.noise, self.noise))
        stream = Stream(self.clock, loader.batch_size, level, self.landscape.ramp_s(loader), self.landscape.floor, self.jitter, self.rng)
        stopped: list[tuple[int, float]] = []

        enough: list[float] = []

        def on_window(step: int, value: float, spread: tuple[float, float]) -> bool:
            verdict = on_intermediate(step, value) if on_intermediate is not None else WindowVerdict.GO_ON
            if verdict is WindowVerdict.ENOUGH:  # as run_trial does: the time budget is spent, the windows so far are the result
                enough.extend((value, *spread))
                return True
            if verdict is WindowVerdict.PRUNE:
                stopped.append((step, value))
                return True
            return False

        m = measure(stream, warmup_batches=settings.warmup_batches, window_s=settings.window_s, windows=settings.windows, on_window=on_window, clock=self.clock)
        limit = settings.trial_timeout if timeout_s is None else timeout_s  # as run_trial: the tuner may cut it at the budget's end
        if self.clock.now - start > limit:
            self.clock.now = start + limit
            return TrialResult(Outcome.TIMEOUT, message="no result in time", duration_s=limit)
        if enough:
            return TrialResult(Outcome.COMPLETE, samples_per_s=enough[0], spread=(enough[1], enough[2]), duration_s=self.clock.now - start,
                               message=f"measured {len(m.windows)} window(s): the time budget ran out")
        if stopped:
            self.pruned.append(key)
            step, value = stopped[0]
            return TrialResult(Outcome.PRUNED, samples_per_s=value, message=f"pruned after window {step}", duration_s=self.clock.now - start)
        # start-up as a trial process records it: the build (the landscape's seconds) and the first batch
        return TrialResult(Outcome.COMPLETE, samples_per_s=m.samples_per_s, spread=m.spread, windows=m.windows, steady_from=m.steady_from,
                           startup_s=self.landscape.startup_s(loader) + m.startup_s, warmup_s=m.warmup_s, duration_s=self.clock.now - start)


def _tuner(dataset, monkeypatch, **kw) -> Tuner:
    """A study in memory (a database's writes would take most of the test's time)."""
    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())
    settings = TuneSettings(**{"cache": "none", "paired": False, "cores": 4, "window_s": 0.5, "windows": 3, **kw})
    return Tuner(scan(dataset), parse_space(SPACE, cores=4), settings, storage="memory", study_name="search")


def _winner(tuner: Tuner, record: dict) -> LoaderConfig:
    t = next(t for t in tuner.study.trials if t.number == record["winner_trial"])
    return LoaderConfig.from_params(trial_attrs(t)["loader"])


# --------------------------------------------------------------------------------------- landscapes
def smooth(c: LoaderConfig) -> float:
    """DALI far above torch, best at 6 threads and batch 8."""
    if c.dali is None:
        return 150.0 + 60 * c.torch.num_workers + 2 * c.batch_size
    return 1000.0 - 50 * abs(c.dali.num_threads - 6) - 60 * abs(math.log2(c.batch_size / 8))


#: three configs within 3 % at the top, by (batch size, DALI threads)
TOP = {(8, 6): 1000.0, (8, 5): 985.0, (16, 6): 975.0}


def near_ties(c: LoaderConfig) -> float:
    """The :data:`TOP` three; their neighbours 10 % below the best, and further ones lower still; torch far below."""
    if c.dali is None:
        return 150.0 + 60 * c.torch.num_workers + 2 * c.batch_size
    key = (c.batch_size, c.dali.num_threads)
    return TOP.get(key, 960.0 - 60 * abs(c.dali.num_threads - 6) - 60 * abs(math.log2(c.batch_size / 8)))


def dali_ramp(c: LoaderConfig) -> float:
    """DALI starts slowly, the slower the more threads; torch is at its rate from the first window."""
    return 0.25 * c.dali.num_threads if c.dali is not None else 0.0


def dali_startup(c: LoaderConfig) -> float:
    """Seconds to the first batch: DALI builds its pipeline."""
    return 4.0 if c.dali is not None else 0.5


# -------------------------------------------------------------------------------------------- tests
def test_no_config_is_measured_twice_during_the_search(tiny_dataset, monkeypatch):
    replay = Replay(Landscape(smooth, ramp_s=dali_ramp), noise=0.05, seed=0).install(monkeypatch)
    tuner = _tuner(tiny_dataset, monkeypatch, n_trials=25, seed=0)
    tuner.optimize()
    trials = tuner.study.trials
    twice = {k: n for k, n in replay.searched.items() if n > 1}
    assert not twice, f"measured more than once during the search: {twice}"
    repeats = [t for t in trials if trial_attrs(t).get("outcome") == Outcome.REPEAT.value]
    assert len(repeats) >= 5, "the sampler hardly proposed a config again: the space is too large to test this"
    measured = [t for t in trials if trial_attrs(t).get("outcome") not in (None, Outcome.REPEAT.value, Outcome.DOMINATED.value)]  # told: not run
    assert sum(replay.searched.values()) == len(measured)
    for t in repeats:  # told the earlier trial's result
        earlier = trials[trial_attrs(t)["repeat_of"]]
        assert trial_attrs(earlier)["config"] == trial_attrs(t)["config"] and t.state == earlier.state
        assert t.state != optuna.trial.TrialState.COMPLETE or t.value == earlier.value
    record = tuner.confirm()
    again = {c["config"] for c in record["candidates"]}
    assert set(replay.remeasured) == again  # the confirmation re-measures the contenders, nothing else
    assert all(replay.searched[k] == 1 for k in again)


@pytest.mark.parametrize("space", [
    {"backend": {"choices": ["dali"]}, "batch_size": {"choices": [8]}, "dali_device": {"choices": ["cpu"]}, "num_threads": {"int": [1, 3]}},
    {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8, 16]}, "num_workers": {"choices": [0]}},
], ids=["dali-only", "no-workers"])
def test_a_baseline_outside_the_space_is_a_reference_never_the_winner(tiny_dataset, monkeypatch, space):
    """--space dali handed back a torch YAML (the torch heuristic, measured for reference, was the fastest), and a
    space allowing no workers a config with num_workers = cores."""
    from autotune.study.result import config_from_study, figures

    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())
    Replay(Landscape(lambda c: 5000.0 if c.dali is None and c.torch.num_workers else 100.0 + c.batch_size), seed=0).install(monkeypatch)
    settings = TuneSettings(cache="none", paired=False, cores=4, window_s=0.5, windows=3, n_trials=5, pruner="none", confirm_top=2, confirm_repeats=1)
    tuner = Tuner(scan(tiny_dataset), parse_space({"params": space}, cores=4), settings, storage="memory", study_name="s")
    tuner.optimize()
    heuristic = next(t for t in tuner.study.trials if trial_attrs(t).get("role") == "heuristic")
    assert heuristic.value == pytest.approx(5000.0, rel=0.05) and trial_attrs(heuristic)["reference"]  # measured, as a reference
    record = tuner.confirm()
    cfg = config_from_study(tuner.study, "memory")
    assert cfg.loader.backend.value == space["backend"]["choices"][0]
    assert cfg.loader.torch is None or cfg.loader.torch.num_workers == 0
    assert not cfg.torch_fallback  # a DALI-only space has none, as the docs say
    assert all(c["trial"] != heuristic.number for c in record["candidates"])
    assert figures(tuner.study)["heuristic_samples_per_s"] == pytest.approx(5000.0, rel=0.05)  # still stated beside the winner


@pytest.mark.parametrize("seed", range(8))
def test_screening_keeps_the_best_of_near_ties(tiny_dataset, monkeypatch, seed):
    # three configs within 3 % at the top, slow starters all (DALI's start-up and ramp), each measurement +-8 %
    replay = Replay(Landscape(near_ties, startup_s=dali_startup, ramp_s=dali_ramp), noise=0.08, seed=seed).install(monkeypatch)
    tuner = _tuner(tiny_dataset, monkeypatch, n_trials=25, seed=seed, confirm_top=3, confirm_repeats=2)
    tuner.optimize()
    best = max(TOP.values())
    near = {k for k in replay.searched if replay.true_rate(replay.configs[k]) >= 0.97 * best}
    assert near, "the search never sampled a config near the best"
    assert not near & set(replay.pruned), f"pruned a config within 3 % of the best: {near & set(replay.pruned)}"
    chosen = _winner(tuner, tuner.confirm())
    assert replay.true_rate(chosen) >= 0.97 * best, chosen.describe()


@pytest.mark.parametrize("before", [
    pytest.param({1: (700.0, 0.0), 2: (750.0, 0.0), 3: (800.0, 0.0), 4: (650.0, 0.0)}, id="after-fast-starters"),
    pytest.param({1: (600.0, 0.0), 2: (600.0, 0.0), 3: (600.0, 0.0), 4: (600.0, 0.0), 7: (1050.0, 2.0)}, id="after-another-slow-starter"),
])
def test_a_slow_starter_is_judged_on_its_steady_windows_against_every_trial(tiny_dataset, monkeypatch, before):
    # DALI configs by thread count: (true rate, ramp seconds); after the trials `before`, the best config (a slow
    # starter) and then a clearly slow one (a fast starter)
    rates = {**before, 6: (1000.0, 2.0), 5: (300.0, 0.0)}
    replay = Replay(Landscape(lambda c: rates[c.dali.num_threads][0], ramp_s=lambda c: rates[c.dali.num_threads][1]), seed=0).install(monkeypatch)
    tuner = _tuner(tiny_dataset, monkeypatch, n_trials=len(rates), baselines=False, seed=0)
    for threads in rates:
        tuner.study.enqueue_trial({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": threads})
    tuner.optimize()
    outcome = {trial_attrs(t)["loader"]["num_threads"]: t for t in tuner.study.trials}
    best = outcome[6]
    assert best.state == optuna.trial.TrialState.COMPLETE, f"the best config was pruned: {best.intermediate_values}"
    assert best.value == pytest.approx(1000.0, rel=0.03)
    assert outcome[5].state == optuna.trial.TrialState.PRUNED  # the pruner still stops a clearly slower config
    assert [replay.configs[k].dali.num_threads for k in replay.pruned] == [5]


@pytest.mark.parametrize("budget_s", [60, 90, 120])
def test_a_budget_with_slow_starting_contenders_is_kept(tiny_dataset, workdir, monkeypatch, budget_s):
    # the contenders (DALI, many threads) take seconds to start and ramp up, the other trials far less: a
    # re-measurement costs several median trials
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.loaders.backends._dali.is_available", lambda feature: True)  # DALI stays in the space
    slow_start = Landscape(near_ties, startup_s=lambda c: 2.0 * c.dali.num_threads if c.dali is not None else 0.5, ramp_s=dali_ramp)
    replay = Replay(slow_start, noise=0.08, seed=1, clock=clock).install(monkeypatch)
    (workdir / "space.yaml").write_text(yaml.safe_dump(SPACE))
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "space.yaml", "--budget", str(budget_s), "--seed", "1",
                 "--storage", "journal:study.log", "--no-report", "--quiet"]) == 0
    study = optuna.load_study(study_name=None, storage=optuna.storages.JournalStorage(JournalFileBackend("study.log")))
    t, conf = study.user_attrs["time"], study.user_attrs["confirmation"]
    marks = t["setup_marks_s"]  # where the set-up's seconds went, step by step (the budget's own clock)
    assert list(marks) == ["fingerprint", "dataset", "preflight", "prepared", "study open"] and list(marks.values()) == sorted(marks.values())
    assert marks["study open"] == t["spent_s"]["setup"]
    contenders = [tr for tr in study.trials if tr.number in {c["trial"] for c in conf["candidates"]}]
    assert max(trial_attrs(tr)["duration_s"] for tr in contenders) > 1.5 * t["median_trial_s"], t  # slow starters among quick trials
    elapsed = clock.now - 1000.0
    assert budget_s * 0.6 <= elapsed <= budget_s * 1.10, (elapsed, t)
    if t["remeasured"]["repeats"]:  # the re-measurement planned at the contenders' own trial time: the contenders side by side, for rounds
        assert conf["attempted"] == 1 and len(conf["paired"]["rounds"]) >= 2, (t, conf["method"])
        assert dict(replay.remeasured) == {c["config"]: 1 for c in conf["candidates"]}


def test_a_slow_trial_at_the_end_of_the_budget_is_cut_at_its_next_window(tiny_dataset, workdir, monkeypatch, capsys):
    """The torch defaults decode in one process: here a batch takes 2 s, a trial of them 10 s and more. Started late,
    such a trial ends at the first window past the budget, complete with what it measured, and the run ends in time."""
    clock = FakeClock()
    monkeypatch.setattr(budget_mod, "time", types.SimpleNamespace(monotonic=clock))
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.loaders.backends._dali.is_available", lambda feature: True)
    slow_defaults = Landscape(lambda c: 4.0 if c.dali is None and c.torch.num_workers == 0 else near_ties(c))
    Replay(slow_defaults, noise=0.02, seed=3, clock=clock).install(monkeypatch)
    (workdir / "space.yaml").write_text(yaml.safe_dump(SPACE))
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "space.yaml", "--budget", "15", "--seed", "1", "--batch-size", "8",
                 "--storage", "journal:study.log", "--no-report"]) == 0
    study = optuna.load_study(study_name=None, storage=optuna.storages.JournalStorage(JournalFileBackend("study.log")))
    (defaults,) = [t for t in study.trials if trial_attrs(t).get("role") == "defaults"]
    err = capsys.readouterr().err
    elapsed = clock.now - 1000.0
    assert elapsed <= 15 * 1.10, (elapsed, study.user_attrs["time"])
    assert defaults.state is optuna.trial.TrialState.COMPLETE and defaults.value == pytest.approx(4.0, rel=0.1)
    cut = [t for t in study.trials if "the time budget ran out" in str(trial_attrs(t).get("message", ""))]
    assert cut, "some trial ran into the end of the budget and was cut"
    # its line says it was measured in fewer windows (it read as a whole trial), and its log ends with its rate
    line = next(ln for ln in err.splitlines() if ln.startswith(f"trial {cut[0].number} "))
    assert f"complete {trial_attrs(cut[0])['samples_per_s']:,.0f} samples/s (measured " in line and " window(s): the time budget ran out)" in line, line
    log = Path(trial_attrs(cut[0])["log"]).read_text().splitlines()
    assert log[-1].endswith(f"complete: {trial_attrs(cut[0])['samples_per_s']:.1f} samples/s ({trial_attrs(cut[0])['message']})"), log


@pytest.mark.parametrize("second,extra", [(990.0, 4), (800.0, 0)], ids=["close-call", "decisive"])
def test_a_close_call_between_the_two_leaders_is_measured_again(tiny_dataset, monkeypatch, second, extra):
    rates = {6: 1000.0, 5: second, 4: 500.0, 3: 400.0}  # DALI threads -> true rate; no noise
    replay = Replay(Landscape(lambda c: rates[c.dali.num_threads]), seed=0).install(monkeypatch)
    tuner = _tuner(tiny_dataset, monkeypatch, n_trials=len(rates), baselines=False, seed=0, pruner="none", confirm_top=3, confirm_repeats=1)
    for t in rates:
        tuner.study.enqueue_trial({"backend": "dali", "batch_size": 8, "num_threads": t, "prefetch_queue_depth": 2})
    tuner.optimize()
    record = tuner.confirm()
    assert record["tiebreak"] == extra  # two more rounds of the two leaders only when they are within 3 %
    assert record["attempted"] == 3 + extra
    assert sum(replay.remeasured.values()) == 3 + extra
    assert _winner(tuner, record).dali.num_threads == 6
    assert ("more" in record["method"]) == bool(extra)


def test_a_trial_is_stored_in_a_few_writes_with_its_measurement_in_one(tiny_dataset, monkeypatch):
    """Each result field was its own user attribute: 19 trials made 577 SQLite commits. Now a measured trial is a
    handful of writes (owner, loader, config, the measurement), whatever the measurement holds."""
    Replay(Landscape(smooth, ramp_s=dali_ramp), noise=0.05, seed=0).install(monkeypatch)
    tuner = _tuner(tiny_dataset, monkeypatch, n_trials=20, seed=0)
    writes: collections.Counter[int] = collections.Counter()
    real = optuna.Trial.set_user_attr

    def counted(self: optuna.Trial, key: str, value: object) -> None:
        writes[self.number] += 1
        real(self, key, value)

    monkeypatch.setattr(optuna.Trial, "set_user_attr", counted)
    tuner.optimize()
    measured = [t for t in tuner.study.trials if trial_attrs(t).get("outcome") == Outcome.COMPLETE.value]
    assert len(measured) >= 5
    assert max(writes[t.number] for t in measured) <= 5, writes
    for t in measured:
        assert isinstance(t.user_attrs["result"], dict) and trial_attrs(t)["samples_per_s"] == t.user_attrs["result"]["samples_per_s"]
