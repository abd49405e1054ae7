"""One definition of each figure: the YAML, the report, ``autotune show`` and ``--json`` state the same numbers."""

from __future__ import annotations

import json
import os
import re
import statistics
import time
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.cli import main
from autotune.config.files import save_config
from autotune.config.schema import DaliOptions, LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.report import overview, write_report
from autotune.report._render import fmt_rate, fmt_speedup, fmt_spread
from autotune.study.result import config_from_study, headline
from autotune.study.space import parse_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.spec import TrialResult
from tests.helpers import ROOT

FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--quiet"]


def _study_with_symptoms(url: str) -> optuna.Study:
    """The shapes seen in the field: the winner's re-measurements far above its first trial's windows, and the
    heuristic among the re-measured candidates (its re-measured median differs from its trial score)."""
    study = optuna.create_study(storage=url, study_name="symptoms", direction="maximize")
    for k, v in {"dataset": {"path": "/d", "samples": 24}, "device": "cpu", "hardware": {"cpus": 2}, "ranks": 1}.items():
        study.set_user_attr(k, v)
    trials = [  # (role, workers, score, window spread)
        ("defaults", 0, 100.0, [95.0, 104.0]),
        ("heuristic", 2, 380.0, [300.0, 390.0]),
        (None, 1, 400.0, [343.2, 409.2]),
        (None, 3, 150.0, [140.0, 160.0]),
        ("dali-heuristic", None, 300.0, [290.0, 310.0]),
    ]
    for role, w, score, spread in trials:
        params = {"backend": "torch", "num_workers": w} if w is not None else {"backend": "dali", "dali_device": "cpu", "num_threads": 2}
        loader = LoaderConfig.from_params({**params, "batch_size": 8})
        attrs = {"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "samples_per_s": score, "spread": spread}
        if role:
            attrs["role"] = role
        study.add_trial(optuna.trial.create_trial(value=score, user_attrs=attrs))
    method = "top 2 re-measured 2x each, interleaved; winner by median of all scores"
    study.set_user_attr("confirmation", {"method": method, "winner_trial": 2, "repeats": 2, "attempted": 4, "candidates": [
        {"trial": 2, "config": "w1", "scores": [400.0, 494.4, 510.0], "median": 494.4},
        {"trial": 1, "config": "w2", "scores": [380.0, 270.0, 276.2], "median": 276.2},
    ]})
    return study


def _show(args: list[str], capsys) -> str:
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "200"  # one table row per line
    try:
        assert main(["show", *args]) == 0
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return capsys.readouterr().out


def _cross_check(study: optuna.Study, url: str, tmp_path: Path, capsys) -> dict:
    """Every place a figure is stated agrees with the YAML; returns the YAML's result section."""
    cfg = config_from_study(study, url)
    path = tmp_path / "autotune.yaml"
    save_config(cfg, path)
    r = autotune.load_config(path).result
    lo, hi = r["spread"]
    assert lo <= r["samples_per_s"] <= hi, "the spread holds the value it describes"
    assert r["samples_per_s"] == round(statistics.median(r["scores"]), 1)
    roles = {"defaults": "defaults", "heuristic": "heuristic", **({"dali-heuristic": "dali_heuristic"} if "dali_heuristic_samples_per_s" in r else {})}
    for key in roles.values():
        if r[f"{key}_samples_per_s"]:
            assert r[f"speedup_vs_{key}"] == round(r["samples_per_s"] / r[f"{key}_samples_per_s"], 2)

    ov = overview(study, url)
    assert ov["winner"]["samples_per_s"] == r["samples_per_s"] and ov["winner"]["spread"] == r["spread"]
    assert ov["winner"]["scores"] == r["scores"]
    assert ov["speedups"] == {role: r[f"speedup_vs_{key}"] for role, key in roles.items() if r[f"speedup_vs_{key}"] is not None}
    for role, key in roles.items():
        assert (ov["baselines"].get(role) or {}).get("samples_per_s") == r[f"{key}_samples_per_s"]
    if "confirmed" in r:
        assert ov["confirmation"]["method"] == r["confirmed"]["method"]

    md = (write_report(study, url, tmp_path / "reports") / "report.md").read_text()
    assert f"**best samples/s** {fmt_rate(r['samples_per_s'])}" in md
    assert f"**vs defaults** {fmt_speedup(r['speedup_vs_defaults'])}" in md
    assert f"**vs heuristic** {fmt_speedup(r['speedup_vs_heuristic'])}" in md
    if "dali-heuristic" in roles:
        assert f"**vs DALI's usual** {fmt_speedup(r['speedup_vs_dali_heuristic'])}" in md
    assert f"spread {fmt_spread(r['spread'])}" in md
    if "confirmed" in r:
        assert r["confirmed"]["method"] in md

    for out in (_show([str(path)], capsys), _show(["--storage", url, "--study", study.study_name], capsys)):
        text = re.sub(r"\s+", " ", out)
        assert f"{fmt_rate(r['samples_per_s'])} spread {fmt_spread(r['spread'])}" in text
        assert f"(speedup {fmt_speedup(r['speedup_vs_defaults'])})" in text
        assert f"(speedup {fmt_speedup(r['speedup_vs_heuristic'])})" in text
        if "dali-heuristic" in roles:
            assert "DALI's usual" in text and f"{fmt_rate(r['dali_heuristic_samples_per_s'])} (speedup {fmt_speedup(r['speedup_vs_dali_heuristic'])})" in text
    shown = json.loads(_show([str(path), "--json"], capsys))
    stored = json.loads(_show(["--storage", url, "--study", study.study_name, "--json"], capsys))
    assert shown["result"] == r
    assert {k: v for k, v in stored["config"].items() if k != "created"} == {k: v for k, v in shown.items() if k not in ("created",)}
    return r


@pytest.mark.slow
def test_the_figures_agree_on_the_shapes_seen_in_the_field(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 's.db'}"
    r = _cross_check(_study_with_symptoms(url), url, tmp_path, capsys)
    assert r["samples_per_s"] == 494.4 and r["spread"] == [400.0, 510.0]  # the range of the same three scores
    assert r["heuristic_samples_per_s"] == 276.2 and r["speedup_vs_heuristic"] == 1.79  # like for like, everywhere
    assert r["dali_heuristic_samples_per_s"] == 300.0 and r["speedup_vs_dali_heuristic"] == 1.65  # DALI's usual start, stated too
    assert "1.79x" in (tmp_path / "reports" / "symptoms" / "report.md").read_text()
    # the winner's trial (400) and its re-measured figure (494.4) are both shown: the trials table says which is which
    text = re.sub(r"\s+", " ", _show(["--storage", url, "--study", "symptoms"], capsys))
    assert "samples/s: each trial's own measurement; the config's figure above is the median of the winner's and its re-measurements" in text


def _warm_start_was_dalis_usual(url: str, *, queued: bool) -> optuna.Study:
    """A re-tune whose warm start (trial 0) is DALI's usual start, the winner re-measured to a median that rounds
    two ways (300.75 stored, 300.7499... from the scores); its dali-heuristic trial queued when the budget ended, or
    run and told as a repeat of trial 0."""
    study = optuna.create_study(storage=url, study_name="warm", direction="maximize")
    for k, v in {"dataset": {"path": "/d", "samples": 24}, "device": "cpu", "hardware": {"cpus": 2}, "ranks": 1}.items():
        study.set_user_attr(k, v)
    dali = LoaderConfig.from_params({"backend": "dali", "dali_device": "cpu", "num_threads": 2, "batch_size": 8})
    torch_ = LoaderConfig.from_params({"backend": "torch", "num_workers": 2, "batch_size": 8})
    study.add_trial(optuna.trial.create_trial(value=236.0, user_attrs={
        "loader": dali.to_params(), "config": dali.describe(), "outcome": "complete", "role": "warm-start", "spread": [142.0, 300.0]}))
    study.add_trial(optuna.trial.create_trial(value=185.0, user_attrs={
        "loader": torch_.to_params(), "config": torch_.describe(), "outcome": "complete", "role": "heuristic", "spread": [160.0, 190.0]}))
    if queued:
        study.enqueue_trial({}, user_attrs={"role": "dali-heuristic", "loader_params": dali.to_params()})
    else:
        study.add_trial(optuna.trial.create_trial(value=236.0, user_attrs={
            "loader": dali.to_params(), "config": dali.describe(), "outcome": "repeat", "repeat_of": 0, "role": "dali-heuristic"}))
    study.set_user_attr("confirmation", {"method": "top 2 re-measured", "winner_trial": 0, "repeats": 2, "attempted": 4, "candidates": [
        {"trial": 0, "config": "w", "scores": [236.0, 300.7499999, 441.0], "median": 300.75},
        {"trial": 1, "config": "t", "scores": [185.0, 180.0, 170.0], "median": 180.0},
    ]})
    return study


@pytest.mark.parametrize("queued", [True, False])
@pytest.mark.slow
def test_dalis_usual_measured_as_the_warm_start_is_stated_as_the_winner_is(tmp_path, capsys, queued):
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _warm_start_was_dalis_usual(url, queued=queued)
    r = _cross_check(study, url, tmp_path, capsys)
    assert r["dali_heuristic_samples_per_s"] == r["samples_per_s"] == 300.7 and r["speedup_vs_dali_heuristic"] == 1.0
    ov = overview(study, url)
    assert ov["baselines"]["dali-heuristic"]["spread"] == ov["winner"]["spread"] == [236.0, 441.0]  # one trial, one bar


@pytest.mark.slow
def test_the_figures_agree_on_a_finished_study(tiny_dataset, workdir, capsys):
    rc = main(["run", "--dataset", str(tiny_dataset), "--space", "torch", "--n-trials", "4", "--batch-size", "8", "--confirm-top", "2",
               "--confirm-repeats", "1", "--seed", "3", "--study-name", "finished", "--reports-dir", str(workdir / "run-reports"), *FAST])
    assert rc == 0
    capsys.readouterr()
    study = optuna.load_study(study_name="finished", storage="sqlite:///autotune.db")
    written = autotune.load_config(workdir / "autotune.yaml")
    time.sleep(1.1)  # a stamp taken now would differ
    out = _show(["--storage", "sqlite:///autotune.db", "--study", "finished"], capsys)
    assert written.created in out, out  # the study's config is stamped as the YAML written from it, not now
    r = _cross_check(study, "sqlite:///autotune.db", workdir, capsys)  # (writes its own autotune.yaml)
    assert r == written.result  # the run wrote the same figures


def test_single_score_spread_is_its_windows_and_holds_the_value():
    assert headline([300.0], [280.0, 320.0]) == (300.0, [280.0, 320.0])
    assert headline([300.0, 250.0, 310.0], [10.0, 20.0]) == (300.0, [250.0, 310.0])
    rate, (lo, hi) = headline([300.0], [310.0, 320.0])  # windows that miss the value (a foreign record) are widened
    assert lo <= rate <= hi


def _tuner(dataset, tmp_path, space: dict, **kw) -> Tuner:
    settings = TuneSettings(**{"baselines": False, "paired": False, "confirm_top": 2, "confirm_repeats": 2, "cache": "none", **kw})
    return Tuner(scan(dataset), parse_space(space, cores=2), settings, storage=f"sqlite:///{tmp_path}/t.db", study_name="t")


WORKERS = {"params": {"backend": {"choices": ["torch"]}, "batch_size": {"choices": [8]}, "num_workers": {"int": [0, 2]}}}


def test_confirmation_method_says_when_every_re_measurement_failed(tiny_dataset, tmp_path, monkeypatch):
    tuner = _tuner(tiny_dataset, tmp_path, WORKERS)
    for w, v in ((0, 100.0), (1, 200.0), (2, 150.0)):
        loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": w})
        tuner.study.add_trial(optuna.trial.create_trial(value=v, user_attrs={"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete"}))
    monkeypatch.setattr(tuner, "measure", lambda loader, number=None, on_intermediate=None, log=None: TrialResult(Outcome.CRASH, message="boom"))
    record = tuner.confirm()
    assert "re-measured 2x each" not in record["method"]
    assert record["method"] == "best single trial: all 4 re-measurements of the top 2 failed"
    cfg = config_from_study(tuner.study, tuner.storage_url)
    assert cfg.result["confirmed"]["method"] == record["method"] and cfg.result["spread"][0] <= cfg.result["samples_per_s"]


def test_a_stored_record_that_claims_re_measurements_that_failed_is_told_as_it_was(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = _study_with_symptoms(url)
    conf = dict(study.user_attrs["confirmation"])
    del conf["attempted"]
    conf["candidates"] = [{**c, "scores": c["scores"][:1], "median": c["scores"][0]} for c in conf["candidates"]]
    study.set_user_attr("confirmation", conf)
    assert config_from_study(study, url).result["confirmed"]["method"] == "best single trial: every re-measurement failed"


def test_hw_decoder_load_only_for_gpu_decode_and_without_float_noise():
    cpu = LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 2, "hw_decoder_load": 0.65})
    assert "hw_decoder_load" not in cpu.to_params() and "hw_decoder_load" not in cpu.to_dict()["dali"]
    assert cpu.dali.hw_decoder_load is None
    gpu = LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "gpu", "hw_decoder_load": 0.9500000000000001})
    assert gpu.to_params()["hw_decoder_load"] == 0.95 and gpu.to_dict()["dali"]["hw_decoder_load"] == 0.95
    assert "hw_load=0.95" in gpu.describe()
    assert DaliOptions(device="gpu").hw_decoder_load == 0.65  # DALI's usual share when none is named


def test_stepped_floats_are_sampled_at_the_steps_decimals():
    space = parse_space({"params": {"backend": {"choices": ["dali"]}, "batch_size": {"choices": [8]}, "dali_device": {"choices": ["gpu"]},
                                    "hw_decoder_load": {"float": [0.0, 1.0], "step": 0.05}}}, cores=2)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    values = [space.suggest(study.ask(), {})["hw_decoder_load"] for _ in range(60)]
    assert all(v == round(v, 2) and repr(v) == repr(round(v, 2)) for v in values)
    assert any(repr(v).endswith("5") for v in values)  # 0.05 steps, e.g. 0.95 (0.9500000000000001 before)


def test_yaml_header_points_to_a_section_that_exists(tmp_path):
    path = tmp_path / "a.yaml"
    save_config(autotune.Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8})), path)
    header = path.read_text().splitlines()[0]
    doc, section = re.search(r"(docs/[\w.]+), section '([^']+)'", header).groups()
    assert f"\n## {section}\n" in (ROOT / doc).read_text()


def _dali_winner(url: str, with_torch: bool = True) -> optuna.Study:
    study = optuna.create_study(storage=url, study_name="dali-wins", direction="maximize")
    rows = [({"backend": "dali", "batch_size": 16, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2}, 300.0)]
    if with_torch:
        rows += [({"backend": "torch", "batch_size": 8, "num_workers": 0}, 100.0),
                 ({"backend": "torch", "batch_size": 16, "num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}, 210.0),
                 ({"backend": "torch", "batch_size": 8, "num_workers": 1, "prefetch_factor": 2}, 180.0)]
    for params, v in rows:
        loader = LoaderConfig.from_params(params)
        attrs = {"loader": loader.to_params(), "config": loader.describe(), "outcome": "complete", "spread": [v - 5, v + 5]}
        study.add_trial(optuna.trial.create_trial(value=v, user_attrs=attrs))
    return study


def test_a_dali_winner_still_serves_dataloader_kwargs(tmp_path, capsys):
    url = f"sqlite:///{tmp_path / 's.db'}"
    cfg = config_from_study(_dali_winner(url), url)
    path = tmp_path / "autotune.yaml"
    save_config(cfg, path)
    text = path.read_text()
    assert "\ntorch_fallback:" in text and text.index("\nloader:") < text.index("\ntorch_fallback:") < text.index("\nresult:")
    loaded = autotune.load_config(path)
    assert loaded.loader.backend.value == "dali"
    assert loaded.torch_fallback["trial"] == 2 and loaded.torch_fallback["samples_per_s"] == 210.0
    assert loaded.dataloader_kwargs() == {"batch_size": 16, "num_workers": 2, "pin_memory": False, "prefetch_factor": 4, "persistent_workers": True}
    assert loaded.dataloader_kwargs(batch_size=4)["batch_size"] == 4
    assert loaded.for_rank(0, 1).dataloader_kwargs()["num_workers"] == 2
    import torch

    loader = torch.utils.data.DataLoader(list(range(40)), **loaded.dataloader_kwargs())  # a user's own Dataset
    assert sum(len(b) for b in loader) == 40
    shown = re.sub(r"\s+", " ", _show([str(path)], capsys))
    assert "the best torch DataLoader: trial #2, 210.0 samples/s" in shown and '"num_workers": 2' in shown


def test_a_dali_only_study_says_there_are_no_dataloader_kwargs(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    cfg = config_from_study(_dali_winner(url, with_torch=False), url)
    assert cfg.torch_fallback == {} and "torch_fallback" not in cfg.to_dict()
    with pytest.raises(autotune.ConfigError, match="build_loader"):
        cfg.dataloader_kwargs()


@pytest.mark.parametrize(("section", "needle"), [
    ("torch_fallback: {batch_size: 8, torch: {num_workers: -1}}", "torch_fallback.torch.num_workers must be between 0 and 16384"),
    ("torch_fallback: {batch_size: 0, torch: {}}", "torch_fallback.batch_size must be between 1 and 1048576, but got 0"),
    ("torch_fallback: {batch_size: true, torch: {}}", "torch_fallback.batch_size must be an integer"),
    ("torch_fallback: {batch_size: 8, torch: {workers: 2}}", "unknown key torch_fallback.torch.workers"),
    ("torch_fallback: [1, 2]", "torch_fallback must be a mapping"),
])
def test_a_bad_torch_fallback_is_a_one_line_error(tmp_path, section, needle):
    path = tmp_path / "a.yaml"
    path.write_text("schema: 1\nloader: {backend: dali, batch_size: 8, dali: {device: cpu}}\n" + section + "\n")
    with pytest.raises(autotune.ConfigError, match=re.escape(needle)):
        autotune.load_config(path)


def test_later_starts_are_counted_apart_from_dominated_kinds(tmp_path):
    """The report counted a sampled config told for its later start as 'of a dominated kind', unlike the last line."""
    from autotune.report._render import headline as trials_headline
    from autotune.study.evidence import LATER_START

    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    dist = {"num_workers": optuna.distributions.IntDistribution(0, 4)}
    base = {"backend": "user", "batch_size": 8}
    for i, (value, attrs) in enumerate([
        (500.0, {"outcome": "complete", "samples_per_s": 500.0, "spread": [490.0, 510.0], "role": "heuristic"}),
        (0.0, {"outcome": "dominated", "message": f"multiprocessing_context=spawn {LATER_START} than multiprocessing_context=fork"}),
        (0.0, {"outcome": "dominated", "message": "a kind measured at a third or less of another's best"}),
    ]):
        loader = {**base, "num_workers": i + 1}
        study.add_trial(optuna.trial.create_trial(params={"num_workers": i + 1}, distributions=dist, value=value,
                                                  user_attrs={"loader": loader, "config": f"user w={i + 1}", **attrs}))
    ov = overview(study, url)
    assert ov["later_start"] == 1
    assert dict(trials_headline(ov))["trials"] == ("3 (1 completed, 1 of a dominated kind, not measured, 1 starting workers later than a "
                                                  "start that completed, not measured, 0 not complete)")
