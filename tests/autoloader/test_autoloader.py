"""AutoLoader on the CPU: exactly-once delivery across switches, failures replaced without a lost batch, a matching
YAML means no exploration, the YAML and the study it writes, the budget and the slowdown cap, DDP agreement."""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import optuna
import pytest
import torch

import autotune
from autotune._imports import is_available
from autotune.autoloader import AutoLoader, Exploration
from autotune.autoloader import _loader as loader_module
from autotune.autoloader._explore import BUDGET, CONTINUE, DONE, FAILED, SLOW, Explorer, Tally
from autotune.autoloader._plan import EpochPlan
from autotune.config.files import load_config
from autotune.config.staleness import is_stale
from autotune.dataset.scan import scan
from autotune.study.evidence import trial_attrs
from tests.helpers import ROOT, FakeClock, run_ranks

SPACE = """\
name: tiny
params:
  backend: {choices: [torch]}
  batch_size: {choices: [4]}
  num_workers: {int: [0, 1], when: {backend: torch}}
  prefetch_factor: {choices: [2, 4], when: {backend: torch, num_workers: {gt: 0}}}
"""

#: every candidate runs 2 batches (1 warm-up, 1 measured): 3 candidates in an epoch of 6 batches of 4
QUICK = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=8, settle_wait=0.0)

#: distinct configs, tried in this order before the sampler's
CANDIDATES = [
    {"backend": "torch", "num_workers": 0},
    {"backend": "torch", "num_workers": 1, "prefetch_factor": 2},
    {"backend": "torch", "num_workers": 0, "pin_memory": True},
    {"backend": "torch", "num_workers": 1, "prefetch_factor": 4},
]


@pytest.fixture()
def space(workdir: Path) -> str:
    path = workdir / "tiny-space.yaml"
    path.write_text(SPACE)
    return str(path)


def make(tiny_dataset: Path, space: str, **kw) -> AutoLoader:
    args = {"device": "cpu", "config": "autotune.yaml", "batch_size": 4, "space": space, "seed": 7, "storage": "sqlite:///autotune.db",
            "with_indices": True, "exploration": QUICK, "budget_s": 600.0, "max_slowdown": 100.0}
    return AutoLoader(tiny_dataset, **{**args, **kw})


def run_epoch(al: AutoLoader) -> tuple[list[int], list[int]]:
    indices, labels = [], []
    for images, y, ix in al:
        assert images.shape == (4, 3, 224, 224) and images.dtype == torch.float32
        assert y.dtype == torch.int64 and ix.dtype == torch.int64
        indices += ix.tolist()
        labels += y.tolist()
    return indices, labels


def assert_exactly_once(dataset, indices: list[int], labels: list[int]) -> None:
    assert sorted(indices) == list(range(len(dataset))), collections.Counter(indices)
    assert labels == [dataset.labels[i] for i in indices]  # each label is its file's
    assert collections.Counter(labels) == collections.Counter(dataset.labels)


def epochs_exactly_once(al: AutoLoader, tiny_dataset: Path, epochs: int) -> None:
    """Run ``epochs`` epochs, each delivering every sample once, then close the loader (also when one fails)."""
    dataset = scan(tiny_dataset)
    try:
        for _ in range(epochs):
            assert_exactly_once(dataset, *run_epoch(al))
    finally:
        al.close()


def switches_within_epochs(al: AutoLoader) -> list[dict]:
    return [h for h in al.history if 0 < h["batch"]]


# -- the plan and the rules, without a loader -----------------------------------------------------------------
def test_plan_ranks_share_one_permutation_without_overlap():
    a = EpochPlan.make(25, seed=3, epoch=1, rank=0, world=2, batch_size=4, drop_last=True)
    b = EpochPlan.make(25, seed=3, epoch=1, rank=1, world=2, batch_size=4, drop_last=True)
    assert len(a.indices) == len(b.indices) == 12 and not set(a.indices) & set(b.indices)
    assert EpochPlan.make(25, seed=3, epoch=2, rank=0, world=2, batch_size=4, drop_last=True).indices != a.indices
    a.advance(4)
    assert a.remaining() == a.indices[4:] and a.expected_batches() == 3
    a.advance(4)
    assert not a.done()
    a.advance(4)
    assert a.done()


def test_rules_abandon_a_candidate_slower_than_the_cap():
    ex = Explorer(Exploration(max_slowdown=1.5, measure_batches=30, check_batches=10), started=0.0)
    ex.record(0, {"backend": "torch"}, DONE, per_sample=0.010)
    # 10 measured batches of 4 samples: 1.4x the best continues, 1.6x is abandoned before its 30 batches
    assert ex.judge(measured=10, samples=40, loop_s=40 * 0.014, failed=False, now=1.0) == CONTINUE
    assert ex.judge(measured=10, samples=40, loop_s=40 * 0.016, failed=False, now=1.0) == SLOW
    assert ex.judge(measured=30, samples=120, loop_s=120 * 0.011, failed=False, now=1.0) == DONE
    assert ex.judge(measured=10, samples=40, loop_s=0.1, failed=True, now=1.0) == FAILED


def test_rules_stop_exploring_when_the_budget_is_spent():
    ex = Explorer(Exploration(budget_s=60.0, settle_wait=0.0), started=100.0)
    assert ex.judge(measured=5, samples=20, loop_s=0.2, failed=False, now=159.0) == CONTINUE
    assert ex.judge(measured=5, samples=20, loop_s=0.2, failed=False, now=160.0) == BUDGET
    ex.record(3, {"backend": "torch"}, BUDGET, per_sample=0.01)
    assert ex.best is not None and ex.best.number == 3  # what was measured before the budget ran out counts
    assert ex.settle_now(BUDGET, 0.5, now=160.0)
    assert not Explorer(Exploration(budget_s=60.0, settle_wait=0.0), started=100.0).settle_now(DONE, 0.5, now=120.0)


def test_rules_settle_when_the_loader_keeps_up_with_the_step():
    ex = Explorer(Exploration(settle_wait=0.03), started=0.0)
    ex.record(0, {}, DONE, per_sample=0.01)
    assert ex.settle_now(DONE, 0.01, now=1.0)  # the loop waited 1 % of its time for data: nothing to gain
    assert not ex.settle_now(DONE, 0.20, now=1.0)


def test_rules_finish_the_epoch_on_the_current_candidate_when_a_second_start_costs_more():
    ex = Explorer(Exploration(), started=0.0)
    ex.record(0, {}, DONE, per_sample=0.010, start_s=2.0)  # the winner: 2 s to build and deliver its first batch
    assert ex.stay_to_epoch_end(DONE, 0.0102, samples_left=5_000)  # 1 s lost over the epoch's rest < 2 s
    assert not ex.stay_to_epoch_end(DONE, 0.012, samples_left=5_000)  # 10 s lost > 2 s: switch now
    assert not ex.stay_to_epoch_end(FAILED, 0.0102, samples_left=5_000)  # a failed loader does not go on
    assert not ex.stay_to_epoch_end(DONE, math.inf, samples_left=5_000)  # unmeasured
    assert not Explorer(Exploration(), started=0.0).stay_to_epoch_end(DONE, 0.01, samples_left=10)  # no winner yet


def test_on_a_gpu_the_first_candidate_is_the_mixed_decode_start():
    """Then DALI's usual 0.65 share, then the torch heuristic."""
    from autotune.autoloader._source import CandidateSource
    from autotune.config.schema import LoaderConfig
    from autotune.study.space import load_space

    space = load_space("default", cores=16, device="cuda", dali=True).fix("batch_size", 256)
    source = CandidateSource(space, storage=None, study_name="order", attrs={}, seed=0, device="cuda", cores=16, first=[])
    asked = [source.ask() for _ in range(3)]
    assert [trial_attrs(c.trial)["role"] for c in asked] == ["dali-mixed", "dali-heuristic", "heuristic"]
    assert asked[0].loader.describe() == "dali-gpu b=256 threads=12 queue=2 hw_load=0.5"
    for c in asked:  # in the default space: each with its params, which are its config
        assert c.trial.params and LoaderConfig.from_params({**c.trial.params}).describe() == c.loader.describe()


def test_a_candidate_of_the_users_off_the_grid_is_what_the_yaml_hands_over_when_it_wins():
    """A user candidate leaving a knob to its default is measured without params; it can still win, and the YAML
    must then be it (it was the slower heuristic, or no YAML at all, while the tuner's references could not win)."""
    from autotune.autoloader._explore import DONE
    from autotune.autoloader._source import CandidateSource
    from autotune.study.space import load_space

    space = load_space("torch", cores=4, device="cpu")
    source = CandidateSource(space, storage=None, study_name="users", attrs={"dataset": {"root": "/d"}}, seed=0, device="cpu", cores=4,
                             first=[{"num_workers": 3, "batch_size": 64}])
    mine = source.ask()
    assert trial_attrs(mine.trial).get("outside_space")
    source.tell(mine, DONE, per_sample=1 / 1000, wait_fraction=0.0, measured=30)
    other = source.ask()
    source.tell(other, DONE, per_sample=1 / 500, wait_fraction=0.0, measured=30)
    cfg = source.write_config(None, {})
    assert cfg.loader.describe() == "torch b=64 workers=3" and cfg.result["samples_per_s"] == 1000.0


def test_a_starting_point_outside_the_space_is_measured_without_params():
    import yaml

    from autotune.autoloader._source import CandidateSource
    from autotune.study.space import parse_space

    space = parse_space(yaml.safe_load(SPACE))
    first = [{"backend": "torch", "batch_size": 4, "num_workers": 3}, {"backend": "torch", "batch_size": 4, "num_workers": 1}]
    source = CandidateSource(space, storage=None, study_name="outside", attrs={}, seed=0, device="cpu", cores=1, first=first)
    outside, partial = source.ask(), source.ask()
    assert outside.loader.describe() == "torch b=4 workers=3" and outside.trial.params == {}  # sampled, params would say 0 or 1
    assert partial.loader.describe() == "torch b=4 workers=1" and partial.trial.params == {}  # prefetch_factor left to its default
    import warnings

    from autotune.study.space import load_space

    gpu = load_space("default", cores=16, device="cuda", dali=True).fix("batch_size", 256)
    between = {"backend": "dali", "batch_size": 256, "dali_device": "gpu", "num_threads": 4, "prefetch_queue_depth": 2, "hw_decoder_load": 0.63}
    source = CandidateSource(gpu, storage=None, study_name="between", attrs={}, seed=0, device="cuda", cores=16, first=[between])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # Optuna warned of a fixed value off the 0.05 step, and recorded it
        cand = source.ask()
    assert cand.loader.describe() == "dali-gpu b=256 threads=4 queue=2 hw_load=0.63" and cand.trial.params == {}


def test_a_repeated_proposal_names_the_trial_that_measured_it():
    """Like `autotune run`'s repeats, an AutoLoader repeat carries repeat_of (the docs say so; it was null)."""
    from autotune.autoloader._explore import DONE
    from autotune.autoloader._source import CandidateSource
    from autotune.study.space import load_space

    space = load_space("torch", cores=1, device="cpu").fix("batch_size", 8).fix("num_workers", 0).fix("pin_memory", False)
    source = CandidateSource(space, storage=None, study_name="repeats", attrs={}, seed=0, device="cpu", cores=1, first=[])
    told = {}
    while (cand := source.ask()) is not None:  # the baselines, then what the sampler finds, until it only repeats
        source.tell(cand, DONE, per_sample=0.01, wait_fraction=0.5, measured=10)
        told[cand.loader.describe()] = cand.number
        assert len(told) < 10
    repeats = [t for t in source.study.trials if trial_attrs(t).get("outcome") == "repeat"]
    assert repeats and all(trial_attrs(t)["repeat_of"] == told[trial_attrs(t)["config"]] for t in repeats)


def test_bad_arguments_are_one_line_errors(tiny_dataset, space):
    with pytest.raises(autotune.UserError, match="max_slowdown must be >= 1.0"):
        make(tiny_dataset, space, max_slowdown=0.5)
    with pytest.raises(autotune.UserError, match="batch_size must be a positive integer"):
        make(tiny_dataset, space, batch_size=0)
    with pytest.raises(autotune.UserError, match="larger than the 24 images"):
        make(tiny_dataset, space, batch_size=64)
    # the other backend's knob: {"backend": "dali", "num_workers": 4} ran DALI's defaults, and was told as such
    with pytest.raises(autotune.UserError, match=r"^candidates\[0\] sets num_workers, which the dali backend does not use; drop it, or set backend torch$"):
        make(tiny_dataset, space, candidates=[{"backend": "dali", "num_workers": 4}])
    with pytest.raises(autotune.UserError, match=r"sets num_threads, which the torch backend does not use \(torch is the backend when none is given\)"):
        make(tiny_dataset, space, candidates=[{"num_threads": 4}])


def test_import_autotune_stays_light():
    code = "import sys, autotune; assert 'optuna' not in sys.modules and 'torch' not in sys.modules; autotune.AutoLoader; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120, check=False)
    assert out.stdout.strip() == "ok", out.stderr


# -- in the loop ------------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_every_sample_once_per_epoch_across_switches(tiny_dataset, space):
    al = make(tiny_dataset, space, candidates=CANDIDATES)
    epochs_exactly_once(al, tiny_dataset, 3)
    within = switches_within_epochs(al)
    assert len(within) >= 3, al.history
    assert len({h["config"] for h in al.history}) >= 3


def test_in_a_small_shm_each_candidate_with_workers_hands_over_smaller_batches(tiny_dataset, space, monkeypatch):
    """/dev/shm with room for no candidate's whole batches (an 8 MiB mount; Docker's 64 MiB at batch 4 would hold
    them): each worker hands over fewer samples, joined in the loop, and every sample still comes once an epoch."""
    from autotune.config.schema import LoaderConfig
    from autotune.loaders.memory import estimate
    from autotune.trials.guard import _budgets

    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 8.0)
    al = make(tiny_dataset, space, candidates=[CANDIDATES[1], CANDIDATES[3]])
    epochs_exactly_once(al, tiny_dataset, 2)
    tried = [LoaderConfig.from_params(t.user_attrs["loader"]) for t in al.source.study.trials if t.user_attrs.get("loader")]
    workers = [c for c in tried if c.options.num_workers]
    assert workers and all(c.options.worker_batch and c.options.worker_batch < 4 for c in workers), [c.describe() for c in tried]
    need = {c.describe(): estimate(c, scan(tiny_dataset), "imagenet-train", "cpu")["shm_mib"] for c in workers}
    assert all(v <= 0.8 * 8.0 for v in need.values()), need  # the whole batches' 7-12 MiB: over the budget
    assert "failed" not in [h["reason"] for h in al.history], al.history


def test_a_candidate_whose_workers_cannot_fit_the_shm_even_one_sample_at_a_time_is_not_tried(tiny_dataset, space, monkeypatch):
    """A 1 MiB /dev/shm: a worker's one-sample batches would not fit; the candidate would crash, or leave the loop
    waiting on a batch lost with the shared memory. It is told to the study as ``shm``, and never built."""
    from autotune.trials.guard import _budgets

    monkeypatch.setattr(_budgets, "shm_free_mib", lambda path=_budgets.SHM_PATH: 1.0)
    built = []
    real = loader_module.build_from_dataset
    monkeypatch.setattr(loader_module, "build_from_dataset", lambda dataset, loader, **kw: built.append(loader.describe()) or real(dataset, loader, **kw))
    al = make(tiny_dataset, space, candidates=[CANDIDATES[1], CANDIDATES[0]])
    epochs_exactly_once(al, tiny_dataset, 2)
    skipped = [trial_attrs(t) for t in al.source.study.trials if trial_attrs(t).get("outcome") == "shm"]
    assert [a["config"] for a in skipped][:1] == ["torch b=4 workers=1 prefetch=2"] and "/dev/shm" in skipped[0]["message"], skipped
    assert not any("workers=1" in d for d in built), built


@pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")
def test_exactly_once_across_a_switch_to_dali_and_back(tiny_dataset, space):
    """A DALI candidate reads the rest of the epoch as a file list."""
    dali = {"backend": "dali", "dali_device": "cpu", "num_threads": 1, "prefetch_queue_depth": 1}
    al = make(tiny_dataset, space, candidates=[CANDIDATES[0], dali, CANDIDATES[1]])
    epochs_exactly_once(al, tiny_dataset, 2)
    assert [h["config"].split(" ")[0] for h in al.history[:3]] == ["torch", "dali-cpu", "torch"]


class _BreaksAfterOne:
    """A loader whose iteration raises after its first batch (a worker crash, an OOM in the middle)."""

    def __init__(self, inner):
        self.inner = inner

    def __iter__(self):
        it = iter(self.inner)
        yield next(it)
        raise RuntimeError("injected mid-epoch failure")

    def close(self):
        self.inner.close()


def test_a_failing_candidate_is_replaced_without_an_error_or_a_lost_batch(tiny_dataset, space, monkeypatch):
    real = loader_module.build_from_dataset

    def build(dataset, loader, **kw):
        pf = loader.torch.prefetch_factor if loader.torch else None
        if pf == 3:
            raise RuntimeError("injected build failure")
        if pf == 5:
            return _BreaksAfterOne(real(dataset, loader, **kw))
        return real(dataset, loader, **kw)

    monkeypatch.setattr(loader_module, "build_from_dataset", build)
    cands = [CANDIDATES[0], {"backend": "torch", "num_workers": 1, "prefetch_factor": 3}, {"backend": "torch", "num_workers": 1, "prefetch_factor": 5},
             CANDIDATES[1]]
    al = make(tiny_dataset, space, candidates=cands)
    epochs_exactly_once(al, tiny_dataset, 2)  # no exception reached the loop
    failed = [t for t in al.source.study.trials if t.state == optuna.trial.TrialState.FAIL and "injected" in trial_attrs(t).get("message", "")]
    assert {trial_attrs(t)["config"] for t in failed} == {"torch b=4 workers=1 prefetch=3", "torch b=4 workers=1 prefetch=5"}
    assert [h["reason"] for h in al.history].count("failed") == 2


@pytest.mark.slow
def test_exploration_writes_the_yaml_and_the_study_shows_in_studies(tiny_dataset, space, capsys):
    explore = Exploration(warmup_batches=1, measure_batches=2, check_batches=1, max_candidates=3, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=CANDIDATES[:3], exploration=explore)
    try:
        for _ in range(3):
            run_epoch(al)
    finally:
        al.close()
    assert not al.exploring and al.history[-1]["action"] == "settle"
    cfg = load_config("autotune.yaml", strict=True)
    best = max((t for t in al.source.study.trials if t.state == optuna.trial.TrialState.COMPLETE), key=lambda t: t.value)
    assert cfg.loader.describe() == trial_attrs(best)["config"] == al.settled.describe()
    assert cfg.result["tuned_by"].startswith("AutoLoader") and cfg.study["name"] == al.source.study.study_name
    # the starting points carry their params as sampled trials do (they had none: importance, the sampler and
    # optuna-dashboard did not count them)
    firsts = [t for t in al.source.study.trials if trial_attrs(t).get("role") in ("user", "defaults") and trial_attrs(t).get("outcome") == "complete"]
    assert len(firsts) == 3
    # the first candidate is the torch defaults: the YAML's defaults figure (it was null though they were measured)
    assert trial_attrs(firsts[0])["role"] == "defaults" and cfg.result["defaults_samples_per_s"] == trial_attrs(firsts[0])["samples_per_s"]
    assert cfg.result["speedup_vs_defaults"] is not None
    assert [t.params for t in firsts] == [
        {"backend": "torch", "batch_size": 4, "num_workers": 0},
        {"backend": "torch", "batch_size": 4, "num_workers": 1, "prefetch_factor": 2},
        {"backend": "torch", "batch_size": 4, "num_workers": 0},
    ]
    assert is_stale("autotune.yaml", dataset=tiny_dataset) == (False, [])
    out = subprocess.run(
        [sys.executable, "-m", "autotune", "studies", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=120,
        check=False,
    )
    rows = json.loads(out.stdout)
    assert [r["name"] for r in rows] == [al.source.study.study_name]
    assert rows[0]["best_config"] == cfg.loader.describe() and rows[0]["in_training"] is True
    from autotune.cli import main

    assert main(["studies"]) == 0  # beside `autotune run`'s studies, whose samples/s are the loader's alone
    assert "(loop): tuned by AutoLoader inside training" in capsys.readouterr().out
    assert main(["show", "autotune.yaml"]) == 0  # its samples/s are the training loop's, not the loader's alone: show says so
    assert "tuned by AutoLoader, inside the training loop; scored by samples/s of the training loop (loader plus step), after" in " ".join(
        re.sub("[│┃┌┐└┘├┤┬┴┼─━]", " ", capsys.readouterr().out).split()
    )
    assert main(["report", "--json", "--quiet"]) == 0  # the report marks it too, in words ("in_training True" before)
    md = Path(json.loads(capsys.readouterr().out)["markdown"]).read_text()
    assert "best samples/s (loop)" in md and "in the training loop" in md and "in_training" not in md


def test_a_matching_yaml_means_no_exploration(tiny_dataset, space, monkeypatch):
    first = make(
        tiny_dataset,
        space,
        candidates=CANDIDATES[:2],
        exploration=Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=2, settle_wait=0.0),
    )
    for _ in range(2):
        run_epoch(first)
    first.close()
    written = load_config("autotune.yaml")
    studies = len(optuna.get_all_study_summaries("sqlite:///autotune.db"))
    built = []
    real = loader_module.build_from_dataset
    monkeypatch.setattr(loader_module, "build_from_dataset", lambda ds, loader, **kw: built.append((loader, kw)) or real(ds, loader, **kw))

    second = make(tiny_dataset, space, candidates=CANDIDATES)
    dataset = scan(tiny_dataset)
    try:
        for _ in range(2):
            assert_exactly_once(dataset, *run_epoch(second))
    finally:
        second.close()
    assert second.history == [] and second.source is None and not second.exploring
    assert [loader for loader, _ in built] == [written.loader]  # that loader, built once for both epochs
    assert built[0][1].get("indices") is None
    assert len(optuna.get_all_study_summaries("sqlite:///autotune.db")) == studies


def test_a_matching_yaml_that_drops_much_of_each_epoch_is_warned_of_as_build_loader_does(tiny_dataset, space, caplog):
    """Batch 10 over 24 images drops the last 4 (17 %) of each epoch: build_loader warned of it for that YAML, the
    AutoLoader that built the same loader from it said nothing."""
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 10, "num_workers": 0})
    save_config(Config(loader=loader, hardware=fingerprint.collect(), dataset=scan(tiny_dataset).summary(), device="cpu"), "autotune.yaml")
    with pytest.warns(UserWarning, match="drops the last 4") as built:
        autotune.build_loader(tiny_dataset, "autotune.yaml", device="cpu").close()
    al = make(tiny_dataset, space, batch_size=None, candidates=CANDIDATES[:1])
    al.close()
    assert not al.exploring and al.settled == loader
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "drops" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(str(built[0].message).split(";")[0])  # once, the same words


def test_a_yaml_from_another_machine_is_explored_again(tiny_dataset, space):
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    other = {"cpus": 999, "torch": "0.0", "python": "2.7"}
    save_config(
        Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 4}), hardware=other, dataset=scan(tiny_dataset).summary()), "autotune.yaml"
    )
    al = make(tiny_dataset, space, candidates=CANDIDATES[:1])
    assert al.exploring and al.history[0]["action"] == "switch"
    al.close()


def test_a_yaml_that_no_longer_matches_is_named_and_its_batch_size_kept(tiny_dataset, space, caplog):
    """Explored again (a warning: the file will be rewritten), at the YAML's batch size when none is given."""
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    other = {"cpus": 999, "torch": "0.0", "python": "2.7"}
    save_config(
        Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8}), hardware=other, dataset=scan(tiny_dataset).summary()), "autotune.yaml"
    )
    al = make(tiny_dataset, space, candidates=CANDIDATES[:1], batch_size=None)
    assert al.exploring and al.batch_size == 8  # not the default (the 24 samples here)
    al.close()
    assert "autotune.yaml does not match" in caplog.text and "rewritten" in caplog.text


AT_EXIT = textwrap.dedent("""
    import atexit, sys
    from autotune.autoloader import AutoLoader, Exploration
    cands = [{"backend": "torch", "num_workers": 0}, {"backend": "torch", "num_workers": 0, "pin_memory": True},
             {"backend": "torch", "num_workers": 1}]
    loader = AutoLoader(sys.argv[1], device="cpu", config="autotune.yaml", batch_size=4, space=sys.argv[2], storage="sqlite:///autotune.db",
                        candidates=cands, budget_s=600.0, max_slowdown=100.0, seed=3,
                        exploration=Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=8, settle_wait=0.0))
    for images, labels in loader:  # the README's loop: 6 batches, two candidates measured, the third running
        pass
    assert loader.exploring  # training ends here, still exploring
    if sys.argv[3] == "atexit":
        atexit.register(loader.close)  # closed only as the interpreter exits; else never closed at all
""")


def _run_at_exit(tiny_dataset, space, workdir, how: str):
    script = workdir / "at_exit.py"
    script.write_text(AT_EXIT)
    out = subprocess.run(
        [sys.executable, str(script), str(tiny_dataset), space, how],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    return load_config(workdir / "autotune.yaml", strict=True)


@pytest.mark.slow
def test_training_that_ends_without_close_still_writes_the_yaml(tiny_dataset, space, workdir):
    cfg = _run_at_exit(tiny_dataset, space, workdir, "unclosed")
    assert cfg.result["settled_because"] == "training ended while exploring"
    study = optuna.load_study(study_name=cfg.study["name"], storage="sqlite:///autotune.db")
    cut = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    assert [trial_attrs(t).get("outcome") for t in cut] == ["interrupted"]  # the candidate still running: not a failure of its own
    assert cfg.study["failed"] == {"interrupted": 1}


def test_training_that_ends_while_exploring_still_writes_the_best_so_far(tiny_dataset, space):
    with make(tiny_dataset, space, candidates=CANDIDATES) as al:
        run_epoch(al)  # 3 candidates measured, exploration not over
        assert al.exploring
    assert not al.exploring and al.history[-1]["reason"] == "training ended while exploring"
    assert load_config("autotune.yaml").loader.describe() == al.settled.describe()
    assert not [t for t in al.source.study.trials if t.state == optuna.trial.TrialState.RUNNING]


def test_an_exploration_training_cut_short_goes_on_in_the_next_run(tiny_dataset, space, caplog, capsys):
    """Settled as training ended after one epoch, the YAML was final: the next run used it and explored nothing. It
    records the cut, and the next run explores on in the same study: what was measured counts, no config measured
    twice, the candidate interrupted and the ones queued are run, and the YAML is rewritten once exploration ends."""
    first = make(tiny_dataset, space, candidates=CANDIDATES)
    run_epoch(first)  # 3 candidates measured, the 4th interrupted, the heuristic queued
    first.close()
    cut = load_config("autotune.yaml")
    assert cut.result["settled_because"] == "training ended while exploring" and cut.result["exploration_cut_short"] is True
    from autotune.cli import main

    assert main(["show", "autotune.yaml"]) == 0
    assert "exploration cut short: training ended while exploring after" in " ".join(re.sub("[│┃┌┐└┘├┤┬┴┼─━]", " ", capsys.readouterr().out).split())
    caplog.clear()
    second = make(tiny_dataset, space, candidates=CANDIDATES)
    try:
        assert second.exploring and second.source.study.study_name == cut.study["name"]
        said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "exploring on" in r.getMessage()]
        assert len(said) == 1 and cut.study["name"] in said[0]
        for _ in range(4):
            run_epoch(second)
            if not second.exploring:
                break
    finally:
        second.close()
    assert second.history[-1]["reason"] != "training ended while exploring"
    done = load_config("autotune.yaml")
    assert "exploration_cut_short" not in done.result and done.study["name"] == cut.study["name"]
    assert done.result["candidates_tried"] > cut.result["candidates_tried"]
    # the 4 candidates and the heuristic, each measured once: complete, or left as too slow (on a busy machine a
    # candidate can fall behind the best by more than the exploration allows)
    measured = [t.user_attrs["config"] for t in second.source.study.trials if t.user_attrs.get("outcome") in ("complete", "pruned")]
    assert len(measured) == len(set(measured)) >= 5, [(t.user_attrs.get("config"), t.user_attrs.get("outcome")) for t in second.source.study.trials]
    assert not [t for t in second.source.study.trials if t.state.name in ("RUNNING", "WAITING")]


#: 6 batches an epoch, a warm-up of 5 and checks every 10: epochs too short to measure after a warm-up
SHORT = Exploration(warmup_batches=5, measure_batches=30, check_batches=10, max_candidates=3, settle_wait=0.0)


def short_epochs(tiny_dataset, space, epochs: int = 4) -> tuple[AutoLoader, list[optuna.trial.FrozenTrial]]:
    """Run ``epochs`` epochs of the first three candidates under :data:`SHORT`; the loader and its completed trials."""
    al = make(tiny_dataset, space, candidates=CANDIDATES[:3], exploration=SHORT)
    try:
        for _ in range(epochs):
            assert_exactly_once(al.dataset, *run_epoch(al))
    finally:
        al.close()
    return al, [t for t in al.source.study.trials if t.state == optuna.trial.TrialState.COMPLETE]


def test_epochs_too_short_for_a_warm_up_score_each_candidate_over_a_whole_epoch(tiny_dataset, space):
    """6 batches an epoch, a warm-up of 5 and checks every 10: each candidate runs a whole epoch, all of it measured,
    so candidates finish (instead of none completing), scored by what the loop got over the whole epoch."""
    al, done = short_epochs(tiny_dataset, space)
    assert [t.number for t in done] == [0, 1, 2] and [trial_attrs(t)["measured_batches"] for t in done] == [6, 6, 6]
    assert [(h["epoch"], h["batch"]) for h in al.history] == [(0, 0), (0, 6), (1, 6), (2, 6)], "switches at the ends of epochs only"
    assert al.history[-1]["action"] == "settle" and al.short_epochs
    cfg = load_config("autotune.yaml")
    assert "whole epochs" in cfg.result["score"] and "whole epochs" in cfg.measurement["statistic"]
    assert (cfg.measurement["warmup_batches"], cfg.measurement["measure_batches"]) == (0, 6)  # not the 5 and 30 asked


@pytest.mark.slow
def test_a_short_epochs_end_counts_in_its_candidates_score(tiny_dataset, space, monkeypatch):
    """What a loader does after the last batch of an epoch (DALI decodes the dropped partial batch; workers stop)
    is paid every epoch by the loader training keeps: scored over whole short epochs, a candidate pays it too."""
    real = loader_module.build_from_dataset
    END_S = 0.3

    class SlowEnd:
        def __init__(self, inner):
            self.inner = inner

        def __iter__(self):
            yield from self.inner
            time.sleep(END_S)  # the epoch's end, after its last batch

        def __len__(self):
            return len(self.inner)

        def close(self):
            self.inner.close()

    monkeypatch.setattr(loader_module, "build_from_dataset", lambda *a, **k: SlowEnd(real(*a, **k)))
    al, done = short_epochs(tiny_dataset, space)
    assert len(done) == 3 and all(t.value <= len(al.dataset) / END_S for t in done)  # 24 samples an epoch, each epoch >= 0.3 s


class _Timed:
    """A loader whose every batch takes ``step`` seconds of a :class:`FakeClock` (the loop's own step takes none):
    what a candidate scores is then fixed by the test, whatever else the machine runs."""

    def __init__(self, inner, clock: FakeClock, step: float):
        self.inner, self.clock, self.step = inner, clock, step

    def __iter__(self):
        for batch in self.inner:
            self.clock.now += self.step
            yield batch

    def close(self):
        self.inner.close()


def _timed_builds(monkeypatch, step_of, build_s: float = 0.0) -> FakeClock:
    """Candidates' batches timed by a fake clock: ``step_of(loader config)`` seconds a batch, ``build_s`` a build."""
    real = loader_module.build_from_dataset
    clock = FakeClock()
    monkeypatch.setattr(loader_module, "_clock", clock)

    def build(ds, loader, **kw):
        clock.now += build_s
        return _Timed(real(ds, loader, **kw), clock, step_of(loader))

    monkeypatch.setattr(loader_module, "build_from_dataset", build)
    return clock


@pytest.mark.slow
def test_a_short_epochs_score_leaves_out_building_the_loader(tiny_dataset, space, monkeypatch):
    """Candidates are rebuilt every short epoch, the loader training keeps is built once: a build that takes
    seconds (a DALI pipeline on a GPU) must not decide the choice. The first batch and the epoch's end still count.
    Timed by a fake clock (each batch 0.01 s, each build 100 s), the score is exact whatever the machine's load."""
    _timed_builds(monkeypatch, lambda loader: 0.01, build_s=100.0)
    al, done = short_epochs(tiny_dataset, space)
    assert len(done) == 3 and [t.value for t in done] == [pytest.approx(len(al.dataset) / (6 * 0.01))] * 3  # 6 batches, no build


@pytest.mark.slow
def test_short_epochs_left_early_by_a_steps_per_epoch_loop_still_finish_candidates(tiny_dataset, space):
    """A loop that takes 3 of each epoch's 6 batches never reaches an epoch's end: a candidate is judged once it has
    run an epoch's worth of batches, so exploration still ends."""
    rules = Exploration(warmup_batches=5, measure_batches=30, check_batches=10, max_candidates=3, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=CANDIDATES[:3], exploration=rules)
    try:
        for _ in range(10):  # 2 batches an epoch are measured (the one the loop leaves on is not timed): 3 epochs a candidate
            for step, _batch in enumerate(al):
                if step == 2:
                    break
    finally:
        al.close()
    done = [t for t in al.source.study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 3 and all(trial_attrs(t)["measured_batches"] >= 6 for t in done)
    assert al.history[-1]["action"] == "settle" and al.history[-1]["reason"] != "training ended while exploring"


def test_training_that_ends_before_any_candidate_finished_says_nothing_was_written(tiny_dataset, space, caplog):
    rules = Exploration(warmup_batches=1, measure_batches=50, check_batches=1, max_candidates=3, settle_wait=0.0)
    with make(tiny_dataset, space, candidates=CANDIDATES[:2], exploration=rules) as al:
        run_epoch(al)
    al.close()  # a second close says nothing more
    said = [r.getMessage() for r in caplog.records if "not written" in r.getMessage()]
    assert len(said) == 1 and "autotune.yaml" in said[0] and not Path("autotune.yaml").exists()


def _open_trials_left(name: str) -> dict[int, tuple[str, str | None]]:
    """Each trial of study ``name`` as the storage holds it: number -> (state, outcome)."""
    study = optuna.load_study(study_name=name, storage="sqlite:///autotune.db")
    return {t.number: (t.state.name, t.user_attrs.get("outcome")) for t in study.trials}


#: no candidate finishes before the loop leaves: 50 measured batches a candidate, 6 batches an epoch
UNFINISHED = Exploration(warmup_batches=1, measure_batches=50, check_batches=1, max_candidates=3, settle_wait=0.0)


@pytest.mark.parametrize("how", ["close", "exception", "dropped"])
def test_a_loop_left_before_any_candidate_finished_leaves_no_trial_running_or_queued(tiny_dataset, space, how):
    """A break after 5 batches then close(), an exception out of a with block, or the loader dropped (garbage
    collected) without close(): the study kept trial 0 RUNNING and the rest WAITING, for ever. The candidate running
    is interrupted; the queued ones are taken off the queue, counted as queued and not run."""
    import gc

    from autotune.study.result import outcome_counts

    al = make(tiny_dataset, space, candidates=CANDIDATES[:2], exploration=UNFINISHED)
    name = al.source.study.study_name
    if how == "exception":
        with pytest.raises(ZeroDivisionError), al:
            for step, _batch in enumerate(al):
                if step == 4:
                    raise ZeroDivisionError("the training step failed")
    else:
        for step, _batch in enumerate(al):
            if step == 4:
                break
        if how == "close":
            al.close()
        else:
            del al
            gc.collect()
    trials = _open_trials_left(name)
    assert trials[0] == ("FAIL", "interrupted")
    assert len(trials) >= 2 and all(v == ("FAIL", "waiting") for n, v in trials.items() if n > 0)  # the second candidate, the heuristic
    counts = outcome_counts(optuna.load_study(study_name=name, storage="sqlite:///autotune.db"))
    assert counts == {"interrupted": 1, "waiting": len(trials) - 1}  # "queued, not run" in reports, as autotune run's
    assert not Path("autotune.yaml").exists()


LEFT_EARLY = textwrap.dedent("""
    import sys
    from autotune.autoloader import AutoLoader, Exploration
    loader = AutoLoader(sys.argv[1], device="cpu", config="autotune.yaml", batch_size=4, space=sys.argv[2], storage="sqlite:///autotune.db",
                        candidates=[{"backend": "torch", "num_workers": 0}], budget_s=600.0, max_slowdown=100.0, seed=3,
                        exploration=Exploration(warmup_batches=1, measure_batches=50, check_batches=1, max_candidates=3, settle_wait=0.0))
    print(loader.source.study.study_name)
    for step, batch in enumerate(loader):
        if step == 4:
            break  # and the interpreter exits, the loader neither closed nor dropped
""")


@pytest.mark.slow
def test_a_loop_left_early_then_the_interpreters_exit_leaves_no_trial_running(tiny_dataset, space, workdir):
    script = workdir / "left_early.py"
    script.write_text(LEFT_EARLY)
    out = subprocess.run([sys.executable, str(script), str(tiny_dataset), space], cwd=workdir, capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)
    assert out.returncode == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    trials = _open_trials_left(out.stdout.split()[-1])
    assert trials[0] == ("FAIL", "interrupted") and all(v == ("FAIL", "waiting") for n, v in trials.items() if n > 0)


def test_a_config_path_that_cannot_be_written_is_an_error_before_training(tiny_dataset, space):
    Path("afile").write_text("")
    with pytest.raises(autotune.UserError, match=r"config 'afile/x.yaml' is under .*afile.*, which is a file.*config=None"):
        make(tiny_dataset, space, config="afile/x.yaml", candidates=CANDIDATES[:1])


def test_a_study_name_taken_gets_a_suffix_instead_of_an_error(tiny_dataset, space, caplog):
    """A training run is not stopped for it, but the new name is said (it was in an INFO line and the YAML only)."""
    names = []
    for _ in range(2):
        al = make(tiny_dataset, space, candidates=CANDIDATES[:1], study_name="same")
        al.close()
        names.append(al.source.study.study_name)
    assert names == ["same", "same-2"]
    said = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "already exists" in r.getMessage()]
    assert said == [
        "study 'same' already exists in sqlite:///autotune.db: this exploration is kept as study 'same-2' (AutoLoader starts a study each time it explores)"
    ]


@pytest.mark.parametrize("how", ["argument", "exploration"])
def test_zero_budget_explores_nothing(tiny_dataset, space, how):
    """Exploration(budget_s=...) was overwritten by AutoLoader's own default (180 s) and explored on."""
    kw = {"budget_s": 0.0} if how == "argument" else {"budget_s": None, "max_slowdown": None, "exploration": dataclasses.replace(QUICK, budget_s=0.0)}
    al = make(tiny_dataset, space, candidates=CANDIDATES, **kw)
    epochs_exactly_once(al, tiny_dataset, 1)
    assert [h["action"] for h in al.history] == ["settle"] and al.settled.describe() == "torch b=4 workers=0"
    assert not Path("autotune.yaml").exists()  # nothing measured: nothing to write
    assert al.source is None and not Path("autotune.db").exists()  # and no empty study to list


def test_exploration_budget_and_slowdown_count_unless_given_twice():
    from autotune.autoloader._setup import rules_of

    assert rules_of(Exploration(budget_s=3.0, max_slowdown=2.0), budget_s=None, max_slowdown=None) == Exploration(budget_s=3.0, max_slowdown=2.0)
    assert rules_of(Exploration(warmup_batches=2), budget_s=40.0, max_slowdown=None).budget_s == 40.0  # at its default: yields
    assert rules_of(None, budget_s=None, max_slowdown=None) == Exploration()
    with pytest.raises(autotune.UserError, match=r"^budget_s is given twice: AutoLoader\(budget_s=40\.0\) and Exploration\(budget_s=3\.0\); pass it once$"):
        rules_of(Exploration(budget_s=3.0), budget_s=40.0, max_slowdown=None)
    with pytest.raises(autotune.UserError, match="max_slowdown must be >= 1.0"):
        rules_of(None, budget_s=None, max_slowdown=0.5)
    with pytest.raises(autotune.UserError, match="budget_s must be a number of seconds"):  # not "given twice"
        rules_of(Exploration(budget_s=60.0), budget_s="x", max_slowdown=None)


@pytest.mark.slow
def test_a_candidate_far_slower_than_the_best_is_abandoned_early(tiny_dataset, space, monkeypatch):
    """Timed by a fake clock (a batch 0.01 s, the slow candidate's 0.8 s), the verdict does not move with the load."""
    _timed_builds(monkeypatch, lambda loader: 0.8 if loader.torch.prefetch_factor == 4 else 0.01)
    rules = Exploration(warmup_batches=1, measure_batches=3, check_batches=1, max_candidates=3, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=[CANDIDATES[0], CANDIDATES[3], CANDIDATES[1]], exploration=rules, max_slowdown=1.5)
    try:
        for _ in range(3):
            run_epoch(al)
    finally:
        al.close()
    by_config = {t.user_attrs["config"]: t for t in al.source.study.trials if "config" in t.user_attrs}
    slow = by_config["torch b=4 workers=1 prefetch=4"]
    assert slow.state == optuna.trial.TrialState.PRUNED and slow.user_attrs["measured_batches"] == 1  # not its 3
    assert by_config["torch b=4 workers=0"].state == optuna.trial.TrialState.COMPLETE


class _Slow:
    """A loader that takes ``delay`` seconds a batch."""

    def __init__(self, inner, delay):
        self.inner, self.delay = inner, delay

    def __iter__(self):
        for batch in self.inner:
            time.sleep(self.delay)
            yield batch

    def close(self):
        self.inner.close()


class _Hiccup:
    """A loader that keeps up (every batch read at its first) but for its ``at``-th batch, which takes ``delay`` s
    (a collection, an epoch's end): once, not every batch. ``delay`` None: ``every`` seconds at every batch."""

    def __init__(self, inner, at, delay, every=0.0):
        self.inner, self.at, self.delay, self.every = inner, at, delay, every

    def __iter__(self):
        batches = list(self.inner)  # read at the first batch (a warm-up batch): the rest come at once
        for i, batch in enumerate(batches):
            if i == self.at and self.delay:
                time.sleep(self.delay)
            time.sleep(self.every)
            yield batch

    def close(self):
        self.inner.close()


def test_rules_leave_the_longest_wait_out_of_whether_the_loader_keeps_up():
    t = Tally()
    for wait in (0.001, 0.3, 0.002, 0.001):
        t.add(0.05, 4, wait)
    assert t.measured == 4 and t.samples == 16 and math.isclose(t.loop_s, 0.2)
    assert math.isclose(t.wait_s, 0.304) and math.isclose(t.steady_wait_s, 0.004)  # the 0.3 s hiccup left out
    short = Tally()  # an epoch of two batches: the one wait is the loader's, not a hiccup
    for wait in (1.5, 0.0):
        short.add(1.6, 256, wait)
    assert math.isclose(short.steady_wait_s, 1.5)


@pytest.mark.parametrize("delay,settles", [(None, True), ("every", False)])
@pytest.mark.slow
def test_one_hiccup_does_not_keep_a_loader_that_keeps_up_from_settling(tiny_dataset, space, monkeypatch, delay, settles):
    """One long wait in the measured batches is not a loader too slow; a wait at every batch is."""
    real = loader_module.build_from_dataset

    def build(ds, loader, **kw):
        inner = real(ds, loader, **kw)
        return _Hiccup(inner, at=2, delay=None, every=0.06) if delay == "every" else _Hiccup(inner, at=2, delay=0.4)

    monkeypatch.setattr(loader_module, "build_from_dataset", build)
    rules = Exploration(warmup_batches=1, measure_batches=4, check_batches=4, max_candidates=3, settle_wait=0.1)
    al = make(tiny_dataset, space, candidates=CANDIDATES[:3], exploration=rules)
    try:
        for _ in range(2):
            for _batch in al:
                time.sleep(0.05)  # the training step
    finally:
        al.close()
    switches = [h for h in al.history if h["action"] == "switch"]
    if settles:
        assert len(switches) == 1 and al.history[1]["reason"] == "the loader keeps up with the step", al.history
    else:
        assert len(switches) > 1, al.history


def _recording_builds(monkeypatch, slow_build: dict | None = None, slow_batches: dict | None = None) -> list[tuple[str, int | None]]:
    """Record (config, positions read or None) of every loader built; optionally slow a config's build or batches."""
    real = loader_module.build_from_dataset
    builds: list[tuple[str, int | None]] = []

    def build(ds, loader, **kw):
        desc = loader.describe()
        builds.append((desc, None if kw.get("indices") is None else len(kw["indices"])))
        if slow_build and desc in slow_build:
            time.sleep(slow_build[desc])
        inner = real(ds, loader, **kw)
        return _Slow(inner, slow_batches[desc]) if slow_batches and desc in slow_batches else inner

    monkeypatch.setattr(loader_module, "build_from_dataset", build)
    return builds


@pytest.mark.parametrize("measure,check", [(8, 4), (5, 4)])  # 5 measured are judged at the check after 8
def test_a_candidate_measured_across_an_epoch_end_is_built_once(tiny_dataset, space, monkeypatch, measure, check):
    """A candidate reads on into the next epoch's order instead of being rebuilt (and warmed up again) there."""
    builds = _recording_builds(monkeypatch)
    rules = Exploration(warmup_batches=1, measure_batches=measure, check_batches=check, max_candidates=2, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=CANDIDATES[:2], exploration=rules)  # 9 batches a candidate, 6 an epoch
    epochs_exactly_once(al, tiny_dataset, 4)  # each epoch still its own order, every sample once
    explored = [b for b in builds if b[1] is not None]
    assert explored == [("torch b=4 workers=0", 48), ("torch b=4 workers=1 prefetch=2", 36)], builds  # 24 + 24; 12 + 24
    measured = {trial_attrs(t)["config"]: trial_attrs(t)["measured_batches"] for t in al.source.study.trials if "measured_batches" in trial_attrs(t)}
    assert measured == {"torch b=4 workers=0": 8, "torch b=4 workers=1 prefetch=2": 8}  # judged at a check point


def test_a_loop_that_stops_by_count_after_the_last_batch_still_reads_on(tiny_dataset, space, monkeypatch):
    builds = _recording_builds(monkeypatch)
    rules = Exploration(warmup_batches=1, measure_batches=8, check_batches=4, max_candidates=1, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=CANDIDATES[:1], exploration=rules)
    dataset = scan(tiny_dataset)
    try:
        for _ in range(3):
            indices, labels = [], []
            for _step, (_images, y, ix) in zip(range(len(al)), al, strict=False):  # never asks the loader past the epoch's last batch
                indices += ix.tolist()
                labels += y.tolist()
            assert_exactly_once(dataset, indices, labels)
    finally:
        al.close()
    assert [b for b in builds if b[1] is not None] == [("torch b=4 workers=0", 48)], builds


@pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")
def test_a_dali_candidate_reads_on_into_the_next_epoch_as_one_file_list(tiny_dataset, space, monkeypatch):
    builds = _recording_builds(monkeypatch)
    dali = {"backend": "dali", "dali_device": "cpu", "num_threads": 1, "prefetch_queue_depth": 1}
    rules = Exploration(warmup_batches=1, measure_batches=8, check_batches=4, max_candidates=1, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=[dali], exploration=rules)
    epochs_exactly_once(al, tiny_dataset, 3)
    assert [b for b in builds if b[1] is not None] == [("dali-cpu b=4 threads=1 queue=1", 48)], builds


@pytest.mark.slow
def test_settling_mid_epoch_on_another_candidate_finishes_the_epoch_when_that_is_cheaper(tiny_dataset, space, monkeypatch):
    """The winner took 3 s to start; the current candidate is 0.6 s a batch slower: the epoch's 2 batches left cost
    less. (Seconds, not tenths: on two busy cores a stall of a few tenths made the current candidate look slower.)"""
    first, second = "torch b=4 workers=0", "torch b=4 workers=0 pin"
    builds = _recording_builds(monkeypatch, slow_build={first: 3.0}, slow_batches={second: 0.6})
    rules = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=2, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=[CANDIDATES[0], CANDIDATES[2]], exploration=rules)  # 2 batches each
    epochs_exactly_once(al, tiny_dataset, 2)
    settle = al.history[-1]
    assert settle["action"] == "settle" and settle["config"] == first and settle.get("from_next_epoch"), al.history
    assert settle["epoch"] == 0 and 0 < settle["batch"] < 6  # decided mid-epoch (epochs count from 0)
    assert builds == [(first, 24), (second, 16), (first, None)], builds  # no second start of the winner mid-epoch


@pytest.mark.slow
def test_a_slow_or_failing_study_write_does_not_stall_or_break_the_loop(tiny_dataset, space, monkeypatch, caplog):
    """The last result and the YAML are stored on a worker thread: a disk that takes 1.5 s a write costs the loop nothing.

    (Asking for the next candidate waits for the results before it, so that the sampler sees them all.)
    """
    from autotune.autoloader import _source

    real_tell, real_write = _source.CandidateSource.tell, _source.CandidateSource.write_config

    def slow_tell(self, cand, *a, **kw):
        if cand.params.get("num_workers") == 1:  # the last candidate: its result is stored while the loop goes on
            time.sleep(1.5)
            raise RuntimeError("database is locked")  # a storage failure: a warning, not an error in the loop
        return real_tell(self, cand, *a, **kw)

    def slow_write(self, *a, **kw):
        time.sleep(1.5)
        return real_write(self, *a, **kw)

    monkeypatch.setattr(_source.CandidateSource, "tell", slow_tell)
    monkeypatch.setattr(_source.CandidateSource, "write_config", slow_write)
    rules = Exploration(warmup_batches=1, measure_batches=1, check_batches=1, max_candidates=2, settle_wait=0.0)
    al = make(tiny_dataset, space, candidates=CANDIDATES[:2], exploration=rules)
    gaps, last = [], time.perf_counter()
    try:
        for _ in range(2):
            for _batch in al:
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
    finally:
        al.close()
    assert not al.exploring and max(gaps[1:]) < 1.0, gaps  # the last tell and the YAML write: 3 s, none in the loop
    assert load_config("autotune.yaml", strict=True).loader.describe() == "torch b=4 workers=0"  # written by close()
    assert "storing candidate" in caplog.text and "database is locked" in caplog.text


def test_an_error_asking_the_study_is_raised_not_taken_for_no_candidate(tiny_dataset, space, monkeypatch):
    from autotune.autoloader import _source

    def bad_ask(self):
        raise KeyError("a bug in the space")

    monkeypatch.setattr(_source.CandidateSource, "ask", bad_ask)
    with pytest.raises(KeyError, match="a bug in the space"):
        make(tiny_dataset, space, candidates=CANDIDATES[:1])


@pytest.mark.slow
def test_close_at_interpreter_exit_still_writes_the_yaml(tiny_dataset, space, workdir):
    assert _run_at_exit(tiny_dataset, space, workdir, "atexit").result["settled_because"] == "training ended while exploring"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available() or not is_available("dali"), reason="needs a CUDA GPU and DALI")
def test_on_a_gpu_it_explores_dali_gpu_decoding_and_delivers_every_sample_once(tiny_dataset, workdir):
    """The default space on a GPU: the mixed-decode start first, batches on the GPU, each epoch exactly once."""
    rules = Exploration(warmup_batches=1, measure_batches=2, check_batches=1, max_candidates=3, settle_wait=0.0)
    al = AutoLoader(
        tiny_dataset,
        device="cuda",
        config="autotune.yaml",
        batch_size=4,
        seed=7,
        storage="sqlite:///autotune.db",
        with_indices=True,
        exploration=rules,
        budget_s=600.0,
        max_slowdown=100.0,
    )
    dataset = scan(tiny_dataset)
    try:
        for _ in range(3):
            indices, labels = [], []
            for images, y, ix in al:
                assert images.is_cuda and y.is_cuda and images.shape == (4, 3, 224, 224)
                indices += ix.tolist()
                labels += y.tolist()
            assert_exactly_once(dataset, indices, labels)
    finally:
        al.close()
    first = al.history[0]["config"]  # DALI's other start: mixed decode on 16 cores and more, else the hardware decoder alone
    assert first == "dali-gpu b=4 threads=12 queue=2 hw_load=0.5" or (first.startswith("dali-gpu b=4 threads=") and first.endswith(" queue=2 hw_load=1"))
    assert not al.exploring and load_config("autotune.yaml", strict=True).device == "cuda"


# -- DDP: two gloo processes -------------------------------------------------------------------------------------
WORKER = textwrap.dedent("""
    import json, os, sys, time
    import torch.distributed as dist
    from autotune.autoloader import AutoLoader, Exploration

    rank, data, space, out, init = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    if rank == 1:  # one candidate fails on rank 1 only: rank 1 runs a fallback until the ranks next agree
        from autotune.autoloader import _loader
        real = _loader.build_from_dataset
        def build(ds, loader, **kw):
            if loader.torch is not None and loader.torch.prefetch_factor == 3:
                raise RuntimeError("injected failure on rank 1")
            return real(ds, loader, **kw)
        _loader.build_from_dataset = build
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2)
    cands = json.loads(sys.argv[6])
    al = AutoLoader(data, device="cpu", config="autotune.yaml", batch_size=2, space=space, storage="sqlite:///autotune.db", with_indices=True,
                    candidates=cands, budget_s=600.0, max_slowdown=100.0,
                    exploration=Exploration(warmup_batches=1, measure_batches=2, check_batches=1, max_candidates=4, settle_wait=0.0))
    epochs = []
    for _ in range(3):
        seen = []
        for images, labels, ix in al:
            if rank == 1:
                time.sleep(0.05)  # rank 1 is the slow one: its time is the score
            seen.append([ix.tolist(), labels.tolist()])
        epochs.append(seen)
    al.close()
    json.dump({"epochs": epochs, "history": al.history, "seed": al.seed}, open(out, "w"))
    dist.barrier()
    dist.destroy_process_group()
""")


FALLBACK_WORKER = textwrap.dedent("""
    import json, sys, datetime
    import torch, torch.distributed as dist
    from autotune.autoloader import AutoLoader, Exploration, _loader

    rank, data, space, out, init = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    if rank == 1:  # rank 1's first loader dies at its 10th batch, near the epoch's end: rank 1 alone rebuilds there
        real, built = _loader.build_from_dataset, []

        class Dies:
            def __init__(self, inner):
                self.inner = inner

            def __iter__(self):
                for i, b in enumerate(self.inner):
                    if i == 9:
                        raise RuntimeError("injected worker death on rank 1")
                    yield b

            def close(self):
                self.inner.close()

        def build(ds, loader, **kw):
            built.append(1)
            return Dies(real(ds, loader, **kw)) if len(built) == 1 else real(ds, loader, **kw)

        _loader.build_from_dataset = build
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    cands = [{"backend": "torch", "num_workers": 0}, {"backend": "torch", "num_workers": 0, "pin_memory": True}]
    al = AutoLoader(data, device="cpu", config=None, batch_size=1, space=space, storage=None, candidates=cands, budget_s=600.0,
                    max_slowdown=100.0, seed=7, exploration=Exploration(warmup_batches=3, measure_batches=6, check_batches=5,
                    max_candidates=4, settle_wait=0.0))
    for epoch in range(3):
        for step, (images, labels) in enumerate(al):
            t = torch.tensor([float(epoch * 100 + step)])
            dist.all_reduce(t)  # the training step's collective: the ranks must stay in step
            assert t.item() == 2 * (epoch * 100 + step), (epoch, step, t.item())
    json.dump(al.history, open(out, "w"))
    dist.destroy_process_group()
""")


def _two_ranks(workdir: Path, script_text: str, tiny_dataset, space, *extra: str) -> list[str]:
    """Run ``script_text`` as two gloo ranks (argv: rank, data, space, its JSON out, the rendezvous file, *extra); their output."""
    script = workdir / "worker.py"
    script.write_text(script_text)
    ranks = run_ranks(
        [[sys.executable, str(script), str(r), str(tiny_dataset), space, str(workdir / f"rank{r}.json"), str(workdir / "init"), *extra] for r in range(2)],
        workdir,
        timeout=300,
        merge_stderr=True,
    )
    outs = [out for _, out, _ in ranks]
    assert [code for code, _, _ in ranks] == [0, 0], "\n".join(o[-3000:] for o in outs)
    return outs


OTHER_DATASET_WORKER = textwrap.dedent("""
    import datetime, json, sys
    import torch.distributed as dist
    import autotune

    rank, data, space, out, init, other = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    try:
        autotune.AutoLoader(other if rank == 1 else data, device="cpu", config=None, batch_size=2, space=space, storage=None, budget_s=5.0)
        said = None
    except autotune.UserError as e:
        said = str(e)
    json.dump(said, open(out, "w"))
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_ddp_ranks_on_different_datasets_are_told_on_every_rank(tiny_dataset, space, workdir, tmp_path_factory):
    """Rank 1 on another folder: rank 0's plan split 24 images among ranks that read other files, and the first
    all_reduce died in gloo ('Received data size doesn't match expected size'); with NCCL, a hang."""
    from autotune.dataset.synth import synthesize

    other = synthesize(tmp_path_factory.mktemp("other") / "train", images=12, classes=3, min_side=64, max_side=96, workers=1)
    _two_ranks(workdir, OTHER_DATASET_WORKER, tiny_dataset, space, str(other))
    said = [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(2)]
    assert said[0] == said[1] and said[0].startswith("the 2 DDP ranks read different datasets: images 24 (rank 0), 12 (rank 1); dataset ")
    assert said[0].endswith("pass every rank the same dataset folder, with the same files")


@pytest.mark.slow
def test_ddp_a_dataset_missing_on_one_rank_is_told_on_every_rank(tiny_dataset, space, workdir, tmp_path):
    """Rank 1's folder is not there (a node without the copy): rank 1 raised alone and rank 0 waited in the ranks'
    dataset comparison until the process group's timeout (30 minutes by default)."""
    _two_ranks(workdir, OTHER_DATASET_WORKER, tiny_dataset, space, str(tmp_path / "not-copied"))
    said = [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(2)]
    assert said[0].startswith("rank 1: ") and said[0].removeprefix("rank 1: ") == said[1], said
    assert "not-copied" in said[1]


OTHER_DEVICE_WORKER = textwrap.dedent("""
    import datetime, json, sys
    import torch.distributed as dist
    import autotune
    from autotune.autoloader import _setup

    rank, data, space, out, init = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
    if rank == 1:  # device=None on a rank that sees a GPU, the other sees none
        _setup._device = lambda device: "cuda:0"
    dist.init_process_group("gloo", init_method=f"file://{init}", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    try:
        autotune.AutoLoader(data, device=None, config=None, batch_size=2, space=space, storage=None, budget_s=5.0)
        said = None
    except autotune.UserError as e:
        said = str(e)
    json.dump(said, open(out, "w"))
    dist.destroy_process_group()
""")


@pytest.mark.slow
def test_ddp_ranks_on_different_kinds_of_device_are_told_on_every_rank(tiny_dataset, space, workdir):
    _two_ranks(workdir, OTHER_DEVICE_WORKER, tiny_dataset, space)
    said = [json.loads((workdir / f"rank{r}.json").read_text()) for r in range(2)]
    assert said[0] == said[1] and said[0].startswith("the 2 DDP ranks deliver to different kinds of device: device cpu (rank 0), cuda (rank 1); "), said


@pytest.mark.slow
def test_ddp_a_rank_that_rebuilds_alone_near_an_epoch_end_reads_as_far_as_the_others(tiny_dataset, space, workdir):
    """A fallback on one rank must not change how far its loader reads ahead: the ranks' check points stay together."""
    outs = _two_ranks(workdir, FALLBACK_WORKER, tiny_dataset, space)
    h0, h1 = (json.loads((workdir / f"rank{r}.json").read_text()) for r in range(2))
    assert h0 == h1 and "injected worker death" in outs[1]


@pytest.mark.slow
def test_ddp_ranks_switch_together_and_the_slowest_rank_scores(tiny_dataset, space, workdir):
    cands = json.dumps([CANDIDATES[0], {"backend": "torch", "num_workers": 1, "prefetch_factor": 3}, CANDIDATES[2], CANDIDATES[1]])
    _two_ranks(workdir, WORKER, tiny_dataset, space, cands)
    r0, r1 = (json.loads((workdir / f"rank{r}.json").read_text()) for r in range(2))
    assert r0["seed"] == r1["seed"]  # drawn by rank 0, agreed by both
    assert r0["history"] == r1["history"]  # the same candidate, switched at the same batch, on both ranks
    assert sum(1 for h in r0["history"] if h["action"] == "switch" and h["batch"] > 0) >= 2
    dataset = scan(tiny_dataset)
    for e0, e1 in zip(r0["epochs"], r1["epochs"], strict=False):
        assert len(e0) == len(e1) == 6  # 12 samples per rank, batches of 2
        ix0 = [i for b in e0 for i in b[0]]
        ix1 = [i for b in e1 for i in b[0]]
        assert sorted(ix0 + ix1) == list(range(len(dataset)))  # every sample once per epoch across the ranks
        for b in e0 + e1:
            assert b[1] == [dataset.labels[i] for i in b[0]]
    study = optuna.load_study(study_name=optuna.get_all_study_summaries("sqlite:///autotune.db")[0].study_name, storage="sqlite:///autotune.db")
    failed = [trial_attrs(t)["config"] for t in study.trials if t.state == optuna.trial.TrialState.FAIL and trial_attrs(t)["outcome"] != "waiting"]
    assert failed == ["torch b=2 workers=1 prefetch=3"]  # rank 1's failure, reported to rank 0 at the check point (not one never run)
    rates = [trial_attrs(t)["samples_per_s"] for t in study.trials if trial_attrs(t).get("outcome") == "complete"]
    assert rates and all(r <= 2 / 0.05 for r in rates)  # rank 1 sleeps 50 ms a batch of 2: at most 40 samples/s
    assert math.isfinite(max(rates))


def test_len_follows_the_batch_size_of_the_candidate_in_use(tiny_dataset, space):
    """len() stayed at the first batch size while the epochs came in candidates of another size."""
    al = make(tiny_dataset, space, batch_size=[4, 8], candidates=[{"backend": "torch", "num_workers": 0, "batch_size": 8}])
    try:
        iter(al)  # exploring: the first candidate is in use
        assert al.exploring and len(al) == 24 // 8
    finally:
        al.close()


def test_a_switch_line_says_whose_the_reason_is_under_the_packages_logger(tiny_dataset, space, caplog):
    """ "switch to X ... (slow)" read as if X were slow; and the lines came from private module names."""
    import logging

    rules = Exploration(warmup_batches=1, measure_batches=2, check_batches=2, max_candidates=2, settle_wait=0.0)
    with caplog.at_level(logging.INFO, logger="autotune.autoloader"):
        al = make(tiny_dataset, space, candidates=CANDIDATES[:2], exploration=rules)
        try:
            epochs_exactly_once(al, tiny_dataset, 2)
        finally:
            al.close()
    switches = [r for r in caplog.records if r.getMessage().startswith("switch to")]
    assert "(first candidate)" in switches[0].getMessage()
    assert switches[1:] and all("(after the previous candidate: " in r.getMessage() for r in switches[1:])
    assert {r.name for r in caplog.records if r.getMessage().startswith(("switch to", "candidate "))} == {"autotune.autoloader"}
    said = [r.getMessage() for r in caplog.records]  # each decision after the measured candidate's line (a settle came before it)
    decisions = [i for i, m in enumerate(said) if m.startswith(("switch to", "settle to"))]
    assert len(decisions) == 3 and all(said[i - 1].startswith("candidate ") for i in decisions[1:]), said
    assert said[decisions[0]].startswith("switch to torch b=4 workers=0 before the first batch"), said


def test_two_iterators_read_at_once_while_exploring_are_refused(tiny_dataset, space):
    """Alternating next() on two iterators repeated samples within an epoch and failed healthy candidates."""
    al = make(tiny_dataset, space, candidates=CANDIDATES[:2])
    try:
        a = iter(al)
        next(a)
        b = iter(al)
        next(b)
        with pytest.raises(RuntimeError, match="read one epoch at a time"):
            next(a)
        next(b)  # the newer epoch reads on
    finally:
        al.close()


def test_a_candidate_batch_size_outside_those_explored_is_refused(tiny_dataset, space):
    """batch_size=8 with a candidate of 16 yielded batches of 16 while len() counted 8s; a candidate of 64 over 24
    images gave empty epochs forever, with nothing measured and nothing said."""
    for b in (16, 64):
        with pytest.raises(autotune.UserError, match=rf"^candidates\[0\] sets batch_size {b}, but this AutoLoader explores batch size 4 "):
            make(tiny_dataset, space, candidates=[{"backend": "torch", "batch_size": b}])
    al = make(tiny_dataset, space, batch_size=[4, 8], candidates=[{"backend": "torch", "batch_size": 8}])  # among those explored: kept
    al.close()
    with pytest.raises(autotune.UserError, match=r"^candidates\[0\] decodes on the GPU \(dali_device 'gpu'\), but this AutoLoader delivers to cpu"):
        make(tiny_dataset, space, candidates=[{"backend": "dali", "dali_device": "gpu"}])  # it was accepted, and failed when its turn came


def test_a_yaml_whose_batch_is_larger_than_the_dataset_is_explored_again(tiny_dataset, space):
    """It matched (check said OK) and every epoch held no batch."""
    al = make(tiny_dataset, space, candidates=CANDIDATES[:1])
    epochs_exactly_once(al, tiny_dataset, 1)
    al.close()
    text = Path("autotune.yaml").read_text()
    assert "batch_size: 4" in text
    Path("autotune.yaml").write_text(text.replace("batch_size: 4", "batch_size: 25", 1))  # over the 24 images
    again = make(tiny_dataset, space, candidates=CANDIDATES[:1], batch_size=None)
    assert again.settled is None and again.batch_size == 24
    assert [sum(1 for _ in again) for _ in range(2)] == [1, 1]
    again.close()


def test_a_file_torch_cannot_decode_is_one_line_naming_it(tiny_dataset, space, workdir):
    """A truncated JPEG (a valid header): a dozen candidates failed on it in turn, the torch defaults too, and then
    a BadImageError traceback reached the training loop."""
    import shutil

    data = workdir / "data"
    shutil.copytree(tiny_dataset, data)
    jpg = sorted(data.rglob("*.jpg"))[0]
    raw = jpg.read_bytes()
    (jpg.parent / "zz_bad.jpg").write_bytes(raw[: len(raw) // 2])
    al = make(data, space, candidates=[{"backend": "torch", "num_workers": 0}, {"backend": "torch", "num_workers": 1}])
    try:
        with pytest.raises(autotune.UserError) as e:
            for _ in range(3):
                for _batch in al:
                    pass
    finally:
        al.close()
    said = str(e.value)
    assert said.startswith(f"{jpg.parent / 'zz_bad.jpg'} cannot be decoded, and every loader reads it: remove or replace it") and "\n" not in said
