"""Model in the loop (CPU): simulated and real training steps, the model's memory term, the ceiling and the
"enough" rule, down to the YAML it writes."""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import time

import optuna
import pytest

import autotune
from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.errors import UserError
from autotune.loaders.presets import Preset
from autotune.outcomes import Outcome
from autotune.study import selection
from autotune.study.ceiling import measure_ceiling
from autotune.study.evidence import trial_attrs
from autotune.study.result import config_from_study
from autotune.study.selection import choose_enough
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials import model
from autotune.trials.guard import Budgets
from autotune.trials.measure import measure
from autotune.trials.model import ModelSpec, estimate_gpu_mib, prepare_consumer
from autotune.trials.spec import TrialResult

TINY = Preset("tiny", train=True, crop=32)


def _args(**kw) -> argparse.Namespace:
    base = {"model": None, "amp": False, "channels_last": False, "step_ms": None, "tolerance": 0.02}
    return argparse.Namespace(**{**base, **kw})


# ------------------------------------------------------------------------------------------------ spec
def test_model_spec_from_flags_checks_them_and_pickles():
    spec = ModelSpec.from_args(_args(model="resnet50", amp=True, channels_last=True))
    assert spec.describe() == "resnet50 bf16 channels_last"
    assert pickle.loads(pickle.dumps(spec)) == spec
    assert ModelSpec.from_args(_args(step_ms=150.0)).describe() == "simulated 150 ms/step"
    with pytest.raises(UserError, match="not both"):
        ModelSpec.from_args(_args(model="resnet18", step_ms=10.0))
    with pytest.raises(UserError, match="--tolerance must be a fraction between 0 and 1"):
        ModelSpec.from_args(_args(model="resnet18", tolerance=2.0))
    with pytest.raises(UserError, match="apply to --model only"):
        ModelSpec.from_args(_args(step_ms=10.0, amp=True))


def test_simulated_step_takes_its_time():
    consume, extra = prepare_consumer(ModelSpec(step_ms=20.0), 16, "cpu", TINY)
    t0 = time.perf_counter()
    for _ in range(10):
        consume(None)
    took = time.perf_counter() - t0
    assert 0.2 <= took < 0.3
    assert extra == {"model": "simulated 20 ms/step"}


@pytest.mark.slow
def test_training_steps_on_a_resident_batch_update_the_model():
    import torch

    spec = ModelSpec(name="resnet18", channels_last=True)
    consume, _ = prepare_consumer(spec, 4, "cpu", TINY, num_classes=3)
    loader = model.ResidentBatch(4, TINY, "cpu", num_classes=3)
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (4, 3, 32, 32) and int(labels.max()) < 3
    m = measure(loader, "cpu", warmup_batches=1, window_s=0.05, windows=2, consume=consume)
    assert m.samples_per_s > 0 and m.batches >= 2
    with pytest.raises(ValueError, match="torchvision classification model such as resnet18"):
        model.build_model(ModelSpec(name="not_a_model"))
    assert torch.is_tensor(images)


# ---------------------------------------------------------------------------------------------- memory
def test_model_memory_estimate_grows_with_the_batch():
    r18 = ModelSpec(name="resnet18")
    small, mid, big = (estimate_gpu_mib(r18, b) for b in (16, 64, 256))
    params_mib = 11.7e6 * 4 * 3 / 2**20  # weights, gradients, momentum
    assert params_mib < small < mid < big
    assert big - mid > 2 * (mid - small)  # activations grow linearly with the batch
    assert estimate_gpu_mib(ModelSpec(name="resnet18", amp=True), 256) < big  # bf16 activations
    assert estimate_gpu_mib(ModelSpec(step_ms=100.0), 256) == 0.0
    assert estimate_gpu_mib(None, 256) == 0.0
    # once the ceiling measured the footprint, that is what counts (linear in the batch size)
    measured = ModelSpec(name="resnet18", gpu_mib=((64, 3000.0), (128, 5000.0)))
    assert estimate_gpu_mib(measured, 256) == pytest.approx(9000.0)
    assert estimate_gpu_mib(measured, 96) == pytest.approx(4000.0)


def test_the_tuner_does_not_import_torch_for_the_memory_of_a_fixed_batch_size():
    """With --model and --batch-size the ceiling measures one batch size: the estimate at that size is the
    measurement. Tracing the model for it imported torch and torchvision into the tuner (about 6 s of its budget)."""
    import subprocess
    import sys

    code = ("import sys; from autotune.trials.model import ModelSpec, estimate_gpu_mib; "
            "print(estimate_gpu_mib(ModelSpec(name='resnet18', gpu_mib=((256, 3000.0),)), 256), 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["3000.0", "False"]


def test_model_memory_is_charged_to_the_gpu_budget(tiny_dataset, tmp_path, monkeypatch):
    """A config whose loader fits the GPU budget but whose model does not is predicted-oom, never run."""
    ran = []
    monkeypatch.setattr("autotune.study.tuner.run_trial", lambda *a, **k: ran.append(1) or TrialResult(Outcome.COMPLETE, samples_per_s=1.0))
    spec = ModelSpec(name="resnet18")
    need = estimate_gpu_mib(spec, 64)
    space = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [64]}}})
    settings = TuneSettings(device="cuda", model=spec, budgets=Budgets(gpu_mib=need * 0.8), baselines=False)
    tuner = Tuner(scan(tiny_dataset), space, settings, storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    r = tuner.measure(LoaderConfig.from_params({"backend": "torch", "batch_size": 64}))
    assert r.outcome is Outcome.PREDICTED_OOM and not ran


# --------------------------------------------------------------------------------------------- ceiling
def test_ceiling_of_a_model_that_cannot_be_built_is_a_user_error(tiny_dataset, tmp_path, monkeypatch):
    space = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8, 16]}}})
    settings = TuneSettings(model=ModelSpec(name="resnet_typo"))
    tuner = Tuner(scan(tiny_dataset), space, settings, storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    seen = []

    def fake_run(spec, **kw):
        seen.append((spec.loader.batch_size, spec.model.resident, spec.ranks))
        return TrialResult(Outcome.CRASH, message="ValueError: --model must be a torchvision classification model ...")

    monkeypatch.setattr("autotune.trials.runner.run_trial", fake_run)
    with pytest.raises(UserError, match="could not be trained: ValueError: --model must be"):
        measure_ceiling(tuner)
    assert seen == [(8, True, 1), (16, True, 1)]


def test_ceiling_records_each_batch_size_and_the_measured_memory(tiny_dataset, tmp_path, monkeypatch):
    space = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [64, 128, 256]}}})
    settings = TuneSettings(model=ModelSpec(name="resnet50", amp=True))
    tuner = Tuner(scan(tiny_dataset), space, settings, storage=f"sqlite:///{tmp_path}/s.db", study_name="s")

    def fake_run(spec, **kw):
        b = spec.loader.batch_size
        if b == 256:
            return TrialResult(Outcome.OOM_GPU, message="CUDA out of memory")
        return TrialResult(Outcome.COMPLETE, samples_per_s=10.0 * b, spread=(9.0 * b, 11.0 * b), extra={"model_gpu_mib": 1000.0 + 10 * b})

    monkeypatch.setattr("autotune.trials.runner.run_trial", fake_run)
    c = measure_ceiling(tuner)
    assert c["samples_per_s"] == 1280.0 and c["batch_size"] == 128
    assert c["per_batch_size"]["256"]["outcome"] == "oom-gpu"
    assert tuner.settings.model.gpu_mib == ((64, 1640.0), (128, 2280.0))
    assert selection.ceiling_attrs(c, 64, 320.0) == {"model_ceiling_samples_per_s": 640.0, "fraction_of_ceiling": 0.5}
    assert selection.ceiling_at(c, 256) == 1280.0  # not measured there: the nearest batch size that was


def test_a_model_too_slow_for_a_trial_at_the_smallest_batch_is_one_line(tiny_dataset, tmp_path, monkeypatch):
    """A slow model on a CPU ran its ceiling to the timeout at every batch size (minutes of a one-minute budget), then
    failed every trial with 'raise --trial-timeout'. The smallest batch's timeout now ends the run, with the cause."""
    space = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8, 16, 32]}}})
    settings = TuneSettings(model=ModelSpec(name="resnet18"), trial_timeout=30.0, time_left=lambda: 40.0)
    tuner = Tuner(scan(tiny_dataset), space, settings, storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    given = []

    def slow(spec, timeout_s, **kw):
        given.append(spec.loader.batch_size)
        return TrialResult(Outcome.TIMEOUT, message="no result in time")

    monkeypatch.setattr("autotune.trials.runner.run_trial", slow)
    with pytest.raises(UserError, match=r"'resnet18' is too slow to tune with here: .* on batch 8 resident on cpu, gave no result in 30 s; raise --budget"):
        measure_ceiling(tuner)
    assert given == [8]  # not three trials' time

    def large_too_slow(spec, timeout_s, **kw):  # the smallest completes: the others keep their outcome, the run goes on
        b = spec.loader.batch_size
        return TrialResult(Outcome.COMPLETE, samples_per_s=10.0 * b, spread=(1.0, 1.0)) if b == 8 else TrialResult(Outcome.TIMEOUT, message="no result")

    monkeypatch.setattr("autotune.trials.runner.run_trial", large_too_slow)
    c = measure_ceiling(tuner)
    assert c["batch_size"] == 8 and c["per_batch_size"]["32"]["outcome"] == "timeout"


def test_with_several_ranks_the_ceiling_is_every_rank_s_gpu(tiny_dataset, tmp_path, monkeypatch):
    """Trials with N ranks are scored by their total: the ceiling they are a fraction of is N one-GPU ceilings."""
    space = parse_space({"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [64, 128]}}})
    settings = TuneSettings(model=ModelSpec(name="resnet50", amp=True), ranks=2)
    tuner = Tuner(scan(tiny_dataset), space, settings, storage=f"sqlite:///{tmp_path}/s.db", study_name="s")
    seen = []

    def fake_run(spec, **kw):
        seen.append(spec.ranks)
        return TrialResult(Outcome.COMPLETE, samples_per_s=10.0 * spec.loader.batch_size, spread=(1.0, 1.0))

    monkeypatch.setattr("autotune.trials.runner.run_trial", fake_run)
    c = measure_ceiling(tuner)
    assert seen == [1, 1]  # measured on one GPU
    assert (c["ranks"], c["per_gpu_samples_per_s"], c["samples_per_s"]) == (2, 1280.0, 2560.0)
    # two ranks delivering 2 x 1,240 samples/s: 97 % of the ceiling, not 194 %
    assert selection.ceiling_attrs(c, 128, 2480.0) == {"model_ceiling_samples_per_s": 2560.0, "fraction_of_ceiling": 0.969}


def test_a_study_from_before_the_ceiling_counted_its_ranks_reads_right():
    """A two-rank study whose ceiling holds one GPU's rate and whose trial stored 1.94 of it: the report reads
    the ceiling as both GPUs' and the trial as 0.97 of it."""
    from autotune.report._data import overview, trial_rows

    study = optuna.create_study(direction="maximize")
    study.set_user_attr("ranks", 2)
    ceiling = {"model": "resnet50", "per_batch_size": {"128": {"samples_per_s": 1280.0}}, "samples_per_s": 1280.0, "batch_size": 128}
    study.set_user_attr("model_ceiling", ceiling)
    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 128, "num_workers": 4})
    study.add_trial(
        optuna.trial.create_trial(
            value=2480.0,
            params={},
            distributions={},
            user_attrs={
                "loader": loader.to_params(),
                "config": loader.describe(),
                "outcome": "complete",
                "samples_per_s": 2480.0,
                "fraction_of_ceiling": 1.938,
            },
        )
    )
    assert selection.study_ceiling(study.user_attrs)["samples_per_s"] == 2560.0
    assert trial_rows(study)[0]["fraction_of_ceiling"] == 0.969
    ov = overview(study, "sqlite:///x.db")
    assert (ov["model_ceiling"], ov["model_ceiling_ranks"]) == (2560.0, 2)


# ----------------------------------------------------------------------------------------- enough rule
def _add(study, number_params, value, peak_host, role=None, **extra):
    loader = LoaderConfig.from_params(number_params)
    attrs = {"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "peak_host_mib": peak_host, "samples_per_s": value, **extra}
    if role:
        attrs["role"] = role
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=value, user_attrs=attrs))


def test_enough_rule_prefers_the_cheapest_config_within_tolerance():
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("hardware", {"cpus": 16})
    study.set_user_attr("model_ceiling", {"model": "resnet50 bf16", "per_batch_size": {"128": {"samples_per_s": 3000.0}}})
    _add(study, {"backend": "torch", "batch_size": 128, "num_workers": 0}, 400.0, 900.0, role="defaults")  # 0
    _add(study, {"backend": "torch", "batch_size": 128, "num_workers": 16}, 2990.0, 9000.0, role="heuristic")  # 1
    _add(study, {"backend": "torch", "batch_size": 128, "num_workers": 8}, 2950.0, 5000.0)  # 2
    _add(study, {"backend": "dali", "batch_size": 128, "dali_device": "gpu", "num_threads": 4}, 3100.0, 2500.0)  # 3: lucky once
    _add(study, {"backend": "dali", "batch_size": 128, "dali_device": "gpu", "num_threads": 2}, 2900.0, 2400.0)  # 4: 3.3 % off
    _add(study, {"backend": "dali", "batch_size": 128, "dali_device": "cpu", "num_threads": 4}, 2960.0, 2300.0)  # 5
    # re-measured: trial 3 is really 2980/s
    study.set_user_attr(
        "confirmation",
        {
            "method": "top 3 re-measured",
            "winner_trial": 3,
            "candidates": [
                {"trial": 3, "config": "", "scores": [3100.0, 2980.0, 2970.0], "median": 2980.0},
                {"trial": 1, "config": "", "scores": [2990.0, 2990.0, 2995.0], "median": 2990.0},
                {"trial": 5, "config": "", "scores": [2960.0, 2950.0, 2955.0], "median": 2955.0},
            ],
        },
    )

    sel = choose_enough(study, 0.02)
    # within 2 % of 2990: trials 1 (16 workers), 2 (8), 3 (4 threads, 2500 MiB), 5 (4 threads, 2300 MiB)
    assert sel["fastest_trial"] == 1 and sel["within_tolerance"] == [1, 2, 3, 5]
    assert sel["chosen_trial"] == 5  # fewest threads, then least host memory
    assert sel["headroom"] == {"cpu_workers_saved": 12, "host_mib_saved": 6700.0, "gpu_mib_saved": None, "cpu_threads_left": 12, "model_bound": True}
    assert study.user_attrs["confirmation"]["winner_trial"] == 5

    cfg = config_from_study(study, "sqlite:///x.db")
    assert cfg.loader.to_params()["num_threads"] == 4 and cfg.loader.dali.device == "cpu"
    assert cfg.result["samples_per_s"] == 2955.0
    assert cfg.result["fraction_of_ceiling"] == pytest.approx(0.985)
    assert cfg.result["selection"]["tolerance"] == 0.02 and cfg.result["model"] == "resnet50 bf16"

    s = selection.training_summary(study)
    by = {r["label"]: r for r in s["rows"]}
    assert by["defaults"]["samples_per_s"] == 400.0 and by["best torch"]["trial"] == 1 and by["best DALI"]["trial"] == 3
    assert s["dali_over_torch"] == pytest.approx(2980 / 2990, abs=0.01)
    assert s["reaches_95_percent"] is True

    # no tolerance: the fastest
    assert choose_enough(study, 0.0)["chosen_trial"] == 1
    # a reference outside the space (the torch defaults under --space dali) is never chosen, however cheap
    _add(study, {"backend": "torch", "batch_size": 128, "num_workers": 0}, 2995.0, 800.0, role="defaults", reference=True)  # 6
    assert choose_enough(study, 0.02)["chosen_trial"] == 5
    with pytest.raises(UserError, match="--tolerance"):
        choose_enough(study, 1.5)


# ------------------------------------------------------------------------------------------ end to end
@pytest.mark.slow
def test_slow_model_picks_the_cheapest_loader_within_tolerance(workdir, tmp_path, monkeypatch):
    """A 400 ms step at batch 8, and every sample takes 25 ms to load (a slow disk: time, not CPU), so a batch
    loads in 200 ms plus its decoding, however busy these 2 cores are. One worker loads the next batch while the
    step runs and keeps up as well as two (its decoding may take 8 times its idle time); without workers, loading
    and the step run in turn: at least 600 ms a batch, at most 67 % of the model's ceiling, whatever the machine
    does. The margins are structural: the step is twice a batch's sleeping, and the sleeping alone costs the
    worker-less loader a third of its rate."""
    from autotune.cli import main
    from autotune.dataset.synth import synthesize
    from autotune.tuning import prepare

    images = synthesize(tmp_path / "train", images=96, classes=4, min_side=64, max_side=96, workers=1)  # 12 batches an epoch
    persistent = {"persistent_workers": True, "prefetch_factor": 2}
    monkeypatch.setattr(
        "autotune.study.tuner.baseline_configs",
        lambda space, settings: {
            "defaults": {"backend": "torch", "batch_size": 8, "num_workers": 0},
            "heuristic": {"backend": "torch", "batch_size": 8, "num_workers": 2, **persistent},
            "one-worker": {"backend": "torch", "batch_size": 8, "num_workers": 1, **persistent},
        },
    )
    settings_for = prepare.settings_for
    monkeypatch.setattr(prepare, "settings_for", lambda *a, **k: dataclasses.replace(settings_for(*a, **k), inject=dict.fromkeys(range(3), "sample-sleep:25")))
    (workdir / "space.yaml").write_text("params:\n  backend: {choices: [torch]}\n  batch_size: {choices: [8]}\n  num_workers: {choices: [0, 1, 2]}\n")
    rc = main(
        [
            "run",
            "--dataset",
            str(images),
            "--space",
            "space.yaml",
            "--device",
            "cpu",
            "--n-trials",
            "3",
            "--step-ms",
            "400",
            "--tolerance",
            "0.10",
            "--window",
            "2.0",
            "--windows",
            "2",
            "--warmup-batches",
            "2",
            "--confirm-repeats",
            "0",
            "--no-report",
            "--quiet",
        ]
    )
    assert rc == 0
    cfg = autotune.load_config(workdir / "autotune.yaml")
    sel = cfg.result["selection"]
    study = optuna.load_study(study_name=cfg.study["name"], storage="sqlite:///autotune.db")
    ceiling = study.user_attrs["model_ceiling"]
    assert ceiling["per_batch_size"]["8"]["samples_per_s"] == pytest.approx(8 / 0.400, rel=0.05)
    rates = selection.trial_rates(study)
    workers = {t.number: trial_attrs(t)["loader"]["num_workers"] for t in study.trials}
    floor = max(rates.values()) * 0.90
    within = [n for n in rates if rates[n] >= floor]
    assert sorted(within) == sel["within_tolerance"]
    assert workers[sel["chosen_trial"]] == min(workers[n] for n in within)
    no_workers = next(n for n in rates if workers[n] == 0)
    assert rates[no_workers] < floor  # no workers: loading and the step run in turn, clearly slower
    assert cfg.loader.torch.num_workers == 1  # the cheapest that keeps up, not the 2-worker loader
    assert cfg.result["fraction_of_ceiling"] >= 0.8
    assert all("fraction_of_ceiling" in trial_attrs(t) for t in study.trials)
