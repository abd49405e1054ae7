"""Search spaces: parsing, validation errors that name file, field and rule, conditions."""

from __future__ import annotations

import optuna
import pytest

from autotune.errors import SpaceError
from autotune.study.space import SPACES_DIR, load_space, parse_space


@pytest.mark.parametrize("name", sorted(p.stem for p in SPACES_DIR.glob("*.yaml")))
def test_shipped_spaces_load(name):
    space = load_space(name, cores=4, device="cuda", dali=True)
    assert "batch_size" in space


@pytest.mark.parametrize(
    "data, field, rule",
    [
        ({"params": {"batch_size": {"choices": []}}}, "params.batch_size.choices", "non-empty list"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [4, 1]}}}, "params.num_workers.int", "low <= high"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, "lots"]}}}, "params.num_workers.int", "cores"),
        ({"params": {"batch_size": {"choices": [8]}, "nm_workers": {"int": [0, 1]}}}, "params.nm_workers", "not a loader parameter"),
        ({"params": {"batch_size": {"choices": [8], "typo": 1}}}, "params.batch_size.typo", "unknown"),
        (
            {"params": {"batch_size": {"choices": [8]}, "pin_memory": {"choices": [True], "when": {"num_workers": 1}}}},
            "params.pin_memory.when.num_workers",
            "earlier parameter",
        ),
        ({"params": {"num_workers": {"int": [0, 2]}}}, "params.batch_size", "required"),
        ({"params": {"batch_size": {"choices": [8]}}, "parms": {}}, "'parms'", "unknown"),
        ({"params": {"backend": {"choices": ["tf"]}, "batch_size": {"choices": [8]}}}, "params.backend.choices", "torch or dali"),
        ({"params": {"batch_size": {"choices": [8], "int": [1, 2]}}}, "params.batch_size", "exactly one"),
        ({"params": {"batch_size": {"choices": ["8"]}}}, "params.batch_size", "an integer from 1 to 1048576, but holds '8'"),
        ({"params": {"batch_size": {"choices": [0]}}}, "params.batch_size", "an integer from 1 to 1048576, but holds 0"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [-3, -1]}}}, "params.num_workers", "from 0 to 16384, but holds -3"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"choices": [100000]}}}, "params.num_workers", "but holds 100000"),
        ({"params": {"batch_size": {"choices": [8]}, "prefetch_factor": {"choices": [0]}}}, "params.prefetch_factor", "from 1"),
        ({"params": {"batch_size": {"choices": [8]}, "hw_decoder_load": {"float": [2, 5]}}}, "params.hw_decoder_load", "a number from 0 to 1"),
        ({"params": {"batch_size": {"choices": [8]}, "pin_memory": {"choices": ["yes"]}}}, "params.pin_memory", "true or false"),
        # each of these passed the reading and failed as a traceback at the first trial that drew it
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, 4], "step": 0}}}, "params.num_workers.step", "above 0"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, 4], "step": 0.5}}}, "params.num_workers.step", "whole number"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, 4], "step": "abc"}}}, "params.num_workers.step", "'abc'"),
        ({"params": {"batch_size": {"choices": [8]}, "hw_decoder_load": {"float": [0, 1], "step": -0.1}}}, "params.hw_decoder_load.step", "above 0"),
        ({"params": {"batch_size": {"choices": [8]}, "hw_decoder_load": {"float": [0, 1], "step": float("nan")}}}, "params.hw_decoder_load.step", "above 0"),
        (
            {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2], "when": {"backend": {"gt": 1}}}}},
            "params.num_workers.when.backend",
            "takes values that are not numbers",
        ),
        (
            {"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2], "when": {"device": {"lt": 1}}}}},
            "params.num_workers.when.device",
            "takes values that are not numbers",
        ),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [1, 4], "log": True, "step": 2}}}, "params.num_workers.step", "log"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [1, 4], "log": "no"}}}, "params.num_workers.log", "true or false"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, "cores/0"]}}}, "params.num_workers.int", "by zero"),
        (
            {
                "params": {
                    "batch_size": {"choices": [8]},
                    "num_workers": {"int": [0, 2]},
                    "prefetch_factor": {"choices": [2], "when": {"num_workers": {"gt": "abc"}}},
                }
            },
            "params.prefetch_factor.when.num_workers",
            "a number",
        ),
        (
            {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2], "when": {"backend": [["torch"]]}}}},
            "params.num_workers.when.backend",
            "plain values",
        ),
        ({"params": {"backend": {"int": [0, 1]}, "batch_size": {"choices": [8]}}}, "params.backend", "choices"),
        (
            {"params": {"backend": {"choices": ["torch", "dali"]}, "batch_size": {"choices": [8], "when": {"backend": "dali"}}}},
            "params.batch_size.when",
            "not allowed",
        ),
        # accepted, and sampled as b=21 and b=23; a condition on a device no run has
        ({"params": {"batch_size": {"int": [1, 10**20]}}}, "params.batch_size", "an integer from 1 to 1048576, but holds 100000000000000000000"),
        ({"params": {"batch_size": {"float": [16, 64]}}}, "params.batch_size.float", "is not allowed: batch_size takes whole numbers; use int: [low, high]"),
        ({"params": {"batch_size": {"choices": [8]}, "num_workers": {"float": [0, 2]}}}, "params.num_workers.float", "whole numbers"),
        (
            {"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2], "when": {"device": "tpu"}}}},
            "params.num_workers.when.device",
            "must be cpu or cuda (where batches go), but got 'tpu'",
        ),
        # Optuna warned in two raw lines each and cut the range to [0, 0] and [0.0, 0.9]; a typo switched a knob off
        (
            {"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2], "step": 5}}},
            "params.num_workers.step",
            "5 does not divide the range [0, 2] (Optuna would sample [0, 0] only); use a step that divides 2, or end the range at 0",
        ),
        (
            {"params": {"batch_size": {"choices": [8]}, "hw_decoder_load": {"float": [0.0, 1.0], "step": 0.3}}},
            "params.hw_decoder_load.step",
            "sample [0.0, 0.9] only",
        ),
        # Optuna's decimal arithmetic failed with a traceback, after the study was made
        (
            {"params": {"batch_size": {"choices": [8]}, "hw_decoder_load": {"float": [0.0, 1.0], "step": 1e-28}}},
            "params.hw_decoder_load.step",
            "1e-28 cuts the range [0.0, 1.0] into 1e+28 steps, more than 1,000,000 can be sampled; use a step of at least 1e-06, or no step",
        ),
        (
            {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2], "when": {"backend": "pytorch"}}}},
            "params.num_workers.when.backend",
            "asks for 'pytorch', which backend never takes (its choices: torch); use one of them",
        ),
        (
            {
                "params": {
                    "backend": {"choices": ["torch", "dali"]},
                    "batch_size": {"choices": [8]},
                    "num_workers": {"int": [0, 2], "when": {"backend": ["torch", "jax"]}},
                }
            },
            "params.num_workers.when.backend",
            "asks for 'jax'",
        ),
    ],
)
def test_errors_name_file_field_and_rule(data, field, rule):
    """(A whole-number range of a million steps of 1 is fine: the bound is for float steps.)"""
    parse_space({"params": {"batch_size": {"int": [1, 1048576], "step": 1}}})
    with pytest.raises(SpaceError) as e:
        parse_space(data, source="my.yaml")
    msg = str(e.value)
    assert msg.startswith("my.yaml: ")
    assert field in msg and rule in msg
    assert "\n" not in msg


def test_cores_token_and_conditions():
    space = parse_space(
        {
            "params": {
                "backend": {"choices": ["torch", "dali"]},
                "batch_size": {"choices": [8, 16]},
                "num_workers": {"int": [0, "cores*2"], "when": {"backend": "torch"}},
                "prefetch_factor": {"choices": [2, 4], "when": {"backend": "torch", "num_workers": {"gt": 0}}},
                "num_threads": {"int": [1, "cores/2"], "when": {"backend": "dali"}},
            }
        },
        cores=8,
    )
    assert space["num_workers"].high == 16
    assert space["num_threads"].high == 4
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0), direction="maximize")
    seen = []
    for _ in range(40):
        t = study.ask()
        params = space.suggest(t, {"device": "cpu"})
        seen.append(params)
        study.tell(t, 1.0)
    for p in seen:
        if p["backend"] == "torch":
            assert "num_threads" not in p
            assert ("prefetch_factor" in p) == (p["num_workers"] > 0)
        else:
            assert set(p) == {"backend", "batch_size", "num_threads"}
    assert {p["backend"] for p in seen} == {"torch", "dali"}


def test_dali_left_out_when_missing_and_error_when_only_dali(caplog):
    space = load_space("default", cores=2, device="cpu", dali=False)
    assert space.backends() == ("torch",)
    assert "DALI is not installed" in caplog.text
    with pytest.raises(SpaceError, match=r'pip install -e "\.\[dali\]"'):
        load_space("dali", cores=2, device="cpu", dali=False)


def test_gpu_only_knobs_removed_on_cpu():
    space = load_space("default", cores=2, device="cpu", dali=True)
    assert space["dali_device"].choices == ("cpu",)
    assert space["pin_memory"].choices == (False,)
    gpu = load_space("default", cores=2, device="cuda", dali=True)
    assert "gpu" in gpu["dali_device"].choices


def test_fix_batch_size():
    space = load_space("torch", cores=2).fix("batch_size", 96)
    assert space["batch_size"].choices == (96,)


def test_missing_space_names_the_shipped_ones():
    with pytest.raises(SpaceError, match="default"):
        load_space("nope-not-here")


def test_bad_yaml_syntax(tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text("params: {batch_size: [\n")
    with pytest.raises(SpaceError, match="not valid YAML"):
        load_space(str(f))


def test_a_step_that_does_not_divide_a_cores_range_ends_it_at_the_last_step():
    """'cores' differs by machine: [0, cores] in steps of 2 is [0, 2] on 3 cores, not an error there and fine on 4."""
    data = {
        "params": {
            "backend": {"choices": ["torch"]},
            "batch_size": {"choices": [8]},
            "num_workers": {"int": [0, "cores"], "step": 2},
            "prefetch_factor": {"choices": [2, 4], "when": {"num_workers": [2, 4]}},
        }
    }
    assert (parse_space(data, cores=3)["num_workers"].high, parse_space(data, cores=4)["num_workers"].high) == (2, 4)
    assert parse_space({"params": {"batch_size": {"choices": [8]}, "hw_decoder_load": {"float": [0.0, 1.0], "step": 0.05}}})["hw_decoder_load"].high == 1.0
    low = {"params": {"batch_size": {"choices": [8]}, "num_workers": {"int": ["cores/2", 16], "step": 4}}}  # a 'cores' low end too
    assert (parse_space(low, cores=8)["num_workers"].high, parse_space(low, cores=6)["num_workers"].high) == (16, 15)
    # a condition on choices that name the cores: 4 and 8 are among them on 8 cores, not on 16; no error on either
    cond = {
        "params": {
            "backend": {"choices": ["torch"]},
            "batch_size": {"choices": [8]},
            "num_workers": {"choices": [0, "cores/2", "cores"]},
            "prefetch_factor": {"choices": [2, 4], "when": {"num_workers": [4, 8]}},
        }
    }
    assert parse_space(cond, cores=8)["prefetch_factor"] and parse_space(cond, cores=16)["prefetch_factor"]
