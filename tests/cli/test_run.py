"""``autotune run`` end to end on tiny data (CPU), resume, and every bad input's one-line error."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import optuna
import pytest

import autotune
from autotune.cli import main
from autotune.study.evidence import trial_attrs

FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--no-report", "--quiet"]


def _trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    (summary,) = optuna.get_all_study_summaries(storage)
    return optuna.load_study(study_name=summary.study_name, storage=storage).trials


@pytest.mark.slow
def test_run_writes_a_yaml_that_training_can_use(tiny_dataset, workdir):
    rc = main(
        [
            "run",
            "--dataset",
            str(tiny_dataset),
            "--space",
            "cpu",
            "--n-trials",
            "4",
            "--batch-size",
            "8",
            "--confirm-top",
            "2",
            "--confirm-repeats",
            "1",
            "--seed",
            "1",
            *FAST,
        ]
    )
    assert rc == 0
    cfg = autotune.load_config(workdir / "autotune.yaml")
    assert cfg.loader.batch_size == 8
    assert cfg.result["samples_per_s"] > 0
    assert cfg.result["defaults_samples_per_s"] > 0 and cfg.result["heuristic_samples_per_s"] > 0
    assert cfg.dataset["samples"] == 24 and cfg.hardware["cpus"] >= 1
    assert cfg.study["trials"] == 4 and "re-measured" in cfg.result["confirmed"]["method"]
    trials = _trials("sqlite:///autotune.db")
    # what the search measured, and whether it or a starting point found the winner
    ran = {trial_attrs(t).get("config") for t in trials if trial_attrs(t).get("outcome") != "repeat"}
    assert cfg.study["configs_measured"] == len(ran) and cfg.study["sampled_measured"] == len(ran) - 3
    best = next(t for t in trials if t.number == cfg.study["best_trial"])
    assert cfg.study["winner_from"] == (trial_attrs(best).get("role") or "search")
    roles = [trial_attrs(t).get("role") for t in trials[:3]]
    assert roles == ["dali-heuristic", "heuristic", "defaults"]  # the baselines run first, the likeliest winner first
    assert trial_attrs(trials[2])["loader"]["num_workers"] == 0
    # the loader training gets is the one that was measured
    loader = autotune.build_loader(tiny_dataset, cfg)
    images, labels = next(iter(loader))
    assert tuple(images.shape) == (8, 3, 224, 224) and labels.dtype.is_floating_point is False
    assert len(loader) == 24 // 8
    loader.close()


@pytest.mark.slow
def test_resume_keeps_earlier_trials(tiny_dataset, workdir):
    args = ["run", "--dataset", str(tiny_dataset), "--space", "torch", "--study-name", "s1", "--batch-size", "8", "--confirm-top", "0", *FAST]
    assert main([*args, "--n-trials", "2"]) == 0
    first = _trials("sqlite:///autotune.db")
    assert len(first) == 2
    # same study without --resume is refused, with the fix
    assert main([*args, "--n-trials", "1"]) == 2
    assert main([*args, "--n-trials", "1", "--resume"]) == 0
    after = _trials("sqlite:///autotune.db")
    assert len([t for t in after if trial_attrs(t).get("outcome") != "repeat"]) == 3  # --n-trials counts measured trials
    assert [t.value for t in after[:2]] == [t.value for t in first]
    assert [trial_attrs(t).get("role") for t in after].count("defaults") == 1  # baselines not run twice


@pytest.mark.slow
def test_resume_refuses_another_dataset_or_space(tiny_dataset, workdir, tmp_path, capsys):
    import shutil

    args = ["run", "--study-name", "s1", "--batch-size", "8", "--confirm-top", "0", *FAST]
    assert main([*args, "--dataset", str(tiny_dataset), "--space", "torch", "--n-trials", "1"]) == 0
    before = len(_trials("sqlite:///autotune.db"))
    other = tmp_path / "other"
    shutil.copytree(tiny_dataset, other)
    next(other.rglob("*.jpg")).unlink()  # other files, at another path
    capsys.readouterr()
    # --out named: autotune.yaml, the first dataset's config, may be replaced; the study refuses
    assert main([*args, "--dataset", str(other), "--space", "torch", "--n-trials", "1", "--resume", "--out", "autotune.yaml"]) == 2
    err = capsys.readouterr().err
    assert "was tuned on" in err and str(other) in err and "--study-name" in err and len(err.strip().splitlines()) == 1
    assert main([*args, "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "1", "--resume"]) == 2
    assert "--space torch, not cpu" in capsys.readouterr().err
    assert len(_trials("sqlite:///autotune.db")) == before  # nothing measured, nothing lost
    same = tmp_path / "same"
    shutil.copytree(tiny_dataset, same)  # the same files at another path: another node of a fleet
    assert main([*args, "--dataset", str(same), "--space", "torch", "--n-trials", "1", "--resume"]) == 0


@pytest.mark.slow
def test_resume_refuses_another_measurement(tiny_dataset, workdir, capsys):
    """--resume --cache cold --window 0.4 ranked cold 0.4 s trials against warm 0.3 s ones, and the YAML named the first."""
    args = [
        "run",
        "--dataset",
        str(tiny_dataset),
        "--space",
        "torch",
        "--study-name",
        "m1",
        "--batch-size",
        "8",
        "--confirm-top",
        "0",
        "--n-trials",
        "1",
        "--device",
        "cpu",
        "--no-report",
        "--warmup-batches",
        "1",
        "--windows",
        "2",
    ]
    assert main([*args, "--window", "0.3"]) == 0
    before = len(_trials("sqlite:///autotune.db"))
    capsys.readouterr()
    assert main([*args, "--window", "0.4", "--cache", "cold", "--resume"]) == 2
    err = capsys.readouterr().err
    assert (
        "autotune: error: --resume: study 'm1' measured with --window 0.3, --cache warm, this run with --window 0.4, --cache cold; "
        "pass --window 0.3 --cache warm to resume it"
    ) in err and err.count("error") == 1
    assert len(_trials("sqlite:///autotune.db")) == before
    assert main([*args, "--window", "0.3", "--resume"]) == 0


@pytest.mark.slow
def test_resume_with_another_budget_keeps_the_studys_windows(tiny_dataset, workdir, monkeypatch):
    """A budget plans the windows (0.5 s x 3 under two minutes, 1 s x 3 up to five): a 60 s run resumed with
    --budget 150 is "more time", not another measurement, and keeps the study's windows."""
    from autotune.study import tuner as tuner_mod

    seen = []
    real = tuner_mod.Tuner.spec

    def spec(self, *a, **k):
        s = real(self, *a, **k)
        seen.append((s.window_s, s.windows))
        return s

    monkeypatch.setattr(tuner_mod.Tuner, "spec", spec)
    args = [
        "run",
        "--dataset",
        str(tiny_dataset),
        "--space",
        "torch",
        "--study-name",
        "b1",
        "--batch-size",
        "8",
        "--device",
        "cpu",
        "--no-report",
        "--warmup-batches",
        "1",
        "--quiet",
    ]
    assert main([*args, "--budget", "15"]) == 0
    first = len(seen)
    assert main([*args, "--budget", "150", "--resume", "--n-trials", "1"]) == 0  # --n-trials plans 1 s x 5 without a budget
    assert first and len(seen) > first and set(seen) == {(0.5, 3)}, seen
    study = optuna.load_study(study_name="b1", storage="sqlite:///autotune.db")
    assert (study.user_attrs["measurement"]["window_s"], study.user_attrs["measurement"]["windows"]) == (0.5, 3)


def _bad(tmp_path, kind):
    if kind == "missing":
        return str(tmp_path / "nope")
    if kind == "file":
        f = tmp_path / "f.jpg"
        f.write_bytes(b"x")
        return str(f)
    d = tmp_path / kind
    d.mkdir()
    if kind == "flat":
        (d / "a.jpg").write_bytes(b"\xff\xd8")
    if kind == "flat-no-images":  # it said "has images but no class sub-folders"
        (d / "readme.md").write_text("hi")
    if kind == "noimages":
        (d / "cls").mkdir()
        (d / "cls" / "notes.txt").write_text("hi")
    return str(d)


@pytest.mark.parametrize(
    "kind, needle",
    [
        ("missing", "does not exist"),
        ("file", "is a file, not a folder"),
        ("empty", "is empty"),
        ("flat", "has images but no class sub-folders"),
        ("flat-no-images", "holds no images and no class sub-folders (only 1 other file, such as 'readme.md')"),
        ("noimages", "no readable images"),
    ],
)
def test_bad_dataset(tmp_path, workdir, capsys, kind, needle):
    rc = main(["run", "--dataset", _bad(tmp_path, kind), "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert needle in err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (workdir / "autotune.yaml").exists()


@pytest.mark.parametrize(
    "given, needle",
    [
        ("pipe.py:", "dataset path 'pipe.py:' names no function after the colon; pass FILE.py:FUNC (FUNC: the function that returns"),
        (":train_set", "dataset path ':train_set' names no file before the colon; pass FILE.py:train_set, the file that defines train_set"),
        ("pipe.py", "dataset path 'pipe.py' is a Python file, not a folder of images; pass FILE.py:FUNC"),
        ("pipe.py:1x", "'1x' after the colon is not a function's name; pass FILE.py:FUNC"),
    ],
)
def test_half_a_pipeline_function_is_told_its_form(workdir, capsys, given, needle):
    """It was told as an image folder that does not exist (or is a file), which never names FILE.py:FUNC."""
    (workdir / "pipe.py").write_text("def train_set():\n    pass\n")
    assert main(["run", "--dataset", given, "--batch-size", "8", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1 and "sub-folder" not in err, err


def test_a_pipeline_function_where_only_a_folder_is_taken_says_where_it_is_taken(workdir):
    """doctor and AutoLoader read a folder: a FILE.py:FUNC there was told to pass FILE.py:FUNC, which they do not take."""
    from autotune.dataset.scan import scan
    from autotune.errors import DatasetError

    (workdir / "pipe.py").write_text("def train_set():\n    pass\n")
    with pytest.raises(DatasetError) as told:
        scan("pipe.py:train_set")
    assert str(told.value) == ("dataset path 'pipe.py:train_set' names a pipeline function, not a folder of images, which only "
                               "`autotune run --dataset` takes; here pass a folder, or in Python the Dataset that train_set() returns")
    with pytest.raises(DatasetError) as told:
        scan("pipe.py")
    assert "pass FILE.py:FUNC (FUNC: the function that returns your Dataset) to `autotune run`, or in Python the Dataset" in str(told.value)


def test_a_space_of_another_kind_of_dataset_is_refused_before_any_trial(workdir, tiny_dataset, capsys):
    """An image folder's space over the user's Dataset failed alike in every trial ('num_samples should be a positive
    integer'), and the user's space over a folder failed alike too: each is one line now, and no study is made."""
    (workdir / "pipe.py").write_text("import torch\n\n\ndef train_set():\n    return [(torch.zeros(3), 0)] * 16\n")
    assert main(["run", "--dataset", "pipe.py:train_set", "--batch-size", "8", "--space", "torch", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--space torch tunes an image folder's loaders, not your own Dataset's; leave --space out (your Dataset takes the space "
                        "'user'), or pass a space file whose backend is user"), err
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "user", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--space user tunes your own pipeline's loaders (user), not an image folder's; pass --dataset FILE.py:FUNC" in err, err
    assert not list(workdir.glob("*.db")) and not (workdir / "autotune.yaml").exists()


@pytest.mark.parametrize(
    "extra, needle",
    [
        (["--n-trials", "0"], "--n-trials: must be at least 1"),
        (["--pipeline", "coco"], "unknown pipeline 'coco'"),
        (["--space", "BADSPACE"], "params.num_workers"),
        (["--space", "nonexistent.yaml"], "not found"),
        (["--device", "tpu"], "--device must be cpu, cuda or cuda:N"),
        (["--device", "cuda:abc"], "--device must be cpu, cuda or cuda:N, but got 'cuda:abc'"),
        (["--device", "cuda"], "no NVIDIA GPU is visible"),
    ],
)
def test_bad_arguments(tiny_dataset, workdir, capsys, extra, needle):
    if "BADSPACE" in extra:
        bad = workdir / "bad.yaml"
        bad.write_text("params:\n  batch_size: {choices: [8]}\n  num_workers: {int: [0]}\n")
        extra = ["--space", str(bad)]
    if extra == ["--device", "cuda"]:
        from autotune.config import fingerprint

        if fingerprint.gpu_info()["gpus"]:
            pytest.skip("a GPU is visible")
    rc = main(["run", "--dataset", str(tiny_dataset), "--quiet", *extra])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert needle in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err


def test_no_command_prints_help(capsys):
    assert main([]) == 2
    assert "run" in capsys.readouterr().err


def test_demo_dataset_is_imagenet_like(tmp_path):
    from PIL import Image

    from autotune.dataset.synth import synthesize

    root = synthesize(tmp_path / "d", images=12, classes=3)
    files = sorted(root.rglob("*.jpg"))
    assert len(files) == 12 and len({f.parent.name for f in files}) == 3
    sizes = [Image.open(f).size for f in files]
    assert all(300 <= min(s) and max(s) <= 500 for s in sizes)
    assert len(set(sizes)) > 1  # varied sizes
    mean = sum(f.stat().st_size for f in files) / len(files)
    assert 15_000 < mean < 120_000  # photo-like JPEG sizes, not flat colour


@pytest.mark.slow
def test_dali_only_space_still_measures_the_torch_baselines(tiny_dataset, workdir):
    pytest.importorskip("nvidia.dali")
    space = workdir / "dali-only.yaml"
    space.write_text("params:\n  backend: {choices: [dali]}\n  batch_size: {choices: [8]}\n  num_threads: {int: [1, 2]}\n")
    rc = main(["run", "--dataset", str(tiny_dataset), "--space", str(space), "--n-trials", "3", "--confirm-top", "0", *FAST])
    assert rc == 0
    trials = _trials("sqlite:///autotune.db")
    assert [trial_attrs(t)["loader"]["backend"] for t in trials] == ["dali", "torch", "torch"]  # DALI's usual start first
    assert trials[2].params == {} and trial_attrs(trials[2])["outcome"] == "complete"  # measured, nothing sampled
    assert autotune.load_config(workdir / "autotune.yaml").result["defaults_samples_per_s"] > 0


@pytest.mark.slow
def test_dali_cpu_study_writes_a_dali_yaml_that_build_loader_iterates(tiny_dataset, workdir):
    pytest.importorskip("nvidia.dali")
    rc = main(
        [
            "run",
            "--dataset",
            str(tiny_dataset),
            "--space",
            "dali",
            "--device",
            "cpu",
            "--batch-size",
            "8",
            "--n-trials",
            "3",
            "--no-baselines",
            "--confirm-top",
            "2",
            "--confirm-repeats",
            "1",
            *FAST,
        ]
    )
    assert rc == 0
    cfg = autotune.load_config(workdir / "autotune.yaml")
    assert cfg.loader.backend.value == "dali" and cfg.loader.dali.device == "cpu"
    assert "loader" in cfg.to_dict() and cfg.result["samples_per_s"] > 0
    loader = autotune.build_loader(tiny_dataset, cfg)
    n = 0
    for _epoch in range(2):  # resettable per epoch
        for images, labels in loader:
            assert tuple(images.shape) == (8, 3, 224, 224) and str(labels.dtype) == "torch.int64"
            n += 1
    assert n == 2 * len(loader) == 2 * (24 // 8)
    loader.close()


# ------------------------------------------------------------------------------------ where the YAML goes
def test_out_under_a_regular_file_is_refused_before_tuning(tiny_dataset, workdir, capsys):
    (workdir / "notes.txt").write_text("a file, not a folder")
    rc = main(["run", "--dataset", str(tiny_dataset), "--out", "notes.txt/autotune.yaml", "--quiet"])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert "--out 'notes.txt/autotune.yaml' is under" in err and "which is a file, not a folder" in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert not (workdir / "autotune.db").exists()  # found before the study was opened


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes in a read-only folder")
def test_out_in_a_read_only_folder_is_refused_before_tuning(tiny_dataset, workdir, capsys):
    ro = workdir / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        rc = main(["run", "--dataset", str(tiny_dataset), "--out", "ro/sub/autotune.yaml", "--quiet"])
    finally:
        ro.chmod(0o755)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and "is not writable" in err and len(err.splitlines()) == 1, err
    assert not (workdir / "autotune.db").exists()


def test_out_folder_that_cannot_be_written_is_refused_before_tuning(tiny_dataset, workdir, capsys, monkeypatch):
    """What a read-only folder or file system answers, for a user that root's permissions hide it from."""
    import tempfile

    from autotune.config import files

    def read_only(*a, **kw):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(files.tempfile, "mkstemp", read_only)
    rc = main(["run", "--dataset", str(tiny_dataset), "--out", "out/autotune.yaml", "--quiet"])
    monkeypatch.setattr(files.tempfile, "mkstemp", tempfile.mkstemp)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and f"folder {str(workdir)!r} is not writable (Read-only file system)" in err, err
    assert not (workdir / "autotune.db").exists()


@pytest.mark.slow
def test_write_error_at_the_end_keeps_the_study_and_resume_writes_the_yaml(tiny_dataset, workdir, capsys, monkeypatch):
    from autotune.config.files import save_config
    from autotune.tuning import write as tune_module

    def disk_full(cfg, path):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    args = [
        "run",
        "--dataset",
        str(tiny_dataset),
        "--space",
        "torch",
        "--study-name",
        "full",
        "--batch-size",
        "8",
        "--n-trials",
        "2",
        "--confirm-top",
        "0",
        *FAST,
    ]
    monkeypatch.setattr(tune_module, "save_config", disk_full)
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "cannot write 'autotune.yaml' (No space left on device)" in err and "--resume" in err, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    trials = _trials("sqlite:///autotune.db")
    assert len(trials) == 2 and any(t.state is optuna.trial.TrialState.COMPLETE for t in trials)  # the study is kept

    monkeypatch.setattr(tune_module, "save_config", save_config)
    assert main([*args, "--resume"]) == 0
    cfg = autotune.load_config(workdir / "autotune.yaml")
    assert cfg.study["name"] == "full" and cfg.result["samples_per_s"] > 0
    assert len(_trials("sqlite:///autotune.db")) == 2  # written from the study, without tuning again
    assert main([*args, "--resume", "--n-trials", "1"]) == 0  # the next --resume tunes as usual
    measured = [t for t in _trials("sqlite:///autotune.db") if trial_attrs(t).get("outcome") != "repeat"]  # a repeat is not measured
    assert len(measured) == 3


def test_a_reports_dir_that_cannot_be_a_folder_is_one_line_before_any_study(tiny_dataset, workdir, capsys):
    Path("afile").write_text("")
    rc = main(
        ["run", "--dataset", str(tiny_dataset), "--space", "torch", "--batch-size", "8", "--n-trials", "1", "--reports-dir", "afile", "--no-report", *FAST]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "--reports-dir 'afile'" in err and "Not a directory" in err and len(err.strip().splitlines()) == 1
    assert not Path("autotune.db").exists() or not optuna.get_all_study_summaries("sqlite:///autotune.db")


@pytest.mark.slow
def test_resume_after_the_space_file_changed_its_choices_is_one_line(tiny_dataset, workdir, capsys):
    space = Path("my.yaml")
    space.write_text("params:\n  backend: {choices: [torch]}\n  batch_size: {choices: [8]}\n  num_workers: {choices: [0, 1]}\n")
    args = ["run", "--dataset", str(tiny_dataset), "--space", "my.yaml", "--study-name", "s", "--no-baselines", "--confirm-top", "0", *FAST]
    assert main([*args, "--n-trials", "1"]) == 0
    space.write_text("params:\n  backend: {choices: [torch]}\n  batch_size: {choices: [8]}\n  num_workers: {choices: [0, 2]}\n")
    capsys.readouterr()
    assert main([*args, "--n-trials", "1", "--resume"]) == 2
    err = capsys.readouterr().err
    assert "--resume: study 's' sampled num_workers from {0, 1}, this run from {0, 2}" in err and len(err.strip().splitlines()) == 1, err
    assert [t.state for t in _trials("sqlite:///autotune.db")][0] == optuna.trial.TrialState.COMPLETE  # the first trial is kept


@pytest.mark.slow
def test_the_first_seconds_are_named_and_a_bad_folder_is_still_one_line(tiny_dataset, tmp_path, workdir, capsys):
    """The set-up (scan, torch imported by the probe and the measuring process) is said as it starts; a folder
    that fails the scan gives its error alone."""
    assert main(["run", "--dataset", str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "does not exist" in err[0]
    assert (
        main(
            [
                "run",
                "--dataset",
                str(tiny_dataset),
                "--space",
                "torch",
                "--n-trials",
                "1",
                "--batch-size",
                "8",
                "--confirm-top",
                "0",
                "--window",
                "0.2",
                "--windows",
                "2",
                "--warmup-batches",
                "1",
                "--no-report",
            ]
        )
        == 0
    )  # not --quiet
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith(f"setting up: 24 images in {tiny_dataset}, starting the measuring process")


@pytest.mark.slow
def test_the_estimate_of_one_trial_counts_no_re_measurement(tmp_path, workdir, tiny_dataset, capsys):
    """One trial has no other to be compared with: `--n-trials 1` estimated 1:18 for "1 trial and up to 6
    re-measurements", and took 15 s."""
    loud = [a for a in FAST if a != "--quiet"]
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "torch", "--batch-size", "8", "--n-trials", "1", *loud]) == 0
    said = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("estimated time:")]
    assert len(said) == 1 and said[0].endswith(" for 1 trial"), said


def _config_for(path: Path, folder: str, created: str = "2026-01-01T00:00:00Z") -> bytes:
    """An autotune.yaml at ``path`` tuned on ``folder`` (its figures and signature as a run records them, or only its
    path for a folder of no images); returns its bytes."""
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    loader = LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1})
    dataset = fingerprint.dataset_summary(folder) if any(Path(folder).iterdir()) else {"path": folder, "samples": 24}
    save_config(Config(loader=loader, hardware=fingerprint.collect(), dataset=dataset, created=created), path)
    return path.read_bytes()


class _Checked(Exception):
    """Raised in place of fitting the batch sizes to the dataset: every check of the outputs has passed."""


@pytest.fixture()
def stop_after_the_checks(monkeypatch):
    from autotune.tuning import prepare

    def fit(*a, **k):  # noqa: ANN002, ANN003, ARG001 - fit_batch_sizes' signature
        raise _Checked

    monkeypatch.setattr(prepare, "fit_batch_sizes", fit)
    monkeypatch.setattr(prepare, "launch_zygote", lambda early, preload=None: (None, ""))  # noqa: ARG005 - nothing is measured


def test_a_yaml_for_another_dataset_is_not_replaced_unless_out_names_it(tiny_dataset, workdir, capsys, stop_after_the_checks):
    """Tuning a second dataset in the same folder replaced autotune.yaml, written for the first, without a word."""
    other = workdir / "a"
    other.mkdir()
    before = _config_for(workdir / "autotune.yaml", str(other))
    for flags in ([], ["--json"], ["--reuse"], ["--resume"]):
        assert main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *flags]) == 2
        out, err = capsys.readouterr()
        assert err.strip().splitlines()[-1] == (f"autotune: error: autotune.yaml holds the config for {other}, not for {tiny_dataset}; "
                                                "pass --out autotune.yaml to replace it, or --out another file"), flags
        assert "Traceback" not in err and (workdir / "autotune.yaml").read_bytes() == before and not (workdir / "autotune.db").exists()
        if "--json" in flags:
            assert "holds the config for" in out
    for named in (["--out", "autotune.yaml"], ["--out", "./autotune.yaml"], ["--out", "b.yaml"]):
        with pytest.raises(_Checked):  # --out names the file: replaced as asked, or another file written
            main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1", *named])


def test_a_yaml_for_the_same_dataset_is_replaced_as_before(tiny_dataset, workdir, stop_after_the_checks):
    import shutil

    _config_for(workdir / "autotune.yaml", str(tiny_dataset))
    with pytest.raises(_Checked):
        main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1"])
    (workdir / "link").symlink_to(tiny_dataset)  # the same folder named another way
    with pytest.raises(_Checked):
        main(["run", "--dataset", "link", "--n-trials", "1"])
    shutil.copytree(tiny_dataset, workdir / "copy")  # the same files elsewhere: another node of a fleet
    with pytest.raises(_Checked):
        main(["run", "--dataset", "copy", "--n-trials", "1"])
    (workdir / "autotune.yaml").write_text("")  # an empty file records no dataset: nothing to keep
    with pytest.raises(_Checked):
        main(["run", "--dataset", str(tiny_dataset), "--n-trials", "1"])


def test_if_stale_re_tunes_its_file_whatever_dataset_it_records(tiny_dataset, workdir, stop_after_the_checks):
    """--if-stale FILE names FILE: re-tuned for its own dataset, or for --dataset when given."""
    other = workdir / "a"
    other.mkdir()
    _config_for(workdir / "autotune.yaml", str(other))
    with pytest.raises(_Checked):
        main(["run", "--if-stale", "autotune.yaml", "--max-age", "1", "--dataset", str(tiny_dataset), "--n-trials", "1"])
    _config_for(workdir / "own.yaml", str(tiny_dataset))
    with pytest.raises(_Checked):
        main(["run", "--if-stale", "own.yaml", "--max-age", "1", "--n-trials", "1"])

