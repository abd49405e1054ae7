"""``autotune run --dataset FILE.py:FUNC``: the user's own Dataset tuned end to end on the CPU, its errors in one line,
and its source's hash in the YAML, which ``autotune check`` compares."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from autotune.cli import main
from autotune.config.files import load_config

FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--no-report", "--quiet", "--confirm-top", "0", "--device", "cpu"]

PIPELINE = '''\
import multiprocessing
import os

import torch
from torch.utils.data import Dataset

import autotune

with open("imported.txt", "a") as f:  # each process that imports this module (spawned workers do too)
    f.write(f"{os.getpid()} {multiprocessing.current_process().name}\\n")


class Random(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return {"x": torch.randn(3, 8, 8), "y": i % 4}


def make():
    return autotune.DatasetSpec(Random(96))


def broken():
    size = int("ninety-six")
    return Random(size)


class Stream(torch.utils.data.IterableDataset):
    def __init__(self, n, split=True):
        self.n, self.split = n, split

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        start, step = (info.id, info.num_workers) if info is not None and self.split else (0, 1)
        for i in range(start, self.n, step):
            yield torch.full((3, 8, 8), float(i)), i % 4


def stream():
    return Stream(96)


def unsplit():
    return Stream(96, split=False)
'''


@pytest.fixture
def pipeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "my_pipeline.py"
    path.write_text(PIPELINE)
    return path


@pytest.mark.slow
def test_a_pipeline_function_is_tuned_and_a_changed_source_is_stale(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dataset", "my_pipeline.py:make", "--batch-size", "8", "--n-trials", "2", *[f for f in FAST if f != "--quiet"]]) == 0
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if line.startswith(("setting up", "study "))]
    assert len(lines) == 2 and all("96 samples" in line and "images" not in line for line in lines), lines
    data = yaml.safe_load(Path("autotune.yaml").read_text())
    assert data["loader"]["backend"] == "user" and data["loader"]["batch_size"] == 8 and data["result"]["samples_per_s"] > 0
    assert set(data["loader"]["user"]) >= {"num_workers", "multiprocessing_context", "in_order"}
    function = data["dataset"]["function"]
    assert function["name"] == "my_pipeline:make" and function["samples"] == 96 and len(function["sha256"]) == 64
    assert data["dataset"]["path"] == f"{pipeline}:make"
    imports = [line.split()[0] for line in Path("imported.txt").read_text().splitlines() if line.endswith(" MainProcess")]
    assert len(imports) == 2 and os.getpid() == int(imports[0])  # here, and once in the process trials are forked from
    capsys.readouterr()
    assert main(["check", "autotune.yaml"]) == 0
    pipeline.write_text(PIPELINE + "\n# a changed transform\n")
    assert main(["check", "autotune.yaml"]) == 1
    assert f"dataset.signature: {pipeline} changed since it was tuned" in capsys.readouterr().out
    assert main(["show", "autotune.yaml"]) == 0
    from autotune.cli._show import _config_rows

    rows = dict(_config_rows(load_config("autotune.yaml")))
    assert rows["pipeline"] == "your own, my_pipeline:make, on cpu (drops the last partial batch)"  # not imagenet-train
    assert rows["dataset"] == f"{pipeline}:make (96 samples)"  # not "(None images)"
    pipeline.rename(pipeline.with_name("moved.py"))
    capsys.readouterr()
    main(["check", "autotune.yaml"])
    assert "is not here (its file is gone or moved); pass --dataset FILE.py:FUNC" in capsys.readouterr().out  # not "DIR ... the images"
    data = yaml.safe_load(Path("autotune.yaml").read_text())
    data["dataset"]["path"] = "<my_pipeline:Random object>"  # as AutoLoader over a Dataset object writes it
    Path("object.yaml").write_text(yaml.safe_dump(data))
    main(["check", "object.yaml"])
    assert "the YAML was tuned over a Dataset object (<my_pipeline:Random object>); pass --dataset FILE.py:FUNC" in capsys.readouterr().out


def test_an_exception_in_the_function_is_one_line_naming_it(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dataset", "my_pipeline.py:broken", "--batch-size", "8", "--n-trials", "1", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "broken raised ValueError" in err and f"{pipeline}:29" in err
    assert not Path("autotune.yaml").exists()


def test_a_pipeline_without_a_batch_size_is_one_line(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dataset", "my_pipeline.py:make", "--n-trials", "1", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--batch-size" in err


@pytest.mark.slow
def test_an_iterable_dataset_is_tuned(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loud = [flag for flag in FAST if flag != "--quiet"]
    assert main(["run", "--dataset", "my_pipeline.py:stream", "--batch-size", "8", "--n-trials", "2", *loud]) == 0
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if line.startswith(("setting up", "study "))]
    assert len(lines) == 2 and all("a stream of samples" in line and "images" not in line for line in lines), lines
    data = yaml.safe_load(Path("autotune.yaml").read_text())
    assert data["loader"]["backend"] == "user" and data["result"]["samples_per_s"] > 0
    assert data["dataset"]["function"]["name"] == "my_pipeline:stream"


def test_an_iterable_dataset_that_does_not_split_by_worker_is_one_line(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--dataset", "my_pipeline.py:unsplit", "--batch-size", "8", "--n-trials", "1", *FAST]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "unsplit returned an IterableDataset (Stream)" in err and "torch.utils.data.get_worker_info" in err
    assert not Path("autotune.yaml").exists()


def test_a_stream_of_unknown_length_is_tuned_with_workers_that_persist(pipeline: Path) -> None:
    """Workers that do not persist start again each epoch; over a stream of unknown length that start cannot be priced
    per sample, and a forkserver start each epoch won a 2-core study, then read half a worker per core's rate."""
    import optuna

    from autotune.study.evidence import is_told

    args = ["run", "--dataset", "my_pipeline.py:stream", "--batch-size", "8", "--n-trials", "8", "--sampler", "random", "--seed", "0"]
    assert main([*args, *FAST]) == 0
    url = "sqlite:///autotune.db"
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    measured = [t for t in study.trials if not is_told(t)]  # a later start told, not measured, has no workers started
    with_workers = [t.user_attrs["loader"] for t in measured if (t.user_attrs.get("loader") or {}).get("num_workers", 0) > 0]
    assert len(with_workers) >= 3 and all(o["persistent_workers"] for o in with_workers), with_workers


@pytest.mark.slow
def test_a_stream_is_measured_whole_where_each_worker_holds_less_than_a_batch(pipeline: Path) -> None:
    """Each worker batches its own share of a stream: a trial that dropped each worker's last partial batch read no
    batch from 2 workers of 20 samples each at batch 32, where build_loader (which keeps them) reads all 40."""
    import optuna

    pipeline.write_text(PIPELINE + "\n\ndef small():\n    return Stream(40)\n")
    args = ["run", "--dataset", "my_pipeline.py:small", "--batch-size", "32", "--n-trials", "2", "--seed", "0"]  # the first: the cores heuristic
    assert main([*args, *FAST]) == 0
    url = "sqlite:///autotune.db"
    study = optuna.load_study(study_name=optuna.get_all_study_names(url)[0], storage=url)
    workers = {t.number: (t.user_attrs.get("loader") or {}).get("num_workers", 0) for t in study.trials}
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert any(workers[t.number] >= 2 for t in complete), {t.number: (t.state.name, workers[t.number], t.user_attrs.get("error")) for t in study.trials}
    assert yaml.safe_load(Path("autotune.yaml").read_text())["pipeline"] == "imagenet-eval"  # what was measured: every batch kept
