"""The command line for scripts and people: --help, studies, show, report, and run --json end to end."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from autotune.cli import COMMANDS, build_parser, main
from autotune.config.files import load_config
from tests.helpers import ROOT


def _study(tmp_path: Path, name: str = "cli-study") -> str:
    """A stored study with two completed trials, the defaults baseline and one memory failure."""
    import optuna

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    study = optuna.create_study(storage=url, study_name=name, direction="maximize")
    study.set_user_attr("created", "2026-11-29T12:00:00Z")
    study.set_user_attr("device", "cpu")
    dist = {"backend": optuna.distributions.CategoricalDistribution(("torch",)), "num_workers": optuna.distributions.IntDistribution(0, 4)}
    for nw, rate, outcome, role in ((0, 50.0, "complete", "defaults"), (4, 210.0, "complete", None), (4, None, "oom-host", None)):
        state = optuna.trial.TrialState.COMPLETE if rate else optuna.trial.TrialState.PRUNED
        attrs = {"outcome": outcome, "samples_per_s": rate, "spread": [rate - 5, rate + 5] if rate else None, "peak_host_mib": 900.0,
                 "peak_gpu_mib": None, "loader": {"backend": "torch", "batch_size": 32, "num_workers": nw, "pin_memory": False},
                 "config": f"torch b=32 workers={nw}", "message": "" if rate else "stopped: over the host memory budget"}
        if role:
            attrs["role"] = role
        study.add_trial(
            optuna.trial.create_trial(params={"backend": "torch", "num_workers": nw}, distributions=dist, value=rate, state=state, user_attrs=attrs)
        )
    return url


@pytest.mark.parametrize("command", [c for c in COMMANDS if c in build_parser()._subparsers._group_actions[0].choices])
def test_every_command_has_help_with_examples(command, capsys):
    try:
        rc = main([command, "--help"])
    except SystemExit as e:
        rc = e.code
    assert rc in (0, None)
    out = capsys.readouterr().out
    assert "examples:" in out and f"autotune {command}" in out


def test_studies_lists_a_study(workdir, capsys):
    url = _study(workdir)
    assert main(["studies", "--storage", url, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == ["cli-study"]
    assert rows[0]["trials"] == 3 and rows[0]["best_samples_per_s"] == 210.0 and rows[0]["best_config"] == "torch b=32 workers=4"
    assert rows[0]["speedup_vs_defaults"] == 4.2 and rows[0]["created"] == "2026-11-29T12:00:00Z"
    assert main(["studies", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert "cli-study" in out and "210" in out
    assert "2026-11-29 12:00" in out  # the creation time whole, to the minute (a narrow column cut it to "2026-11-29T12:0…")


@pytest.mark.parametrize("columns", [80, 120, 200])
@pytest.mark.parametrize("name", ["imagenet-train-3f9c2a71b8e4d605-autoloader-20260412-093015", "x" * 150])
def test_studies_keeps_each_name_whole_on_one_line(tmp_path, capsys, monkeypatch, columns, name):
    """At the default terminal width an AutoLoader study's name broke across two lines and could not be copied;
    the other columns fold instead, and a name wider than the terminal is one line the terminal wraps."""
    import optuna

    url = _study(tmp_path, name)
    study = optuna.load_study(study_name=name, storage=url)
    study.set_user_attr("interrupted", True)  # the longest trials cell: "3 (2 ok), interrupted (--resume)"
    monkeypatch.setenv("COLUMNS", str(columns))
    assert main(["studies", "--storage", url]) == 0
    out = capsys.readouterr().out
    assert any(name in line for line in out.splitlines()), out
    assert "2026-11-29" in out and "210.0" in out and "workers=4" in out and "…" not in out  # folded, not cut
    if len(name) < 100:  # a name that leaves room keeps the table within the terminal
        assert max(map(len, out.splitlines())) <= max(columns, 120)


def test_queued_trials_the_budget_left_unrun_are_counted_apart(workdir, capsys):
    import optuna

    from autotune.cli._show import _trial_count

    url = _study(workdir)
    optuna.load_study(study_name="cli-study", storage=url).enqueue_trial({"backend": "torch", "num_workers": 2})
    assert main(["studies", "--storage", url, "--json"]) == 0
    row = json.loads(capsys.readouterr().out)[0]
    assert (row["trials"], row["complete"], row["queued"]) == (4, 2, 1)
    assert main(["studies", "--storage", url]) == 0
    assert "3 (2 ok), 1 queued" in capsys.readouterr().out
    assert _trial_count({"trials": 6, "queued_not_run": 4}) == "2 trials run, 4 queued and not run"
    assert _trial_count({"trials": 6}) == "6 trials run"


def test_show_a_study_has_a_row_per_trial(workdir, capsys):
    """And where the run's time went (the study attr ``time``), which the docs said show prints: only the report did."""
    import optuna

    url = _study(workdir)
    spent = {"elapsed_s": 58.2, "budget_s": 60, "spent_s": {"set-up": 6.1, "trials": 44.0, "re-measurement": 8.1}, "trials_measured": 7}
    optuna.load_study(study_name="cli-study", storage=url).set_user_attr("time", spent)
    assert main(["show", "--storage", url, "--study", "cli-study", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [t["outcome"] for t in data["trials"]] == ["complete", "complete", "oom-host"]
    assert data["config"]["loader"]["torch"]["num_workers"] == 4
    assert data["time"] == spent
    assert main(["show", "--storage", url, "--study", "cli-study"]) == 0
    out = capsys.readouterr().out
    assert "oom-host" in out and "stopped: over the host memory budget" in out
    hand = {"elapsed_s": "x", "spent_s": "a string", "runs": "two", "remeasured": {"top": "y", "repeats": None}}  # edited by hand
    optuna.load_study(study_name="cli-study", storage=url).set_user_attr("time", hand)
    assert main(["show", "--storage", url, "--study", "cli-study"]) == 0  # shown as it is, never a crash
    assert "no re-measurement planned" in capsys.readouterr().out
    assert "58 s of a 60 s budget before the YAML and the report were written (set-up 6.1 s, trials 44 s, re-measurement 8.1 s); 7 trials" in " ".join(
        re.sub("[│┃┌┐└┘├┤┬┴┼─━]", " ", out).split()
    )  # the table's wrapped cell, read as text


def test_report_command_writes_the_folder(workdir, capsys):
    url = _study(workdir)
    assert main(["report", "--storage", url, "--study", "cli-study", "--json", "--quiet"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert Path(data["html"]).is_file() and Path(data["report_dir"]) == Path("reports") / "cli-study"
    assert len(data["images"]) == 6


@pytest.mark.parametrize(
    "argv, message",
    [
        (["studies", "--storage", "sqlite:///missing.db"], "no storage file"),
        (["show", "--storage", "URL"], "needs --study"),
        (["report", "--storage", "sqlite:///missing.db"], "no storage file"),
        (["run", "--demo", "--budget", "nan"], "must be a finite number"),
        (["run", "--demo", "--window", "inf"], "must be a finite number"),
        (["run", "--demo", "--host-budget", "nan"], "must be a finite number"),
        (["run", "--demo", "--reserve-gpu-mem", "nan"], "must be a finite number >= 0"),
        (["run", "--demo", "--seed", "-1"], "between 0 and 2**32 - 1"),
        (["check", "autotune.yaml", "--max-age", "nan"], "must be a finite number"),
        (["synth", "sy", "--min-side", "100000"], "must be from 8 to 8192"),
        (["synth", "sy", "--quality", "0"], "must be from 1 to 100"),
        (["synth", "sy", "--min-side", "400", "--max-side", "100"], "swap them"),
        (["synth", "afile/sy"], "cannot create 'afile/sy'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(workdir, capsys, argv, message):
    Path("afile").write_text("")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not Path("missing.db").exists()


def test_unknown_study_is_exit_2(workdir, capsys):
    url = _study(workdir)
    assert main(["show", "--storage", url, "--study", "nope"]) == 2
    assert "no study named 'nope'" in capsys.readouterr().err


@pytest.mark.slow
def test_run_json_quiet_end_to_end(workdir, tiny_dataset, capsys):
    rc = main(
        [
            "run",
            "--dataset",
            str(tiny_dataset),
            "--space",
            "cpu",
            "--n-trials",
            "3",
            "--window",
            "0.2",
            "--windows",
            "2",
            "--confirm-top",
            "0",
            "--json",
            "--quiet",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    summary = json.loads(out)
    assert summary["loader"]["backend"] in ("torch", "dali") and summary["loader"]["batch_size"] > 0
    assert summary["result"]["samples_per_s"] > 0
    html = workdir / "reports" / summary["study"] / "report.html"
    assert html.is_file() and summary["report"] == str(Path("reports") / summary["study"] / "report.html")
    assert (workdir / "autotune.yaml").is_file()
    documented = (ROOT / "docs" / "reports.md").read_text()
    assert [k for k in summary if f"`{k}`" not in documented] == []  # every key of the summary is described there
    from autotune import load_config

    stored = load_config("autotune.yaml").study["storage"]  # the YAML names a storage that opens from any folder
    # the summary names it alike (it said sqlite:///autotune.db, which opens another database from another folder)
    assert stored == f"sqlite:///{(workdir / 'autotune.db').resolve()}" == summary["storage"]
    elsewhere = workdir / "elsewhere"
    elsewhere.mkdir()
    os.chdir(elsewhere)  # the workdir fixture restores the folder
    assert main(["show", "--storage", stored, "--study", summary["study"]]) == 0
    assert summary["study"] in capsys.readouterr().out
    os.chdir(workdir)
    assert main(["studies", "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == [summary["study"]]


def test_a_reader_that_goes_away_is_no_traceback(monkeypatch, capsys):
    """`autotune studies --json | head`: the pipe closes while autotune writes."""
    import autotune.cli._studies as studies

    def write_to_a_closed_pipe(args):
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(studies, "run", write_to_a_closed_pipe)
    monkeypatch.setattr("os.dup2", lambda *a: None)  # keep pytest's stdout
    monkeypatch.setattr("autotune.cli._stdout_gone", lambda: True)
    assert main(["studies"]) == 141
    assert capsys.readouterr().err == ""
    monkeypatch.setattr("autotune.cli._stdout_gone", lambda: False)  # another pipe broke: an error, said in one line
    assert main(["studies"]) == 1
    assert "a pipe broke" in capsys.readouterr().err


class _StoppableTrials:
    """Trials that complete at once (rate 100 + batch size), and a Ctrl-C once ``stop_after`` have run since ``reset``."""

    def __init__(self) -> None:
        self.stop_after: int | None = None
        self.calls = 0

    def reset(self, stop_after: int | None) -> None:
        self.calls, self.stop_after = 0, stop_after

    def __call__(self, spec, **kw):
        from autotune.outcomes import Outcome
        from autotune.trials.spec import TrialResult

        self.calls += 1
        if self.stop_after is not None and self.calls > self.stop_after:
            raise KeyboardInterrupt
        rate = 100.0 + spec.loader.batch_size
        return TrialResult(Outcome.COMPLETE, samples_per_s=rate, spread=(rate, rate), windows=[rate] * spec.windows, duration_s=0.1)


@pytest.fixture
def trials(monkeypatch) -> _StoppableTrials:
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    monkeypatch.setattr("autotune.study.tuner.Zygote.start", classmethod(lambda cls, *a, **k: None))
    fake = _StoppableTrials()
    monkeypatch.setattr("autotune.study.tuner.run_trial", fake)
    return fake


@pytest.mark.slow
def test_an_interrupted_study_is_marked_in_studies_until_resumed(workdir, tiny_dataset, trials, capsys):
    args = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "4", "--confirm-top", "0", "--no-report", "--quiet", "--study-name", "cut"]
    trials.reset(stop_after=2)
    assert main(args) == 130
    capsys.readouterr()
    assert main(["studies", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["interrupted"] is True
    assert main(["studies"]) == 0
    assert "interrupted" in capsys.readouterr().out  # in the trials column (wrapped to its width)
    trials.reset(stop_after=None)
    assert main([*args, "--resume"]) == 0
    capsys.readouterr()
    assert main(["studies", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)[0]["interrupted"] is False


@pytest.mark.slow
def test_a_stop_before_any_trial_completed_says_nothing_was_written_and_how_to_go_on(workdir, tiny_dataset, trials, capsys):
    """Ctrl-C during the first trial printed only "autotune: interrupted": now what is left, and the way on."""
    trials.reset(stop_after=0)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "3", "--no-report", "--study-name", "early"]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        "autotune: interrupted: no trial had completed, so no config was written; study early keeps what ran: continue it with the same command and --resume"
    )
    assert not (workdir / "autotune.yaml").exists()


@pytest.mark.slow
def test_an_interrupt_with_json_answers_on_stdout(workdir, tiny_dataset, trials, capsys):
    """--json printed nothing on stdout for a stop, while a bad input gave {"error": ..., "exit_code": ...}."""
    import json

    trials.reset(stop_after=0)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "3", "--no-report", "--study-name", "j", "--json"]) == 130
    answer = json.loads(capsys.readouterr().out)
    assert answer["exit_code"] == 130 and answer["error"].startswith("interrupted: no trial had completed")


@pytest.mark.slow
def test_a_stop_while_the_report_is_written_says_the_yaml_was(workdir, tiny_dataset, trials, capsys, monkeypatch):
    from autotune import report

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_report", stopped)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "2", "--confirm-top", "0", "--quiet"]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "autotune: interrupted: wrote autotune.yaml; the report was not written ('autotune report' writes it)"
    assert (workdir / "autotune.yaml").exists()


@pytest.mark.slow
def test_a_second_stop_while_a_stopped_runs_report_is_written_still_says_how_to_go_on(workdir, tiny_dataset, trials, capsys, monkeypatch):
    """Ctrl-C pressed again and again: one landed after the best-so-far YAML was written, and the last line said only
    "interrupted: wrote autotune.yaml", not that it is the best so far, nor --resume."""
    from autotune import report

    def stopped(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(report, "write_report", stopped)
    trials.reset(stop_after=1)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "3", "--confirm-top", "0", "--quiet"]) == 130
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == ("autotune: interrupted: wrote the best config so far to autotune.yaml; continue with --resume; the report was not written "
                    "('autotune report' writes it)")


@pytest.mark.slow
def test_an_interrupted_run_keeps_the_config_an_earlier_run_wrote(workdir, tiny_dataset, trials, capsys):
    """A Ctrl-C seconds into a second run writes its best so far beside autotune.yaml, not over a finished run's."""
    common = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "3", "--confirm-top", "0", "--no-report"]
    assert main([*common, "--quiet", "--study-name", "first"]) == 0
    finished = (workdir / "autotune.yaml").read_text()

    trials.reset(stop_after=1)
    assert main([*common, "--study-name", "second"]) == 130
    err = capsys.readouterr().err
    assert (workdir / "autotune.yaml").read_text() == finished
    side = workdir / "autotune.interrupted.yaml"
    assert load_config(side).study["name"] == "second"
    assert (
        "wrote the best config so far to autotune.interrupted.yaml and kept autotune.yaml (written before this run); "
        "continue with --resume, which writes autotune.yaml when it finishes"
    ) in err

    trials.reset(stop_after=1)  # the interrupted study's own YAML is replaced by its newer best
    assert main([*common, "--study-name", "second", "--resume", "--out", str(side), "--quiet"]) == 130
    assert load_config(side).study["trials"] > 1 and not (workdir / "autotune.interrupted.interrupted.yaml").exists()

    trials.reset(stop_after=None)  # resumed to the end, it writes --out as any finished run does, and its side file goes
    assert main([*common, "--study-name", "second", "--resume", "--quiet"]) == 0
    assert load_config(workdir / "autotune.yaml").study["name"] == "second" and not side.exists()

    trials.reset(stop_after=1)  # the same study name in another storage is another study
    finished = (workdir / "autotune.yaml").read_text()
    assert main([*common, "--study-name", "second", "--storage", "sqlite:///other.db", "--quiet"]) == 130
    assert (workdir / "autotune.yaml").read_text() == finished and load_config(side).study["storage"].endswith("/other.db")


@pytest.mark.slow
def test_a_re_measurement_set_aside_is_said_beside_the_winner(workdir, tiny_dataset, trials, monkeypatch, capsys):
    """The progress lines showed "re-measured 1/2: trial 4: 402 samples/s", then the winner's 471 did not count it,
    and only the YAML's method text said why."""
    from autotune.study.tuner import Tuner

    confirm = Tuner.confirm

    def cut_round(self, *a, **k):  # the budget ended the round after its first re-measurement
        record = confirm(self, *a, **k)
        record["set_aside"] = [{"trial": record["winner_trial"], "score": 402.4}]
        self.study.set_user_attr("confirmation", record)
        return record

    monkeypatch.setattr(Tuner, "confirm", cut_round)
    assert main(["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "3", "--no-report"]) == 0
    err = capsys.readouterr().err
    assert "the budget ended the re-measurement round part-way: trial " in err
    assert "'s 402 set aside, so that every candidate is judged on as many measurements" in err
    from autotune.report._render import fmt_rate, fmt_speedup

    r = load_config("autotune.yaml").result  # the last line's figures are the YAML's, as written (1.37x, not 1.4x)
    assert f"{fmt_rate(r['samples_per_s'])} samples/s ({fmt_speedup(r['speedup_vs_defaults'])} the defaults' {fmt_rate(r['defaults_samples_per_s'])})" in err
    # the bar's best was a single trial's figure: the last line says its own is a median, and of how many
    assert len(r["scores"]) > 1 and f"; the median of its {len(r['scores'])} measurements" in err


@pytest.mark.parametrize(
    ("attr", "value", "command"),
    [("dataset", "oops", "show"), ("confirmation", "x", "report"), ("confirmation", {"winner_trial": 99}, "show"), ("ranks", "x", "report")],
)
def test_a_study_attribute_edited_by_hand_is_one_line(workdir, capsys, attr, value, command):
    """AttributeError, TypeError and StopIteration tracebacks from show and report (studies already coped)."""
    import optuna

    url = _study(workdir)
    optuna.load_study(study_name="cli-study", storage=url).set_user_attr(attr, value)
    assert main([command, "--storage", url, "--study", "cli-study", *(["--quiet"] if command == "report" else [])]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("autotune: error: study 'cli-study' holds an attribute that is not what autotune writes (") and "edited by hand" in line
