"""What a new user meets first: what the commands say about what they did, and the warnings a short or busy run needs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from autotune.config import fingerprint
from autotune.config.files import save_config
from autotune.config.schema import Config, LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.report._data import importances
from autotune.report._render import headline
from autotune.study.budget import TimeBudget
from autotune.study.evidence import trial_attrs
from autotune.study.space import load_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.guard import OtherLoad, too_busy
from autotune.tuning.caveats import busy_warnings, short_run_warnings
from autotune.tuning.search import budget_header


def test_synth_says_what_it_wrote(tmp_path, capsys):
    d = str(tmp_path / "data")
    assert main(["synth", d, "--images", "6", "--classes", "2", "--min-side", "16", "--max-side", "24"]) == 0
    assert "wrote 6 images in 2 classes" in capsys.readouterr().err
    assert main(["synth", d, "--images", "6", "--classes", "2", "--min-side", "16", "--max-side", "24", "--seed", "5"]) == 0
    assert "wrote nothing: all 6 images were already" in capsys.readouterr().err  # not "wrote 6 images"
    assert main(["synth", d, "--images", "8", "--classes", "2", "--min-side", "16", "--max-side", "24"]) == 0
    err = capsys.readouterr().err
    assert "wrote 2 images in 2 classes" in err and "(6 already there, kept)" in err
    assert sum(1 for _ in Path(d).rglob("*.jpg")) == 8


def _yaml(path: Path, hardware: dict) -> str:
    cfg = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 1}), hardware=hardware,
                 dataset={"path": "/nonexistent/train", "samples": 24})
    save_config(cfg, path)
    return str(path)


def test_check_suggests_rewriting_the_file_it_checked(tmp_path, capsys):
    f = _yaml(tmp_path / "other.yaml", fingerprint.collect() | {"cpus": 97})
    assert main(["check", f]) == 1
    out = capsys.readouterr().out
    assert f"--warm-start {f} --out {f}" in out  # without --out the re-tune would write autotune.yaml, leaving this file stale


def test_show_reads_autotune_yaml_by_default(workdir, capsys):
    assert main(["show"]) == 2
    assert "no autotune.yaml in this folder" in capsys.readouterr().err
    _yaml(workdir / "autotune.yaml", fingerprint.collect())
    assert main(["show"]) == 0
    assert "autotune.yaml" in capsys.readouterr().out


def test_the_budget_header_never_shows_a_negative_time_left():
    spent = TimeBudget(10.0, clock=lambda: 21.0, start=0.0)
    line = budget_header(spent)
    assert "-" not in line and "went on setting up (21 s)" in line
    assert "(7 s left)" in budget_header(TimeBudget(10.0, clock=lambda: 3.0, start=0.0))


def test_a_run_that_measured_no_dataloader_says_so_and_how_to_fix_it():
    space = load_space("default", cores=2, device="cpu", dali=True)
    dali = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 2}))
    budget = TimeBudget(30.0, clock=lambda: 28.0, start=0.0)
    warnings = short_run_warnings(dali, space, budget)
    assert len(warnings) == 1 and "cfg.dataloader_kwargs()" in warnings[0] and "--budget 60" in warnings[0]
    with_fallback = Config(loader=dali.loader, torch_fallback={"batch_size": 8, "torch": {"num_workers": 1}})
    assert short_run_warnings(with_fallback, space, budget) == []
    over = TimeBudget(10.0, clock=lambda: 28.0, start=0.0)
    over.spent["setup"] = 21.0
    assert any("over its 10 s budget (setting up alone took 21 s" in w for w in short_run_warnings(with_fallback, space, over))
    # the "took 49 s of the 20 s budget" line and this warning state one figure (the warning came a second later)
    assert any(w.startswith("the run took 49 s, over its 10 s budget") for w in short_run_warnings(with_fallback, space, over, elapsed=49.4))


def test_importance_leaves_out_trials_without_params():
    """AutoLoader records its starting points without params: they must not hide the knobs that vary."""
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=50.0, user_attrs={"outcome": "complete"}))
    dist = {"num_threads": optuna.distributions.IntDistribution(1, 4), "prefetch_queue_depth": optuna.distributions.IntDistribution(1, 4)}
    for th, q, v in ((1, 2, 340.0), (1, 1, 290.0), (2, 4, 310.0), (1, 4, 435.0), (2, 1, 442.0)):
        study.add_trial(optuna.trial.create_trial(params={"num_threads": th, "prefetch_queue_depth": q}, distributions=dist, value=v,
                                                  user_attrs={"outcome": "complete"}))
    few = optuna.create_study(direction="maximize")  # the three baselines of a short run: no ranking of knobs from them
    few.add_trials(study.trials[:4])
    assert importances(few) == ([], ["Parameter importance over all trials not computed: needs at least 5 completed trials, has 3."])
    found, notes = importances(study)
    assert found and set(found[0]["values"]) == {"num_threads", "prefetch_queue_depth"}, notes
    assert found[0]["trials"] == 5 and any("comes from 5 trials: a rough guide" in n for n in notes)
    for i in range(5):  # ten trials: no caveat
        study.add_trial(optuna.trial.create_trial(params={"num_threads": 1 + i % 2, "prefetch_queue_depth": 1 + i % 4}, distributions=dist,
                                                  value=300.0 + 10 * i, user_attrs={"outcome": "complete"}))
    found, notes = importances(study)
    assert found[0]["trials"] == 10 and not any("rough guide" in n for n in notes)


def test_the_trial_count_names_repeats_apart():
    ov = {"winner": None, "speedups": {}, "trials": 7, "outcomes": {"complete": 6, "repeat": 1}}
    row = dict(headline(ov))["trials"]
    assert row == "7 (6 completed, 1 repeating an earlier config, 0 not complete)"


def test_dominated_trials_are_counted_apart_not_as_failures():
    from autotune.cli._show import _trial_count

    ov = {"winner": None, "speedups": {}, "trials": 9, "outcomes": {"complete": 6, "dominated": 2, "pruned": 1}}
    assert dict(headline(ov))["trials"] == "9 (6 completed, 2 of a dominated kind, not measured, 1 not complete)"
    assert _trial_count({"trials": 9, "dominated": 2}) == "9 trials run, 2 of a dominated kind, not measured"
    assert _trial_count({"trials": 9, "dominated": 3, "later_start": 2}) == \
        "9 trials run, 1 of a dominated kind, not measured, 2 starting workers later than a start that completed, not measured"
    ov = {**ov, "outcomes": {"complete": 6, "dominated": 3}, "later_start": 2}  # the report's count says the same
    assert dict(headline(ov))["trials"] == ("9 (6 completed, 1 of a dominated kind, not measured, 2 starting workers later than a start "
                                            "that completed, not measured, 0 not complete)")


def test_gpu_text():
    assert fingerprint.gpu_text({"gpu": None, "gpus": 0}) == "no GPU"  # not "no GPU x0"
    assert fingerprint.gpu_text({"gpu": "NVIDIA H200", "gpus": 2}) == "2 x NVIDIA H200"


def test_check_names_a_change_in_classes(tmp_path):
    old = {"path": "/d", "samples": 300, "classes": 3, "mean_bytes": 100, "signature": "a"}
    diffs = fingerprint.diff_dataset(old, old | {"classes": 4})
    assert [(d.field, d.matters) for d in diffs] == [("dataset.classes", True)]


def test_an_unknown_space_fails_before_the_set_up_line(workdir, tiny_dataset, capsys):
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "bogus", "--budget", "20"]) == 2
    err = capsys.readouterr().err
    assert "search space 'bogus' not found" in err and "setting up" not in err


def _burn(detach: bool) -> int:
    """A process that keeps one core busy: our child, or (detach) one that belongs to nobody here."""
    code = "import time\nt = time.time()\nwhile time.time() - t < 30: pass"
    if not detach:
        return subprocess.Popen([sys.executable, "-c", code]).pid
    out = subprocess.run(["bash", "-c", f"setsid {sys.executable} -c '{code}' >/dev/null 2>&1 & echo $!"], capture_output=True, text=True, check=True)
    return int(out.stdout.strip())


def _ours() -> float:
    import psutil

    from autotune.trials.guard._other_load import _tree_cpu_s

    return _tree_cpu_s(psutil.Process())


def _cpu_s(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


@pytest.mark.parametrize("detach", [False, True])
@pytest.mark.slow
def test_other_load_counts_other_jobs_not_ours(detach):
    """Our own children's CPU time is ours; a process outside our tree is another job (whatever else the machine runs).

    Judged by the burner's own CPU seconds, not by how much of a core it got: on a loaded machine it gets less."""
    pid = _burn(detach)
    try:
        time.sleep(0.3)
        start, burnt0 = time.monotonic(), _cpu_s(pid)
        load, before = OtherLoad(), _ours()
        while _cpu_s(pid) - burnt0 < 1.0 and time.monotonic() - start < 25:
            time.sleep(0.1)
        burnt = _cpu_s(pid) - burnt0
        ours, others = _ours() - before, (load.cores() or 0.0) * (time.monotonic() - start)
        assert burnt >= 1.0, f"the burner got {burnt:.2f} s of CPU in 25 s"
        if detach:
            assert others >= 0.9 * burnt and ours < burnt - 0.5  # its seconds are another job's, not ours
        else:
            assert ours >= 0.9 * burnt  # our child's seconds are ours
    finally:
        os.kill(pid, signal.SIGKILL)
        if not detach:
            os.waitpid(pid, 0)


@pytest.mark.slow
def test_a_killed_trial_keeps_its_workers_cpu_time_as_ours():
    """A trial killed with its workers: init reaps them, so their CPU time would leave our tree and read as
    another job's. kill_tree keeps it."""
    from autotune.trials.runner import kill_tree

    code = ("import subprocess, sys, time\n"
            "w = subprocess.Popen([sys.executable, '-c', 'import time\\nt = time.time()\\nwhile time.time() - t < 30: pass'])\n"
            "time.sleep(30)")
    before = _ours()
    trial = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    start = time.monotonic()
    while _ours() - before < 1.0 and time.monotonic() - start < 25:  # its worker burns a core meanwhile, however slowly
        time.sleep(0.1)
    assert _ours() - before >= 1.0, "the worker got less than 1 s of CPU in 25 s"
    kill_tree(trial.pid)
    trial.wait()
    assert _ours() - before >= 1.0  # the worker's seconds are still ours, though init reaped it


def test_a_quota_below_the_mask_counts_only_what_others_take_from_it():
    quota = {"cores": 20.0, "cpus": 64, "usable_cores": 4}  # a 4-CPU container on a 64-core node, 20 cores used by others
    assert not too_busy(quota) and busy_warnings(quota) == []
    crowded = {"cores": 62.0, "cpus": 64, "usable_cores": 4}
    assert too_busy(crowded) and "2.0 of the 4 it may use" in busy_warnings(crowded)[0]


def test_a_resumed_study_keeps_the_busier_sessions_load():
    from autotune.tuning.caveats import keep_busier

    study = optuna.create_study(direction="maximize")
    keep_busier(study, {"cores": 1.7, "usable_cores": 2})
    keep_busier(study, {"cores": 0.1, "usable_cores": 2})
    assert study.user_attrs["other_load"]["cores"] == 1.7


@pytest.mark.parametrize("cores", [1.7, 0.1])
@pytest.mark.slow
def test_a_busy_run_says_so_in_its_yaml_and_show(tiny_dataset, workdir, monkeypatch, capsys, cores):
    """The busy warning was printed once; the YAML kept a 9x speedup measured on a shared machine with no word of it."""
    import autotune

    monkeypatch.setattr(OtherLoad, "to_dict", lambda self: {"cores": cores, "cpus": 2, "usable_cores": 2})
    assert (
        main(
            [
                "run",
                "--dataset",
                str(tiny_dataset),
                "--space",
                "torch",
                "--batch-size",
                "8",
                "--n-trials",
                "1",
                "--no-baselines",
                "--window",
                "0.2",
                "--windows",
                "1",
                "--warmup-batches",
                "1",
                "--confirm-top",
                "0",
                "--device",
                "cpu",
                "--no-report",
            ]
        )
        == 0
    )
    cfg = autotune.load_config("autotune.yaml")
    capsys.readouterr()
    monkeypatch.setenv("COLUMNS", "250")
    assert main(["show"]) == 0
    out = capsys.readouterr().out
    if cores > 1:
        assert cfg.result["other_load"] == {"cores": 1.7, "cpus": 2, "usable_cores": 2}
        assert "kept 1.7 of 2 cores busy during the run (the figures moved with them)" in out
    else:
        assert "other_load" not in cfg.result and "other jobs" not in out


def test_no_budget_advice_when_torch_trials_ran_and_failed():
    space = load_space("default", cores=2, device="cpu", dali=True)
    dali = Config(loader=LoaderConfig.from_params({"backend": "dali", "batch_size": 8, "dali_device": "cpu", "num_threads": 2}))
    study = optuna.create_study(direction="maximize")
    study.add_trial(
        optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"loader": {"backend": "torch", "batch_size": 8}, "outcome": "shm"})
    )
    assert short_run_warnings(dali, space, TimeBudget(30.0, clock=lambda: 28.0, start=0.0), study) == []  # /dev/shm, not the budget
    cut = optuna.create_study(direction="maximize")  # the budget's end cut the only torch trial: it did not run, the advice stands
    cut.add_trial(
        optuna.trial.create_trial(
            state=optuna.trial.TrialState.FAIL, user_attrs={"loader": {"backend": "torch", "batch_size": 8}, "outcome": "interrupted", "role": "heuristic"}
        )
    )
    assert any("no torch DataLoader was measured" in w for w in short_run_warnings(dali, space, TimeBudget(30.0, clock=lambda: 28.0, start=0.0), cut))


def test_defaults_left_queued_by_the_budget_are_named_with_the_fix():
    """A 30 s run on two cores measured the heuristics, then re-measured: the defaults stayed queued and the
    run printed no speedup, silently. It now says so, with the budget that measures them."""
    space = load_space("default", cores=2, device="cpu", dali=True)
    best = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 2}), result={"samples_per_s": 500.0})
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"backend": "torch"}, user_attrs={"role": "defaults"})
    budget = TimeBudget(30.0, clock=lambda: 28.0, start=0.0)
    (warning,) = short_run_warnings(best, space, budget, study)
    assert warning == "the 30 s budget left too little time to measure the torch DataLoader defaults, so there is no speedup over them; pass --budget 60"
    measured = Config(loader=best.loader, result={"samples_per_s": 500.0, "defaults_samples_per_s": 90.0})
    assert short_run_warnings(measured, space, budget, study) == []
    cut = optuna.create_study(direction="maximize")  # started, then cut by the budget's end: the same advice
    cut.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"role": "defaults", "outcome": "interrupted"}))
    assert short_run_warnings(best, space, budget, cut) == [warning]


@pytest.mark.slow
def test_a_slow_trial_is_cut_where_the_time_budget_ends(workdir, tiny_dataset, monkeypatch):
    """Under load the torch defaults took 15 s to their first window, started with 15 s of a 30 s budget left:
    the run took 34 s. Once a trial has completed, the next one ends 2 s before the budget's end at the latest (the YAML
    and the exit keep them), and a cut trial is told as failed (the budget's end says nothing about the config), not as
    a timeout the sampler learns from."""
    from autotune.study import tuner as tuner_mod
    from autotune.trials.spec import TrialResult

    limits = []

    def measure(self, loader, number=None, on_intermediate=None, log=None, timeout_s=None):
        limits.append(timeout_s)
        if len(limits) == 1:
            return TrialResult(Outcome.COMPLETE, samples_per_s=100.0, duration_s=1.0)
        return TrialResult(Outcome.TIMEOUT, message="no result within 7 s", duration_s=7.0)

    monkeypatch.setattr(tuner_mod.Tuner, "measure", measure)
    settings = TuneSettings(cores=2, n_trials=2, baselines=False, trial_timeout=60.0, time_left=lambda: 6.0)
    tuner = Tuner(scan(tiny_dataset), load_space("cpu", cores=2), settings, storage="sqlite:///cut.db", study_name="cut")
    tuner.optimize()
    assert limits == [None, 7.0]  # the first trial runs to its own limit (the YAML needs one); the next to 2 s before the end
    cut = [t for t in tuner.study.trials if trial_attrs(t).get("outcome") != "repeat"][1]  # the sampler may propose trial 0's config again
    assert cut.state is optuna.trial.TrialState.FAIL and trial_attrs(cut)["outcome"] == "interrupted"
    assert "the time budget ran out 7 s into the trial" in trial_attrs(cut)["message"]


def test_busy_warnings():
    assert busy_warnings({"cores": 1.7, "usable_cores": 2}) and too_busy({"cores": 1.7, "usable_cores": 2})
    assert busy_warnings({"cores": 0.2, "usable_cores": 2}) == []
    assert busy_warnings({"cores": 3.0, "usable_cores": 128}) == []  # 2 % of a large node
    assert busy_warnings(None) == []


@pytest.mark.slow
def test_the_run_says_where_repeated_trials_went(workdir, tiny_dataset, capsys):
    (workdir / "one.yaml").write_text("params:\n  backend: {choices: [torch]}\n  batch_size: {choices: [8]}\n  num_workers: {choices: [0]}\n")
    argv = [
        "run",
        "--dataset",
        str(tiny_dataset),
        "--space",
        "one.yaml",
        "--n-trials",
        "2",
        "--no-baselines",
        "--window",
        "0.2",
        "--windows",
        "1",
        "--warmup-batches",
        "1",
        "--confirm-top",
        "0",
        "--no-report",
    ]
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert "repeated one already measured and" in err and "not measured again" in err


def test_autoloader_says_when_the_last_batch_drops_much_of_an_epoch(tmp_path, caplog):
    import logging

    from autotune.autoloader._agree import Agreement
    from autotune.autoloader._setup import resolve
    from autotune.dataset.synth import synthesize

    root = synthesize(tmp_path / "d", images=30, classes=2, min_side=16, max_side=24, workers=1)
    with caplog.at_level(logging.WARNING, logger="autotune.autoloader"):
        resolve(Agreement(), None, root, device="cpu", batch_size=16, pipeline="imagenet-train", space="cpu", seed=0)
    assert "batch size 16 over 30 images per rank drops the last 14 (47 %) of every epoch" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="autotune.autoloader"):
        resolve(Agreement(), None, root, device="cpu", batch_size=15, pipeline="imagenet-train", space="cpu", seed=0)
    assert "drops" not in caplog.text


@pytest.mark.slow
def test_run_and_build_loader_say_when_the_last_batch_drops_much_of_an_epoch(tmp_path, workdir, capsys):
    """Only AutoLoader said it: a run on 300 images chose b=256, and build_loader then dropped 44 of them every epoch."""
    import warnings

    import autotune
    from autotune.dataset.synth import synthesize

    root = synthesize(tmp_path / "d", images=30, classes=2, min_side=16, max_side=24, workers=1)
    assert (
        main(
            [
                "run",
                "--dataset",
                str(root),
                "--space",
                "torch",
                "--batch-size",
                "16",
                "--n-trials",
                "1",
                "--no-baselines",
                "--window",
                "0.2",
                "--windows",
                "1",
                "--warmup-batches",
                "1",
                "--confirm-top",
                "0",
                "--device",
                "cpu",
                "--no-report",
            ]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: the winner's batch size 16 over 30 images drops the last 14 (47 %) of every epoch; to train on them all, pass a --batch-size" in err
    with pytest.warns(UserWarning, match=r"^batch size 16 over 30 images drops the last 14 \(47 %\) of every epoch; re-tune with a batch size"):
        autotune.build_loader(root, autotune.load_config("autotune.yaml"), device="cpu")
    with pytest.warns(UserWarning, match=r"batch size 6 over 15 images of this shard drops the last 3 \(20 %\)"):
        autotune.build_loader(root, autotune.LoaderConfig.from_params({"backend": "torch", "batch_size": 6, "num_workers": 0}), device="cpu", num_shards=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        autotune.build_loader(root, autotune.LoaderConfig.from_params({"backend": "torch", "batch_size": 15, "num_workers": 0}), device="cpu")
        autotune.build_loader(root, autotune.load_config("autotune.yaml"), pipeline="imagenet-eval", device="cpu")  # eval keeps the last batch


def test_the_python_api_gives_no_command_line_advice(workdir):
    """build_loader on a missing folder said 'pass --dataset DIR ... or use --demo', flags a script has not; a missing
    YAML did not say where it was looked for, nor how to make one."""
    import autotune
    from autotune.errors import ConfigError, DatasetError

    with pytest.raises(DatasetError) as e:
        autotune.build_loader("no-such-train", autotune.LoaderConfig.from_params({"backend": "torch", "batch_size": 4}), device="cpu")
    assert "--" not in str(e.value) and f"looked for from {workdir}" in str(e.value) and "check the path" in str(e.value)
    with pytest.raises(ConfigError) as e:
        autotune.load_config("autotune.yaml")
    assert f"looked for from {workdir}" in str(e.value) and "autotune run --dataset DIR" in str(e.value)


def test_build_loader_warns_when_the_yaml_was_tuned_on_another_dataset(tmp_path, tiny_dataset):
    """A YAML tuned on one folder, used on another of other content: said once, with the command that re-tunes."""
    import shutil
    import warnings as w

    import autotune
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    f = tmp_path / "a.yaml"
    save_config(
        Config(
            loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 4, "num_workers": 0}),
            hardware=fingerprint.collect(),
            dataset=fingerprint.dataset_summary(tiny_dataset),
        ),
        f,
    )
    cfg = autotune.load_config(f)
    copy = tmp_path / "copy"
    shutil.copytree(tiny_dataset, copy)
    with w.catch_warnings():
        w.simplefilter("error")
        autotune.build_loader(copy, cfg, device="cpu")  # the same files elsewhere (a local SSD copy): nothing to say
    other = tmp_path / "other"
    shutil.copytree(tiny_dataset, other)
    images = sorted(p for p in other.rglob("*") if p.is_file())
    for image in images[: len(images) // 2]:
        image.unlink()  # half the images gone
    with pytest.warns(
        UserWarning, match=r"a.yaml was tuned on another dataset .*dataset.samples: .*re-tune for this folder with 'autotune run --dataset .*other --warm-start"
    ):
        autotune.build_loader(other, cfg, device="cpu")
    with w.catch_warnings():
        w.simplefilter("error")
        autotune.build_loader(other, cfg, device="cpu", pipeline="imagenet-eval")  # an eval loader on another folder is meant


def test_dalis_usual_start_left_unmeasured_after_a_bad_file_is_named():
    """A truncated JPEG failed DALI's usual start, its retry without the file was queued behind the slow torch
    defaults, and the budget ended first: the run chose a torch loader at half DALI's rate and said nothing."""
    space = load_space("default", cores=2, device="cpu", dali=True)
    torch_best = Config(
        loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 64, "num_workers": 2}),
        result={"samples_per_s": 219.0, "defaults_samples_per_s": 17.0, "heuristic_samples_per_s": 219.0},
    )
    dali = {"backend": "dali", "batch_size": 128, "dali_device": "cpu"}
    study = optuna.create_study(direction="maximize")
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"role": "dali-heuristic", "loader": dali, "outcome": "bad-data"}))
    study.enqueue_trial({"backend": "dali"}, user_attrs={"role": "dali-heuristic"})
    budget = TimeBudget(40.0, clock=lambda: 43.0, start=0.0)
    (warning,) = short_run_warnings(torch_best, space, budget, study)
    assert warning == (
        "the 40 s budget left too little time to measure DALI's usual start again without the undecodable file its first "
        "trial met, so the winner was not compared with it; pass --budget 80"
    )
    measured = optuna.create_study(direction="maximize")  # DALI measured in another config: the choice saw DALI
    measured.add_trial(study.trials[0])
    measured.enqueue_trial({"backend": "dali"}, user_attrs={"role": "dali-heuristic"})
    measured.add_trial(optuna.trial.create_trial(value=300.0, user_attrs={"loader": {**dali, "num_threads": 1}, "outcome": "complete"}))
    assert short_run_warnings(torch_best, space, budget, measured) == []
    broken = optuna.create_study(direction="maximize")  # failed for its own reason: the report says why, no budget advice
    broken.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL, user_attrs={"role": "dali-heuristic", "loader": dali, "outcome": "crash"}))
    assert short_run_warnings(torch_best, space, budget, broken) == []


def test_baselines_the_budget_left_unmeasured_are_one_line():
    """ResNet-50 in the loop on one H200: the model's ceiling took 73 of the 120 s, and the defaults and the common
    torch settings stayed queued: one warning for both, with the one fix (three lines said --budget 240 before)."""
    space = load_space("default", cores=16, device="cpu", dali=True)
    best = Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8, "num_workers": 2}), result={"samples_per_s": 500.0})
    study = optuna.create_study(direction="maximize")
    study.enqueue_trial({"backend": "torch"}, user_attrs={"role": "heuristic"})
    study.enqueue_trial({"backend": "torch"}, user_attrs={"role": "defaults"})
    (warning,) = short_run_warnings(best, space, TimeBudget(120.0, clock=lambda: 121.0, start=0.0), study)
    assert warning == (
        "the 120 s budget left too little time to measure the torch DataLoader defaults or the common torch settings "
        "(num_workers = cores), so there is no speedup over them; pass --budget 240"
    )
