"""Bad input that used to end in a traceback or a misleading fix: each is now one line, naming the problem and the fix."""

from __future__ import annotations

import errno
import logging
import re
import sqlite3
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from autotune.config import fingerprint
from autotune.config.files import load_config, save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.errors import UserError
from autotune.study.storage import is_storage_error, storage_failure

FAST = ["--window", "0.2", "--windows", "1", "--warmup-batches", "1", "--confirm-top", "0", "--no-report", "--batch-size", "8"]


def _optuna_commit_failure() -> AssertionError:
    """What Optuna raises when a trial's commit fails on a full disk: an AssertionError raised while handling it."""
    try:
        try:
            try:
                raise sqlite3.OperationalError("database or disk is full")
            except sqlite3.OperationalError as e:
                raise optuna.exceptions.StorageInternalError("An exception is raised during the commit.") from e
        except optuna.exceptions.StorageInternalError:
            raise AssertionError("Should not reach.")  # noqa: B904 - as Optuna does
    except AssertionError as e:
        return e


def test_a_storage_failure_hidden_behind_optunas_assertion_is_named():
    e = _optuna_commit_failure()
    assert is_storage_error(e) and not is_storage_error(ValueError("x"))
    msg = str(storage_failure("sqlite:///full/a.db", e))
    assert "is full" in msg and "free some space" in msg


@pytest.mark.slow
def test_a_full_disk_mid_run_is_one_line(workdir, tiny_dataset, monkeypatch, capsys):
    from autotune.study import tuner as tuner_mod

    def full(self, callbacks=None, **kw):  # noqa: ANN001, ARG001 - Tuner.optimize's signature
        raise _optuna_commit_failure()

    monkeypatch.setattr(tuner_mod.Tuner, "optimize", full)
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "is full" in err


@pytest.mark.slow
def test_resume_with_another_batch_size_fails_before_any_trial(workdir, tiny_dataset, capsys):
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", "--no-baselines", "--study-name", "s", "--space", "cpu", *FAST]) == 0
    before = len(optuna.load_study(study_name="s", storage="sqlite:///autotune.db").trials)
    argv = ["run", "--dataset", str(tiny_dataset), "--n-trials", "1", "--no-baselines", "--study-name", "s", "--resume", "--space", "cpu", *FAST]
    argv[argv.index("--batch-size") + 1] = "16"
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--resume: study 's' sampled batch_size from {8}, this run from {16}" in err and "Traceback" not in err
    assert len(optuna.load_study(study_name="s", storage="sqlite:///autotune.db").trials) == before  # no failed trial added


@pytest.mark.parametrize("argv, message", [
    (["--budget", "15", "--window", "30"], "of measuring per trial, more than the 15 s a trial may take"),
    (["--amp"], "add --model NAME"),
    (["--channels-last"], "add --model NAME"),
    (["--warm-start", "missing.yaml"], "'missing.yaml' does not exist"),
])
def test_flags_that_cannot_work_fail_before_the_scan(workdir, tiny_dataset, capsys, argv, message):
    assert main(["run", "--dataset", str(tiny_dataset), *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and "setting up" not in err and len(err.strip().splitlines()) == 1


def test_too_many_ranks_for_the_images_names_gpus(workdir, tiny_dataset, capsys, monkeypatch):
    monkeypatch.setattr("autotune.config.fingerprint.usable_cpus", lambda: 2)
    assert main(["run", "--dataset", str(tiny_dataset), "--gpus", "4", "--n-trials", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "pass fewer --gpus" in err
    # more CPU ranks than cores: measured as such a job runs, and said (--gpus 99 started 99 ranks without a word)
    assert "--gpus 4 on the CPU measures 4 rank processes on 2 usable cores" in err


def test_an_unknown_model_fails_before_the_ceiling(workdir, tiny_dataset, capsys):
    assert main(["run", "--dataset", str(tiny_dataset), "--model", "resnet5O", "--n-trials", "1", *FAST]) == 2
    err = capsys.readouterr().err
    assert "--model 'resnet5O' is not a torchvision classification model" in err and "resnet50" in err
    assert "ceiling" not in err and "ValueError" not in err


def test_world_size_and_num_shards_below_one_are_errors(tmp_path, tiny_dataset):
    from autotune import build_loader

    f = tmp_path / "a.yaml"
    save_config(Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), hardware=fingerprint.collect()), f)
    for bad in (0, -1, "two", True):
        with pytest.raises(UserError, match="world_size must be a whole number of 1 or more"):
            load_config(f, world_size=bad)
    import numpy as np

    load_config(f, world_size="2")  # as os.environ["LOCAL_WORLD_SIZE"] gives it
    with pytest.raises(UserError, match=r"world_size must be a whole number from 1 to 1048576 \(the ranks per node\), but got 10{30}"):
        load_config(f, world_size=10**30)  # an overflowed variable: it was a warning that compared it with the tuned ranks
    load_config(f, world_size=np.int64(2))
    with pytest.raises(UserError, match="num_shards must be a whole number of 1 or more"):
        build_loader(tiny_dataset, load_config(f), num_shards=0, device="cpu")
    # shard_id as the environment gives it, like num_shards; anything else one line, not torch's TypeError
    assert len(build_loader(tiny_dataset, load_config(f), shard_id="1", num_shards="2", device="cpu")) >= 1
    for bad in (None, 1.5, "one", -1):
        with pytest.raises(UserError, match="shard_id must be a whole number of 0 or more"):
            build_loader(tiny_dataset, load_config(f), shard_id=bad, num_shards=2, device="cpu")


@pytest.mark.parametrize(("device", "needle"), [("tpu", "device must be 'cpu', 'cuda' or 'cuda:N'"), (["cpu"], "device must be"),
                                                ("cuda:7", "needs a CUDA GPU" if not __import__("torch").cuda.is_available() else "is not here")])
def test_a_device_batches_cannot_go_to_is_named_before_the_first_batch(tmp_path, tiny_dataset, device, needle):
    """The torch backend built a loader for any device and failed in torch at the first batch; DALI's checked."""
    from autotune import AutoLoader, build_loader

    f = tmp_path / "a.yaml"
    save_config(Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), hardware=fingerprint.collect()), f)
    with pytest.raises(UserError, match=needle):
        build_loader(tiny_dataset, load_config(f), device=device)
    with pytest.raises(UserError, match=needle):
        AutoLoader(tiny_dataset, batch_size=8, device=device, config=str(tmp_path / "al.yaml"))


def test_autoloader_takes_a_numpy_batch_size(tiny_dataset):
    import numpy as np

    from autotune.autoloader._setup import _batch_choices

    assert _batch_choices(np.int64(8)) == (8,) and _batch_choices([4, np.int32(8)]) == (4, 8)
    for bad in (8.0, True, [0], "8"):
        with pytest.raises(UserError, match="batch_size must be a positive integer"):
            _batch_choices(bad)


def test_check_with_a_missing_dataset_does_not_offer_demo(tmp_path, capsys):
    f = tmp_path / "a.yaml"
    save_config(Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), hardware=fingerprint.collect()), f)
    assert main(["check", str(f), "--dataset", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "does not exist" in err and "--demo" not in err


def test_a_damaged_journal_is_named(tmp_path, capsys):
    j = tmp_path / "half.jsonl"
    j.write_text('{"op_code": 0, "worker_id": "x"}\n')
    assert main(["studies", "--storage", str(j)]) == 2
    assert "is not a readable Optuna journal" in capsys.readouterr().err


@pytest.mark.parametrize("text", ["garbage", "garbage\n", "\n", '[{"op_code": 0}]\n'], ids=["no-newline", "one-line", "blank", "no-entry"])
def test_a_file_that_is_no_journal_is_named_not_listed_empty(tmp_path, capsys, text):
    """Optuna skips an undecodable last line (a write cut short), so a file of one such line read as no study."""
    j = tmp_path / "notes.log"
    j.write_text(text)
    assert main(["studies", "--storage", str(j)]) == 2
    err = capsys.readouterr().err
    assert "is not a readable Optuna journal" in err and "first line is not a journal entry" in err and err.count("\n") == 1
    assert j.read_text() == text


def test_a_journal_whose_first_entry_is_being_written_is_a_journal(tmp_path, capsys):
    """Another process creating the first study has written part of its line: Optuna waits for the rest."""
    j = tmp_path / "shared.log"
    j.write_text('{"op_code": 0, "worker')
    assert main(["studies", "--storage", str(j)]) == 0
    assert "no study" in capsys.readouterr().err


def test_many_broken_files_are_a_few_lines_and_a_count(tmp_path, caplog):
    from autotune.dataset.scan import SKIPPED_SHOWN, scan
    from autotune.dataset.synth import synthesize

    root = synthesize(tmp_path / "d", images=4, classes=2, min_side=16, max_side=24, workers=1)
    for i in range(20):
        (root / "class_0000" / f"bad_{i:02d}.jpg").write_bytes(b"not a jpeg at all")
    with caplog.at_level(logging.WARNING, logger="autotune.dataset.scan"):
        ds = scan(root)
    lines = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(ds.skipped) == 20 and len(lines) == SKIPPED_SHOWN + 1
    assert "skipping 15 more unusable files" in lines[-1]


def test_synth_on_a_full_disk_is_one_line_and_leaves_no_partial_image(tmp_path, monkeypatch, capsys):
    from PIL import Image

    real_save, calls = Image.Image.save, []

    def save(self, fp, *a, **k):  # noqa: ANN001 - PIL's signature: the third image fills the disk, half written
        calls.append(fp)
        if len(calls) == 3:
            with open(fp, "wb") as f:
                f.write(b"\xff\xd8\xff")
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_save(self, fp, *a, **k)

    monkeypatch.setattr(Image.Image, "save", save)
    d = tmp_path / "s"
    assert main(["synth", str(d), "--images", "5", "--classes", "1", "--min-side", "16", "--max-side", "24"]) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert sorted(p.name for p in d.rglob("*") if p.is_file()) == ["img_000000.jpg", "img_000001.jpg"]  # whole ones only


def test_an_error_with_json_answers_on_stdout_too(workdir, capsys):
    import json

    assert main(["run", "--dataset", "missing-folder", "--json"]) == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["exit_code"] == 2 and "does not exist" in data["error"] and "does not exist" in err


@pytest.mark.slow
def test_truncated_jpegs_found_before_the_trials_are_left_out(workdir, tmp_path, capsys):
    """The scan reads headers only; the preflight's decode sample finds truncated files once, not a trial each."""
    import yaml

    from autotune.dataset.synth import synthesize

    root = synthesize(tmp_path / "d", images=12, classes=2, min_side=32, max_side=48, workers=1)
    cut = sorted(root.rglob("*.jpg"))[:3]
    for p in cut:
        p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
    assert main(["run", "--dataset", str(root), "--n-trials", "1", "--no-baselines", "--space", "torch", *FAST]) == 0
    err = capsys.readouterr().err
    assert "3 of the files decoded before the trials cannot be decoded" in err
    data = yaml.safe_load((workdir / "autotune.yaml").read_text())
    assert sorted(data["dataset"]["excluded"]) == sorted(str(p.relative_to(root)) for p in cut) and data["dataset"]["samples"] == 9


def test_an_argument_error_with_json_answers_on_stdout_too(capsys):
    import json

    assert main(["run", "--dataset", "D", "--budget", "-5", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "argument --budget: must be greater than 0, but got -5.0 (see 'autotune run --help')", "exit_code": 2}
    assert "must be greater than 0" in err


def test_quiet_and_verbose_together_are_refused(capsys):
    import json

    assert main(["run", "--demo", "--quiet", "-v", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out)["exit_code"] == 2 and err.count("\n") == 1 and "pass one of them" in err


def test_an_option_of_another_command_is_named_with_its_command(capsys):
    """`autotune check --if-stale` pointed at 'autotune --help', then at check's help, where --if-stale is not; the
    error is check's, says whose option it is, and points at that command's help."""
    assert main(["check", "--if-stale"]) == 2
    assert capsys.readouterr().err.strip() == ("autotune check: error: unrecognized arguments: --if-stale; --if-stale is an option of "
                                               "'autotune run' (see 'autotune run --help')")
    assert main(["--json", "studies"]) == 2  # the command's own option before it: named as such, not as run's
    assert "--json goes after the command: autotune studies --json ..." in capsys.readouterr().out
    assert main(["-v", "studies"]) == 2
    assert "autotune studies: error: -v goes after the command: autotune studies -v ..." in capsys.readouterr().err
    assert main(["check", "--if-stale", "--bogus"]) == 2  # a flag no command has: check's help
    assert capsys.readouterr().err.strip().endswith("--if-stale is an option of 'autotune run' (see 'autotune check --help')")
    assert main(["show", "a.yaml", "--bogus"]) == 2
    assert capsys.readouterr().err.strip() == "autotune show: error: unrecognized arguments: --bogus (see 'autotune show --help')"
    assert main(["--bogus"]) == 2
    assert capsys.readouterr().err.strip() == "autotune: error: unrecognized arguments: --bogus (see 'autotune --help')"


@pytest.mark.parametrize(("words", "said"), [
    (["--storage", "sqlite:///s.db", "studies"], "--storage sqlite:///s.db goes after the command: autotune studies --storage sqlite:///s.db ..."),
    (["--budget", "30", "run", "--demo"], "--budget 30 goes after the command: autotune run --budget 30 ..."),
    (["--json", "--storage", "sqlite:///s.db", "studies"], "--json --storage sqlite:///s.db go after the command"),
])
def test_an_option_with_its_value_before_the_command_is_told_where_it_goes(capsys, words, said):
    """`autotune --storage sqlite:///s.db studies` read the URL as the command: "invalid choice: 'sqlite:///s.db'"."""
    assert main(words) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and said in err and "invalid choice" not in err


@pytest.mark.parametrize(("storage", "out"), [(None, "autotune.db"), ("sqlite:///runs.db", "./runs.db"), ("run.log", "run.log")])
@pytest.mark.slow
def test_out_naming_the_storage_file_is_refused_before_any_trial(workdir, tiny_dataset, capsys, storage, out):
    """`--out autotune.db` (tab completion offers it) replaced the database with YAML: every study was lost."""
    main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST, "--quiet", "--study-name", "kept",
          *(["--storage", storage] if storage else [])])
    db = workdir / out
    before = db.read_bytes()
    capsys.readouterr()
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST, "--out", out, *(["--storage", storage] if storage else [])]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"--out {str(Path(out))!r} is the study storage" in line and "pass another file name such as autotune.yaml" in line
    assert db.read_bytes() == before


@pytest.mark.slow
def test_out_holding_another_programs_yaml_is_not_replaced(workdir, tiny_dataset, capsys):
    train = workdir / "train.yaml"
    train.write_text("lr: 0.1\nepochs: 90\n")
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST, "--out", "train.yaml"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == ("autotune: error: --out 'train.yaml' exists and is not an autotune config (no schema and loader sections), so it is not "
                    "replaced; pass another file name such as autotune.yaml, or remove it first")
    assert train.read_text() == "lr: 0.1\nepochs: 90\n"
    train.write_text("model: resnet50\nloader: {batch_size: 256, workers: 8}\n")  # a training config with a loader of its own
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST, "--out", "train.yaml"]) == 2
    assert "is not an autotune config" in capsys.readouterr().err
    assert not (workdir / "autotune.db").exists()  # refused before the study
    (workdir / "empty.yaml").write_text("")
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST, "--quiet", "--out", "empty.yaml"]) == 0  # an empty file is fine
    assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *FAST, "--quiet", "--out", "empty.yaml"]) == 0  # so is a config


@pytest.mark.slow
def test_an_empty_path_is_an_error_not_the_current_folder(tmp_path, monkeypatch, capsys):
    """`build_loader('', cfg)` and `autotune synth ''` read or wrote wherever the process ran (an unset variable)."""
    from autotune import build_loader

    monkeypatch.chdir(tmp_path)
    assert main(["synth", "", "--images", "2", "--classes", "1"]) == 2
    assert "DIR is empty" in capsys.readouterr().err and list(tmp_path.iterdir()) == []
    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), hardware=fingerprint.collect())
    with pytest.raises(UserError, match="the dataset path is empty"):
        build_loader("", cfg, device="cpu")
    assert main(["doctor", "--dataset", ""]) != 0
    assert "the dataset path is empty" in capsys.readouterr().out  # the dataset row of doctor's table


def test_a_ddp_rank_that_would_read_repeated_data_is_warned(tmp_path, tiny_dataset, monkeypatch):
    """Under DDP, a loader with one shard (or LOCAL_RANK given as shard_id) trains on repeated data with no error."""
    import warnings

    import torch.distributed as dist

    from autotune import build_loader

    f = tmp_path / "a.yaml"
    save_config(Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 0}), hardware=fingerprint.collect()), f)
    cfg = load_config(f)
    monkeypatch.setenv("RANK", "1")  # torchrun's environment, before init_process_group
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.warns(UserWarning, match="rank 1 of 2, but the loader has one shard: every rank reads the whole dataset"):
        build_loader(tiny_dataset, cfg, device="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_loader(tiny_dataset, cfg, device="cpu", shard_id=1, num_shards=2)  # right: no warning
    monkeypatch.setattr(dist, "is_initialized", lambda: True)  # a process group's word outranks the environment
    monkeypatch.setattr(dist, "get_rank", lambda: 2)
    monkeypatch.setattr(dist, "get_world_size", lambda: 4)
    with pytest.warns(UserWarning, match="rank 2 of 4, but reads shard 0: another rank reads it too"):
        build_loader(tiny_dataset, cfg, device="cpu", shard_id=0, num_shards=4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build_loader(tiny_dataset, cfg, device="cpu", shard_id=0, num_shards=2)  # data-parallel groups: taken as meant


def test_a_bad_flag_with_demo_is_refused_before_the_demo_set_is_made(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert main(["run", "--demo", "--space", "no-such-space", "--no-report"]) == 2
    assert main(["run", "--demo", "--window", "30", "--windows", "5", "--budget", "60", "--no-report"]) == 2
    assert main(["run", "--demo", "--device", "tpu", "--no-report"]) == 2
    assert not (tmp_path / "cache").exists()  # minutes of image-making saved for a typo
    assert capsys.readouterr().err.count("autotune: error:") == 3


def test_a_torch_that_cannot_run_trials_is_told_before_the_demo_set_is_made(tmp_path, monkeypatch, capsys):
    """A CPU torch beside a CUDA torchvision: the run made the demo set for 43 s, then stopped at the torch check."""
    from autotune import doctor

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr(doctor._probes, "torch_probe", lambda: {"torch": "2.13.0+cpu", "torchvision": None, "cuda": None, "available": False, "devices": 0,
                                                         "torchvision_error": "RuntimeError: operator torchvision::nms does not exist"})
    assert main(["run", "--demo", "--device", "cpu", "--no-report"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("autotune: error: torch check failed: 2.13.0+cpu, but torchvision does not import") and err.count("\n") == 1, err
    assert not (tmp_path / "cache").exists()


@pytest.mark.parametrize("seed", [-1, 2**32, 2**70, "x", float("nan"), 1.5, True])
def test_a_seed_numpy_would_refuse_is_one_line_in_the_python_api(tmp_path, tiny_dataset, seed):
    """Seeds reached numpy, torch or Optuna unchecked: a ValueError mid-exploration, or silently truncated."""
    import autotune
    from autotune.errors import ConfigError

    cfg = LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 0})
    with pytest.raises(ConfigError, match="seed must be a whole number"):
        autotune.build_loader(tiny_dataset, cfg, device="cpu", seed=seed)
    with pytest.raises(ConfigError, match="seed must be a whole number"):
        autotune.AutoLoader(tiny_dataset, batch_size=4, device="cpu", seed=seed, config=str(tmp_path / "a.yaml"), storage=f"sqlite:///{tmp_path}/s.db")


def test_numpy_seeds_are_seeds(tiny_dataset):
    import numpy as np

    import autotune

    cfg = LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 0})
    assert len(autotune.build_loader(tiny_dataset, cfg, device="cpu", seed=np.int64(3))) >= 1


@pytest.mark.parametrize(("env", "needle"), [
    ({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "7"}, "local_rank=7, local_world_size=1 and world_size=1 do not fit together"),
    ({"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "8"}, "local_world_size=8 and world_size=2 do not fit together"),
])
def test_for_rank_refuses_ranks_that_do_not_fit_together(tmp_path, monkeypatch, env, needle):
    """LOCAL_RANK=7 on a one-rank job meant cuda:7."""
    from autotune.errors import ConfigError

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    f = tmp_path / "a.yaml"
    save_config(Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 0}), hardware=fingerprint.collect()), f)
    with pytest.raises(ConfigError, match=re.escape(needle)):
        load_config(f).for_rank()


@pytest.mark.parametrize("value", ["0", "-3", "abc"])
def test_autoloader_refuses_a_local_world_size_that_is_no_count(tmp_path, tiny_dataset, monkeypatch, value):
    """LOCAL_WORLD_SIZE=0 wrote a YAML with ranks: 0 that load_config then refused; 'abc' was a ValueError."""
    import autotune
    from autotune.errors import ConfigError

    monkeypatch.setenv("LOCAL_WORLD_SIZE", value)
    with pytest.raises(ConfigError, match="LOCAL_WORLD_SIZE must be a whole number of 1 or more"):
        loader = autotune.AutoLoader(tiny_dataset, batch_size=4, device="cpu", config=str(tmp_path / "a.yaml"), storage=f"sqlite:///{tmp_path}/s.db")
        next(iter(loader))


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"budget_s": "x"}, "budget_s must be a number of seconds"),
    ({"budget_s": True}, "budget_s must be a number of seconds"),
    ({"max_slowdown": "x"}, "max_slowdown must be a number"),
    ({"space": 5}, "space must be a search space's name"),
    ({"storage": 5}, "storage must be a storage URL"),
    ({"storage": "autotune.db"}, "storage 'autotune.db' is not a storage URL; pass sqlite:///autotune.db"),
    ({"config": 5}, "config must be a YAML's path"),
    ({"pipeline": 5}, "pipeline must be a preset's name"),
    ({"study_name": 5}, "study_name must be a study's name"),
    ({"with_indices": "yes"}, "with_indices must be True or False"),
    ({"exploration": {}}, "exploration must be an autotune.Exploration"),
    ({"candidates": [1]}, "candidates must be a list of dicts"),
    ({"candidates": {"num_workers": 2}}, "candidates must be a list of dicts"),
    ({"candidates": [{"workers": 2}]}, r"candidates\[0\] .* is not a loader config: unknown loader parameter 'workers'"),
    ({"candidates": [{"backend": "torch", "num_workers": -1}]}, r"candidates\[0\] .* is not a loader config: .*num_workers must be between 0"),
])
def test_autoloader_arguments_of_the_wrong_kind_are_one_line(tmp_path, tiny_dataset, kwargs, needle):
    """Were TypeErrors and AttributeErrors from deep inside (a str compared with 0, storage.lower() on an int), or a
    candidate with a typo skipped with a warning minutes into training."""
    import autotune

    args = {"batch_size": 4, "device": "cpu", "config": str(tmp_path / "a.yaml"), "storage": f"sqlite:///{tmp_path}/s.db", **kwargs}
    with pytest.raises(UserError, match=needle):
        autotune.AutoLoader(tiny_dataset, **args)
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "a.yaml").exists()


def test_api_paths_of_the_wrong_kind_are_one_line(tiny_dataset):
    import autotune

    cfg = LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 0})
    with pytest.raises(UserError, match="path must be the dataset folder's path or your own Dataset, but got int 5"):
        autotune.build_loader(5, cfg, device="cpu")
    with pytest.raises(UserError, match="path must be the dataset folder's path or your own Dataset, but got NoneType None"):
        autotune.AutoLoader(None, device="cpu", config=None, storage=None)
    with pytest.raises(UserError, match="path must be the YAML's path"):
        autotune.load_config(None)


def test_a_loader_config_built_by_hand_is_checked_like_the_yaml():
    """LoaderConfig("bogus", 16) was a ValueError from the enum; a dict for torch= was kept and broke describe()."""
    from autotune.config.schema import TorchOptions
    from autotune.errors import ConfigError

    with pytest.raises(ConfigError, match="loader.backend must be one of torch, dali, user, dali_user, but got 'bogus'"):
        LoaderConfig("bogus", 16)
    with pytest.raises(ConfigError, match="backend must be one of torch, dali, user, dali_user, but got 'bogus'"):
        LoaderConfig.from_params({"backend": "bogus", "batch_size": 16})
    assert LoaderConfig("torch", 16, torch={"num_workers": 2}).torch == TorchOptions(num_workers=2)
    assert LoaderConfig("torch", 16, torch={"num_workers": 2}).describe() == "torch b=16 workers=2"
    with pytest.raises(ConfigError, match="unknown key loader.torch.workers"):
        LoaderConfig("torch", 16, torch={"workers": 2})
    with pytest.raises(ConfigError, match="loader.torch must be an autotune.TorchOptions or a mapping"):
        LoaderConfig("torch", 16, torch=5)
    with pytest.raises(ConfigError, match="loader.dali is given, but loader.backend is torch, which would not use it; remove the dali section"):
        LoaderConfig("torch", 16, dali={"num_threads": 4})  # backend: dali edited to torch, its section left: torch's defaults ran


def test_a_yaml_whose_backend_was_switched_by_hand_is_one_line(tmp_path):
    import autotune
    from autotune.errors import ConfigError

    path = tmp_path / "autotune.yaml"
    path.write_text("schema: 1\nloader: {backend: torch, batch_size: 8, dali: {device: cpu, num_threads: 4}}\n")
    with pytest.raises(ConfigError, match="loader.dali is given, but loader.backend is torch.*or set backend: dali"):
        autotune.load_config(path)


def test_out_ending_in_a_slash_is_a_folder_not_a_file(tmp_path, workdir, tiny_dataset, capsys):
    """`--out configs/` wrote a file named configs (Path() drops the slash); the next `--out configs/a.yaml` then failed."""
    import autotune

    assert main(["run", "--dataset", str(tiny_dataset), "--out", "configs/", *FAST]) == 2
    err = capsys.readouterr().err
    assert "--out 'configs/' names a folder (it ends in '/'); pass a file name such as configs/autotune.yaml" in err
    assert not (workdir / "configs").exists() and "setting up" not in err
    with pytest.raises(UserError, match="names a folder"):
        autotune.AutoLoader(tiny_dataset, batch_size=4, device="cpu", config=str(tmp_path / "al") + "/", storage=None)
    assert not (tmp_path / "al").exists()


def test_out_with_an_image_extension_is_refused_before_it_lands_in_the_dataset(tiny_dataset, workdir, capsys):
    """`--out ds/cls/x.jpg` wrote the YAML into the class folder, and the next scan warned of it as an undecodable image."""
    from autotune.dataset.scan import scan

    before = len(scan(str(tiny_dataset)))
    out = next(p for p in tiny_dataset.iterdir() if p.is_dir()) / "autotune.JPG"
    assert main(["run", "--dataset", str(tiny_dataset), "--out", str(out), *FAST]) == 2
    err = capsys.readouterr().err
    assert (f"--out {str(out)!r} ends in .JPG, an image's extension, so a scan of its folder would read it as a broken image; "
            "pass a file name with another extension") in err
    assert err.count("\n") == 1 and not out.exists() and len(scan(str(tiny_dataset))) == before
    assert main(["run", "--dataset", str(tiny_dataset), "--out", "-", *FAST]) == 2
    assert "--out '-' would write a file named '-'" in capsys.readouterr().err and not (workdir / "-").exists()
    assert main(["run", "--dataset", str(tiny_dataset), "--storage", f"sqlite:///{workdir}/study.png", *FAST]) == 2
    assert "ends in .png, an image's extension" in capsys.readouterr().err and not (workdir / "study.png").exists()


def test_synth_out_of_memory_is_one_line(tmp_path, monkeypatch, capsys):
    """8192 px images under a memory limit: a numpy _ArrayMemoryError traceback."""
    from autotune.dataset import synth

    def no_memory(job):  # synth._write's one argument
        raise MemoryError("Unable to allocate 1.50 GiB for an array")

    monkeypatch.setattr(synth, "_write", no_memory)
    assert main(["synth", str(tmp_path / "s"), "--images", "2", "--classes", "1", "--max-side", "8192", "--min-side", "8000"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("autotune: error: not enough memory to draw images of up to 8192 px (1,536 MiB each while drawn")
    assert line.endswith("pass a smaller --max-side (the images written so far are kept)")


def test_autoloader_takes_what_it_took_before_its_argument_checks(tmp_path, tiny_dataset):
    """The checks must not refuse what worked: a torch.device, numpy's bool, candidates as any mappings in any
    iterable, an in-memory SQLite storage (as None)."""
    import types

    import numpy as np
    import torch

    import autotune

    rules = autotune.Exploration(warmup_batches=1, measure_batches=2, check_batches=2, max_candidates=1)
    al = autotune.AutoLoader(
        tiny_dataset,
        device=torch.device("cpu"),
        batch_size=4,
        config=None,
        storage="sqlite:///:memory:",
        with_indices=np.bool_(False),
        candidates=(types.MappingProxyType({"backend": "torch", "num_workers": 0}),),
        exploration=rules,
    )
    try:
        assert sum(1 for _ in al) == 6  # 24 images, batch 4
    finally:
        al.close()
    with pytest.raises(UserError, match=r"candidates\[0\] .* is not a loader config"):
        autotune.AutoLoader(tiny_dataset, device="cpu", config=None, storage=None, candidates=[{"backend": "torch", "batch_size": None}])


def test_synth_names_a_file_or_folder_in_the_way(tmp_path, capsys):
    """A file where a class folder goes was reported as a full disk; a folder where an image goes counted as an
    image (the class came out one short); a file given as DIR said 'cannot create (File exists)'."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "class_0000").write_text("")
    (tmp_path / "b" / "class_0001" / "img_000001.jpg").mkdir(parents=True)
    (tmp_path / "c").write_text("")
    for name, needle in (
        ("a", "'a/class_0000' is a file where a class folder goes; move it away"),
        ("b", "'b/class_0001/img_000001.jpg' is a folder where an image goes; remove it"),
        ("c", "'c' is a file; pass a folder to write the class sub-folders into"),
    ):
        assert main(["synth", str(tmp_path / name), "--images", "4", "--classes", "2"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert needle.replace("'", "'" + str(tmp_path) + "/", 1) in line and "disk" not in line


@pytest.mark.parametrize("argv", [["synth", "{long}"], ["check", "{long}.yaml"], ["run", "--dataset", "{long}"], ["studies", "--storage", "{long}.log"]])
def test_a_path_too_long_for_the_system_is_one_line(workdir, capsys, argv):
    """A 300-character name was an OSError traceback (File name too long) in every command."""
    long = "x" * 300
    assert main([a.format(long=long) for a in argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "is too long a path for this system (File name too long); pass a shorter one" in line and len(line) < 200


def test_synth_in_a_folder_it_cannot_write_names_that_fix(tmp_path, monkeypatch, capsys):
    """A read-only file system was told to 'free some space'."""
    from PIL import Image

    def save(self, fp, *a, **k):  # noqa: ARG001 - PIL's signature
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(Image.Image, "save", save)
    assert main(["synth", str(tmp_path / "s"), "--images", "2", "--classes", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "(Read-only file system); pass a folder you can write" in line and "free some space" not in line


def test_synth_refused_for_more_classes_than_images_leaves_no_folder(tmp_path, capsys):
    """The folder was made first, then the counts refused: an empty DIR was left behind."""
    target = tmp_path / "new" / "x"
    assert main(["synth", str(target), "--images", "3", "--classes", "5"]) == 2
    assert "--classes must be between 1 and the number of images (3), but got 5" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize(
    "argv",
    [
        ["run", "--if-stale", ""],  # tuned and wrote ./autotune.yaml
        ["run", "--dataset", "d", "--warm-start", ""],  # ran with no warm start, without a word
        ["run", "--dataset", "d", "--resume", "--study-name", " "],  # resumed the latest study
        ["run", "--dataset", "d", "--reports-dir", ""],  # wrote the report folder into the working folder
        ["report", "--study", ""],  # reported the latest study
        ["check", ""],  # "'.' is a folder"
        ["show", "--study", ""],
        ["studies", "--storage", ""],
        ["run", "--dataset", "d", "--device", ""],  # the default device
    ],
)
def test_an_empty_value_is_refused_not_read_as_the_default(argv, workdir, capsys):
    """`--if-stale "$CONFIG"` with the variable unset: the run fell back to another file, study or folder."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert ": is empty (" in err and "give a value, or leave it out for the default" in err and "\n" not in err, err


def test_a_config_built_by_hand_is_checked_like_the_yaml(tiny_dataset, tmp_path):
    """Config(loader={...}) broke build_loader with an AttributeError deep inside it; schema: true read as 1."""
    import autotune
    from autotune.config.schema import Config
    from autotune.errors import ConfigError

    cfg = Config(loader={"backend": "torch", "batch_size": 4, "torch": {"num_workers": 0}})  # the YAML's section, read as it
    assert cfg.loader == LoaderConfig("torch", 4) and cfg.dataloader_kwargs()["batch_size"] == 4
    with pytest.raises(ConfigError, match="^loader must be an autotune.LoaderConfig or a mapping of the YAML's loader section, but got NoneType$"):
        Config(loader=None)
    with pytest.raises(ConfigError, match="^dataset must be a mapping, but got list$"):
        Config(loader=LoaderConfig("torch", 4), dataset=[1])
    with pytest.raises(ConfigError, match="^device must be cpu, cuda or cuda:N, but got 'tpu'$"):
        Config(loader=LoaderConfig("torch", 4), device="tpu")
    with pytest.raises(ConfigError, match="^loader parameters must be a mapping"):
        LoaderConfig.from_params([1])
    for schema in ("true", "1.0"):
        path = tmp_path / "a.yaml"
        path.write_text(f"schema: {schema}\nloader: {{backend: torch, batch_size: 4}}\n")
        with pytest.raises(ConfigError, match=r"schema must be 1, but got (True|1\.0)"):
            autotune.load_config(path)
    path.write_text("schema: 1\ndevice: null\nloader: {backend: torch, batch_size: 4}\n")
    assert autotune.load_config(path).device == "cpu"  # null is the default, as it was before the Config's own check
    with pytest.raises(ConfigError, match="^strict must be True or False, but got str 'no'$"):
        autotune.load_config(path, strict="no")  # read as True: a stale file raised
