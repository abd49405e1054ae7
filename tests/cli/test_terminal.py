"""What the terminal shows: trial output in per-trial logs, one line per event without a terminal, errors only
with --quiet, nothing twice, no traceback."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from autotune.cli._output import TerminalReporter as Reporter
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import trial_attrs
from autotune.study.space import load_space
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.spec import TrialResult
from tests.helpers import ROOT, run_autotune, start_autotune

FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--device", "cpu", "--space", "cpu", "--seed", "0"]


@pytest.fixture(scope="module")
def messy_dataset(tmp_path_factory) -> Path:
    """48 small JPEGs, a zero-byte file (skipped by the scan) and a truncated JPEG (found bad by a trial)."""
    from autotune.dataset.synth import synthesize

    root = synthesize(tmp_path_factory.mktemp("messy") / "train", images=48, classes=3, min_side=64, max_side=96, workers=1)
    jpgs = sorted(root.rglob("*.jpg"))
    (jpgs[0].parent / "zero.jpg").write_bytes(b"")
    data = jpgs[1].read_bytes()
    (jpgs[1].parent / "truncated.jpg").write_bytes(data[: len(data) // 2])
    return root


# The CLI in a child process, with trial 1 writing to its file descriptors 1 and 2 as native code does.
_WITH_OUTPUT = (
    "import sys, autotune.tuning.prepare as t, autotune.doctor._checks as d\n"
    "d.DECODE_SAMPLE = 1\n"  # the preflight's decode sample misses truncated.jpg: a trial finds it, as in a large set
    "f = t.settings_for\n"
    "def g(*a, **k):\n"
    "    s = f(*a, **k); s.inject[1] = 'output'; return s\n"
    "t.settings_for = g\n"
    "from autotune.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _run(workdir: Path, *argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", _WITH_OUTPUT, "run", *FAST, *argv]
    return subprocess.run(cmd, cwd=workdir, capture_output=True, text=True, timeout=300, check=False)


def _assert_clean(text: str) -> None:
    assert "Traceback" not in text and "[W " not in text and "[I " not in text
    assert "\r" not in text and "\x1b[" not in text  # no bar redraws, no colour codes
    assert "native stdout line" not in text and "native stderr line" not in text and "library warning" not in text


@pytest.mark.slow
def test_run_through_a_pipe_prints_one_line_per_event_and_trial_output_goes_to_logs(messy_dataset, workdir):
    p = _run(workdir, "--dataset", str(messy_dataset), "--n-trials", "3", "--confirm-top", "2", "--confirm-repeats", "1",
             "--study-name", "pipe", "--storage", "sqlite:///t.db")
    assert p.returncode == 0, p.stderr
    err = p.stderr
    _assert_clean(err)
    _assert_clean(p.stdout)
    assert p.stdout == ""
    assert err.count("zero.jpg") == 1, err  # named once, not by the scan and again by the preflight
    assert "estimated time: about " in err
    lines = err.splitlines()
    trial_lines = [ln for ln in lines if ln.startswith("trial ")]
    assert [ln.split()[1] for ln in trial_lines] == ["0", "1", "2"], err  # one line per trial
    assert "bad-data" in trial_lines[0] and "truncated.jpg cannot be decoded" in trial_lines[0]
    assert sum("truncated.jpg" in ln for ln in lines) == 1, err  # the failed trial is one line, and only one
    events = [ln.split(":")[0] for ln in lines if ln.startswith("re-measur")]
    study = optuna.load_study(study_name="pipe", storage=f"sqlite:///{workdir}/t.db")
    contenders = len(study.user_attrs["confirmation"]["candidates"])
    if contenders < 2:  # on a loaded machine one baseline may fall below a third of the other: nothing to re-measure
        assert events == [], err
    elif "paired" in study.user_attrs["confirmation"]:  # both begin together in one process, then what each read
        assert events == ["re-measuring 1/2", "re-measuring 2/2", "re-measured 1/2", "re-measured 2/2"], err
    else:  # fresh processes (the record says why they were not paired), one after the other
        assert study.user_attrs["confirmation"]["not_paired"]
        assert events[:4] == ["re-measuring 1/2", "re-measured 1/2", "re-measuring 2/2", "re-measured 2/2"]
        # then, when the two leaders are within 3 % of each other, up to four more (each a line when it starts and ends)
        assert events[4:] == [f"re-measur{w} {k}/{k}" for k in range(3, 3 + len(events[4:]) // 2) for w in ("ing", "ed")]

    # each trial process's output went to its own log, named in the trial's attributes and the report
    folder = workdir / "reports" / "pipe"
    for t in study.trials:
        if trial_attrs(t).get("outcome") == "repeat" or not t.state.is_finished():  # told, not measured; or queued (a baseline to measure again)
            assert "log" not in trial_attrs(t)
            continue
        assert Path(trial_attrs(t)["log"]) == (folder / "trials" / f"{t.number}.log").resolve()
        assert "trial process" in Path(trial_attrs(t)["log"]).read_text()
    log1 = (folder / "trials" / "1.log").read_text()
    assert "native stdout line" in log1 and "native stderr line" in log1 and "library warning" in log1
    assert "Traceback" in (folder / "trials" / "0.log").read_text()  # the bad-data trial's details
    paired = "paired" in study.user_attrs["confirmation"]
    assert len(list((folder / "trials").glob("*-remeasure-1.log"))) == (2 if contenders >= 2 and not paired else 0)
    if paired:  # the one process that measured both: each round's rates
        assert "round 1: " in (folder / "trials" / "remeasure-paired.log").read_text()
    report = (folder / "report.md").read_text()
    assert "[trials/0.log](<trials/0.log>)" in report and '<a href="trials/1.log">' in (folder / "report.html").read_text()


@pytest.mark.slow
def test_quiet_prints_only_errors(messy_dataset, workdir):
    p = _run(workdir, "--dataset", str(messy_dataset), "--n-trials", "2", "--confirm-top", "0", "--quiet", "--no-report")
    assert p.returncode == 0, p.stderr
    assert p.stderr == "" and p.stdout == ""
    (log,) = (workdir / "reports").glob("*/trials/1.log")  # the output still has its log
    assert "native stderr line" in log.read_text()


@pytest.mark.slow
def test_ctrl_c_prints_no_traceback(messy_dataset, workdir):
    cmd = ["run", "--dataset", str(messy_dataset), "--n-trials", "30", "--confirm-top", "0",
           "--no-report", *FAST, "--window", "0.5", "--windows", "4"]
    p = start_autotune(cmd, workdir)
    try:
        seen = []
        for line in p.stderr:  # wait for the first trial that completes, then stop during the next one
            seen.append(line)
            if line.startswith("trial ") and "complete" in line:
                break
        time.sleep(1.0)
        p.send_signal(signal.SIGINT)
        _, rest = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    err = "".join(seen) + rest
    assert p.returncode == 130, err
    assert "interrupted" in err
    _assert_clean(err)


# ------------------------------------------------------------------------------------ in the tuner process
@pytest.mark.parametrize("fork", [True, False], ids=["forked", "spawned"])
@pytest.mark.slow
def test_native_output_of_a_trial_lands_in_its_log_not_on_the_terminal(tiny_dataset, tmp_path, capfd, fork):
    settings = TuneSettings(n_trials=1, window_s=0.2, windows=2, warmup_batches=1, confirm_top=0, baselines=False, cache="none",
                            pruner="none", inject={0: "output"}, fork_trials=fork, log_dir=str(tmp_path / "logs"))
    tuner = Tuner(scan(tiny_dataset), load_space("cpu", cores=2), settings, storage=f"sqlite:///{tmp_path}/t.db", study_name="output")
    tuner.optimize()
    out, err = capfd.readouterr()  # file descriptors 1 and 2 of this process, which the trial's would inherit
    assert "native stdout line" not in out + err and "native stderr line" not in out + err and "library warning" not in out + err
    (t,) = tuner.study.trials
    log = Path(trial_attrs(t)["log"])
    assert log == tmp_path / "logs" / "0.log"
    text = log.read_text()
    assert "native stdout line" in text and "native stderr line" in text and "library warning" in text


def test_report_keeps_the_trial_logs_when_written_again(tmp_path):
    from autotune.report import write_report

    study = optuna.create_study(study_name="logs", storage=f"sqlite:///{tmp_path}/r.db", direction="maximize")
    logs = tmp_path / "reports" / "logs" / "trials"
    logs.mkdir(parents=True)
    (logs / "0.log").write_text("trial output\n")
    study.add_trial(
        optuna.trial.create_trial(value=100.0, user_attrs={"outcome": "complete", "config": "torch b=8", "samples_per_s": 100.0, "log": str(logs / "0.log")})
    )
    with open(logs / "0.log", "a") as still_open:  # a trial process still writing while the report is replaced
        for _ in range(2):
            folder = write_report(study, f"sqlite:///{tmp_path}/r.db", tmp_path / "reports")
        still_open.write("more output\n")
    assert (folder / "trials" / "0.log").read_text() == "trial output\nmore output\n"
    assert "[trials/0.log](<trials/0.log>)" in (folder / "report.md").read_text()


# ------------------------------------------------------------------------------------------ the reporter
def _trial(number: int, outcome: str, **attrs) -> optuna.trial.FrozenTrial:
    state = optuna.trial.TrialState.COMPLETE if outcome == "complete" else optuna.trial.TrialState.FAIL
    t = optuna.trial.create_trial(
        state=state,
        value=100.0 * (number + 1) if outcome == "complete" else None,
        user_attrs={"outcome": outcome, "config": f"torch b={number}", "samples_per_s": 100.0 * (number + 1), **attrs},
    )
    t.number = number
    return t


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_failed_trial_is_one_line_above_the_bar(monkeypatch):
    monkeypatch.setenv("TERM", "xterm")
    stream = _Terminal()
    r = Reporter(stream=stream)
    assert r.mode == "bar"
    r.start(3, 0)
    r(None, _trial(0, "crash", message="RuntimeError: boom\nsecond line", log="/x/reports/s/trials/0.log"))
    r(None, _trial(1, "complete"))
    r(None, _trial(2, "pruned", message="pruned after window 1"))
    r.stop()
    text = stream.getvalue()
    assert text.count("trial 0 crash: RuntimeError: boom second line (log: /x/reports/s/trials/0.log)") == 1
    assert "second line\n" not in text and "pruned after window" not in text  # a pruned trial is no failure


def test_without_a_terminal_each_event_is_one_plain_line():
    stream = io.StringIO()
    r = Reporter(stream=stream)
    assert r.mode == "lines"
    r.start(2, 2, TuneSettings(window_s=1.0, windows=5))
    r(None, _trial(0, "complete"))
    r(None, _trial(1, "bad-data", bad_file="/d/a/bad.jpg", message="cannot decode /d/a/bad.jpg"))
    t = _trial(0, "complete")
    for k in (1, 2):
        r.remeasure(k, 2, t, None)
        r.remeasure(k, 2, t, TrialResult(Outcome.COMPLETE, samples_per_s=99.0))
    r.stop()
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("estimated time: about ") and "2 trials and up to 2 re-measurements" in lines[0]
    assert lines[1].startswith("trial 0 (1/2) torch b=0: complete 100 samples/s")
    assert lines[2].startswith("trial 1 (2/2) torch b=1: bad-data: /d/a/bad.jpg cannot be decoded")
    assert [ln.split(":")[0] for ln in lines[3:]] == ["re-measuring 1/2", "re-measured 1/2", "re-measuring 2/2", "re-measured 2/2"]
    assert "\r" not in stream.getvalue() and "\x1b" not in stream.getvalue()


def test_a_trial_line_and_its_best_state_the_same_rate():
    stream = io.StringIO()
    r = Reporter(stream=stream)
    r.start(1, 0, TuneSettings(window_s=1.0, windows=2))
    t = optuna.trial.create_trial(
        state=optuna.trial.TrialState.COMPLETE, value=246.5021, user_attrs={"outcome": "complete", "config": "dali-cpu b=128", "samples_per_s": 246.5}
    )
    r(None, t)
    r.stop()
    line = next(ln for ln in stream.getvalue().splitlines() if ln.startswith("trial"))
    assert "complete 246 samples/s; best 246 samples/s" in line, line  # not "complete 246; best 247"


def test_a_repeat_is_said_and_not_counted():
    """The demo's lines went 'trial 3 (4)', 'trial 5 (5)': trial 4 repeated an earlier config and was not shown."""
    from autotune.study.evidence import unless_repeat

    stream = io.StringIO()
    r = Reporter(stream=stream)
    r.start(3, 0, TuneSettings(window_s=1.0, windows=2))
    shown = unless_repeat(r)
    shown(None, _trial(0, "complete"))
    shown(None, _trial(1, "repeat", message="same config as trial #0: not measured again"))
    shown(None, _trial(2, "complete"))
    r.stop()
    lines = [ln for ln in stream.getvalue().splitlines() if ln.startswith("trial")]
    assert lines[0].startswith("trial 0 (1/3) ") and lines[2].startswith("trial 2 (2/3) ")
    assert lines[1] == "trial 1 torch b=1: same config as trial #0: not measured again"


def test_with_a_budget_elapsed_and_left_add_up_to_it():
    """With --budget 30 and a 13 s set-up, the first trial read '0:05 elapsed, ~0:12 left': the elapsed time counted
    from the trials' start, the time left from the command's. Both count from the command's start now."""
    import time

    stream = io.StringIO()
    r = Reporter(stream=stream)
    r.start(0, 0, budget_s=17.0, since=time.monotonic() - 13.0)
    r(None, _trial(0, "complete"))
    r.stop()
    line = next(ln for ln in stream.getvalue().splitlines() if ln.startswith("trial"))
    assert line.endswith("0:13 elapsed, ~0:17 left") or line.endswith("0:13 elapsed, ~0:16 left"), line


def test_quiet_reporter_prints_nothing():
    stream = _Terminal()
    r = Reporter(quiet=True, stream=stream)
    r.start(1, 0, TuneSettings())
    r(None, _trial(0, "crash", message="boom"))
    r.stop()
    assert stream.getvalue() == ""


def test_the_preflight_does_not_name_skipped_files_again(messy_dataset, caplog):
    from autotune.doctor import check_dataset

    caplog.set_level("WARNING")
    scan(messy_dataset)
    check_dataset(messy_dataset)
    assert sum("zero.jpg" in r.getMessage() for r in caplog.records) == 1


def test_main_in_process_leaves_the_logging_set_up_as_it_was(workdir):
    import logging

    from autotune.cli import main

    root = logging.getLogger()
    before = (root.level, list(root.handlers), logging.getLogger("optuna").propagate)
    assert main(["report", "--storage", f"sqlite:///{workdir}/none.db", "--quiet"]) == 2
    assert (root.level, list(root.handlers), logging.getLogger("optuna").propagate) == before


def test_a_resumed_run_starts_from_the_best_it_had():
    stream = io.StringIO()
    r = Reporter(stream=stream)
    r.start(1, 0, TuneSettings(window_s=1.0, windows=5), done=3, best=224.0)
    r(None, _trial(0, "complete"))  # 100 samples/s, below the 224 a trial before the resume reached
    assert "best 224 samples/s" in stream.getvalue()


def _autotune(workdir: Path, *argv: str, stdout=subprocess.PIPE, stderr=subprocess.PIPE) -> subprocess.CompletedProcess:
    return run_autotune(argv, workdir, stdout=stdout, stderr=stderr)


RUN_FAST = ["run", *FAST, "--n-trials", "2", "--confirm-top", "0", "--no-report"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.slow
def test_a_run_whose_stderr_cannot_be_written_still_writes_its_yaml(tiny_dataset, workdir):
    """A cron log on a full disk (2>/dev/full): the first progress line raised, exit 1, nothing tuned, no YAML.
    A reader gone (2>&1 | head -3): exit 141 after the first trial, the YAML never written."""
    with open("/dev/full", "w") as full:
        p = _autotune(workdir, *RUN_FAST, "--dataset", str(tiny_dataset), "--out", "full.yaml", stderr=full)
    assert p.returncode == 0 and (workdir / "full.yaml").is_file()
    head = subprocess.Popen(["head", "-c", "1"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    p = _autotune(workdir, *RUN_FAST, "--dataset", str(tiny_dataset), "--out", "piped.yaml", stderr=head.stdin)
    head.stdin.close()
    head.wait()
    assert p.returncode == 0 and (workdir / "piped.yaml").is_file()


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.slow
def test_a_result_that_cannot_be_written_is_one_line_and_exit_2(tiny_dataset, workdir):
    """check >/dev/full exited 1 ('stale') with a traceback for a config that matches: a 'check || retune' re-tuned."""
    (workdir / "a.yaml").write_text((ROOT / "benchmarks" / "cpu-machine.yaml").read_text())
    for argv in (["check", "a.yaml"], ["check", "a.yaml", "--json"], ["show", "a.yaml"], ["show", "a.yaml", "--json"]):
        with open("/dev/full", "w") as full:
            p = _autotune(workdir, *argv, stdout=full)
        assert p.returncode == 2, (argv, p.stderr)
        assert p.stderr.strip().splitlines()[-1] == (
            "autotune: error: standard output could not be written (No space left on device); free space where it goes, or send it elsewhere"
        ), argv
        assert "Traceback" not in p.stderr


@pytest.mark.slow
def test_closed_standard_descriptors_are_reopened_on_dev_null(tiny_dataset, workdir):
    """2>&-: Python had no sys.stderr (print went to stdout), and the next file opened, the study's database among
    them, became descriptor 2."""
    p = subprocess.run(
        [sys.executable, "-m", "autotune", *RUN_FAST, "--dataset", str(tiny_dataset), "--out", "closed.yaml", "--json"],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.close(2),
    )
    assert p.returncode == 0 and (workdir / "closed.yaml").is_file()
    assert json.loads(p.stdout)["config_path"] == "closed.yaml"  # stdout holds the JSON alone


@pytest.mark.slow
def test_a_result_for_a_closed_standard_output_is_one_line_and_exit_2(tiny_dataset, workdir):
    """show and studies >&- exited 0, their result on /dev/null; run >&- without --json has no result there."""
    (workdir / "a.yaml").write_text((ROOT / "benchmarks" / "cpu-machine.yaml").read_text())
    for argv in (["show", "a.yaml"], ["check", "a.yaml", "--json"]):
        p = subprocess.run(
            [sys.executable, "-m", "autotune", *argv], cwd=workdir, stderr=subprocess.PIPE, text=True, timeout=120, check=False, preexec_fn=lambda: os.close(1)
        )
        assert p.returncode == 2, (argv, p.stderr)
        assert p.stderr.strip().splitlines()[-1] == (
            "autotune: error: standard output is closed (>&-), so the result cannot be written; send it to a file, or to /dev/null to drop it"
        ), argv
    p = subprocess.run(
        [sys.executable, "-m", "autotune", *RUN_FAST, "--dataset", str(tiny_dataset), "--out", "closed.yaml"],
        cwd=workdir,
        stderr=subprocess.PIPE,
        text=True,
        timeout=300,
        check=False,
        preexec_fn=lambda: os.close(1),
    )
    assert p.returncode == 0 and (workdir / "closed.yaml").is_file(), p.stderr


def test_text_the_output_encoding_cannot_hold_is_escaped_not_a_lost_output(tiny_dataset, workdir):
    """PYTHONIOENCODING=ascii and a dataset path with an 'e' acute: check exited 2 saying to free space."""
    cfg = (ROOT / "benchmarks" / "cpu-machine.yaml").read_text().replace("/tmp/fpd", "/data/caf\u00e9")
    (workdir / "a.yaml").write_text(cfg, encoding="utf-8")
    p = subprocess.run(
        [sys.executable, "-m", "autotune", "show", "a.yaml"],
        cwd=workdir,
        capture_output=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONIOENCODING": "ascii"},
    )
    assert p.returncode == 0, p.stderr
    assert b"caf\\xe9" in p.stdout


def test_a_stopped_trial_log_gets_its_rate_once(tmp_path):
    """A trial stopped at the budget's end gets its rate appended by the parent; when the process wrote its own
    'complete' line just before it was stopped, the log kept two."""
    import logging

    from autotune.trials.logs import CHILD_FORMAT, append_line

    record = logging.LogRecord("autotune.trials.child", logging.INFO, __file__, 0, "complete: 812.0 samples/s", None, None)
    log = tmp_path / "3.log"
    log.write_text("windows: 800 812\n" + logging.Formatter(CHILD_FORMAT).format(record) + "\n\n")
    append_line(str(log), "complete: 812.0 samples/s (measured 2 window(s): the time budget ran out)", unless=": complete: ")
    assert log.read_text().count("complete: ") == 1
    cut = tmp_path / "4.log"
    cut.write_text("windows: 800\n")
    append_line(str(cut), "complete: 800.0 samples/s (measured 1 window(s): the time budget ran out)", unless=": complete: ")
    append_line(str(tmp_path / "no-such-folder" / "5.log"), "complete: 1.0 samples/s")  # a log that cannot be written costs the line
    assert cut.read_text().splitlines()[-1].endswith("INFO autotune.trials.logs: complete: 800.0 samples/s (measured 1 window(s): the time budget ran out)")
