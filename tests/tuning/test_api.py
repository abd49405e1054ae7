"""``autotune.tune``: ``autotune run`` from Python, without argparse; the frozen request both build."""

from __future__ import annotations

import dataclasses
import logging
import subprocess
import sys

import optuna
import pytest

import autotune
from autotune.errors import UserError
from autotune.study.evidence import trial_attrs

#: a short run on the CPU: one fixed batch size, tiny windows, no re-measurement, no report
SHORT = {"space": "cpu", "batch_size": 8, "device": "cpu", "window_s": 0.2, "windows": 2, "warmup_batches": 1, "confirm_top": 0, "report": False}


def test_tune_writes_the_yaml_and_returns_its_config_without_printing(tiny_dataset, workdir, capsys, caplog):
    caplog.set_level(logging.INFO, logger="autotune.tuning")
    cfg = autotune.tune(tiny_dataset, n_trials=2, out=workdir / "tuned.yaml", storage="sqlite:///api.db", seed=0, **SHORT)
    assert isinstance(cfg, autotune.Config)
    assert cfg == autotune.load_config(workdir / "tuned.yaml")
    assert cfg.loader.batch_size == 8 and cfg.result["samples_per_s"] > 0 and cfg.dataset["samples"] == 24
    study = optuna.load_study(study_name=cfg.study["name"], storage="sqlite:///api.db")
    assert len([t for t in study.trials if t.state.is_finished() and trial_attrs(t).get("outcome") != "repeat"]) == 2
    assert not (workdir / "reports" / cfg.study["name"] / "report.html").exists()  # report=False
    assert capsys.readouterr().err == ""  # the run's lines are log records, not prints
    said = [r.getMessage() for r in caplog.records if r.name == "autotune.tuning"]
    assert any(m.startswith("best: ") for m in said) and f"wrote {workdir / 'tuned.yaml'}" in said


def test_tune_tells_a_reporter_given(tiny_dataset, workdir):
    events: list[str] = []

    class Recording(autotune.tuning.LoggingReporter):
        def start(self, trials, remeasurements, settings=None, **kw):
            events.append(f"start {trials}")

        def __call__(self, study, trial):
            events.append("trial")

        def say(self, text):
            events.append(text.split(":")[0].split(" ")[0])

        def wrote(self, path):
            events.append(f"wrote {path}")

    cfg = autotune.tune(dataset=str(tiny_dataset), n_trials=1, baselines=False, reporter=Recording(), **SHORT)
    assert events[:3] == ["setting", "study", "start 1"] and "trial" in events
    assert "wrote autotune.yaml" in events and events[-1] == "wrote"  # the last line says where the YAML went
    assert cfg.study["trials"] == 1 and autotune.load_config("autotune.yaml") == cfg


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({}, "no dataset given; pass the image folder (one sub-folder per class) or demo=True"),
    ({"dataset": "x", "demo": True}, "pass a dataset or demo=True, not both"),
    ({"dataset": "x", "n_trials": 0}, "n_trials must be a whole number of 1 or more, but got 0"),
    ({"dataset": "x", "n_trials": "3"}, "n_trials must be a whole number of 1 or more, but got str '3'"),
    ({"dataset": "x", "budget_s": float("inf")}, "budget_s must be a finite number greater than 0, but got inf"),
    ({"dataset": "x", "budget_s": 5}, "budget_s=5 is too short to measure anything; pass budget_s=10 or more"),  # the argument, not the flag
    ({"dataset": "x", "seed": 2**32}, "seed must be a whole number of 0 or more and 4294967295 or less"),
    ({"dataset": "x", "report": "no"}, "report must be True or False, but got str 'no'"),
    ({"dataset": "x", "pipeline": "imagenet-trian"}, "unknown pipeline 'imagenet-trian'"),
])
def test_tune_refuses_bad_arguments_in_one_line_before_any_work(workdir, kwargs, needle):
    with pytest.raises(UserError) as e:
        autotune.tune(**kwargs)
    assert str(e.value).startswith(needle) and "\n" not in str(e.value)
    assert list(workdir.iterdir()) == []  # no storage, no YAML, no reports folder


def test_tune_names_its_arguments_not_the_command_line_flags(workdir):
    """The run's checks speak of `autotune run`'s flags; from Python the line named flags the caller never wrote
    ("pass its --batch-size"). A command to type in a shell, quoted, keeps its flags."""
    from autotune.tuning.api import in_python_terms

    with pytest.raises(UserError) as e:
        autotune.tune("my_pipeline.py:make")
    assert "pass its batch_size (the one training uses)" in str(e.value) and "--" not in str(e.value)
    assert in_python_terms("--no-report with --demo; run 'autotune run --dataset DIR --out FILE'") == (
        "report=False with demo=True; run 'autotune run --dataset DIR --out FILE'")
    # a value after a flag becomes the argument's value; a word after it stays a word
    assert in_python_terms("pass --out autotune.yaml to replace it, or --out another file; or --batch-size N.") == (
        "pass out='autotune.yaml' to replace it, or out another file; or batch_size=N.")
    assert in_python_terms("a --batch-size 64 too large") == "a batch_size=64 too large"
    # what closes a sentence or a bracket stays outside the value; a flag after a switch is a flag of its own
    assert in_python_terms("(--storage sqlite:///a.db); see") == "(storage='sqlite:///a.db'); see"
    assert in_python_terms("or --batch-size 64), or --budget 5:") == "or batch_size=64), or budget_s=5:"
    assert in_python_terms("pass --resume --budget 60") == "pass resume=True budget_s=60"
    assert in_python_terms("next to --out x.yaml's folder") == "next to out='x.yaml''s folder"


def test_tune_takes_its_arguments_by_keyword_after_the_dataset():
    with pytest.raises(TypeError):
        autotune.tune("/data/train", 60)  # type: ignore[misc]  # the misuse under test


def test_the_request_is_frozen_and_resolved_from_the_settings_given(tmp_path):
    from autotune.tuning.request import BUDGET_MAX_TRIALS, DEFAULT_BUDGET_S, RunRequest, resolve_request

    asked = {"dataset": "/data/train", "space": None, "budget": None, "n_trials": None}
    r = resolve_request(asked)
    assert asked == {"dataset": "/data/train", "space": None, "budget": None, "n_trials": None}  # what was given stays as given
    assert (r.budget, r.n_trials, r.space, r.pipeline, r.out) == (DEFAULT_BUDGET_S, BUDGET_MAX_TRIALS, "default", "imagenet-train", "autotune.yaml")
    assert resolve_request({"dataset": "d", "n_trials": 3}).budget is None  # trials counted, no budget
    assert resolve_request({"dataset": "d", "step_ms": 5.0}).budget == 120.0  # a model in the loop takes longer
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.out = "other.yaml"  # type: ignore[misc]  # frozen: the assignment under test
    with pytest.raises(UserError, match="^n_trailz is no setting of 'autotune run'$"):
        resolve_request({"n_trailz": 3})
    assert dataclasses.replace(r, out="b.yaml").out == "b.yaml" and r.out == "autotune.yaml"
    assert RunRequest().storage == "sqlite:///autotune.db"


def test_autotune_tune_is_the_function_and_import_stays_light():
    code = ("import sys, autotune, autotune.tuning, autotune.tuning.run; "
            "assert callable(autotune.tune) and autotune.tune.__module__ == 'autotune.tuning.api', autotune.tune; "
            "import importlib; importlib.reload(autotune); assert callable(autotune.tune); print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr
    light = "import sys, autotune; autotune.tune; assert 'optuna' not in sys.modules and 'torch' not in sys.modules; print('ok')"
    out = subprocess.run([sys.executable, "-c", light], capture_output=True, text=True, check=False)
    assert out.stdout.strip() == "ok", out.stderr


def test_every_argument_of_tune_gives_a_setting_of_the_run():
    import inspect

    from autotune.tuning.api import _ARGUMENTS
    from autotune.tuning.request import SETTINGS

    assert set(inspect.signature(autotune.tune).parameters) == {*_ARGUMENTS, "reporter"}
    assert {setting for setting, _ in _ARGUMENTS.values()} <= SETTINGS


@pytest.mark.slow
def test_tune_keeps_another_datasets_yaml_unless_out_names_it(tiny_dataset, workdir, tmp_path_factory):
    """As `autotune run` does: autotune.yaml written for one dataset is not replaced by a run on another without a word."""
    from autotune.dataset.synth import synthesize

    other = synthesize(tmp_path_factory.mktemp("other") / "train", images=16, classes=2, min_side=64, max_side=96, seed=3)
    autotune.tune(tiny_dataset, n_trials=1, baselines=False, **SHORT)
    first = (workdir / "autotune.yaml").read_text()
    with pytest.raises(UserError, match="autotune.yaml holds the config for .*; pass out='autotune.yaml' to replace it"):
        autotune.tune(other, n_trials=1, baselines=False, **SHORT)
    assert (workdir / "autotune.yaml").read_text() == first
    cfg = autotune.tune(other, n_trials=1, baselines=False, out="autotune.yaml", **SHORT)
    assert cfg.dataset["samples"] == 16
