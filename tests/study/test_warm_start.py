from __future__ import annotations

import warnings

import optuna
import pytest

from autotune.config import fingerprint
from autotune.config.files import save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.dataset.scan import scan
from autotune.errors import UserError
from autotune.study.evidence import trial_attrs
from autotune.study.fleet import previous_best
from autotune.study.space import load_space
from autotune.study.tuner import Tuner, TuneSettings

OLD = {"backend": "torch", "batch_size": 32, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": True}


def _old_yaml(path) -> str:
    # tuned elsewhere: another GPU, more cores
    hw = {**fingerprint.collect(), "gpu": "Some Old GPU", "cpus": 64}
    save_config(Config(loader=LoaderConfig.from_params(OLD), hardware=hw, dataset={"path": "/elsewhere"}), path)
    return str(path)


def test_warm_start_enqueues_the_old_winner_first_then_neighbours(workdir, tiny_dataset):
    space = load_space("cpu", cores=2)
    tuner = Tuner(scan(tiny_dataset), space, TuneSettings(cores=2), storage="sqlite:///w.db", study_name="w")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the old machine differs: no warning, re-tuning is the point
        params = previous_best(_old_yaml(workdir / "old.yaml"))
    tuner.enqueue_warm_start(params)
    tuner.enqueue_baselines()
    waiting = tuner.study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    roles = [trial_attrs(t)["role"] for t in waiting]
    assert roles[0] == "warm-start"
    assert trial_attrs(waiting[0])["loader_params"] == LoaderConfig.from_params(OLD).to_params()
    assert roles[1:] == ["warm-start-neighbour"] * (len(roles) - 4) + ["dali-heuristic", "heuristic", "defaults"]
    neighbours = [trial_attrs(t)["loader_params"] for t in waiting[1:-3]]
    assert neighbours and all(n != trial_attrs(waiting[0])["loader_params"] for n in neighbours)


def test_a_dali_warm_start_measures_a_torch_dataloader_second(workdir, tiny_dataset):
    """The re-tuned YAML keeps a torch_fallback (cfg.dataloader_kwargs()) even when the budget ends early."""
    space = load_space("cpu", cores=2)
    tuner = Tuner(scan(tiny_dataset), space, TuneSettings(cores=2), storage="sqlite:///w.db", study_name="w")
    tuner.enqueue_warm_start({"backend": "dali", "batch_size": 32, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2})
    tuner.enqueue_baselines()
    roles = [trial_attrs(t)["role"] for t in tuner.study.get_trials(states=(optuna.trial.TrialState.WAITING,))]
    assert roles[:2] == ["warm-start", "heuristic"] and roles.count("heuristic") == 1
    assert roles[-2:] == ["dali-heuristic", "defaults"]


@pytest.mark.slow
def test_run_warm_start_measures_the_old_winner_first(workdir, tiny_dataset):
    from autotune.cli import main

    old = _old_yaml(workdir / "old.yaml")
    rc = main([
        "run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "1", "--batch-size", "4", "--warm-start", old,
        "--window", "0.2", "--windows", "2", "--confirm-top", "0", "--quiet", "--no-report", "--study-name", "ws",
    ])
    assert rc == 0
    study = optuna.load_study(study_name="ws", storage="sqlite:///autotune.db")
    first = min(study.trials, key=lambda t: t.number)
    assert trial_attrs(first)["role"] == "warm-start"
    assert trial_attrs(first)["loader"] == {**LoaderConfig.from_params(OLD).to_params(), "batch_size": 4}
    assert first.state == optuna.trial.TrialState.COMPLETE


def test_warm_start_from_a_study(workdir, tiny_dataset):
    storage = "sqlite:///prev.db"
    study = optuna.create_study(storage=storage, study_name="prev", direction="maximize")
    study.add_trial(optuna.trial.create_trial(value=10.0, user_attrs={"loader": OLD}))
    assert previous_best("study:prev", storage) == LoaderConfig.from_params(OLD).to_params()
    with pytest.raises(UserError, match="no study named"):
        previous_best("study:nope", storage)
    with pytest.raises(UserError, match="needs --storage"):
        previous_best("study:prev", None)


@pytest.mark.slow
def test_a_baseline_the_warm_start_measured_is_not_measured_again(workdir, tiny_dataset, monkeypatch):
    """A re-tune's warm start that was DALI's usual start: its dali-heuristic trial states that result, unmeasured."""
    from autotune.outcomes import Outcome
    from autotune.study.result import baseline_rates
    from autotune.study.tuner import baseline_configs
    from autotune.trials.spec import TrialResult

    space = load_space("cpu", cores=2)
    settings = TuneSettings(cores=2, n_trials=4, confirm_top=0)
    measured = []

    def fake_measure(self, loader, number=None, on_intermediate=None, log=None, timeout_s=None):
        measured.append(loader.describe())
        return TrialResult(Outcome.COMPLETE, samples_per_s=100.0 + len(measured), spread=(90.0, 110.0), windows=[100.0], duration_s=0.1)

    monkeypatch.setattr(Tuner, "measure", fake_measure)
    tuner = Tuner(scan(tiny_dataset), space, settings, storage="sqlite:///w.db", study_name="w")
    usual = baseline_configs(space, settings)["dali-heuristic"]
    tuner.enqueue_warm_start(usual, n_neighbours=0)
    tuner.enqueue_baselines()
    tuner.optimize()
    assert measured.count(LoaderConfig.from_params(usual).describe()) == 1 and len(measured) == len(set(measured))  # DALI's usual once
    by_role = {trial_attrs(t)["role"]: t for t in tuner.study.trials}
    assert trial_attrs(by_role["dali-heuristic"])["outcome"] == "repeat" and trial_attrs(by_role["dali-heuristic"])["repeat_of"] == by_role["warm-start"].number
    assert baseline_rates(tuner.study)["dali-heuristic"] == by_role["warm-start"].value


def test_a_queued_config_that_leaves_knobs_open_measures_what_its_params_say(workdir, tiny_dataset, monkeypatch):
    """A torch winner fitted into a DALI config names no DALI knob: the sampler drew num_threads and the queue, while
    the measurement used DALI's defaults, so the study held params that never ran and the sampler learnt from them."""
    from autotune.outcomes import Outcome
    from autotune.trials.spec import TrialResult

    space = load_space("cpu", cores=2)
    measured = []

    def fake_measure(self, loader, number=None, on_intermediate=None, log=None, timeout_s=None):
        measured.append(loader.to_params())
        return TrialResult(Outcome.COMPLETE, samples_per_s=100.0, spread=(90.0, 110.0), windows=[100.0], duration_s=0.1)

    monkeypatch.setattr(Tuner, "measure", fake_measure)
    tuner = Tuner(scan(tiny_dataset), space, TuneSettings(cores=2, n_trials=3, confirm_top=0, baselines=False), storage="sqlite:///w.db",
                  study_name="w")
    for seed_params in ({"backend": "dali", "batch_size": 32, "num_workers": 2, "prefetch_factor": 4},
                        {"backend": "torch", "batch_size": 16, "num_threads": 2}):
        tuner._enqueue(seed_params, "warm-start")
    tuner.optimize()
    done = [t for t in tuner.study.trials if trial_attrs(t).get("role") == "warm-start"]
    assert len(done) == 2
    for t in done:
        ran = trial_attrs(t)["loader"]
        assert ran in measured
        assert {k: v for k, v in t.params.items()} == {k: ran[k] for k in t.params}  # every param the sampler holds was measured


def _dali_yaml(path, fallback: bool) -> str:
    hw = fingerprint.collect()
    kw = {"torch_fallback": {"batch_size": 32, "torch": {"num_workers": 2, "pin_memory": False}, "samples_per_s": 90.0, "trial": 3}} if fallback else {}
    save_config(Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 32, "dali_device": "cpu", "num_threads": 2,
                                                        "prefetch_queue_depth": 2}), hardware=hw, dataset={"path": "/elsewhere"}, **kw), path)
    return str(path)


def test_a_winner_of_a_backend_the_space_lacks_gives_way_to_its_torch_fallback(workdir, caplog):
    """A DALI YAML into --space torch became the torch defaults (workers=0) with sampled params that never ran."""
    with_fallback = _dali_yaml(workdir / "f.yaml", fallback=True)
    assert previous_best(with_fallback, backends=("torch",))["num_workers"] == 2  # its best DataLoader
    assert previous_best(with_fallback, backends=("torch", "dali"))["backend"] == "dali"  # in the space: the winner
    bare = _dali_yaml(workdir / "b.yaml", fallback=False)
    with caplog.at_level("WARNING"):
        assert previous_best(bare, backends=("torch",)) is None
    assert "which the space does not tune (backends: torch); the search starts from the baselines" in caplog.text
