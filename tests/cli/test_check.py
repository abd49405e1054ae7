from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
from pathlib import Path

import pytest

from autotune.cli import main
from autotune.config import fingerprint
from autotune.config.files import load_config, save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.config.staleness import is_stale


def _write(path, hardware: dict, dataset: dict | None = None, created: str | None = None) -> str:
    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1})
    kw = {"created": created} if created else {}
    cfg = Config(loader=loader, hardware=hardware, dataset=dataset or {"path": "/nonexistent/train", "samples": 24}, **kw)
    save_config(cfg, path)
    return str(path)


@pytest.mark.parametrize(
    ("field", "value"),
    [("gpu", "NVIDIA H200"), ("cpus", 97), ("dali", "0.9.0")],
)
def test_check_fails_and_names_the_difference(tmp_path, capsys, field, value):
    now = fingerprint.collect()
    if now.get(field) == value:
        value = "something else"
    f = _write(tmp_path / "a.yaml", {**now, field: value})
    assert main(["check", f]) == 1
    out = capsys.readouterr().out
    assert f"matters  {field}: {value!r}" in out
    assert "STALE" in out


@pytest.mark.parametrize("hardware", [{}, {"hostname": "x"}], ids=["empty", "no-machine-keys"])
def test_a_config_that_records_no_hardware_is_stale(tmp_path, capsys, hardware):
    f = _write(tmp_path / "a.yaml", hardware)
    assert main(["check", f]) == 1
    out = capsys.readouterr().out
    assert "STALE" in out and "matters  hardware: '(not recorded)'" in out
    with pytest.warns(UserWarning) as caught:  # training is told what is missing, not that the machine differs
        load_config(f)
    (msg,) = [str(w.message) for w in caught]
    assert "records no machine it was tuned on" in msg and "does not fit" not in msg and "autotune run --dataset /nonexistent/train" in msg


def test_check_passes_when_only_the_hostname_changed(tmp_path, capsys):
    f = _write(tmp_path / "a.yaml", {**fingerprint.collect(), "hostname": "the-old-node"})
    assert main(["check", f]) == 0
    out = capsys.readouterr().out
    assert "ignored  hostname: 'the-old-node'" in out
    assert "OK" in out


def test_a_dataset_that_is_not_here_is_said_to_be_unchecked(tmp_path, capsys):
    """The recorded folder moved: the machine matches, and the output says the images were not compared."""
    f = _write(tmp_path / "a.yaml", fingerprint.collect())  # dataset at /nonexistent/train
    assert main(["check", f]) == 0
    out = capsys.readouterr().out
    assert "OK: this machine matches" in out
    assert "dataset not compared: /nonexistent/train is not here; pass --dataset DIR" in out
    assert main(["check", f, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dataset_compared"] is False and data["dataset_note"].startswith("dataset not compared: /nonexistent/train")
    assert main(["check", f, "--no-dataset"]) == 0
    assert "not compared" not in capsys.readouterr().out  # asked for: nothing to say
    bare = _write(tmp_path / "b.yaml", fingerprint.collect(), dataset={"path": str(tmp_path)})  # a folder, nothing recorded of it
    assert main(["check", bare, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["dataset_compared"] is False and "records nothing of its dataset" in data["dataset_note"]


def test_check_reads_autotune_yaml_by_default(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _write(tmp_path / "autotune.yaml", {**fingerprint.collect(), "hostname": "the-old-node"})
    assert main(["check"]) == 0
    assert "OK" in capsys.readouterr().out


def test_check_json(tmp_path, capsys):
    f = _write(tmp_path / "a.yaml", {**fingerprint.collect(), "cpus": 999})
    assert main(["check", f, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["stale"] is True
    assert data["differences"] == [{"field": "cpus", "was": 999, "now": fingerprint.usable_cpus(), "matters": True}]


def test_check_errors_exit_2(tmp_path, capsys):
    assert main(["check", str(tmp_path / "missing.yaml")]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("just: text\n")
    assert main(["check", str(bad)]) == 2
    assert "autotune: error:" in capsys.readouterr().err


def test_check_max_age(tmp_path, capsys):
    f = _write(tmp_path / "a.yaml", fingerprint.collect(), created="2020-01-01T00:00:00Z")
    assert main(["check", f]) == 0
    assert main(["check", f, "--max-age", "30"]) == 1
    assert "age_days" in capsys.readouterr().out
    now = _dt.datetime.now(_dt.timezone.utc)
    f = _write(tmp_path / "b.yaml", fingerprint.collect(), created=(now - _dt.timedelta(seconds=30)).strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert main(["check", f, "--max-age", "0.0001"]) == 1  # 30 s is over 8.6 s: the age shown is over the limit too (was 0.0)
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if "age_days" in ln]
    shown = float(line.split("age_days: ")[1].split(" ->")[0])
    assert 0.0003 <= shown <= 0.001


def test_check_compares_the_dataset(tiny_dataset, tmp_path, capsys):
    import shutil

    f = _write(tmp_path / "a.yaml", fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset))
    assert main(["check", f]) == 0  # the recorded folder exists here: compared, unchanged
    copy = tmp_path / "other"
    shutil.copytree(tiny_dataset, copy)
    jpgs = sorted(copy.rglob("*.jpg"))
    jpgs[0].unlink()
    assert main(["check", f, "--dataset", str(copy)]) == 1  # another folder, other files
    assert "matters  dataset.signature" in capsys.readouterr().out
    h = _write(tmp_path / "c.yaml", fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset) | {"path": str(copy)})
    assert main(["check", h]) == 0  # its own folder, one image of 24 fewer: shown, not stale
    assert "ignored  dataset.samples: 24 -> 23" in capsys.readouterr().out
    for p in jpgs[1:6]:
        p.unlink()
    assert main(["check", f, "--dataset", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "matters  dataset.samples: 24 -> 18" in out and f"autotune run --dataset {copy} --warm-start" in out  # the folder given
    g = _write(tmp_path / "b.yaml", fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset) | {"path": str(copy)})
    assert main(["check", g]) == 1  # the recorded folder changed
    assert main(["check", g, "--no-dataset"]) == 0


def test_is_stale(tmp_path):
    now = fingerprint.collect()
    assert is_stale(tmp_path / "none.yaml", now) == (True, [f"{tmp_path / 'none.yaml'} does not exist"])
    f = _write(tmp_path / "a.yaml", {**now, "hostname": "x"})
    assert is_stale(f, now) == (False, [])
    f = _write(tmp_path / "b.yaml", {**now, "torch": "0.1"})
    stale, reasons = is_stale(f, now)
    assert stale and reasons == [f"torch: '0.1' -> {now['torch']!r}"]


def _run_args(**kw) -> argparse.Namespace:
    from autotune.cli import build_parser

    argv = ["run"]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        argv += [flag] if v is True else [flag, str(v)]
    return build_parser().parse_args(argv)


def _tune(args):
    from autotune.cli._run import request_from_args
    from autotune.tuning.run import run

    return run(request_from_args(args))


def test_if_stale_does_nothing_on_a_match(workdir, tiny_dataset, monkeypatch):
    from autotune.study import tuner as study
    from autotune.tuning import search

    f = _write(workdir / "autotune.yaml", fingerprint.collect(), dataset=fingerprint.dataset_summary(tiny_dataset))
    before = os.stat(f).st_mtime_ns

    def no_tuning(*a, **k):
        raise AssertionError("tuned although the config matches")

    monkeypatch.setattr(search, "Tuner", no_tuning)
    monkeypatch.setattr(study, "run_trial", no_tuning)
    summary = _tune(_run_args(dataset=tiny_dataset, if_stale=f, quiet=True))
    assert summary["action"] == "none"
    assert os.stat(f).st_mtime_ns == before
    assert not (workdir / "autotune.db").exists()


def test_if_stale_tunes_on_a_mismatch(workdir, tiny_dataset, monkeypatch):
    from autotune.tuning import search

    f = _write(workdir / "autotune.yaml", {**fingerprint.collect(), "cpus": 999}, dataset=fingerprint.dataset_summary(tiny_dataset))
    called = {}

    class Stop(Exception):
        pass

    def fake_tuner(*a, **k):
        called["yes"] = True
        raise Stop

    monkeypatch.setattr(search, "Tuner", fake_tuner)
    with pytest.raises(Stop):
        _tune(_run_args(dataset=tiny_dataset, if_stale=f, quiet=True, space="cpu", batch_size=4))
    assert called


def test_if_stale_without_dataset_or_out_re_tunes_the_file_on_its_recorded_dataset(workdir, tiny_dataset, monkeypatch):
    """A cron line 'run --if-stale own.yaml' stopped at 'no dataset given' on the night the file went stale; with
    --dataset but no --out it wrote autotune.yaml (another run's config) and left own.yaml stale for ever."""
    from autotune.cli._run import request_from_args
    from autotune.tuning import prepare

    f = _write(workdir / "own.yaml", {**fingerprint.collect(), "cpus": 999}, dataset=fingerprint.dataset_summary(tiny_dataset))
    scanned = []

    class Stop(Exception):
        pass

    def scan_then_stop(path):
        scanned.append(str(path))
        raise Stop

    monkeypatch.setattr(prepare, "scan", scan_then_stop)
    args = _run_args(if_stale=f, quiet=True)
    with pytest.raises(Stop):
        _tune(args)
    assert scanned == [str(tiny_dataset)] and request_from_args(args).out == f  # its dataset, its file
    args = _run_args(if_stale=f, quiet=True, out="other.yaml")
    with pytest.raises(Stop):
        _tune(args)
    assert request_from_args(args).out == "other.yaml"  # --out given: kept
    assert args.out == "other.yaml" and _run_args(if_stale=f).out is None  # the namespace is never changed


@pytest.mark.slow
def test_if_stale_re_tunes_the_file_as_it_was_tuned(workdir, tiny_dataset, capsys):
    """An eval config came back a training config; one for 2 ranks, a fixed batch and a model came back for 1 rank,
    the default space and no model: only the dataset was taken from FILE. `check`'s advice left the flags out too."""
    import autotune

    run = ["run", "--n-trials", "1", "--window", "0.2", "--windows", "1", "--warmup-batches", "1", "--confirm-top", "0", "--no-baselines",
           "--device", "cpu", "--no-report"]
    assert main([*run, "--dataset", str(tiny_dataset), "--space", "torch", "--pipeline", "imagenet-eval", "--gpus", "2", "--batch-size", "4",
                 "--step-ms", "1", "--out", "f.yaml"]) == 0
    text = Path("f.yaml").read_text()
    Path("f.yaml").write_text(text.replace(f"cpus: {fingerprint.collect()['cpus']},", "cpus: 999,", 1))  # another machine's
    capsys.readouterr()
    assert main(["check", "f.yaml"]) == 1
    flags = "--pipeline imagenet-eval --space torch --device cpu --gpus 2 --batch-size 4 --step-ms 1"
    assert f"re-tune with: autotune run --dataset {tiny_dataset} {flags} --warm-start f.yaml --out f.yaml" in capsys.readouterr().out
    assert main([*run, "--if-stale", "f.yaml", "--max-age", "30"]) == 0
    assert "re-tuning with its --pipeline imagenet-eval --space torch --gpus 2 --batch-size 4 --step-ms 1" in capsys.readouterr().err
    cfg = autotune.load_config("f.yaml", world_size=2)
    got = (cfg.pipeline, cfg.study["space"], cfg.result["ranks"], cfg.loader.batch_size, cfg.result["model"])
    assert got == ("imagenet-eval", "torch", 2, 4, "simulated 1 ms/step")
    # the command's own flag wins over the file's
    Path("f.yaml").write_text(Path("f.yaml").read_text().replace(f"cpus: {fingerprint.collect()['cpus']},", "cpus: 999,", 1))
    assert main([*run, "--if-stale", "f.yaml", "--pipeline", "imagenet-train", "--batch-size", "8", "--gpus", "1"]) == 0
    assert autotune.load_config("f.yaml").loader.batch_size == 8


def _recorded(tmp_path, flags, **given):
    """The flags ``--if-stale`` takes from a FILE recording ``flags``, and the settings after (by name)."""
    import types

    from autotune.tuning.request import SETTINGS, _take_recorded_flags

    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8}), study={"retune_flags": flags})
    save_config(cfg, tmp_path / "r.yaml")
    args = _run_args(if_stale=str(tmp_path / "r.yaml"), **given)
    values = {k: v for k, v in vars(args).items() if k in SETTINGS and v is not None}
    taken = _take_recorded_flags(values, args.if_stale)
    return taken, types.SimpleNamespace(**{name: values.get(name) for name in SETTINGS})


def test_if_stale_takes_no_recorded_flag_the_command_gives_or_the_machine_lacks(tmp_path, monkeypatch, caplog):
    """A default given on the command line lost to FILE's (argparse could not tell it from none); a recorded --model
    beside the command's --step-ms was 'not both'; a recorded --device cuda failed every night on a machine whose GPU
    had gone; recorded values skipped the flags' own checks (--gpus 0: a ZeroDivisionError; --step-ms nan: a hang)."""
    from autotune.errors import UserError

    taken, args = _recorded(tmp_path, ["--space", "cpu", "--pipeline", "imagenet-eval"], space="default", pipeline="imagenet-train")
    assert taken == [] and (args.space, args.pipeline) == ("default", "imagenet-train")
    taken, args = _recorded(tmp_path, ["--model", "resnet18", "--amp", "--batch-size", "32"], step_ms=5)
    assert taken == ["--batch-size", "32"] and (args.model, args.amp, args.step_ms) == (None, False, 5.0)
    monkeypatch.setattr(fingerprint, "collect", lambda: {"gpus": 0})  # the machine's GPU has gone
    taken, args = _recorded(tmp_path, ["--device", "cuda", "--gpus", "8", "--space", "torch"])
    assert taken == ["--space", "torch"] and args.device is None and args.gpus is None
    assert "was tuned with --device cuda --gpus 8, which this machine (0 GPUs) cannot run: re-tuned for what it has" in caplog.text
    for bad in (["--gpus", "0"], ["--step-ms", "nan"], ["--batch-size", "-4"], ["--model"], ["--gpuz", "2"]):
        with pytest.raises(UserError, match=r"^--if-stale .*r\.yaml: study\.retune_flags (gives|holds)"):
            _recorded(tmp_path, bad)
    with pytest.raises(UserError, match="was tuned with --space /gone/space.yaml, which is not here"):
        _recorded(tmp_path, ["--space", "/gone/space.yaml"])


def test_a_yaml_without_retune_flags_gives_them_from_its_sections():
    cfg = Config.from_dict(
        {
            "schema": 1,
            "loader": {"backend": "torch", "batch_size": 8},
            "pipeline": "imagenet-eval",
            "result": {"ranks": 4, "model": "resnet50 bf16 channels_last"},
            "study": {"space": "dali"},
        }
    )
    assert cfg.retune_flags() == ["--pipeline", "imagenet-eval", "--space", "dali", "--gpus", "4", "--model", "resnet50", "--amp", "--channels-last"]
    assert Config.from_dict(
        {"schema": 1, "loader": {"backend": "torch", "batch_size": 8}, "result": {"model": "simulated 2.5 ms/step"}, "study": {"space": "my-own"}}
    ).retune_flags() == ["--step-ms", "2.5"]  # a space file's name is no path
    # 8 ranks on 8 GPUs was the default (all visible GPUs), not a --gpus 8 to hold a 4-GPU node to
    assert (
        Config.from_dict({"schema": 1, "loader": {"backend": "torch", "batch_size": 8}, "result": {"ranks": 8}, "hardware": {"gpus": 8}}).retune_flags() == []
    )


def test_if_stale_without_dataset_is_refused_every_night_when_it_records_no_folder_here(workdir, tiny_dataset, capsys):
    """Refused while the file still matches too: the night it goes stale is too late to find out."""
    f = _write(workdir / "own.yaml", fingerprint.collect())  # a fresh file, tuned on /nonexistent/train
    assert main(["run", "--if-stale", f, "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"autotune: error: --if-stale {f} was tuned on /nonexistent/train, which is not a folder here; pass --dataset DIR (run --dataset DIR --if-stale {f})"
    )
    assert main(["run", "--if-stale", str(workdir / "none.yaml"), "--quiet"]) == 2  # the first night: no file yet
    assert "does not exist yet, so it records no dataset to tune on; pass --dataset DIR" in capsys.readouterr().err
    assert main(["run", "--if-stale", f, "--dataset", str(tiny_dataset), "--quiet"]) == 0  # the folder given: matches, nothing to do
    capsys.readouterr()
    assert main(["run", "--if-stale", f, "--dataset", "", "--quiet"]) == 2  # an unset $DATA is not 'no --dataset'
    assert capsys.readouterr().err.strip() == "autotune: error: --dataset is empty; pass the image folder (one sub-folder per class)"


def test_a_created_stamp_that_is_no_date_is_stale_under_max_age(tmp_path, capsys):
    f = _write(tmp_path / "a.yaml", fingerprint.collect(), created="yesterday")
    assert main(["check", f]) == 0  # no age limit asked: nothing to judge
    assert main(["check", f, "--max-age", "30"]) == 1
    assert "created: 'yesterday'" in capsys.readouterr().out


def test_a_created_stamp_in_the_future_is_stale_under_max_age(tmp_path, capsys):
    f = _write(tmp_path / "a.yaml", fingerprint.collect(), created="2999-01-01T00:00:00Z")
    assert main(["check", f]) == 0
    assert main(["check", f, "--max-age", "30"]) == 1
    assert "in the future" in capsys.readouterr().out
    soon = (_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=2)).isoformat()  # another machine's clock, a little ahead
    assert main(["check", _write(tmp_path / "b.yaml", fingerprint.collect(), created=soon), "--max-age", "30"]) == 0


def test_a_stale_yaml_written_by_autoloader_says_to_run_the_training_again(tmp_path, capsys):
    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1})
    cfg = Config(
        loader=loader,
        hardware={**fingerprint.collect(), "cpus": 999},
        dataset={"path": "/nonexistent/train", "samples": 24},
        result={"samples_per_s": 100.0, "tuned_by": "AutoLoader, inside the training loop"},
    )
    save_config(cfg, tmp_path / "a.yaml")
    assert main(["check", str(tmp_path / "a.yaml")]) == 1
    out = capsys.readouterr().out
    assert "run the training again" in out and "autotune run" not in out


@pytest.mark.parametrize(
    ("params", "device", "field"),
    [
        ({"backend": "dali", "batch_size": 8, "dali_device": "gpu"}, "cuda", "device"),
        ({"backend": "dali", "batch_size": 8, "dali_device": "gpu"}, "cpu", "loader.dali.device"),
        ({"backend": "torch", "batch_size": 8, "num_workers": 1}, "cuda:0", "device"),
    ],
)
def test_a_config_that_needs_a_gpu_is_stale_on_a_machine_without_one(tmp_path, params, device, field):
    """A YAML edited by hand to decode on the GPU, checked where there is none: its loader cannot be built here."""
    cpu_machine = {**fingerprint.collect(), "gpu": None, "gpus": 0, "cuda_usable": False}
    cfg = Config(loader=LoaderConfig.from_params(params), hardware=cpu_machine, device=device)
    save_config(cfg, tmp_path / "g.yaml")
    stale, why = is_stale(tmp_path / "g.yaml", current=cpu_machine)
    assert stale and why == [f"{field}: 'a CUDA GPU' -> 'no GPU on this machine'"]
    cpu_cfg = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu"}), hardware=cpu_machine)
    save_config(cpu_cfg, tmp_path / "c.yaml")
    assert is_stale(tmp_path / "c.yaml", current=cpu_machine) == (False, [])
    # CUDA without NVML (Jetson): no GPU counted, but torch runs on one
    assert is_stale(tmp_path / "g.yaml", current={**cpu_machine, "cuda_usable": True}) == (False, [])


def test_a_gpu_machines_config_on_a_cpu_machine_says_so_once(tmp_path):
    """The recorded GPU count differs already: no second line for the device that needs one."""
    gpu_machine = {**fingerprint.collect(), "gpu": "NVIDIA H200", "gpus": 1}
    cfg = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "gpu"}), hardware=gpu_machine, device="cuda")
    save_config(cfg, tmp_path / "g.yaml")
    stale, why = is_stale(tmp_path / "g.yaml", current={**gpu_machine, "gpu": None, "gpus": 0, "cuda_usable": False})
    assert stale and [w.split(":")[0] for w in why] == ["gpu", "gpus"]


@pytest.mark.parametrize("value", ["1" + "0" * 400, ".inf", "big", "-100", "true", "[1]"])
@pytest.mark.parametrize("key", ["mean_bytes", "classes", "samples"])
def test_a_dataset_figure_that_is_no_count_is_a_bad_yaml(tmp_path, capsys, key, value):
    """10**400 was an OverflowError traceback in check, --if-stale and build_loader; .inf passed the 10 % tolerance
    as a difference that does not matter; a string was a 'STALE' with a re-tune."""
    import yaml

    f = tmp_path / "a.yaml"
    _write(f, fingerprint.collect())
    data = yaml.safe_load(f.read_text())
    data["dataset"][key] = yaml.safe_load(value)
    f.write_text(yaml.safe_dump(data))
    assert main(["check", str(f)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"dataset.{key} must be a whole number of" in line


def test_a_batch_larger_than_the_recorded_dataset_is_no_match(tmp_path, capsys):
    """check said OK and --if-stale did nothing for a batch of 61 over 60 images, which build_loader refuses."""
    f = _write(tmp_path / "a.yaml", fingerprint.collect(), dataset={"path": "/nonexistent/train", "samples": 5})  # batch 8
    assert main(["check", f]) == 1
    out = capsys.readouterr().out
    assert "matters  loader.batch_size: 8 is larger than the 5 images per rank of the dataset the YAML records (5), so an epoch would hold no batch" in out
    assert is_stale(f)[0]


def test_if_stale_tunes_the_batch_size_again_when_it_was_tuned(tmp_path):
    """A user pipeline tuned with --tune-batch-size: the re-tune tunes it again, around the user's own size, not the
    winner's alone."""
    from autotune.tuning.request import RunRequest, retune_flags

    assert retune_flags(RunRequest(dataset="p.py:make", batch_size=8, tune_batch_size=True)) == ["--batch-size", "8", "--tune-batch-size"]
    taken, args = _recorded(tmp_path, ["--batch-size", "8", "--tune-batch-size"])
    assert taken == ["--batch-size", "8", "--tune-batch-size"] and (args.batch_size, args.tune_batch_size) == (8, True)


@pytest.mark.parametrize("missing", ["nofile.py", "dir.py"])
def test_a_pipeline_file_that_is_not_there_is_one_line_to_check_and_if_stale(tmp_path, capsys, monkeypatch, missing):
    """check and --if-stale hash the pipeline's file before anything imports it: a missing file, or a folder named
    FILE.py, was a traceback (FileNotFoundError, IsADirectoryError) and exit 1, which check means as stale."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dir.py").mkdir()
    f = _write(tmp_path / "a.yaml", fingerprint.collect())
    before = Path(f).read_bytes()
    said = "is a folder, not a Python file" if missing == "dir.py" else "does not exist"
    for argv in (["check", f, "--dataset", f"{missing}:f"], ["run", "--dataset", f"{missing}:f", "--batch-size", "8", "--if-stale", f]):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert f"{tmp_path / missing} {said}; pass FILE.py:FUNC with an existing file" in err and len(err.splitlines()) == 1, err
    assert Path(f).read_bytes() == before


def test_if_stale_on_a_pipeline_whose_file_is_gone_asks_for_file_py_func(tmp_path, capsys):
    """It asked for --dataset DIR, the form of an image folder, for a YAML tuned on the user's own pipeline."""
    gone = f"{tmp_path / 'moved.py'}:make"
    f = _write(tmp_path / "a.yaml", fingerprint.collect(),
               dataset={"path": gone, "signature": "0" * 64, "function": {"name": "moved:make", "sha256": "0" * 64, "samples": 96}})
    assert main(["run", "--if-stale", f, "--batch-size", "8", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert f"was tuned on {gone}, which is not here; pass --dataset FILE.py:FUNC (run --dataset FILE.py:FUNC --batch-size B --if-stale" in err, err
    assert "DIR" not in err and len(err.splitlines()) == 1
