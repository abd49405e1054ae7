"""Storages as the read commands see them: every URL `run` opens, errors that name their cause, hostile study
names, a study that cannot be read, and storages closed after an in-process run."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import optuna
import pytest

from autotune.cli import main
from autotune.errors import UserError
from autotune.study.storage import open_storage

SECRET = "hunter2"
FAST = ["--window", "0.2", "--windows", "2", "--warmup-batches", "1", "--no-report", "--quiet", "--no-baselines",
        "--confirm-top", "0", "--space", "torch", "--batch-size", "8", "--n-trials", "1"]


def _add_study(storage, name: str, rate: float = 100.0, **study_attrs) -> None:
    """A finished study as `autotune run` stores it: one complete trial with its loader config."""
    study = optuna.create_study(storage=storage, study_name=name, direction="maximize")
    for k, v in study_attrs.items():
        study.set_user_attr(k, v)
    loader = {"backend": "torch", "batch_size": 8, "num_workers": 1}
    attrs = {"loader": loader, "config": "torch bs=8 workers=1", "outcome": "complete", "samples_per_s": rate}
    study.add_trial(optuna.trial.create_trial(params={}, distributions={}, value=rate, user_attrs=attrs))


@pytest.mark.parametrize("url", [
    f"sqlite:///x.db?password={SECRET}",  # SQLAlchemy takes query arguments: not part of the file name
    "sqlite:///{tmp}/abs.db",
    "sqlite+pysqlite:///plain.db",
    "journal:study.log",
    "study.jsonl",
])
def test_read_commands_open_every_storage_url_that_run_opens(url, workdir, capsys):
    url = url.format(tmp=workdir)
    _add_study(open_storage(url), "s1")
    assert main(["studies", "--storage", url, "--json"]) == 0
    assert [r["name"] for r in json.loads(capsys.readouterr().out)] == ["s1"]
    assert main(["show", "--storage", url, "--study", "s1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["loader"]["batch_size"] == 8
    assert main(["report", "--storage", url, "--study", "s1", "--json", "--quiet"]) == 0
    assert (Path(json.loads(capsys.readouterr().out)["report_dir"]) / "report.md").exists()
    assert main(["studies", "--storage", url]) == 0
    out, err = capsys.readouterr()
    assert "s1" in out and SECRET not in out + err


@pytest.mark.parametrize("url", [f"sqlite:///missing.db?password={SECRET}", "journal:missing.log"])
def test_a_missing_storage_file_is_named_without_the_password(url, workdir, capsys):
    assert main(["studies", "--storage", url]) == 2
    err = capsys.readouterr().err
    assert "no storage file 'missing." in err and SECRET not in err and err.count("\n") == 1
    assert not list(workdir.glob("missing*")), "a read command created the storage"


def test_a_full_disk_is_called_a_full_disk(workdir, monkeypatch):
    import sqlalchemy

    def full(*a, **k):
        raise sqlalchemy.exc.OperationalError("CREATE TABLE studies", {}, Exception("database or disk is full"))

    monkeypatch.setattr(optuna.storages, "RDBStorage", full)
    with pytest.raises(UserError, match=r"the disk holding storage 'autotune.db' is full \(.*\); free some space, or pass --storage on another disk") as info:
        open_storage(f"sqlite:///autotune.db?password={SECRET}")
    assert SECRET not in str(info.value) and "check the URL" not in str(info.value)


@pytest.mark.slow
def test_a_disk_that_fills_up_during_the_study_is_one_line(workdir, tiny_dataset, monkeypatch, capsys):
    import sqlalchemy

    def full(self, *a, **k):
        raise sqlalchemy.exc.OperationalError("INSERT INTO trials", {}, Exception("database or disk is full"))

    monkeypatch.setattr(optuna.Study, "optimize", full)
    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)  # not what this test is about
    assert main(["run", "--dataset", str(tiny_dataset), *FAST]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the disk holding storage 'autotune.db' is full" in err


@pytest.mark.parametrize("url, hint", [
    (f"mysql://user:{SECRET}@db/optuna", "pip install mysqlclient, or pip install PyMySQL and write the URL as mysql+pymysql://"),
    (f"mysql+pymysql://user:{SECRET}@db/optuna", "pip install PyMySQL"),
    (f"mysql+mysqlconnector://user:{SECRET}@db/optuna", "pip install mysql-connector-python"),
])
def test_a_missing_mysql_driver_is_named(url, hint, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_mysql(name, globals=None, locals=None, fromlist=(), level=0):  # whether or not a driver is installed here
        if level == 0 and name.split(".")[0] in ("MySQLdb", "pymysql", "mysql"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real_import(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_mysql)
    with pytest.raises(UserError) as info:
        open_storage(url)
    msg = str(info.value)
    assert hint in msg and "psycopg" not in msg and "PostgreSQL" not in msg and SECRET not in msg


def test_show_of_a_study_name_points_to_study(workdir, capsys):
    """`autotune show NAME` said the config does not exist, and to write it with 'autotune run'."""
    _add_study(open_storage("sqlite:///autotune.db"), "nightly", rate=100.0)
    assert main(["show", "nightly"]) == 2
    assert capsys.readouterr().err == "autotune: error: 'nightly' is no file here but a study in autotune.db; show it with 'autotune show --study nightly'\n"
    assert main(["show", "other"]) == 2
    assert "config 'other' does not exist" in capsys.readouterr().err


HOSTILE = ["[/]evil", "[bold red]loud[/bold red]", "esc\x1b[31mred\x1b[0m", "two\nlines\rback", "bell\x07"]


@pytest.mark.slow
def test_hostile_study_names_are_shown_as_they_are(workdir, capsys):
    storage = open_storage("sqlite:///autotune.db")
    for i, name in enumerate(HOSTILE):
        _add_study(storage, name, rate=100.0 + i)
    assert main(["studies"]) == 0
    out = capsys.readouterr().out
    assert "[/]evil" in out and "[bold red]loud[/bold red]" in out  # the markup is text, not style
    assert "\x1b" not in out and "\x07" not in out and "\r" not in out  # capsys is no terminal: any escape is injected
    assert "esc\\x1b[31mred" in out and "two\\x0alines\\x0dback" in out and "bell\\x07" in out
    for name in HOSTILE:
        assert main(["show", "--study", name]) == 0
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out and "\r" not in out
    assert main(["show", "--study", "[/]evil"]) == 0
    assert "[/]evil" in capsys.readouterr().out
    for name in HOSTILE[2:]:
        assert main(["report", "--study", name, "--quiet"]) == 0
    for md in workdir.glob("reports/*/report.md"):
        text = md.read_text()
        assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "two\nlines" not in text


def test_one_unreadable_study_does_not_hide_the_others(workdir, capsys):
    storage = open_storage("sqlite:///autotune.db")
    _add_study(storage, "good")
    _add_study(storage, "broken", confirmation="not a record", dataset="not a mapping")  # edited by hand
    foreign = optuna.create_study(storage=storage, study_name="not-autotune")  # another tool's study
    foreign.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert main(["studies", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["good"]["best_samples_per_s"] == 100.0 and "error" not in rows["good"]
    assert rows["broken"]["error"] and rows["broken"]["trials"] is None
    assert rows["not-autotune"]["foreign"] == "it minimizes its objective; autotune's maximize samples/s"
    assert rows["not-autotune"]["trials"] == 1 and rows["not-autotune"]["best_samples_per_s"] is None  # its values are not samples/s
    # one stamp format for all (autotune's "...T...Z" sorted after Optuna's "... ..." whatever the times), one set of keys
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r["created"]) for r in rows.values())
    assert len({frozenset(r) - {"error", "foreign"} for r in rows.values()}) == 1
    assert main(["studies"]) == 0
    out = capsys.readouterr().out
    assert "good" in out and "unreadable" in out and "not made by autotune" in out
    assert main(["show", "--study", "not-autotune"]) == 2  # was 0, with a table of another program's values
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "study 'not-autotune' in sqlite:///autotune.db was not made by autotune (it minimizes its objective" in line


def test_a_bad_warm_start_leaves_no_study_behind(workdir, tiny_dataset, capsys):
    (workdir / "old.yaml").write_text("schema: 1\nloader: {backend: torch, batch_size: true}\n")
    assert main(["run", "--dataset", str(tiny_dataset), "--warm-start", "old.yaml", *FAST]) == 2
    assert "loader.batch_size must be an integer" in capsys.readouterr().err
    assert main(["run", "--dataset", str(tiny_dataset), "--warm-start", "study:nope", *FAST]) == 2
    storage = open_storage("sqlite:///autotune.db")
    assert optuna.get_all_study_summaries(storage, include_best_trial=False) == []


@pytest.mark.slow
def test_an_in_process_run_closes_its_storage(workdir, tiny_dataset):
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    assert main(["run", "--dataset", str(tiny_dataset), "--study-name", "s0", *FAST]) == 0  # imports and caches settle
    before = fds()
    assert main(["run", "--dataset", str(tiny_dataset), "--study-name", "s1", *FAST]) == 0
    assert fds() <= before  # each run left 2 open (the SQLite connection pool)


@pytest.mark.slow
def test_a_sqlite_file_named_like_a_journal_is_a_sqlite_database(workdir, tiny_dataset, capsys):
    """'sqlite:///runs.log' was taken for a journal at the file 'sqlite:/runs.log', which could not be opened."""
    assert main(["run", "--dataset", str(tiny_dataset), "--storage", "sqlite:///runs.log", "--study-name", "s", *FAST]) == 0
    assert optuna.load_study(study_name="s", storage="sqlite:///runs.log").best_trial is not None
    assert main(["studies", "--storage", "sqlite:///runs.log"]) == 0 and "s" in capsys.readouterr().out


@pytest.mark.parametrize("url", ["sqlite:///runs/db/autotune.db", "runs/journal/autotune.log"])
@pytest.mark.slow
def test_run_makes_the_folder_of_a_storage_file_as_it_does_for_out(workdir, tiny_dataset, url):
    assert main(["run", "--dataset", str(tiny_dataset), "--storage", url, "--out", "runs/autotune.yaml", *FAST]) == 0
    assert (workdir / url.removeprefix("sqlite:///")).is_file() and (workdir / "runs" / "autotune.yaml").is_file()
    assert main(["studies", "--storage", "sqlite:///elsewhere/x.db"]) == 2  # a read command makes nothing
    assert not (workdir / "elsewhere").exists()


@pytest.mark.parametrize(("url", "whole"), [("sqlite:///~/runs/a.db", "sqlite:////"), ("journal:~/a.log", "journal:/"), ("~/a.log", "/")])
def test_a_storage_path_under_a_tilde_is_refused_not_made_here(workdir, tiny_dataset, capsys, url, whole):
    """A quoted '~' reaches the URL unexpanded: SQLite would open (and run would make) a folder named '~' here."""
    assert main(["run", "--dataset", str(tiny_dataset), "--storage", url, *FAST]) == 2
    err = capsys.readouterr().err
    assert "starts with '~', which is not expanded" in err and f"e.g. {whole}" in err and err.count("\n") == 1
    assert not (workdir / "~").exists()


def test_resume_from_a_storage_file_that_is_not_there_makes_nothing(workdir, tiny_dataset, capsys):
    assert main(["run", "--dataset", str(tiny_dataset), "--resume", "--storage", "sqlite:///typo/a.db", *FAST]) == 2
    assert "no storage file 'typo/a.db'" in capsys.readouterr().err and not (workdir / "typo").exists()


@pytest.mark.parametrize("command", [["show", "--study", "x"], ["studies"], ["report"]])
def test_a_reading_command_leaves_a_database_that_is_not_a_storage_as_it_was(tmp_path, capsys, command):
    """`autotune show --storage sqlite:///app.db` added Optuna's thirteen tables to the application's database."""
    import hashlib
    import sqlite3

    db = tmp_path / "app.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    before = hashlib.md5(db.read_bytes()).hexdigest()
    assert main([*command, "--storage", f"sqlite:///{db}"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "holds no Optuna study tables, so it is not a storage 'autotune run' wrote" in line
    assert hashlib.md5(db.read_bytes()).hexdigest() == before


@pytest.mark.slow
def test_another_programs_studies_in_a_shared_storage_are_named_not_a_traceback(tmp_path, capsys, monkeypatch):
    """A multi-objective study made `show` and `report` end in Optuna's RuntimeError; a string where a mapping goes
    (a `dataset` attribute) made `report` end in AttributeError."""
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    multi = optuna.create_study(storage=url, study_name="multi", directions=["maximize", "minimize"])
    multi.optimize(lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=2)
    odd = optuna.create_study(storage=url, study_name="odd", direction="maximize")
    odd.set_user_attr("fingerprint_key", "k")  # autotune's, with an attribute edited by hand
    odd.set_user_attr("dataset", "a string")
    odd.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    for command in (["show", "--study", "multi"], ["report", "--study", "multi"]):
        assert main([*command, "--storage", url]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert "study 'multi' in " in line and "was not made by autotune (it has 2 objectives" in line
    assert main(["report", "--study", "odd", "--storage", url]) == 0
    assert "Traceback" not in capsys.readouterr().err
    later = optuna.create_study(storage=url, study_name="later", directions=["maximize", "maximize"])  # the newest: not picked
    later.optimize(lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=1)
    plain = optuna.create_study(storage=url, study_name="plain")  # newer still, one objective, minimized: not picked either
    plain.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
    assert main(["report", "--storage", url]) == 0
    assert "odd" in capsys.readouterr().out


@pytest.mark.parametrize(("flags", "needle"), [
    (["--storage", "autotune.db"], "--storage autotune.db is not a storage URL; pass sqlite:///autotune.db for a SQLite file"),
    (["--storage", "sqlite:///afile/x.db"], "--storage sqlite:///afile/x.db names 'afile/x.db', which is under"),
    (["--reports-dir", "afile/reports"], "--reports-dir 'afile/reports' is under"),
])
def test_a_storage_or_reports_folder_that_cannot_be_written_is_refused_before_the_set_up(workdir, tiny_dataset, capsys, monkeypatch, flags, needle):
    """Found after the scan and the measuring process's start, one at a time; now before either, one line each."""
    from autotune.tuning import prepare

    (workdir / "afile").write_text("x")
    monkeypatch.setattr(prepare, "scan", lambda *a, **k: pytest.fail("the dataset was scanned before the bad flag was found"))
    assert main(["run", "--dataset", str(tiny_dataset), *flags, *FAST]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1, err
    assert sorted(p.name for p in workdir.iterdir()) == ["afile"]  # no storage, no reports folder made


def test_run_refuses_a_storage_in_memory(workdir, tiny_dataset, capsys):
    """The YAML named a storage that was gone when the run ended: --resume, show and report could not reach it."""
    for url in ("sqlite://", "sqlite:///:memory:"):
        assert main(["run", "--dataset", str(tiny_dataset), "--storage", url, *FAST]) == 2
        assert "keeps the study in memory" in capsys.readouterr().err
    assert not Path("autotune.yaml").exists()


def test_check_refuses_an_empty_dataset_path(tmp_path, capsys):
    from autotune.config import fingerprint
    from autotune.config.files import save_config
    from autotune.config.schema import Config, LoaderConfig

    f = tmp_path / "a.yaml"
    save_config(Config(loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 8}), hardware=fingerprint.collect()), f)
    assert main(["check", str(f), "--dataset", ""]) == 2
    assert "--dataset is empty" in capsys.readouterr().err


def test_two_runs_in_the_same_second_get_two_studies(workdir, tiny_dataset, monkeypatch):
    """The made-up study name is unique to the second: the second run died as a storage failure ('fix the database')."""
    from autotune.dataset.scan import scan
    from autotune.errors import UserError
    from autotune.study.space import load_space
    from autotune.study.storage import open_storage
    from autotune.study.tuner import Tuner, TuneSettings

    url = "sqlite:///same.db"
    optuna.create_study(storage=open_storage(url), study_name="data-key-20261201-020216")
    t = Tuner(scan(tiny_dataset), load_space("cpu", cores=2), TuneSettings(cores=2), storage=url, study_name="data-key-20261201-020216", made_up_name=True)
    assert t.study.study_name == "data-key-20261201-020216-2"
    real, raced_once = optuna.create_study, []

    def raced(**kw):  # the other run creates the name between this one's look and its create
        if not raced_once:
            raced_once.append(real(storage=kw["storage"], study_name=kw["study_name"]))
        return real(**kw)

    monkeypatch.setattr(optuna, "create_study", raced)
    t = Tuner(scan(tiny_dataset), load_space("cpu", cores=2), TuneSettings(cores=2), storage=url, study_name="fresh-20261201", made_up_name=True)
    assert t.study.study_name == "fresh-20261201-2"
    raced_once.clear()
    with pytest.raises(UserError, match="another run created study 'asked-for' .* at the same moment; pass --resume to join it"):
        Tuner(scan(tiny_dataset), load_space("cpu", cores=2), TuneSettings(cores=2), storage=url, study_name="asked-for")


class _FullAfter:
    """``os`` for Optuna's journal backend, whose ``fsync`` fails as a full disk does once ``n`` writes went through
    (the write itself went half-way: the journal ends in a line without its newline)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __getattr__(self, name: str):
        return getattr(os, name)

    def fsync(self, fd: int) -> None:
        self.n -= 1
        if self.n < 0:
            os.ftruncate(fd, os.fstat(fd).st_size - 7)  # the record's end never reached the disk
            raise OSError(28, "No space left on device")
        os.fsync(fd)


@pytest.mark.parametrize("writes", [12, 35])  # while setting up the study; in the trials
@pytest.mark.slow
def test_a_journal_that_filled_its_disk_is_one_line_and_resumes(workdir, tiny_dataset, monkeypatch, capsys, writes):
    """A journal's full disk was four chained OSError tracebacks, and the record it cut short then glued itself to
    the next one appended: --resume failed on a JSONDecodeError and every command refused the journal after it."""
    import json as _json

    from autotune.cli import main

    monkeypatch.setattr("autotune.doctor.preflight", lambda *a, **k: None)
    argv = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "2", "--confirm-top", "0", "--window", "0.2",
            "--windows", "2", "--warmup-batches", "1", "--no-report", "--quiet", "--storage", "journal:j.log", "--study-name", "j"]
    monkeypatch.setattr("optuna.storages.journal._file.os", _FullAfter(writes))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "the disk holding storage 'j.log' is full" in err, err
    assert not (workdir / "j.log").read_bytes().endswith(b"\n")
    monkeypatch.setattr("optuna.storages.journal._file.os", os)  # space freed
    assert main([*argv, "--resume"]) == 0
    for line in (workdir / "j.log").read_bytes().splitlines():
        _json.loads(line)  # every line a whole record
    assert main(["studies", "--storage", "journal:j.log", "--json"]) == 0
    assert _json.loads(capsys.readouterr().out)[0]["name"] == "j"


def test_another_programs_study_is_neither_resumed_nor_read_as_a_warm_start(workdir, tiny_dataset, capsys):
    """--resume into a plain Optuna study (minimize, param x) added an autotune trial to it, then failed on a KeyError;
    a multi-objective study as --warm-start study:NAME was a RuntimeError traceback."""
    from autotune.cli import main

    url = "sqlite:///shared.db"
    foreign = optuna.create_study(study_name="foreign", storage=url, direction="minimize")
    foreign.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=3)
    optuna.create_study(study_name="multi", storage=url, directions=["maximize", "minimize"]).optimize(
        lambda t: (t.suggest_float("x", 0, 1), 1.0), n_trials=2)
    common = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "1", "--no-report", "--storage", url]
    assert main([*common, "--study-name", "foreign", "--resume"]) == 2
    assert main([*common, "--study-name", "foreign"]) == 2
    assert main([*common, "--study-name", "multi", "--resume"]) == 2
    assert main([*common, "--warm-start", "study:multi"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("study 'foreign' in sqlite:///shared.db was not made by autotune (it minimizes its objective; autotune's maximize "
                     "samples/s); pass another --study-name") == 2
    assert err.count("study 'multi' in sqlite:///shared.db was not made by autotune (it has 2 objectives") == 2  # --resume, --warm-start
    assert len(optuna.load_study(study_name="foreign", storage=url).trials) == 3  # nothing added


@pytest.mark.slow
def test_a_study_stopped_before_its_record_is_resumed_and_recorded(workdir, tiny_dataset):
    """A run stopped between making the study and recording its attributes: --resume measured without them, and
    the study then looked like another program's to every later --resume."""
    from autotune.cli import main

    optuna.create_study(study_name="bare", storage="sqlite:///autotune.db", direction="maximize")
    argv = ["run", "--dataset", str(tiny_dataset), "--space", "cpu", "--n-trials", "1", "--confirm-top", "0", "--window", "0.2",
            "--windows", "1", "--warmup-batches", "1", "--batch-size", "8", "--no-report", "--quiet", "--study-name", "bare", "--resume"]
    assert main(argv) == 0
    assert "fingerprint_key" in optuna.load_study(study_name="bare", storage="sqlite:///autotune.db").user_attrs
    assert main(argv) == 0


@pytest.mark.parametrize("command", [["studies"], ["report"], ["show", "--study", "x"]])
def test_a_bare_file_name_as_storage_of_a_read_command_names_the_url(workdir, capsys, command):
    """run said 'pass sqlite:///s.db'; studies, report and show said SQLAlchemy's 'Could not parse SQLAlchemy URL'."""
    Path("s.db").write_bytes(b"")
    assert main([*command, "--storage", "s.db"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--storage s.db is not a storage URL; pass sqlite:///s.db for a SQLite file, journal:s.db for a journal file" in line


@pytest.mark.usefixtures("sigint_as_in_a_terminal")
def test_a_stop_signal_while_the_storages_close_waits_until_they_are_closed(monkeypatch):
    """A second SIGTERM landing in SQLAlchemy's connection close was logged as 'Exception closing connection' with a
    traceback, and the connections after it were left open."""
    import signal

    from autotune.study import storage

    closed = []

    def close(s):
        signal.raise_signal(signal.SIGINT)
        closed.append(s)

    monkeypatch.setattr(storage, "close_storage", close)
    with pytest.raises(KeyboardInterrupt), storage.closing_storages():
        storage._opened.get().extend(["first", "second"])
    assert closed == ["first", "second"]


def _damaged_storage(folder: Path) -> str:
    """A SQLite storage of 40 trials with 8 KB of garbage written at half its size, as a failing disk leaves one."""
    url = f"sqlite:///{folder / 'damaged.db'}"
    storage = open_storage(url)
    for i in range(5):
        _add_study(storage, f"s{i}")
    study = optuna.load_study(study_name="s0", storage=storage)
    for i in range(40):
        study.add_trial(optuna.trial.create_trial(params={"num_workers": i % 8}, distributions={"num_workers": optuna.distributions.IntDistribution(0, 8)},
                                                  value=float(i), user_attrs={"outcome": "complete", "config": f"workers={i % 8}"}))
    from autotune.study.storage import close_storage

    close_storage(storage)
    db = folder / "damaged.db"
    with open(db, "r+b") as f:
        f.seek(db.stat().st_size // 2)
        f.write(bytes(range(256)) * 32)
    return url


@pytest.mark.parametrize("command", [["studies"], ["show", "--study", "s0"], ["report", "--study", "s0"], ["report"]])
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_a_damaged_database_is_one_line_for_the_read_commands(tmp_path, capsys, command, as_json):
    """Garbage in the middle of the SQLite file made the read commands end in three chained tracebacks
    (StorageInternalError) and exit 1, with nothing on stdout under --json; `run --resume` said it in one line."""
    url = _damaged_storage(tmp_path)
    flags = ["--json"] if as_json else []
    if command[0] == "report":
        flags += ["--reports-dir", str(tmp_path / "reports")]
    assert main([*command, "--storage", url, *flags]) == 2
    out, err = capsys.readouterr()
    (line,) = [ln for ln in err.splitlines() if ln.startswith("autotune")]
    assert "storage 'damaged.db' is damaged (database disk image is malformed); restore it from a copy" in line.replace(str(tmp_path) + "/", "")
    if as_json:
        assert json.loads(out) == {"error": line.removeprefix("autotune: error: "), "exit_code": 2}
