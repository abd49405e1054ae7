"""The memory guard without child processes: budgets, the estimate, classification, and what the sampler learns."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import types

import optuna
import psutil
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import Dataset
from autotune.errors import UserError
from autotune.loaders import memory
from autotune.loaders.backends._dali import DALI_GPU_BASE_MIB
from autotune.loaders.memory import estimate
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials import guard
from autotune.trials.child import bad_image_path, classify_exception
from autotune.trials.guard import (
    Budgets,
    Monitor,
    TreeMemory,
    _budgets,
    _monitor,
    check_estimate,
    default_budgets,
    read_pss_mib,
)
from autotune.trials.spec import TrialResult

MiB = 2**20


def _dataset(n: int = 100, mean_bytes: int = 50_000) -> Dataset:
    files = tuple(f"/data/c{i % 2}/{i}.jpg" for i in range(n))
    return Dataset(root="/data", classes=("c0", "c1"), files=files, labels=tuple(i % 2 for i in range(n)), total_bytes=n * mean_bytes)


def _torch(b: int, w: int, pf: int | None = 2, pin: bool = False) -> LoaderConfig:
    p = {"backend": "torch", "batch_size": b, "num_workers": w, "pin_memory": pin}
    if w:
        p["prefetch_factor"] = pf
    return LoaderConfig.from_params(p)


def _dali(b: int, threads: int = 4, q: int = 2, device: str = "gpu") -> LoaderConfig:
    return LoaderConfig.from_params({"backend": "dali", "batch_size": b, "num_threads": threads, "prefetch_queue_depth": q, "dali_device": device})


# ------------------------------------------------------------------------------------------------ budgets
def test_default_budgets_cpu_takes_fractions_and_given_values(monkeypatch):
    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=guard.SHM_PATH: 1000.0)
    b = default_budgets(device="cpu")
    assert b.gpu_mib is None
    assert b.shm_mib == pytest.approx(800.0)
    assert 0 < b.host_mib <= _budgets.psutil.virtual_memory().available / MiB
    b = default_budgets(host_mib=1234, shm_mib=56, device="cpu")
    assert (b.host_mib, b.shm_mib) == (1234, 56)
    assert b.to_dict() == {"host_mib": 1234, "gpu_mib": None, "shm_mib": 56, "reserve_gpu_mib": 0}


def test_default_gpu_budget_is_free_memory_minus_the_reserve(monkeypatch):
    seen = []
    monkeypatch.setattr(_budgets, "gpu_free_mib", lambda index=0: seen.append(index) or 10_000.0)
    assert default_budgets(device="cuda").gpu_mib == pytest.approx(9_000.0)
    assert default_budgets(reserve_gpu_mib=4_000, device="cuda:1").gpu_mib == pytest.approx(5_000.0)
    assert seen[-1] == 1
    # an explicit budget stands, but never leaves less than the reserve free
    assert default_budgets(gpu_mib=3_000, device="cuda").gpu_mib == 3_000
    assert default_budgets(gpu_mib=8_000, reserve_gpu_mib=4_000, device="cuda").gpu_mib == pytest.approx(6_000.0)
    with pytest.raises(UserError, match="leaves no GPU memory"):
        default_budgets(reserve_gpu_mib=20_000, device="cuda")
    with pytest.raises(UserError, match="must be >= 0"):
        default_budgets(reserve_gpu_mib=-1, device="cuda")


def test_no_nvml_means_no_gpu_budget(monkeypatch):
    monkeypatch.setattr(_budgets, "gpu_free_mib", lambda index=0: None)
    assert default_budgets(device="cuda").gpu_mib is None


# ----------------------------------------------------------------------------------------------- estimate
def test_estimate_grows_with_the_batches_in_flight():
    ds = _dataset()
    small, big = estimate(_torch(32, 2), ds), estimate(_torch(256, 8, pf=4), ds)
    assert big["host_mib"] > small["host_mib"]
    out_batch = 256 * 3 * 224 * 224 * 4 / MiB
    # workers x prefetch batches, and the one the loop holds (a worker and prefetch of 1 need two: a 38 MB batch crashed
    # in 64 MiB)
    assert big["shm_mib"] == pytest.approx((8 * 4 + 1) * out_batch, rel=1e-3)
    assert estimate(_torch(64, 1, pf=1), ds)["shm_mib"] == pytest.approx(2 * out_batch / 4, rel=1e-3)
    assert estimate(_torch(256, 0), ds)["shm_mib"] == 0
    assert small["gpu_mib"] is None
    pinned = estimate(_torch(256, 8, pin=True), ds, device="cuda")
    assert pinned["parts"]["pinned"] > 0 and pinned["gpu_mib"] > memory.CUDA_CONTEXT_MIB
    assert "pinned" not in estimate(_torch(256, 8, pin=True), ds)["parts"]  # no pinning without a GPU


def test_estimate_sizes_dali_decode_buffers_from_image_bytes():
    big_images = estimate(_dali(256), _dataset(mean_bytes=500_000), device="cuda")
    small_images = estimate(_dali(256), _dataset(mean_bytes=20_000), device="cuda")
    assert big_images["gpu_mib"] > small_images["gpu_mib"] > memory.CUDA_CONTEXT_MIB + DALI_GPU_BASE_MIB
    assert estimate(_dali(256, threads=16), _dataset(), device="cuda")["host_mib"] > estimate(_dali(256, threads=2), _dataset(), device="cuda")["host_mib"]
    assert estimate(_dali(256, q=3), _dataset(), device="cuda")["gpu_mib"] > estimate(_dali(256, q=1), _dataset(), device="cuda")["gpu_mib"]
    cpu = estimate(_dali(64, device="cpu"), _dataset())
    assert cpu["gpu_mib"] is None and cpu["shm_mib"] == 0


def test_check_estimate_records_predicted_outcomes_with_the_estimate():
    ds = _dataset()
    fits = Budgets(host_mib=100_000, shm_mib=100_000)
    assert check_estimate(_torch(64, 2), ds, fits) is None
    r = check_estimate(_torch(64, 2), ds, Budgets(host_mib=100))
    assert r.outcome is Outcome.PREDICTED_OOM and r.extra["over"] == "host" and r.extra["estimate"]["host_mib"] > 100
    assert "over the 100 MiB budget" in r.message and r.to_attrs()["estimate"]["parts"]
    r = check_estimate(_torch(256, 8, pf=4), ds, Budgets(host_mib=100_000, shm_mib=200))
    assert r.outcome is Outcome.SHM and "/dev/shm for the workers' batches in flight" in r.message
    assert "process" not in r.message  # the host memory's parts say nothing of /dev/shm
    r = check_estimate(_dali(1024), ds, Budgets(gpu_mib=1_000), device="cuda")
    assert r.outcome is Outcome.PREDICTED_OOM and r.extra["over"] == "gpu" and "GPU memory" in r.message
    assert guard.violation(r, Budgets(gpu_mib=1_000)) == pytest.approx(r.extra["estimate"]["gpu_mib"] / 1_000 - 1)


# ----------------------------------------------------------------------------------------- classification
def test_bad_image_path_through_a_dataloader_worker_traceback(tmp_path):
    bad = tmp_path / "a: b" / "x.jpg"  # a folder name holding ': '
    bad.parent.mkdir()
    bad.write_bytes(b"\xff\xd8")
    wrapped = (
        "Caught BadImageError in DataLoader worker process 0.\nOriginal Traceback (most recent call last):\n"
        '  File "x.py", line 1, in f\nautotune.imaging.BadImageError: ' + f"{bad}: cannot decode image (image file is truncated)"
    )
    assert bad_image_path(wrapped) == str(bad)
    assert bad_image_path(f"{bad}: cannot decode image") == str(bad)
    from autotune.dataset.imaging import BadImageError

    assert classify_exception(BadImageError(wrapped)) == (Outcome.BAD_DATA, str(bad))


@pytest.mark.parametrize(
    ("exc", "outcome"),
    [
        (MemoryError(), Outcome.OOM_HOST),
        (RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB"), Outcome.OOM_GPU),
        (
            RuntimeError("DataLoader worker (pid 7) is killed by signal: Bus error. It is possible that dataloader's workers are out of shared memory."),
            Outcome.SHM,
        ),
        (RuntimeError("DataLoader worker (pid(s) 7) exited unexpectedly"), Outcome.CRASH),
    ],
)
def test_classify_exception(exc, outcome):
    assert classify_exception(exc)[0] is outcome


# ------------------------------------------------------------------------------------------------ sampling
def test_tree_memory_is_close_to_pss_and_cheap():
    code = "import time; b = bytearray(200 * 2**20); b[::4096] = b'\\1' * len(b[::4096]); print('ok', flush=True); time.sleep(20)"
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        assert p.stdout.readline().strip() == b"ok"
        procs = guard.process_tree(p.pid)
        tm = TreeMemory()
        first = tm.total_mib(procs)
        exact = read_pss_mib(p.pid)
        assert exact is not None and exact > 200
        assert first == pytest.approx(exact, rel=0.05)
        t = time.perf_counter()
        for _ in range(10):
            again = tm.total_mib(procs)
        assert again == pytest.approx(exact, rel=0.05)
        assert (time.perf_counter() - t) / 10 < 0.1  # several samples a second stay cheap
        m = Monitor(Budgets(host_mib=exact / 2))
        assert m.sample(p.pid) is Outcome.OOM_HOST and "host memory" in m.reason and m.over == "host"
        assert Monitor(Budgets(host_mib=exact * 4)).sample(p.pid) is None
    finally:
        p.kill()
        p.wait()


def _costly_reads(monkeypatch, cost_s: float = 0.02) -> tuple[list[int], TreeMemory, list[psutil.Process], list[float]]:
    """This process, its PSS read at ``cost_s`` a read, on a clock that moves only when told: (reads, memory, procs, now)."""
    reads: list[int] = []

    def slow_pss(pid):
        reads.append(pid)
        time.sleep(cost_s)
        return 100.0

    monkeypatch.setattr(_monitor, "read_pss_mib", slow_pss)
    now = [0.0]
    return reads, TreeMemory(clock=lambda: now[0]), guard.process_tree(os.getpid())[:1], now


def test_exact_reads_of_a_costly_process_are_spaced_by_what_they_cost(monkeypatch):
    """Reading a CUDA process's PSS took 25-30 ms while holding its memory-map lock; ten a second slowed a DALI GPU
    loader by a fifth. A read costing 20 ms comes again only after 1 s (2 % of the time), unless asked for."""
    reads, tm, procs, now = _costly_reads(monkeypatch)
    for _ in range(20):  # two seconds of samples, ten a second
        tm.total_mib(procs)
        now[0] += 0.1
    assert 2 <= len(reads) <= 3, reads  # at first sight, then about once a second (each read costs 20 ms or a little more)
    tm.total_mib(procs, exact=True)  # a budget about to be crossed: read now, whatever it costs
    assert len(reads) in (3, 4)
    assert tm.total_mib(procs) >= 100.0


def test_a_trial_sitting_near_its_budget_is_confirmed_a_few_times_a_second_not_at_every_sample(monkeypatch):
    """Near the budget every sample asks for exact figures before stopping; read in full each time, a 20 ms read ten
    times a second would slow the trial as before. A read younger than ten times its cost stands instead."""
    reads, tm, procs, now = _costly_reads(monkeypatch)
    for _ in range(20):  # two seconds of confirmations, ten a second
        assert tm.total_mib(procs, exact=True) >= 100.0
        now[0] += 0.1
    assert 4 <= len(reads) <= 10, reads  # every 0.2-0.3 s (each read costs 20 ms or a little more), not 20 times


def test_exact_reads_come_at_least_once_a_second_and_at_once_when_a_process_leaves(monkeypatch):
    """Copy-on-write pages show only in an exact read: however costly, one comes every second. And when a process
    leaves the tree, the pages it shared are the survivors' alone: they are read again at the next sample."""
    reads = []

    def slow_pss(pid):
        reads.append(pid)
        time.sleep(0.05)  # 2.5 s apart by cost alone
        return 100.0

    monkeypatch.setattr(_monitor, "read_pss_mib", slow_pss)
    now = [0.0]
    tm = TreeMemory(clock=lambda: now[0])
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        me, other = psutil.Process(), psutil.Process(child.pid)
        for _ in range(15):  # 1.5 s, ten samples a second
            tm.total_mib([me, other])
            now[0] += 0.1
        assert reads.count(me.pid) == 2 and reads.count(other.pid) == 2, reads  # at first sight and a second later
        tm.total_mib([me])  # the child left
        assert reads[-1] == me.pid and reads.count(me.pid) == 3
    finally:
        child.kill()
        child.wait()


# -------------------------------------------------------------------------------- what the sampler learns
def _toy_study(monkeypatch, seed: int, oom_outcome: Outcome, n_trials: int = 40) -> list[optuna.trial.FrozenTrial]:
    """A study whose rate rises with the batch size, but batches of 256 and more run out of memory (43% of the space)."""
    from autotune.study import tuner as study
    from autotune.study.tuner import TrialFailure

    monkeypatch.setattr(study, "open_storage", lambda url: optuna.storages.InMemoryStorage())

    space = parse_space(
        {
            "name": "toy",
            "params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [16, 32, 64, 128, 256, 512, 1024]}, "num_workers": {"int": [0, 4]}},
        }
    )
    settings = TuneSettings(n_trials=n_trials, seed=seed, baselines=False, cache="none", pruner="none")
    tuner = Tuner(_dataset(), space, settings, storage="memory", study_name="toy")

    def measure(loader, number=None, on_intermediate=None):
        if loader.batch_size >= 256:
            return TrialResult(oom_outcome, message="stopped at the GPU budget", extra={"over": "gpu"})
        return TrialResult(Outcome.COMPLETE, samples_per_s=float(loader.batch_size * (1 + loader.torch.num_workers)))

    tuner.measure = measure
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    tuner.study.optimize(tuner.objective, n_trials=n_trials, catch=(TrialFailure,))
    return tuner.study.get_trials(deepcopy=False)


def _late_oom_share(trials: list[optuna.trial.FrozenTrial], start: int = 10) -> float:
    late = trials[start:]
    return sum(t.params["batch_size"] >= 256 for t in late) / len(late)


def test_tpe_moves_away_from_an_oom_region(monkeypatch):
    """Optuna 5's TPE drops FAILED trials from its model (``_sample`` reads COMPLETE and PRUNED only) and ranks
    PRUNED ones after every COMPLETE one; a constraint above 0 makes a trial infeasible, ranked after every
    feasible one. So a memory outcome is told as PRUNED with a 0 report and a ``memory`` constraint, and the
    sampler leaves the region; told as FAILED, TPE keeps proposing it (the rate it cannot see keeps rising)."""
    ours, failed = [], []
    for seed in (0, 1):
        trials = _toy_study(monkeypatch, seed, Outcome.OOM_GPU)
        for t in trials:
            if t.params["batch_size"] >= 256:
                # a config proposed again is not measured again: told the same as the trial that measured it
                outcome = trial_attrs(trials[trial_attrs(t)["repeat_of"]])["outcome"] if trial_attrs(t)["outcome"] == "repeat" else trial_attrs(t)["outcome"]
                assert t.state is optuna.trial.TrialState.PRUNED and outcome == "oom-gpu"
                assert t.intermediate_values == {0: 0.0} and t.constraints == {"memory": 1.0}
        assert max((t for t in trials if t.value is not None), key=lambda t: t.value).params["batch_size"] == 128
        ours.append(_late_oom_share(trials))
        failed.append(_late_oom_share(_toy_study(monkeypatch, seed, Outcome.CRASH)))
    ours_share, failed_share = sum(ours) / 2, sum(failed) / 2
    assert ours_share < 0.40, f"{ours_share:.0%} of the later trials in the OOM region (random sampling: 43%)"
    assert failed_share > 0.70 and ours_share < failed_share / 2, (ours, failed)


def test_dali_device_allocation_failure_is_oom_gpu():
    # seen on an H200 with the GPU almost full: DALI's resize could not allocate its output
    err = RuntimeError(
        "Critical error in pipeline: Error in GPU operator `nvidia.dali.fn.resize` ... encountered:  "
        "Can't allocate 38535168 bytes on device 0. Current pipeline object is no longer valid."
    )
    assert classify_exception(err)[0] is Outcome.OOM_GPU


def test_monitor_watches_each_rank_gpu(monkeypatch):
    """With two ranks (cuda:0 and cuda:1), a rank over the per-GPU budget on GPU 1 stops the trial."""
    import os

    used = {0: 100.0, 1: 100.0}

    class FakeNvml:
        def __init__(self, index: int) -> None:
            self.index = index

        def used_mib(self, pids):
            assert os.getpid() in pids  # the sampled tree's processes
            return used[self.index]

        def close(self) -> None:
            pass

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(_monitor, "_Nvml", FakeNvml)
    m = Monitor(Budgets(gpu_mib=1000), "cuda", ranks=2)
    assert sorted(nv.index for nv in m._nvml) == [0, 1]
    assert m.sample(os.getpid()) is None
    used[1] = 2000.0
    assert m.sample(os.getpid()) is Outcome.OOM_GPU and m.over == "gpu"
    assert m.peak_gpu_mib == 2000.0
    assert [nv.index for nv in Monitor(Budgets(), "cuda:1")._nvml] == [1]  # one rank: its own device


@pytest.mark.parametrize(("visible", "device", "index"), [("3,1", "cuda:1", 1), ("GPU-cccc-2", "cuda", 2), ("GPU-dddd,GPU-bbbb", "cuda:1", 1)])
def test_the_gpu_watched_is_the_one_cuda_visible_devices_names(monkeypatch, visible, device, index):
    """A trial on 'cuda' under CUDA_VISIBLE_DEVICES=GPU-<uuid> (as schedulers set it) watched NVML's GPU 0: another
    job's GPU, whose memory then stopped this one's trials."""
    import sys
    import types

    uuids = ["GPU-aaaa-0", "GPU-bbbb-1", "GPU-cccc-2", "GPU-dddd-3"]
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 4,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda h: uuids[h],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert _budgets._gpu_index(device) == index


def test_a_confirmation_reads_again_a_process_that_grew_since_its_read(monkeypatch):
    """Workers that map shared pages at once grow in RSS by what they share: the estimate counts that in full, so a
    confirmation that kept a recent read would stop the trial on an over-count."""
    reads = []

    def pss(pid):
        reads.append(pid)
        time.sleep(0.005)  # stands for 0.05 s near a budget
        return 100.0

    class Proc:
        def __init__(self, pid, rss_mib):
            self.pid, self.rss = pid, rss_mib

        def memory_info(self):
            return types.SimpleNamespace(rss=self.rss * _monitor.MiB)

    monkeypatch.setattr(_monitor, "read_pss_mib", pss)
    now = [0.0]
    tm = TreeMemory(clock=lambda: now[0])
    procs = [Proc(pid, 100.0) for pid in range(4)]
    assert tm.total_mib(procs) == 400.0 and len(reads) == 4
    now[0] += 0.01
    assert tm.total_mib(procs, exact=True) == 400.0 and len(reads) == 4  # flat and just read: the reads stand
    for p in procs:
        p.rss += 100.0  # shared pages mapped at once
    assert tm.total_mib(procs, exact=True) == 400.0 and len(reads) == 8  # every grown process read again
    assert tm.total_mib(procs) == 400.0
