from __future__ import annotations

import os
import re
import threading
import time
import warnings

import psutil
import pytest

from autotune.outcomes import Outcome
from autotune.trials import rank_group
from autotune.trials.measure import Measurement
from autotune.trials.rank_group import RankFailed, _Windows, combine, measure_ranks, rank_device


def _m(rate: float) -> Measurement:
    return Measurement(rate, (rate * 0.9, rate * 1.1), [rate, rate], 0, 0.5, 0.1, 10, 100)


def test_combine_scores_the_slowest_rank_times_n():
    p = combine([_m(200.0), _m(150.0)])
    assert p["samples_per_s"] == 300.0
    assert p["per_rank_samples_per_s"] == [200.0, 150.0]
    assert p["slowest_rank"] == 1 and p["ranks"] == 2
    assert p["spread"] == pytest.approx([270.0, 330.0])
    assert p["sum_samples_per_s"] == 350.0


def test_rank_device():
    assert rank_device("cpu", 1) == "cpu"
    assert rank_device("cuda", 3) == "cuda:3"
    assert rank_device("cuda:0", 1) == "cuda:1"


def test_window_relay_reports_once_every_rank_has_the_window():
    """The node's score is the slowest rank's median x N, its spread that rank's spread x N."""
    seen = []
    relay = _Windows(3, lambda k, v, s: seen.append((k, v, s)) or False)
    relay.window(0, 0, 100.0, (95.0, 105.0))
    relay.window(1, 0, 90.0, (80.0, 91.0))
    assert seen == []
    relay.window(2, 0, 80.0, (79.0, 85.0))
    assert seen == [(0, 240.0, (237.0, 255.0))]
    relay.window(0, 1, 100.0, (95.0, 105.0))
    relay.finish(0)
    relay.window(1, 1, 70.0, (60.0, 90.0))
    relay.window(2, 1, 95.0, (79.0, 96.0))
    assert seen == [(0, 240.0, (237.0, 255.0)), (1, 210.0, (180.0, 270.0))]


def test_window_relay_stops_every_rank_when_pruned():
    relay = _Windows(2, lambda k, v, s: True)
    assert relay.window(0, 0, 1.0, (1.0, 1.0)) is False
    assert relay.window(1, 0, 1.0, (1.0, 1.0)) is True
    assert relay.window(0, 1, 1.0, (1.0, 1.0)) is True


def _spec(dataset, workers: int = 0, inject: str | None = None, **kw):
    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import scan
    from autotune.trials.spec import TrialSpec

    return TrialSpec(
        dataset=scan(dataset), loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 2, "num_workers": workers}),
        device="cpu", warmup_batches=1, window_s=0.1, windows=2, seed=0, ranks=2, inject=inject, **kw,
    )


def _descendants(keep: set[int] = frozenset(), timeout: float = 10.0) -> list[psutil.Process]:
    """This test process's descendants (but ``keep`` and theirs), once the dying ones are gone."""
    import multiprocessing.forkserver
    import multiprocessing.resource_tracker

    deadline = time.monotonic() + timeout
    while True:
        # multiprocessing's resource tracker and forkserver live as long as this process once any test started them
        helpers = {multiprocessing.resource_tracker._resource_tracker._pid, multiprocessing.forkserver._forkserver._forkserver_pid}
        kept = set(keep) | {pid for pid in helpers if pid}
        for pid in keep:
            try:
                kept |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
            except psutil.NoSuchProcess:
                pass
        left = [p for p in psutil.Process().children(recursive=True) if p.pid not in kept]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def test_two_cpu_loaders_at_once(tiny_dataset):
    windows = []
    p = measure_ranks(_spec(tiny_dataset), lambda k, v, s: windows.append(v) or False)
    assert len(p["per_rank_samples_per_s"]) == 2 and p["ranks"] == 2
    assert p["samples_per_s"] == pytest.approx(min(p["per_rank_samples_per_s"]) * 2, abs=0.2)
    assert windows and all(v > 0 for v in windows)
    assert not _descendants()


def test_each_rank_is_its_own_process_on_its_own_shard(tiny_dataset, tmp_path, monkeypatch):
    """Two CPU ranks over a torch DataLoader with workers: two processes, one shard and a share of the threads
    each, scored slowest x 2."""
    real = rank_group.measure_rank

    def spy(spec, device, on_window, **kw):
        import torch

        (tmp_path / f"rank{kw['shard_id']}").write_text(f"{os.getpid()} {kw['num_shards']} {device} {torch.get_num_threads()}")
        return real(spec, device, on_window, **kw)

    monkeypatch.setattr(rank_group, "measure_rank", spy)
    windows = []
    during: set[psutil.Process] = set()  # the ranks and their workers, seen while they measure

    def on_window(k, v, s):
        windows.append((k, v))
        return False

    def watch(stop: threading.Event) -> None:  # polled apart from the windows: a rank's worker may start and end between two
        while not stop.is_set():
            try:
                during.update(psutil.Process().children(recursive=True))
            except psutil.Error:
                pass
            time.sleep(0.01)

    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(stop,), daemon=True)
    watcher.start()
    try:
        p = measure_ranks(_spec(tiny_dataset, workers=1), on_window)
    finally:
        stop.set()
        watcher.join()
    assert len(during) >= 4  # two ranks, a worker each
    assert not [q for q in during if q.is_running() and q.status() != psutil.STATUS_ZOMBIE]  # none left, not even re-parented
    seen = [(tmp_path / f"rank{r}").read_text().split() for r in range(2)]
    pids = {int(s[0]) for s in seen}
    assert len(pids) == 2 and os.getpid() not in pids
    import torch

    share = str(max(1, torch.get_num_threads() // 2))  # each rank its share of the intra-op threads
    assert [s[1:] for s in seen] == [["2", "cpu", share], ["2", "cpu", share]]
    rates = p["per_rank_samples_per_s"]
    assert len(rates) == 2 and all(r > 0 for r in rates)
    assert p["slowest_rank"] == rates.index(min(rates))
    assert p["samples_per_s"] == pytest.approx(min(rates) * 2, abs=0.2)
    assert p["sum_samples_per_s"] == pytest.approx(sum(rates), abs=0.2)
    assert [k for k, _ in windows] == list(range(len(windows))) and windows
    assert not _descendants()


def test_each_rank_runs_the_training_step(tiny_dataset):
    """With a model, every rank process times its own training step, as a single-rank trial does."""
    from autotune.trials.model import ModelSpec

    step_ms = 50.0
    p = measure_ranks(_spec(tiny_dataset, model=ModelSpec(step_ms=step_ms)), lambda k, v, s: False)
    ceiling = 2 / (step_ms / 1000)  # batch 2, one step each: at most 40 samples/s per rank
    assert len(p["per_rank_samples_per_s"]) == 2
    assert all(0 < r <= ceiling * 1.02 for r in p["per_rank_samples_per_s"])
    assert p["model"] == ModelSpec(step_ms=step_ms).describe()
    assert not _descendants()


@pytest.mark.parametrize(("fault", "outcome", "text"), [
    ("oom-gpu", Outcome.OOM_GPU, "CUDA out of memory"), ("segfault", Outcome.CRASH, "SIGSEGV"),
    ("signal:40", Outcome.CRASH, "died with signal 40"),  # a real-time signal has no name: it raised ValueError
])
@pytest.mark.slow
def test_a_failing_rank_ends_the_trial_with_its_outcome(tiny_dataset, fault, outcome, text):
    """The trial child's side: the failing rank's outcome, the other rank and every worker gone."""
    import faulthandler

    from autotune.trials.child import classify_exception, execute

    was = faulthandler.is_enabled()
    faulthandler.disable()  # the forked rank would print pytest's fault handler's dump of its segfault
    try:
        with pytest.raises(RankFailed) as err:
            execute(_spec(tiny_dataset, workers=1, inject=f"rank1-{fault}"), lambda k, v, s: False)
    finally:
        if was:
            faulthandler.enable()
    assert err.value.rank == 1 and text in str(err.value)
    assert classify_exception(err.value) == (outcome, None)
    assert not _descendants()


@pytest.mark.parametrize(("fault", "outcome", "text"), [("crash", Outcome.CRASH, "injected crash"), ("oom-gpu", Outcome.OOM_GPU, "CUDA out of memory")])
@pytest.mark.slow
def test_rank_failure_is_a_clean_trial_failure(tiny_dataset, zygote, fault, outcome, text):
    """Through the runner: the failing rank's outcome is the trial's, and no process is left."""
    from autotune.trials.runner import run_trial

    r = run_trial(_spec(tiny_dataset, workers=1, inject=f"rank1-{fault}"), timeout_s=120, zygote=zygote)
    assert r.outcome is outcome
    assert r.message.startswith("rank 1: ") and text in r.message
    assert not _descendants({zygote.proc.pid})


@pytest.mark.slow
def test_hung_rank_is_ended_by_the_trial_timeout(tiny_dataset, zygote):
    from autotune.trials.runner import run_trial

    r = run_trial(_spec(tiny_dataset, workers=1, inject="rank1-hang"), timeout_s=8, zygote=zygote)
    assert r.outcome is Outcome.TIMEOUT
    assert not _descendants({zygote.proc.pid})


@pytest.mark.slow
def test_memory_guard_sees_every_rank(tiny_dataset, zygote):
    """Rank 1's allocation counts against the trial's host budget: the ranks are in the sampled tree."""
    from autotune.trials.guard import Budgets
    from autotune.trials.runner import run_trial

    r = run_trial(_spec(tiny_dataset, inject="rank1-alloc:3000"), timeout_s=120, budgets=Budgets(host_mib=1500), zygote=zygote)
    assert r.outcome is Outcome.OOM_HOST and r.extra.get("over") == "host"
    assert not _descendants({zygote.proc.pid})


@pytest.mark.slow
def test_run_gpus_2_on_cpu_records_two_ranks(workdir, tiny_dataset):
    from autotune.cli import main
    from autotune.config.files import load_config

    rc = main([
        "run", "--dataset", str(tiny_dataset), "--space", "cpu", "--gpus", "2", "--n-trials", "1", "--batch-size", "2",
        "--window", "0.2", "--windows", "2", "--confirm-top", "0", "--quiet", "--no-report", "--seed", "0",
    ])
    assert rc == 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cfg = load_config("autotune.yaml")
    r = cfg.result
    assert r["ranks"] == 2
    assert len(r["per_rank_samples_per_s"]) == 2
    assert r["samples_per_s"] == pytest.approx(min(r["per_rank_samples_per_s"]) * 2, rel=0.01)
    with pytest.warns(UserWarning, match="tuned for 2 rank"):
        load_config("autotune.yaml", world_size=4)
    rank = cfg.for_rank(1, 2)
    assert (rank.shard_id, rank.num_shards, rank.device) == (1, 2, "cpu")
    with pytest.warns(UserWarning, match="tuned for 2 rank"):
        cfg.for_rank(0, 8)


def test_for_rank_reads_torchrun_environment(monkeypatch):
    from autotune.config.schema import Config, LoaderConfig

    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8}), device="cuda", result={"ranks": 4})
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_RANK", "1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = cfg.for_rank()
    assert (r.rank, r.world_size, r.local_rank, r.device, r.shard_id, r.num_shards) == (5, 8, 1, "cuda:1", 5, 8)
    assert r.dataloader_kwargs()["batch_size"] == 8


def test_space_cores_is_the_per_rank_share(workdir, tiny_dataset, monkeypatch):
    from autotune.cli._run import request_from_args
    from autotune.config import fingerprint
    from autotune.tuning import search
    from autotune.tuning.run import run

    real = fingerprint.collect
    monkeypatch.setattr(fingerprint, "collect", lambda: {**real(), "cpus": 8})
    seen = {}

    class Stop(Exception):
        pass

    def fake_tuner(dataset, space, settings, **kw):
        seen["high"] = space["num_workers"].high
        seen["cores"] = settings.cores
        raise Stop

    monkeypatch.setattr(search, "Tuner", fake_tuner)
    from autotune.cli import build_parser

    args = build_parser().parse_args(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--gpus", "4", "--batch-size", "2", "--quiet"])
    with pytest.raises(Stop):
        run(request_from_args(args))
    assert seen == {"high": 2, "cores": 2}


@pytest.mark.parametrize(("env", "needle"), [
    ({"LOCAL_WORLD_SIZE": "0"}, "local_world_size must be a whole number of 1 or more (the ranks on this node; LOCAL_WORLD_SIZE"),
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "rank must be a whole number of 0 or more (this process's rank from 0; RANK"),
    ({"WORLD_SIZE": ""}, "world_size must be a whole number of 1 or more (the number of ranks; WORLD_SIZE"),
    ({"LOCAL_RANK": "x"}, "local_rank must be a whole number of 0 or more (this process's rank on its node; LOCAL_RANK"),
])
def test_for_rank_names_a_bad_torchrun_variable(monkeypatch, env, needle):
    """LOCAL_WORLD_SIZE=0 raised ZeroDivisionError, RANK=abc a bare ValueError; 1.7 was cut to 1."""
    from autotune.config.schema import Config, LoaderConfig
    from autotune.errors import ConfigError

    for k in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "LOCAL_RANK"):
        monkeypatch.delenv(k, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8}))
    with pytest.raises(ConfigError, match=re.escape(needle)):
        cfg.for_rank()
    with pytest.raises(ConfigError, match="rank must be a whole number"):
        cfg.for_rank(1.7, 2)
