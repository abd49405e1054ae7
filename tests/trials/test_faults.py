"""Fault injection on the CPU: each fault costs one trial, the study goes on, and no child process remains."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import optuna
import pytest

from autotune.config.files import load_config
from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.trials.guard import Budgets
from autotune.trials.runner import run_trial
from autotune.trials.spec import TrialSpec
from tests.trials.faults_common import SMALL, fault_tuner, outcomes, runners


# ---------------------------------------------------------------------------------------- in one study
@pytest.mark.slow
def test_study_goes_on_through_faults(small_dataset, workdir):
    """A worker that segfaults, host memory over budget, /dev/shm too small: one trial each, then a good one."""
    budgets = Budgets(host_mib=1500, shm_mib=200)
    inject = {0: "worker-segfault", 1: "alloc:4000"}
    tuner = fault_tuner(small_dataset, workdir, "faults", n_trials=4, trial_timeout=120, budgets=budgets, inject=inject)
    for _ in range(2):
        tuner._enqueue(SMALL, "test")
    # 16 workers x 33 batches in /dev/shm: over 200 MiB even one sample at a time (joined batches would not fit)
    tuner._enqueue({**SMALL, "batch_size": 64, "num_workers": 16, "prefetch_factor": 32}, "test")
    tuner._enqueue(SMALL, "test")
    tuner.optimize()
    trials = tuner.study.get_trials(deepcopy=False)
    assert len(trials) == 4, "the study ran every trial"
    assert outcomes(tuner) == {0: "crash", 1: "oom-host", 2: "shm", 3: "complete"}
    assert "DataLoader worker" in trial_attrs(trials[0])["message"] and trials[0].state is optuna.trial.TrialState.FAIL
    assert trials[1].state is optuna.trial.TrialState.PRUNED and trials[1].constraints["memory"] > 0
    assert trials[1].intermediate_values == {0: 0.0}
    assert "host memory" in trial_attrs(trials[1])["message"] and trial_attrs(trials[1])["peak_host_mib"] < 1500 * 1.2
    assert trial_attrs(trials[2])["predicted"] and trial_attrs(trials[2])["estimate"]["shm_mib"] > 200
    assert trials[3].state is optuna.trial.TrialState.COMPLETE and trials[3].value > 0
    assert not runners(), "a trial process or worker outlived its trial"


@pytest.mark.slow
def test_hung_worker_times_out(small_dataset, workdir, tmp_path, monkeypatch):
    """...and what the killed worker left in its temporary folder (multiprocessing's pymp-*) goes with it."""
    import tempfile

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    tuner = fault_tuner(small_dataset, workdir, "hang", n_trials=1, trial_timeout=8, inject={0: "worker-hang"})
    tuner._enqueue(SMALL, "test")
    t0 = time.monotonic()
    tuner.optimize()
    (trial,) = tuner.study.get_trials(deepcopy=False)
    assert trial_attrs(trial)["outcome"] == "timeout" and trial.state is optuna.trial.TrialState.PRUNED
    assert time.monotonic() - t0 < 30
    assert not runners(), "the hung worker outlived its trial"
    assert [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor")] == []  # torch's import-time cache may stay


def test_tiny_host_budget_is_predicted(small_dataset, workdir):
    tuner = fault_tuner(small_dataset, workdir, "tiny-host", n_trials=2, budgets=Budgets(host_mib=50))
    tuner.optimize()
    # a sampled config that repeats one already predicted is told the same again, not measured (outcome "repeat")
    trials = [t for t in tuner.study.get_trials(deepcopy=False) if t.state.is_finished() and trial_attrs(t).get("outcome") != "repeat"]
    assert len(trials) == 2 and {trial_attrs(t).get("outcome") for t in trials} == {"predicted-oom"}
    assert all(t.state is optuna.trial.TrialState.PRUNED and trial_attrs(t)["estimate"]["host_mib"] > 50 for t in trials)
    assert not runners()


# -------------------------------------------------------------------------------------------- bad data
def _corrupt(src: Path, dst: Path) -> None:
    """A JPEG whose header reads but whose Huffman table is garbage (PIL: 'broken data stream')."""
    data = src.read_bytes()
    i = data.index(b"\xff\xc4") + 5
    dst.write_bytes(data[:i] + b"\xff" * 16 + data[i + 16 :])


@pytest.fixture()
def bad_dataset(small_dataset, tmp_path) -> tuple[Path, Path, Path]:
    root = tmp_path / "bad" / "train"
    shutil.copytree(small_dataset, root)
    jpgs = sorted(root.rglob("*.jpg"))
    corrupt, truncated = jpgs[0].parent / "corrupt.jpg", jpgs[-1].parent / "truncated.jpg"
    _corrupt(jpgs[0], corrupt)
    data = jpgs[1].read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    return root, corrupt, truncated


@pytest.mark.slow
def test_bad_data_names_the_file_and_the_study_goes_on(bad_dataset, workdir):
    root, corrupt, truncated = bad_dataset
    tuner = fault_tuner(root, workdir, "bad-data", n_trials=3)
    for _ in range(3):
        tuner._enqueue({**SMALL, "num_workers": 2}, "test")
    tuner.optimize()
    trials = tuner.study.get_trials(deepcopy=False)
    bad = {trial_attrs(t).get("bad_file") for t in trials if trial_attrs(t).get("outcome") == "bad-data"}
    assert bad == {str(corrupt), str(truncated)}, outcomes(tuner)
    assert all(str(trial_attrs(t)["bad_file"]) in trial_attrs(t)["message"] for t in trials if trial_attrs(t).get("bad_file"))
    assert outcomes(tuner)[2] == "complete", "both files were left out of the following trials"
    assert sorted(tuner.study.user_attrs["bad_files"]) == sorted(map(str, bad))
    assert not runners()


def test_files_removed_during_the_run_go_at_once_not_a_trial_each(tiny_dataset, tmp_path, workdir, caplog):
    """26 files deleted mid-run cost 26 trials, each reported as 'cannot be decoded'."""
    root = tmp_path / "shrinking" / "train"
    shutil.copytree(tiny_dataset, root)
    tuner = fault_tuner(root, workdir, "shrinking")
    removed = sorted(root.rglob("*.jpg"))[:3]
    for f in removed:
        f.unlink()
    with caplog.at_level(logging.WARNING, logger="autotune.study.tuner"):
        tuner.exclude_file(str(removed[1]))
    assert len(tuner.dataset) == 24 - 3 and not set(map(str, removed)) & set(tuner.dataset.files)
    assert {why for f, why in tuner.dataset.skipped if f in set(map(str, removed))} == {"removed during the run"}
    assert "bad_files" not in tuner.study.user_attrs  # not undecodable: gone
    assert "3 file(s) of the dataset were removed while the run measured it" in caplog.text


@pytest.mark.slow
def test_files_the_study_excluded_stay_out_of_build_loader_and_check(bad_dataset, workdir):
    """The YAML names the files the study left out; build_loader leaves them out (one warning naming them), and
    neither keeping nor removing them makes ``autotune check`` call the config stale."""
    import warnings

    import autotune
    from autotune.cli import main
    from autotune.config.files import save_config
    from autotune.config.staleness import assess
    from autotune.study.result import config_from_study

    root, corrupt, truncated = bad_dataset
    tuner = fault_tuner(root, workdir, "excluded", n_trials=3)
    for _ in range(3):
        tuner._enqueue({**SMALL, "num_workers": 2}, "test")
    tuner.optimize()
    assert outcomes(tuner)[2] == "complete", outcomes(tuner)
    from autotune.config import fingerprint

    tuner.study.set_user_attr("hardware", fingerprint.collect())  # as `autotune run` records it
    save_config(config_from_study(tuner.study, tuner.storage_url), workdir / "autotune.yaml")
    cfg = load_config(workdir / "autotune.yaml")
    assert sorted(cfg.dataset["excluded"]) == sorted(["class_0000/corrupt.jpg", f"{truncated.parent.name}/truncated.jpg"])
    assert cfg.dataset["samples"] == 96  # the files measured: the two bad ones are not counted

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loader = autotune.build_loader(root, cfg, pipeline="imagenet-eval")
    (w,) = [w for w in caught if "undecodable" in str(w.message)]
    assert "corrupt.jpg" in str(w.message) and "truncated.jpg" in str(w.message) and "2 files" in str(w.message)
    assert sum(len(labels) for _, labels in loader) == 96  # a whole epoch: no decode error
    getattr(loader, "close", lambda: None)()
    assert [d for d in assess(cfg) if d.matters] == []

    corrupt.unlink()  # as the message advises
    truncated.unlink()
    assert [d for d in assess(cfg) if d.matters] == []
    assert main(["check", str(workdir / "autotune.yaml"), "--quiet"]) == 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        autotune.build_loader(root, cfg)
    assert not [w for w in caught if "undecodable" in str(w.message)]  # nothing left to leave out
    image = next(root.rglob("*.jpg")).read_bytes()
    (root / "class_0001" / "new.jpg").write_bytes(image)
    assert "dataset.samples" in [d.field for d in assess(cfg) if not d.matters]  # one more image: shown, not stale
    for i in range(20):
        (root / "class_0001" / f"new{i}.jpg").write_bytes(image)
    assert "dataset.samples" in [d.field for d in assess(cfg) if d.matters]  # a real change still counts


@pytest.mark.slow
def test_dali_decode_error_names_the_file(bad_dataset):
    pytest.importorskip("nvidia.dali")
    root, corrupt, truncated = bad_dataset
    ds = scan(root)
    for bad in (corrupt, truncated):
        only = [i for i, f in enumerate(ds.files) if f == str(bad) or not f.endswith(("corrupt.jpg", "truncated.jpg"))]
        one_bad = ds.__class__(ds.root, ds.classes, tuple(ds.files[i] for i in only), tuple(ds.labels[i] for i in only), ds.total_bytes)
        loader = LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 1})
        r = run_trial(TrialSpec(one_bad, loader, window_s=0.2, windows=2, warmup_batches=1), timeout_s=60)
        assert (r.outcome, r.bad_file) == (Outcome.BAD_DATA, str(bad)), r.message
    assert not runners()
