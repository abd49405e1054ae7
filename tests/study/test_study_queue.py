"""What the study queues and measures: each sampled config once, the baselines until they are measured."""

from __future__ import annotations

import socket

import optuna
import pytest

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.study.result import config_from_study, no_completion_message
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.spec import TrialResult

#: 2 x 3 = 6 configs: with 12 trials asked for, the sampler certainly proposes some again
SMALL = {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8, 16]}, "num_workers": {"int": [0, 2]}}}


def _tuner(dataset, tmp_path, space=SMALL, name="q", resume=False, **kw) -> Tuner:
    settings = TuneSettings(**{"baselines": False, "confirm_top": 0, "cache": "none", "seed": 0, **kw})
    return Tuner(scan(dataset), parse_space(space, cores=2), settings, storage=f"sqlite:///{tmp_path}/q.db", study_name=name, resume=resume)


def _rate(loader: LoaderConfig) -> float:
    return 100.0 + 10 * loader.torch.num_workers + loader.batch_size


def _measured(tuner: Tuner) -> list[optuna.trial.FrozenTrial]:
    return [t for t in tuner.study.get_trials(deepcopy=False) if trial_attrs(t).get("outcome") not in (None, Outcome.REPEAT.value)]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
@pytest.mark.slow
def test_no_sampled_config_is_measured_twice(tiny_dataset, tmp_path, monkeypatch, sampler):
    tuner = _tuner(tiny_dataset, tmp_path, name=f"q-{sampler}", n_trials=12, sampler=sampler)
    calls: list[dict] = []

    def fake(loader, number=None, on_intermediate=None):
        calls.append(loader.to_params())
        return TrialResult(Outcome.COMPLETE, samples_per_s=_rate(loader))

    monkeypatch.setattr(tuner, "measure", fake)
    shown = []
    tuner.optimize(callbacks=[lambda study, trial: shown.append(trial.number)])
    keys = [tuple(sorted(c.items())) for c in calls]
    assert len(keys) == len(set(keys)), f"{sampler}: a config was measured twice: {keys}"
    measured = _measured(tuner)
    assert len({tuple(sorted(trial_attrs(t)["loader"].items())) for t in measured}) == len(measured) == len(calls)
    repeats = [t for t in tuner.study.trials if trial_attrs(t).get("outcome") == Outcome.REPEAT.value]
    assert repeats, "a 6-config space asked for 12 trials proposes some config again"
    for t in repeats:  # told the earlier result, not measured
        earlier = tuner.study.trials[trial_attrs(t)["repeat_of"]]
        assert trial_attrs(t)["loader"] == trial_attrs(earlier)["loader"] and t.value == earlier.value
    assert sorted(shown) == sorted(t.number for t in measured)  # progress counts measured trials only
    assert len(measured) <= 6
    cfg = config_from_study(tuner.study, tuner.storage_url)
    assert cfg.study["repeats"] == len(repeats) and "repeat" not in cfg.study["failed"]


@pytest.mark.slow
def test_a_repeat_of_a_pruned_config_is_pruned_again_without_measuring(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner(tiny_dataset, tmp_path, n_trials=10)
    calls = []

    def fake(loader, number=None, on_intermediate=None):
        calls.append(loader.to_params())
        if loader.batch_size == 16:
            return TrialResult(Outcome.OOM_HOST, message="over the host memory budget", peak_host_mib=9000.0)
        return TrialResult(Outcome.COMPLETE, samples_per_s=_rate(loader))

    monkeypatch.setattr(tuner, "measure", fake)
    tuner.optimize()
    keys = [tuple(sorted(c.items())) for c in calls]
    assert len(keys) == len(set(keys))
    pruned_again = [t for t in tuner.study.trials if trial_attrs(t).get("outcome") == Outcome.REPEAT.value and trial_attrs(t)["loader"]["batch_size"] == 16]
    assert pruned_again, "the sampler proposed an over-budget config again"
    assert all(t.state == optuna.trial.TrialState.PRUNED and t.system_attrs.get("constraints:memory", 0) > 0 for t in pruned_again)


@pytest.mark.slow
def test_a_baseline_that_hit_a_bad_file_is_measured_again_without_it(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner(tiny_dataset, tmp_path, n_trials=4, baselines=True)
    bad = tuner.dataset.files[0]
    seen = []

    def fake(loader, number=None, on_intermediate=None):
        seen.append(number)
        if bad in tuner.dataset.files and loader.torch.num_workers == 0:
            return TrialResult(Outcome.BAD_DATA, message=f"{bad} cannot be decoded", bad_file=bad)
        return TrialResult(Outcome.COMPLETE, samples_per_s=_rate(loader))

    monkeypatch.setattr(tuner, "measure", fake)
    tuner.optimize()
    defaults = [t for t in tuner.study.trials if trial_attrs(t).get("role") == "defaults"]
    assert [trial_attrs(t)["outcome"] for t in defaults] == ["bad-data", "complete"]
    r = config_from_study(tuner.study, tuner.storage_url).result
    assert r["defaults_samples_per_s"] == _rate(LoaderConfig.from_params(trial_attrs(defaults[1])["loader"]))
    assert r["speedup_vs_defaults"] is not None


@pytest.mark.parametrize("how", ["interrupt", "sigkill"])
@pytest.mark.slow
def test_a_baseline_killed_mid_run_is_queued_again_on_resume(tiny_dataset, tmp_path, monkeypatch, how):
    tuner = _tuner(tiny_dataset, tmp_path, name="k", n_trials=4, baselines=True)
    if how == "interrupt":  # Ctrl-C during the first baseline: Optuna records the trial as failed

        def killed(loader, number=None, on_intermediate=None):
            raise KeyboardInterrupt

        monkeypatch.setattr(tuner, "measure", killed)
        with pytest.raises(KeyboardInterrupt):
            tuner.optimize()
    else:  # the process was killed: the trial stays RUNNING, owned by a process that is gone
        tuner.enqueue_baselines()
        trial = tuner.study.ask()
        trial.set_user_attr("owner", f"{socket.gethostname()}:{2**22 + 12345}")
    first = tuner.study.trials[0]
    killed = trial_attrs(first)["role"]
    assert killed in ("dali-heuristic", "heuristic") and first.state != optuna.trial.TrialState.COMPLETE  # the likeliest winner first

    again = _tuner(tiny_dataset, tmp_path, name="k", resume=True, n_trials=4, baselines=True)
    assert again.study.trials[0].state == optuna.trial.TrialState.FAIL
    monkeypatch.setattr(again, "measure", lambda loader, number=None, on_intermediate=None: TrialResult(Outcome.COMPLETE, samples_per_s=_rate(loader)))
    again.optimize()
    roles = [(trial_attrs(t).get("role"), trial_attrs(t).get("outcome")) for t in again.study.trials]
    assert roles.count((killed, "complete")) == 1  # the killed baseline, measured once on resume
    assert roles.count(("defaults", "complete")) == 1 and roles.count(("heuristic", "complete")) == 1
    assert config_from_study(again.study, again.storage_url).result["speedup_vs_defaults"] is not None


def _failed_study(outcomes: list[tuple[str, str | None]]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for outcome, bad in outcomes:
        attrs = {"outcome": outcome, "message": "x"}
        if bad:
            attrs["bad_file"] = bad
        state = optuna.trial.TrialState.FAIL if outcome in ("bad-data", "crash") else optuna.trial.TrialState.PRUNED
        study.add_trial(optuna.trial.create_trial(state=state, user_attrs=attrs))
    return study


def test_the_final_error_names_the_dominant_cause():
    memory = no_completion_message(_failed_study([("oom-host", None)] * 5 + [("predicted-oom", None)] * 2 + [("bad-data", "/d/cat/truncated.jpg")]))
    assert "7 of 8 went over the memory budget" in memory and "--host-budget" in memory
    assert "truncated.jpg" not in memory and "remove" not in memory
    bad = no_completion_message(_failed_study([("bad-data", "/d/cat/truncated.jpg")] * 3 + [("oom-host", None)]))
    assert "truncated.jpg" in bad and "remove it" in bad
    two = no_completion_message(_failed_study([("bad-data", "/d/cat/truncated.jpg"), ("bad-data", "/d/dog/corrupt.jpg")]))
    assert "2 files cannot be decoded" in two and "truncated.jpg" in two and "corrupt.jpg" in two
    slow = no_completion_message(_failed_study([("timeout", None)] * 2 + [("crash", None)]))
    assert "--trial-timeout" in slow
    shm = no_completion_message(_failed_study([("shm", None)] * 3))
    assert "--shm-budget" in shm


def test_the_final_error_fits_the_users_own_pipeline():
    """Trials of the user's Dataset that ran out of time were told to tune smaller batch sizes (the batch size is the
    user's), and a limit the --budget set was told as --trial-timeout alone; samples torch cannot batch got 'fix that'."""
    study = _failed_study([("timeout", None)] * 3)
    assert no_completion_message(study).endswith("3 of 3 ran past the time a trial may take (--trial-timeout; under --budget, at most half "
                                                 "the budget): raise it, or tune a space with smaller batch sizes")
    study.set_user_attr("dataset", {"path": "/p/pipe.py:make", "function": {"name": "pipe:make"}})
    said = no_completion_message(study)
    assert said.endswith(": look for a hang in your pipeline's code, or raise --trial-timeout and --budget") and "batch sizes" not in said
    pil = "TypeError: default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found <class 'PIL.Image.Image'>"
    study = optuna.create_study(direction="maximize")
    for _ in range(3):
        study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"outcome": "crash", "message": pil}))
    said = no_completion_message(study)
    assert f"so the cause is no loader knob: {pil}; return tensors from your Dataset (torchvision.transforms.v2.ToImage" in said
    assert "or pass a collate_fn in autotune.DatasetSpec, then run again" in said and "fix that" not in said


@pytest.mark.slow
def test_repeats_are_shown_as_not_measured(tiny_dataset, tmp_path, monkeypatch):
    from autotune.report import trial_rows
    from autotune.report._data import outcome_table

    tuner = _tuner(tiny_dataset, tmp_path, n_trials=8, sampler="random")
    monkeypatch.setattr(tuner, "measure", lambda loader, number=None, on_intermediate=None: TrialResult(Outcome.COMPLETE, samples_per_s=_rate(loader)))
    tuner.optimize()
    rows = trial_rows(tuner.study)
    repeats = [r for r in rows if r["outcome"] == "repeat"]
    assert repeats and all(r["samples_per_s"] is None and r["repeat_of"] is not None for r in repeats)
    assert "repeat" not in {g["outcome"] for g in outcome_table(rows)}  # not a failure


@pytest.mark.parametrize("storage", ["sqlite:///{}/c.db", "journal:{}/c.log"], ids=["sqlite", "journal"])
def test_issue_42_item_6_a_config_another_live_process_measures_is_taken(tiny_dataset, tmp_path, monkeypatch, storage):
    """Issue 42, item 6: two to four ``run --resume`` processes on one study measured one config at the same time.
    A config RUNNING in another live process counts as taken: the later trial is not measured, says which trial
    measures it, and is never a contender."""
    import os

    from autotune.study.result import winner

    one = {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [2, 2]}}}

    def tuner(resume: bool) -> Tuner:
        settings = TuneSettings(baselines=False, confirm_top=0, cache="none", seed=0, n_trials=1, pruner="none")
        return Tuner(scan(tiny_dataset), parse_space(one, cores=2), settings, storage=storage.format(tmp_path), study_name="c", resume=resume)

    first, second = tuner(False), tuner(True)
    first._owner = f"{socket.gethostname()}:{os.getppid()}"  # another live process: the one that started the tests
    measured: list[str] = []
    seen: list[list[tuple[str, optuna.trial.TrialState]]] = []

    def first_measures(loader, number=None, on_intermediate=None, **kw):
        measured.append(f"first #{number}")
        second.optimize()  # while trial #0 is RUNNING in the first process, the second samples the same config
        seen.append([(str(trial_attrs(t).get("message")), t.state) for t in second.study.get_trials(deepcopy=False) if t.number > 0])
        return TrialResult(Outcome.COMPLETE, samples_per_s=500.0)

    monkeypatch.setattr(first, "measure", first_measures)
    def second_measures(loader, number=None, *a, **kw):
        measured.append(f"second #{number}")
        return TrialResult(Outcome.COMPLETE, samples_per_s=900.0)

    monkeypatch.setattr(second, "measure", second_measures)
    first.optimize()
    assert measured == ["first #0"]  # measured once, by the trial that took it first
    assert seen[0] and all(s == ("being measured by trial #0 in another process", optuna.trial.TrialState.FAIL) for s in seen[0]), seen
    assert all(trial_attrs(t)["outcome"] == Outcome.REPEAT.value and trial_attrs(t)["repeat_of"] == 0 for t in first.study.trials[1:])
    best, scores = winner(first.study)
    assert best.number == 0 and scores == [500.0]
