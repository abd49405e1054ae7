"""A fleet shares one storage: --reuse, study naming by fingerprint, and concurrent writers (PostgreSQL)."""

from __future__ import annotations

import datetime as _dt
import os
import subprocess
import sys
import textwrap
import uuid
import warnings

import optuna
import pytest

from autotune.cli import main
from autotune.config import fingerprint
from autotune.config.files import load_config
from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.study.evidence import trial_attrs
from autotune.study.fleet import best_of, fresh_studies, reuse
from autotune.study.storage import mask_url, open_storage
from autotune.trials.zygote import Zygote
from tests.helpers import ROOT

PG_URL = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")


def fresh_study(storage, key, **kw):
    """The study ``--reuse`` takes: the best of the fresh ones."""
    return best_of(storage, fresh_studies(storage, key, **kw))
needs_pg = pytest.mark.skipif(not PG_URL, reason="AUTOTUNE_TEST_POSTGRES_URL not set (.ci/pg.sh start)")
WINNER = {"backend": "torch", "batch_size": 4, "num_workers": 1, "prefetch_factor": 2, "persistent_workers": False}


def _key(dataset) -> str:
    from autotune.tuning.prepare import study_key

    return study_key(fingerprint.collect(), scan(dataset).signature(), "imagenet-train", "cpu", 1, None)


def _finished_study(storage: str, name: str, key: str, *, created: str | None = None, finished: bool = True, rate: float = 123.0) -> None:
    study = optuna.create_study(storage=open_storage(storage), study_name=name, direction="maximize")
    created = created or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    for k, v in {"fingerprint_key": key, "hardware": fingerprint.collect(), "device": "cpu", "ranks": 1, "created": created}.items():
        study.set_user_attr(k, v)
    study.add_trial(optuna.trial.create_trial(value=rate, user_attrs={"loader": WINNER, "samples_per_s": rate, "outcome": "complete"}))
    if finished:
        study.set_user_attr(
            "confirmation", {"method": "best single trial", "winner_trial": 0, "candidates": [{"trial": 0, "config": "x", "scores": [rate], "median": rate}]}
        )


def _storages(tmp_path):
    out = [f"sqlite:///{tmp_path}/fleet.db"]
    if PG_URL:
        out.append(PG_URL)
    return out


def _run_reuse(dataset, storage, *extra) -> int:
    return main(["run", "--dataset", str(dataset), "--space", "cpu", "--storage", storage, "--reuse", "--batch-size", "4", "--quiet", "--no-report", *extra])


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgres", marks=[pytest.mark.postgres, needs_pg])])
@pytest.mark.slow
def test_reuse_writes_the_yaml_without_tuning(workdir, tiny_dataset, monkeypatch, backend):
    from autotune.study import tuner as study_mod

    storage = f"sqlite:///{workdir}/fleet.db" if backend == "sqlite" else PG_URL
    key = _key(tiny_dataset)
    name = f"train-{key}-{uuid.uuid4().hex[:8]}"
    _finished_study(storage, name, key)

    def no_trials(*a, **k):
        raise AssertionError("a trial ran although the storage had a fresh study")

    def no_zygote(*a, **k):
        raise AssertionError("the measuring process started although the storage had a fresh study")

    monkeypatch.setattr(study_mod, "run_trial", no_trials)
    monkeypatch.setattr(Zygote, "launch", no_zygote)
    assert _run_reuse(tiny_dataset, storage) == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config("autotune.yaml")
    assert cfg.loader == LoaderConfig.from_params(WINNER)
    assert cfg.study["name"] == name
    assert cfg.study["storage"] == mask_url(storage)
    assert "***" in cfg.study["storage"] or backend == "sqlite"


@pytest.mark.slow
def test_reuse_skips_unfinished_and_old_studies(workdir, tiny_dataset):
    storage = f"sqlite:///{workdir}/fleet.db"
    key = _key(tiny_dataset)
    _finished_study(storage, "old", key, created="2020-01-01T00:00:00Z")
    assert fresh_study(storage, key).study_name == "old"
    assert fresh_study(storage, key, max_age_days=30) is None
    _finished_study(storage, "running", key, finished=False)
    assert fresh_study(storage, key).study_name == "old"  # a study still running elsewhere is not reused
    assert reuse(storage, "another-key", workdir / "x.yaml") is None
    assert not (workdir / "x.yaml").exists()
    assert reuse(storage, key, workdir / "x.yaml")["study"] == "old"


@pytest.mark.slow
def test_reuse_under_an_age_limit_skips_a_study_created_in_the_future(workdir, tiny_dataset):
    storage = f"sqlite:///{workdir}/fleet.db"
    key = _key(tiny_dataset)
    _finished_study(storage, "future", key, created="2999-01-01T00:00:00Z")  # a clock far ahead: no age to trust
    assert fresh_study(storage, key, max_age_days=30) is None
    assert fresh_study(storage, key).study_name == "future"  # no age limit asked: it counts


@pytest.mark.slow
def test_reuse_takes_the_best_fresh_study_not_the_newest(workdir, tiny_dataset, capsys):
    """A thin study run after a thorough one must not replace its better config; the run says which it took."""
    storage = f"sqlite:///{workdir}/fleet.db"
    key = _key(tiny_dataset)

    def ago(days: int) -> str:
        return (_dt.datetime.now(_dt.timezone.utc) - _dt.timedelta(days=days)).strftime("%Y-%m-%dT%H:%M:%SZ")

    _finished_study(storage, "thorough", key, created=ago(3), rate=512.0)
    _finished_study(storage, "thin", key, created=ago(2), rate=242.0)
    _finished_study(storage, "too-old", key, created=ago(400), rate=999.0)
    assert fresh_study(storage, key, max_age_days=30).study_name == "thorough"
    _finished_study(storage, "tie", key, created=ago(1), rate=512.0)
    assert fresh_study(storage, key, max_age_days=30).study_name == "tie"  # the newest of equals
    summary = reuse(storage, key, workdir / "x.yaml", max_age_days=30)
    assert summary["study"] == "tie" and summary["fresh_studies"] == 3
    documented = (ROOT / "docs" / "reports.md").read_text()
    assert [k for k in summary if f"`{k}`" not in documented] == []
    capsys.readouterr()
    assert (
        main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--storage", storage, "--reuse", "--batch-size", "4", "--no-report", "--max-age", "30"])
        == 0
    )
    assert "reused study tie (the best of 3 finished studies for this machine and dataset within --max-age): 512 samples/s" in capsys.readouterr().err


def test_reuse_falls_back_to_tuning(workdir, tiny_dataset, monkeypatch):
    from autotune.tuning import search

    class Tuned(Exception):
        pass

    def fake_tuner(*a, **k):
        raise Tuned

    launched = []
    real_launch = Zygote.launch
    monkeypatch.setattr(Zygote, "launch", lambda *a, **k: launched.append(1) or real_launch(*a, **k))
    monkeypatch.setattr(search, "Tuner", fake_tuner)
    with pytest.raises(Tuned):
        _run_reuse(tiny_dataset, f"sqlite:///{workdir}/empty.db")
    assert launched == [1]  # no study to reuse: the trials' process starts after all


@pytest.mark.slow
def test_study_is_named_and_tagged_by_fingerprint(workdir, tiny_dataset):
    storage = f"sqlite:///{workdir}/fleet.db"
    rc = main(
        [
            "run",
            "--dataset",
            str(tiny_dataset),
            "--space",
            "cpu",
            "--storage",
            storage,
            "--n-trials",
            "1",
            "--batch-size",
            "4",
            "--window",
            "0.2",
            "--windows",
            "2",
            "--confirm-top",
            "0",
            "--quiet",
            "--no-report",
        ]
    )
    assert rc == 0
    key = _key(tiny_dataset)
    (s,) = optuna.get_all_study_summaries(open_storage(storage), include_best_trial=False)
    assert s.user_attrs["fingerprint_key"] == key and key in s.study_name
    # a second node of the same kind reads it
    os.remove("autotune.yaml")
    assert _run_reuse(tiny_dataset, storage) == 0
    assert os.path.exists("autotune.yaml")


_WRITER = textwrap.dedent("""
    import sys, time
    import optuna
    from autotune.study.storage import open_storage
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    url, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    study = optuna.create_study(storage=open_storage(url), study_name=name, direction="maximize", load_if_exists=True)
    def objective(trial):
        x = trial.suggest_int("num_workers", 0, 16)
        trial.set_user_attr("writer", sys.argv[4])
        time.sleep(0.005)
        return float(x)
    study.optimize(objective, n_trials=n)
""")


@pytest.mark.postgres
@needs_pg
def test_two_processes_share_one_postgres_study_and_lose_no_trial(tmp_path):
    name = f"shared-{uuid.uuid4().hex[:8]}"
    n = 40
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, PG_URL, name, str(n), str(i)]) for i in range(2)]
    assert [p.wait(timeout=240) for p in procs] == [0, 0]
    study = optuna.load_study(study_name=name, storage=open_storage(PG_URL))
    trials = study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))
    assert len(trials) == 2 * n
    assert sorted(t.number for t in trials) == list(range(2 * n))
    assert {trial_attrs(t)["writer"] for t in trials} == {"0", "1"}


@pytest.mark.postgres
@needs_pg
def test_two_autotune_runs_share_one_postgres_study(tmp_path, tiny_dataset):
    name = f"runs-{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    procs = []
    for i in range(2):
        d = tmp_path / f"node{i}"
        d.mkdir()
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "autotune",
                    "run",
                    "--dataset",
                    str(tiny_dataset),
                    "--space",
                    "cpu",
                    "--storage",
                    PG_URL,
                    "--study-name",
                    name,
                    "--resume",
                    "--n-trials",
                    "2",
                    "--batch-size",
                    "4",
                    "--no-baselines",
                    "--seed",
                    str(i),
                    "--window",
                    "0.2",
                    "--windows",
                    "2",
                    "--confirm-top",
                    "0",
                    "--quiet",
                    "--no-report",
                ],
                cwd=d,
                env=env,
            )
        )
    assert [p.wait(timeout=400) for p in procs] == [0, 0]
    study = optuna.load_study(study_name=name, storage=open_storage(PG_URL))
    finished = [t for t in study.trials if t.state.is_finished()]
    assert len(finished) == 4
    for i in range(2):
        assert (tmp_path / f"node{i}" / "autotune.yaml").exists()
