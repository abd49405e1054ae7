"""A kind of loader measured far below another is dominated: its sampled configs are told the worst score without a
measurement, so the minute goes to the kind that leads (on the H200, DALI's GPU decode ran 6x the best torch
config), and a trial built ahead is one worth measuring."""

from __future__ import annotations

from typing import Any

import optuna
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import DOMINANCE, MeasuredTrials, dominated, trial_attrs
from autotune.study.result import search_account
from autotune.study.settings import TuneSettings
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner

TORCH = {"backend": "torch", "batch_size": 8, "num_workers": 2}
GPU = {"backend": "dali", "batch_size": 8, "dali_device": "gpu", "num_threads": 4, "prefetch_queue_depth": 2, "hw_decoder_load": 1.0}
CPU = {"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2}


def _trial(params: dict[str, Any], rate: float, role: str | None = None, pruned: bool = False) -> optuna.trial.FrozenTrial:
    loader = LoaderConfig.from_params(params)
    attrs: dict[str, Any] = {"config": loader.describe(), "loader": loader.to_params(), "result": {"outcome": "pruned" if pruned else "complete"}}
    if role:
        attrs["role"] = role
    state = optuna.trial.TrialState.PRUNED if pruned else optuna.trial.TrialState.COMPLETE
    return optuna.trial.create_trial(state=state, value=None if pruned else rate, intermediate_values={0: rate}, user_attrs=attrs)


def _study(*trials: optuna.trial.FrozenTrial) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for t in trials:
        study.add_trial(t)
    return study


def _loader(params: dict[str, Any], **kw: Any) -> LoaderConfig:
    return LoaderConfig.from_params({**params, **kw})


def test_a_kind_far_below_the_leader_is_dominated_and_the_leader_never_is() -> None:
    study = _study(_trial(GPU, 24_000, "dali-mixed"), _trial(TORCH, 3_500, "heuristic"), _trial({**TORCH, "num_workers": 0}, 300, "defaults"))
    why = dominated(study, _loader(TORCH, num_workers=7), number=99)
    assert why is not None and why.startswith("torch is dominated") and "24,000" in why and "3,500" in why
    assert dominated(study, _loader(GPU, num_threads=8), number=99) is None
    # a kind no trial measured yet is measured: nothing is known of it
    assert dominated(study, _loader(CPU), number=99) is None


def test_within_the_margin_nothing_is_dominated() -> None:
    # the 2-core CPU: DALI's CPU decode about 1.6x torch's best; one reading's noise could be much of that
    study = _study(_trial(CPU, 950, "dali-heuristic"), _trial(TORCH, 950 / DOMINANCE * 1.01, "heuristic"))
    assert dominated(study, _loader(TORCH, num_workers=1), number=99) is None


def test_a_kind_without_a_starting_point_is_judged_only_after_two_configs() -> None:
    gpu, cpu1 = _trial(GPU, 24_000, "dali-mixed"), _trial(CPU, 1_900, pruned=True)  # a pruned trial's windows count as its level
    assert dominated(_study(gpu, cpu1), _loader(CPU, num_threads=16), number=99) is None
    cpu2 = _trial({**CPU, "num_threads": 5}, 2_400)
    assert dominated(_study(gpu, cpu1, cpu2), _loader(CPU, num_threads=16), number=99) is not None


def test_one_cpu_decoding_config_is_enough_when_even_all_the_cores_could_not_close_the_gap() -> None:
    """The H200's runs measured two DALI CPU configs (of 5 s and 6 s) before leaving a kind 5x behind DALI's GPU decode:
    one config's rate, grown in proportion to the cores over its decoding threads, bounds what the kind can do."""
    gpu, cpu = _trial(GPU, 26_769, "dali-mixed"), _trial(CPU, 1_008)  # 2 threads: at most 8,064 on 16 cores
    why = dominated(_study(gpu, cpu), _loader(CPU, num_threads=16), number=99, cores=16)
    assert why is not None and "one measured config read 1,008" in why and "at most 8,064 with all 16 cores" in why
    assert dominated(_study(gpu, cpu), _loader(CPU, num_threads=16), number=99) is None  # no cores given: two configs, as before
    # 32 cores could bring 2 threads' 1,008 to 16,128: within reach, so measured again
    assert dominated(_study(gpu, cpu), _loader(CPU, num_threads=16), number=99, cores=32) is None
    # more threads than cores are no bound below the rate read (9,000 at 64 threads is not 2,250 at 16)
    many = _trial({**CPU, "num_threads": 64}, 9_000)
    assert dominated(_study(gpu, many), _loader(CPU), number=99, cores=16) is None
    # a kind decoding on the GPU is not bounded by its threads: one config of it is no level
    hw = _trial(GPU, 1_000)
    assert dominated(_study(_trial(CPU, 26_769, "dali-heuristic"), hw), _loader(GPU), number=99, cores=16) is None


def test_the_trial_itself_and_told_trials_are_no_evidence() -> None:
    told = _trial(GPU, 24_000)
    told.user_attrs["result"] = {"outcome": Outcome.DOMINATED.value}
    study = _study(told, _trial(TORCH, 3_500, "heuristic"))
    assert dominated(study, _loader(TORCH, num_workers=7), number=99) is None
    study = _study(_trial(GPU, 24_000, "dali-mixed"), _trial(TORCH, 3_500, "heuristic"))
    assert dominated(study, _loader(TORCH), number=1) is None  # trial 1 is the torch start: the only torch evidence


def test_dominated_trials_are_not_counted_as_measured() -> None:
    study = _study()
    counter = MeasuredTrials(n=2, max_repeats=10)
    t = _trial(TORCH, 0.0)
    t.user_attrs["result"] = {"outcome": Outcome.DOMINATED.value}
    counter(study, t)
    assert counter.left == 2 and counter.repeats_left == 10 and counter.in_a_row == 1  # no repeat spent; a told one in a row


def test_a_config_the_search_cannot_pick_or_a_memory_failure_leads_nothing() -> None:
    # the torch defaults queued outside a DALI-only space, and a DALI config stopped over a memory budget
    reference = _trial(TORCH, 30_000, "defaults")
    reference.user_attrs["outside_space"] = True
    over = _trial({**GPU, "num_threads": 16}, 90_000, pruned=True)
    over.user_attrs["result"] = {"outcome": Outcome.OOM_HOST.value}
    study = _study(reference, over, _trial(GPU, 9_000, "dali-mixed"), _trial(CPU, 2_000, "dali-heuristic"))
    assert dominated(study, _loader(GPU, num_threads=8), number=99) is None
    assert dominated(study, _loader(CPU, num_threads=4), number=99) is not None  # 9,000 against 2,000: DALI's GPU leads


# ------------------------------------------------------------------------------------------- in the search
SPACE = {"backend": {"choices": ["torch", "dali"]}, "batch_size": {"choices": [8, 16]},
         "num_workers": {"int": [0, 2], "when": {"backend": "torch"}},
         "dali_device": {"choices": ["cpu"], "when": {"backend": "dali"}},
         "num_threads": {"int": [1, 2], "when": {"backend": "dali"}},
         "prefetch_queue_depth": {"choices": [1, 2, 3, 4], "when": {"backend": "dali"}}}


@pytest.mark.slow
@pytest.mark.parametrize("ahead", [False, True], ids=["measured-in-turn", "built-ahead"])
def test_the_search_measures_no_config_of_a_dominated_kind(tiny_dataset, tmp_path, monkeypatch, ahead) -> None:
    pytest.importorskip("nvidia.dali")
    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())

    def torch_dominated(study: optuna.Study, loader: LoaderConfig, number: int, cores: int | None = None) -> str | None:  # as if DALI ran 6x torch
        measured = [t for t in study.get_trials(deepcopy=False) if str(trial_attrs(t).get("config", "")).startswith("torch") and t.state.is_finished()]
        return "torch is dominated: test" if loader.backend.value == "torch" and measured else None

    monkeypatch.setattr("autotune.study.evidence.dominated", torch_dominated)
    settings = TuneSettings(cache="none", cores=2, window_s=0.2, windows=2, warmup_batches=1, pruner="none", baselines=False, confirm_top=2,
                            confirm_repeats=1, sampler="random", seed=3, pipeline="imagenet-eval", fork_trials=False, build_ahead=ahead,
                            n_trials=5, log_dir=str(tmp_path / "logs"))
    tuner = Tuner(scan(tiny_dataset), parse_space({"params": SPACE}, cores=2), settings, storage="memory", study_name="dominated")
    tuner._enqueue({"backend": "torch", "batch_size": 8, "num_workers": 1}, "heuristic")  # the torch start: measured, as every start
    try:
        tuner.optimize()
    finally:
        tuner.close()
    trials = tuner.study.trials
    outcomes = [(trial_attrs(t).get("config", "").split(" ")[0], trial_attrs(t).get("outcome")) for t in trials]
    assert outcomes[0] == ("torch", "complete")
    told = [t for t in trials[1:] if trial_attrs(t).get("outcome") == Outcome.DOMINATED.value]
    assert told, f"seed 3 samples torch configs: {outcomes}"
    assert all(t.state == optuna.trial.TrialState.PRUNED and "duration_s" not in trial_attrs(t) for t in told)  # told, never run
    assert {k for k, o in outcomes[1:] if o == "complete"} == {"dali-cpu"}, outcomes
    assert sum(1 for _, o in outcomes if o == "complete") >= 3, outcomes
    assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.FAIL)]
    best = max((t for t in trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value or 0)
    assert search_account(tuner.study, best)["configs_measured"] == sum(1 for _, o in outcomes if o == "complete")
    if ahead:
        built = [t.number for t in trials if trial_attrs(t).get("built_ahead_s")]
        # asked for while a DALI trial measured, the dominated ones were told at once and the next one built
        assert any(n - 1 in {t.number for t in told} for n in built), (built, outcomes)


@pytest.mark.slow
def test_a_repeat_asked_for_ahead_is_told_and_the_next_config_built(tiny_dataset, tmp_path, monkeypatch) -> None:
    """On the H200 a trial asked for ahead that repeated a measured config was kept for its own objective, and the
    trial after it was then measured without being built ahead (its pipeline's 1.7 s build in its own time)."""
    pytest.importorskip("nvidia.dali")
    monkeypatch.setattr("autotune.study.tuner.open_storage", lambda url: optuna.storages.InMemoryStorage())
    space = {"backend": {"choices": ["dali"]}, "batch_size": {"choices": [8]}, "dali_device": {"choices": ["cpu"]},
             "num_threads": {"int": [1, 2]}, "prefetch_queue_depth": {"choices": [1, 2]}}
    settings = TuneSettings(cache="none", cores=2, window_s=0.2, windows=2, warmup_batches=1, pruner="none", baselines=False, confirm_top=0,
                            sampler="random", seed=4, pipeline="imagenet-eval", fork_trials=False, build_ahead=True, n_trials=4,
                            log_dir=str(tmp_path / "logs"))
    tuner = Tuner(scan(tiny_dataset), parse_space({"params": space}, cores=2), settings, storage="memory", study_name="repeats")
    cpu = {**CPU, "num_threads": 1, "prefetch_queue_depth": 1}
    measured, current, new = (_loader(cpu, num_threads=t, prefetch_queue_depth=q) for t, q in ((1, 1), (2, 1), (2, 2)))
    tuner.study.add_trial(_trial(measured.to_params(), 900))  # trial 0: measured
    asked = iter([measured, new])  # asked for ahead while `current` builds: a repeat of trial 0, then a new config
    monkeypatch.setattr(tuner, "_loader_of", lambda trial: next(asked))
    tuner._searching = True
    try:
        assert tuner._build_next(current, str(tmp_path / "built"))
        assert tuner._warm is not None and (held := tuner._warm.holds()) is not None and held.loader == new
    finally:
        tuner._searching = False
        tuner._unasked()
        tuner.close()
    outcomes = [trial_attrs(t).get("outcome") for t in tuner.study.trials]
    assert outcomes[:2] == ["complete", Outcome.REPEAT.value], outcomes  # told as it was asked for, the next one built


def _crashed(config: dict[str, Any], message: str = "IndexError: corrupt sample 7 at ds.py:3", outcome: str = "crash") -> optuna.trial.FrozenTrial:
    loader = LoaderConfig.from_params(config)
    return optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={
        "config": loader.describe(), "loader": loader.to_params(), "result": {"outcome": outcome, "message": message}})


def test_trials_failing_alike_over_several_configs_end_the_search_once_no_start_is_queued() -> None:
    from autotune.study.evidence import failing_alike, stop_failing_alike

    a, b = TORCH, {**TORCH, "num_workers": 0}
    assert failing_alike(_study(_crashed(a), _crashed(b), _crashed(a))) == "IndexError: corrupt sample 7 at ds.py:3"
    assert failing_alike(_study(_crashed(a), _crashed(b))) is None  # too few
    assert failing_alike(_study(_crashed(a), _crashed(a), _crashed(a))) is None  # one config: that config's fault
    assert failing_alike(_study(_crashed(a), _crashed(b, "OSError: x"), _crashed(a))) is None  # not alike
    assert failing_alike(_study(_crashed(a, outcome="shm"), _crashed(b, outcome="shm"), _crashed(a, outcome="shm"))) is None  # a budget's
    assert failing_alike(_study(_trial(GPU, 24_000), _crashed(a), _crashed(b), _crashed(a))) is None  # one completed: knobs matter
    stopped: list[bool] = []
    study = _study(_crashed(a), _crashed(b), _crashed(a))
    study.stop = lambda: stopped.append(True)  # type: ignore[method-assign]  # outside optimize, Optuna's stop refuses
    study.enqueue_trial({"backend": "torch"}, user_attrs={"role": "defaults"})
    stop_failing_alike(study, study.trials[-1])
    assert not stopped  # the torch defaults are still to run: the config most likely to, where a GPU briefly failed
    study2 = _study(_crashed(a), _crashed(b), _crashed(a))
    study2.stop = lambda: stopped.append(True)  # type: ignore[method-assign]  # a stop outside optimize, counted
    stop_failing_alike(study2, study2.trials[-1])
    assert stopped == [True]


def test_a_start_method_that_only_starts_workers_later_is_not_measured_once_the_default_completed() -> None:
    """On 16 cores, a user's Dataset's spawn and forkserver trials took 13-30 s each (every worker imports the user's
    module) and most were cut by the time budget; fork's workers load alike once started."""
    from autotune.loaders.backends._user import default_start_method
    from autotune.study.evidence import LATER_START, later_start

    if default_start_method() != "fork":
        pytest.skip("workers start by fork here only where it is the interpreter's default")
    soon, late = "fork", "spawn"
    user = {"backend": "user", "batch_size": 8, "num_workers": 2, "pin_memory": False, "persistent_workers": True, "multiprocessing_context": soon}
    none = {"backend": "user", "batch_size": 8, "num_workers": 0, "pin_memory": False}
    study = _study(_trial(user, 600, "heuristic"), _trial(none, 300, "defaults"))
    why = later_start(study, _loader(user, num_workers=1, multiprocessing_context=late), number=99)
    assert why is not None and LATER_START in why and f"multiprocessing_context={late}" in why and "trial 0" in why
    assert later_start(study, _loader(user, num_workers=1), number=99) is None  # the start that completed: measured
    assert later_start(study, _loader(none), number=99) is None  # no workers, no start method
    # before a worker config of the default start completed (only the defaults, no workers), every start is measured
    assert later_start(_study(_trial(none, 300, "defaults")), _loader(user, multiprocessing_context=late), number=99) is None
    # nor is a DALI or torch config touched: their backends start nothing that way
    assert later_start(study, _loader(GPU), number=99) is None and later_start(study, _loader(TORCH), number=99) is None
    # a fork config the search cannot pick (a warm start outside a space narrowed to spawn and forkserver) is no proof
    outside = _trial(user, 600, "warm-start")
    outside.user_attrs["outside_space"] = True
    assert later_start(_study(outside), _loader(user, multiprocessing_context=late), number=99) is None


def test_a_later_start_and_a_dominated_kind_are_pruned_at_the_worst_so_the_sampler_leaves_them() -> None:
    """Failed instead (the sampler ignores failed trials), later starts were proposed again and again: the search
    stopped after 20 in a row with 3-5 configs measured, where the worst score let a 60 s run measure 12-14."""
    from autotune.study.evidence import LATER_START, tell_dominated

    study = optuna.create_study(direction="maximize")
    later, kind = study.ask(), study.ask()
    tell_dominated(later, f"multiprocessing_context=spawn {LATER_START} than multiprocessing_context=fork")
    tell_dominated(kind, "torch is dominated")
    for t in (later, kind):
        study.tell(t, state=optuna.trial.TrialState.PRUNED)
    told = study.trials
    assert [trial_attrs(t)["outcome"] for t in told] == [Outcome.DOMINATED.value] * 2
    assert [t.intermediate_values for t in told] == [{0: 0.0}] * 2
