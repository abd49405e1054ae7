"""Optuna storages: open any URL (or a journal file), and keep passwords out of every message and log line."""

from __future__ import annotations

import contextlib
import contextvars
import json
import logging
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna

from autotune.errors import UserError
from autotune.study.evidence import trial_attrs

logger = logging.getLogger(__name__)

# //user:password@ within one word, up to its last '@' (a password may hold '@' or quotes), never across another '://'
_USERINFO = re.compile(r"(?P<pre>//[^\s/:@'\"]*:)(?!//)(?:(?!://)\S)*@")
# a password holding white space: up to the first '@' before a host, on the same line (not a port: //host:5432/db)
_USERINFO_SPACED = re.compile(r"(?P<pre>//[^\s/:@'\"]*:)(?!\d*(?:[/?#,\s]|$))(?=[^\n@]*\s)(?:(?!://)[^\n@]){1,128}@(?=[\w\[])")
_SECRET_PARAM = re.compile(r"(?i)(?P<pre>(?:password|passwd|pwd|token|secret|key|auth|credentials?|signature|sig)=)[^&;#\s'\"]*")
_known_userinfo: set[str] = set()  # 'user:password@' of each URL this process was given, masked wherever it shows


def remember_secrets(url: str) -> None:
    """Mask the password of ``url`` (a storage URL as given, however malformed) in every later :func:`mask_url`,
    word for word: a password with spaces, quotes or '@' is found even where no pattern tells where it ends."""
    rest = url.partition("://")[2]
    userinfo = rest[: rest.rfind("@") + 1]
    user, colon, password = userinfo[:-1].partition(":")
    if userinfo and colon and password and password != "***":
        _known_userinfo.add(userinfo)


def mask_url(url: str) -> str:
    """``url`` (or any text holding URLs) with passwords and tokens shown as ``***``.

    Masks ``//user:password@`` (``postgresql://user:***@host/db``; a password holding ``@`` or quotes is masked up
    to the word's last ``@``, one holding spaces up to the ``@`` before the host), query parameters such as
    ``?password=``, ``sslpassword=``, ``token=``, ``api_key=``, and the password of every URL passed to
    :func:`remember_secrets` wherever it shows.
    """
    for userinfo in sorted(_known_userinfo, key=len, reverse=True):
        url = url.replace(userinfo, userinfo.partition(":")[0] + ":***@")
    url = _USERINFO.sub(r"\g<pre>***@", url)
    url = _USERINFO_SPACED.sub(r"\g<pre>***@", url)
    return _SECRET_PARAM.sub(r"\g<pre>***", url)


class MaskSecrets(logging.Filter):
    """A handler filter that masks URL passwords and tokens in log records (message, arguments, traceback)."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        masked = mask_url(msg)
        if masked != msg:
            record.msg, record.args = masked, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = mask_url(record.exc_text)
        return True


def mask_log_secrets() -> None:
    """Add :class:`MaskSecrets` to the handlers that print autotune's and Optuna's logs (idempotent)."""
    for name in (None, "optuna"):
        for h in logging.getLogger(name).handlers:
            if not any(isinstance(f, MaskSecrets) for f in h.filters):
                h.addFilter(MaskSecrets())


def driver_url(url: str) -> str:
    """``postgresql://`` through the driver that is installed: SQLAlchemy 2.1 picks psycopg 3, the ``fleet``
    extra installs psycopg2; ``postgres://`` (Heroku's spelling) is read as ``postgresql://``."""
    import importlib.util

    scheme, sep, rest = url.partition("://")
    if sep and scheme in ("postgresql", "postgres"):
        if importlib.util.find_spec("psycopg") is None and importlib.util.find_spec("psycopg2") is not None:
            return f"postgresql+psycopg2://{rest}"
        return f"postgresql://{rest}"
    return url


#: The pip package of each SQLAlchemy driver an Optuna storage URL may name (``dialect+driver://``).
_DRIVER_PACKAGES = {
    "psycopg2": "psycopg2-binary (or: pip install -e \".[fleet]\")",
    "psycopg": "\"psycopg[binary]\"",
    "pg8000": "pg8000",
    "mysqldb": "mysqlclient",
    "pymysql": "PyMySQL",
    "mysqlconnector": "mysql-connector-python",
    "mariadbconnector": "mariadb",
}
_DEFAULT_DRIVER = {"postgresql": "psycopg2", "postgres": "psycopg2", "mysql": "mysqldb", "mariadb": "mysqldb"}


def _driver_hint(url: str) -> str:
    """What to install for the database driver ``url`` needs, e.g. ``pip install PyMySQL``."""
    scheme = url.partition("://")[0].lower()
    dialect, _, driver = scheme.partition("+")
    driver = driver or _DEFAULT_DRIVER.get(dialect, "")
    package = _DRIVER_PACKAGES.get(driver)
    if package is None:
        return f"install the Python driver for {scheme or 'this database'}"
    hint = f"pip install {package}"
    if dialect in ("mysql", "mariadb") and driver == "mysqldb":
        hint += ", or pip install PyMySQL and write the URL as mysql+pymysql://..."
    return hint


def sqlite_file(url: str) -> Path | None:
    """The database file a ``sqlite://`` URL names (query string and driver left out), or None: not SQLite,
    in memory, or a ``file:`` URI (``?uri=true``) that SQLite resolves itself."""
    if not url.lower().startswith("sqlite"):
        return None
    import sqlalchemy

    try:
        u = sqlalchemy.engine.make_url(url)
    except Exception:  # noqa: BLE001 - a malformed URL: open_storage says so
        return None
    db = u.database or ""
    if not db or db == ":memory:" or db.startswith("file:") or str(u.query.get("uri", "")).lower() in ("true", "1"):
        return None
    return Path(db)


def journal_file(url: str) -> Path | None:
    """The file a journal storage (``journal:PATH``, or a plain path ending ``.log`` or ``.jsonl``) writes to, or None.

    A database URL is never a journal, whatever its file is called (``sqlite:///runs.log``)."""
    if url.startswith("journal:") or ("://" not in url and url.endswith((".log", ".jsonl"))):
        return Path(url.removeprefix("journal:"))
    return None


def absolute_url(url: str) -> str:
    """``url`` with a relative SQLite or journal file made absolute (``sqlite:///autotune.db`` ->
    ``sqlite:////srv/train/autotune.db``), so that a YAML names a storage that opens from any folder; others as given."""
    db = sqlite_file(url)
    if db is not None and not db.is_absolute():
        import sqlalchemy

        u = sqlalchemy.engine.make_url(url)
        return u.set(database=str(db.resolve())).render_as_string(hide_password=False)
    path = journal_file(url)
    if path is not None and not path.is_absolute():
        return ("journal:" if url.startswith("journal:") else "") + str(path.resolve())
    return url


def _chain(e: BaseException) -> list[BaseException]:
    """``e`` and the exceptions it was raised from or while handling, innermost last."""
    out: list[BaseException] = []
    cur: BaseException | None = e
    while cur is not None and cur not in out and len(out) < 20:
        out.append(cur)
        # `raise X from None` says that X is not about what was being handled: the chain ends there
        cur = cur.__cause__ or (None if cur.__suppress_context__ else cur.__context__)
    return out


def _is_db_error(e: BaseException) -> bool:
    return (isinstance(e, optuna.exceptions.StorageInternalError) or any(c.__module__.startswith(("sqlalchemy.", "sqlite3")) for c in type(e).__mro__)
            or (isinstance(e, OSError) and _raised_in_journal(e)))


def _raised_in_journal(e: BaseException) -> bool:
    """Whether ``e`` came through Optuna's journal file backend (its writes fail as plain OSErrors: a full disk)."""
    tb = e.__traceback__
    while tb is not None:
        if "/optuna/storages/journal/" in tb.tb_frame.f_code.co_filename.replace(os.sep, "/"):
            return True
        tb = tb.tb_next
    return False


def storage_cause(e: BaseException) -> BaseException | None:
    """The database error behind ``e`` (SQLAlchemy, sqlite3 or Optuna's StorageInternalError), itself or one it
    was raised from or while handling, innermost first; None when ``e`` is not the database's.

    Optuna hides a failed commit inside a trial behind an ``AssertionError("Should not reach.")`` raised while
    handling it: the cause is in the chain, not in the exception that arrives.
    """
    found = [c for c in _chain(e) if _is_db_error(c)]
    return found[-1] if found else None


def is_storage_error(e: BaseException) -> bool:
    """Whether ``e`` came from the database rather than from autotune's own code (see :func:`storage_cause`)."""
    return storage_cause(e) is not None


def storage_failure(url: str, e: BaseException, *, opening: bool = False, reading: bool = False) -> UserError:
    """The one-line :class:`UserError` for ``e``, raised by storage ``url`` while opening, reading (``reading``: a
    command that only reads, such as ``show``) or writing it: its cause (no such file, full disk, read-only,
    damaged, missing driver) and the fix, the password masked."""
    remember_secrets(url)
    e = storage_cause(e) or e
    text = str(e)
    first = mask_url(text.splitlines()[0] if text else type(e).__name__)
    where = sqlite_file(url) or journal_file(url)
    lower = text.lower()
    target = f"{str(where)!r}" if where is not None else mask_url(url)
    if "disk is full" in lower or "no space left" in lower or getattr(e, "errno", None) == 28:
        return UserError(f"the disk holding storage {target} is full ({first}); free some space, or pass --storage on another disk")
    if "readonly database" in lower or "read-only" in lower or isinstance(e, PermissionError):
        return UserError(f"storage {target} cannot be written ({first}); make it writable, or pass --storage somewhere you can write")
    if "unable to open database file" in lower and where is not None:
        return UserError(f"cannot open storage file {target} ({first}); check that its folder exists and is writable, or pass another --storage")
    if "malformed" in lower or "file is not a database" in lower:  # SQLite's words for a damaged file
        return UserError(f"storage {target} is damaged ({first}); restore it from a copy, or pass another --storage")
    if isinstance(e, ImportError):
        return UserError(f"storage {mask_url(url)} needs a database driver that is not installed ({first}); {_driver_hint(url)}")
    if opening and journal_file(url) is not None and not isinstance(e, OSError):
        return UserError(f"storage file {target} is not a readable Optuna journal ({type(e).__name__}: {first}); "
                         "pass the journal autotune wrote, or another --storage")
    if opening:
        return UserError(f"cannot open storage {mask_url(url)}: {first}; check the URL (e.g. sqlite:///autotune.db)")
    if reading:
        return UserError(f"reading storage {mask_url(url)} failed: {first}; check the database, then try again")
    return UserError(f"storage {mask_url(url)} failed: {first}; the trials stored so far are kept: fix the database, then --resume")


_opened: contextvars.ContextVar[list[optuna.storages.BaseStorage] | None] = contextvars.ContextVar("autotune_opened_storages", default=None)


def close_storage(storage: optuna.storages.BaseStorage) -> None:
    """Close a storage's database connections (an RDB storage keeps a connection pool open until then)."""
    inner = getattr(storage, "_backend", storage)  # optuna wraps an RDBStorage in a cache
    engine = getattr(inner, "engine", None)
    if engine is not None:
        try:
            inner.remove_session()
        except Exception:  # closing must not fail
            logger.debug("removing the storage session failed", exc_info=True)
        engine.dispose()


@contextlib.contextmanager
def closing_storages() -> Iterator[None]:
    """Close every storage that :func:`open_storage` opens inside the block when it ends (nested blocks too)."""
    token = _opened.set([])
    try:
        yield
    finally:
        from autotune.trials.runner import deferred_signals

        opened = _opened.get() or []
        _opened.reset(token)
        with deferred_signals():  # a stop signal raised inside SQLAlchemy's close was logged as a traceback; now after it
            for storage in opened:
                close_storage(storage)


def _check_journal_start(path: Path) -> None:
    """Raise when ``path`` holds something other than an Optuna journal. Optuna skips an undecodable last line
    (a write cut short), so a file of one garbage line would read as an empty storage, and a run would append to it.
    Empty (0 bytes) is a new journal; a first line still being written (no newline yet, another process creating
    the first study) is one."""
    try:
        with open(path, "rb") as f:
            first = f.readline(1 << 20)
    except FileNotFoundError:
        return
    if not first:
        return
    if not first.endswith(b"\n") and first.lstrip().startswith(b'{"op_code"'):
        return
    try:
        op = json.loads(first)
    except ValueError:
        op = None
    if not (isinstance(op, dict) and "op_code" in op):
        raise ValueError(f"its first line is not a journal entry: {first[:40].decode(errors='replace').strip()!r}")


def _drop_cut_record(path: Path) -> None:
    """Remove a last journal line that has no newline: a record whose write a full disk or a kill cut short.

    Readers skip it, but the next record appended would continue that line, and every later read fails on it.
    Done under Optuna's own journal lock, so no writer is half-way through a record meanwhile, by each process
    that opens the journal to write (a process that had it open before the cut does not look again).
    """
    from optuna.storages.journal import JournalFileSymlinkLock

    try:
        if not path.is_file() or path.stat().st_size == 0:
            return
    except OSError:
        return
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with open(path, "rb+") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - (1 << 20)))
            tail = f.read()
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            keep = size - len(tail) + cut + 1 if cut >= 0 else (0 if size <= 1 << 20 else None)
            if keep is None:  # a line over 1 MiB: no record of ours; leave it to the reader's error
                return
            f.truncate(keep)
        logger.warning("storage journal %s ended in a record cut short (a full disk or a process killed while writing): "
                       "removed its %d bytes; the records before it are kept", path, size - keep)
    finally:
        lock.release()


def _has_optuna_tables(path: Path) -> bool:
    """Whether the SQLite file holds Optuna's ``studies`` table, read without writing; True when it cannot be read
    as a database (opening it then names the cause)."""
    import sqlite3

    try:
        con = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
        try:
            return con.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'studies'").fetchone() is not None
        finally:
            con.close()
    except sqlite3.Error:
        return True


def _tilde_problem(url: str, local: Path) -> str:
    """Why a storage file under an unexpanded '~' is refused (reads after ``storage file PATH``)."""
    whole = str(local.expanduser())
    whole = f"sqlite:///{whole}" if sqlite_file(url) is not None else ("journal:" if url.startswith("journal:") else "") + whole
    return f"starts with '~', which is not expanded in --storage; write the whole path, e.g. {whole}"


def not_ours(study: optuna.Study) -> str | None:
    """Why ``study`` is not one autotune made (another program's, in a shared storage), or None: autotune's
    maximize samples/s, and its studies or their trials carry autotune's record (a new empty study is taken as ours)."""
    if len(study.directions) != 1:
        return f"it has {len(study.directions)} objectives; autotune's maximize samples/s"
    if study.direction != optuna.study.StudyDirection.MAXIMIZE:
        return "it minimizes its objective; autotune's maximize samples/s"
    trials = study.get_trials(deepcopy=False)
    if trials and "fingerprint_key" not in study.user_attrs and not any(trial_attrs(t).get("outcome") or trial_attrs(t).get("role") for t in trials):
        return "neither it nor its trials carry autotune's record"
    return None


def in_memory(url: str) -> bool:
    """Whether ``url`` is an in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``): gone with the
    process, and each connection gets its own."""
    if sqlite_file(url) is not None or journal_file(url) is not None:
        return False
    import sqlalchemy

    try:
        u = sqlalchemy.engine.make_url(url)
    except Exception:  # noqa: BLE001 - sqlalchemy's parse errors
        return False
    return u.drivername.startswith("sqlite") and (u.database or ":memory:") == ":memory:"


def storage_problem(url: str) -> str | None:
    """Why a run could not keep its study in ``url``, found before any long work and without making a file; None
    when none shows (a server's URL is checked for its form only). Reads after ``--storage URL``."""
    remember_secrets(url)
    local = sqlite_file(url) or journal_file(url)
    if local is None:
        import sqlalchemy

        try:
            u = sqlalchemy.engine.make_url(url)
        except Exception as e:  # noqa: BLE001 - sqlalchemy's parse errors
            u, why = None, str(e).splitlines()[0] if str(e) else type(e).__name__
        if (u is None or not u.drivername) and "://" in url:  # a server's URL, malformed: not a file name
            if u is not None:
                why = "no database kind before ://"
            port = re.fullmatch(r"invalid literal for int\(\) with base 10: (.*)", why)
            why = f"its port {port.group(1)} is not a number" if port else why
            return (f"is not a valid storage URL ({mask_url(why)}); write it as dialect://USER@HOST:PORT/DATABASE, the password after "
                    "USER and a colon, special characters in it %-escaped (several hosts: dialect://USER@/DATABASE?host=HOST1:PORT1&host=HOST2:PORT2)")
        if u is None or not u.drivername:
            return mask_url(f"is not a storage URL; pass sqlite:///{url} for a SQLite file, journal:{url} for a journal file, or a server's URL")
        if in_memory(url):
            return "keeps the study in memory: it is gone when the run ends, and --resume, show and report cannot reach it; pass sqlite:///autotune.db"
        return None
    if local.parts[:1] == ("~",):
        return _tilde_problem(url, local)
    from autotune.config.files import write_problem

    if local.is_file() and not os.access(local, os.W_OK):
        return f"names {str(local)!r}, which cannot be written (no permission); pass a storage file you can write"
    problem = write_problem(local)
    if problem is not None and not problem.startswith("is not a regular file"):
        problem = problem.replace("pass a path", "pass a storage file")
        problem = problem.replace("pass a file name such as autotune.yaml", "pass a file name such as autotune.db")
        return f"names {str(local)!r}, which {problem}"
    return None


def _schema_race(e: BaseException) -> bool:
    """Whether opening failed because another process made the same tables at the same moment (a new database)."""
    text = str(storage_cause(e) or e).lower()
    return ("already exists" in text and "table" in text) or "alembic_version" in text


def open_storage(url: str, *, must_exist: bool = False) -> optuna.storages.BaseStorage:
    """Any Optuna storage URL (sqlite, postgresql, mysql ...) or a journal file (``journal:PATH`` or ``*.log``).

    Args:
        url: the storage, as ``autotune run --storage`` takes it.
        must_exist: for commands that read: a SQLite or journal file that does not exist is an error, not a
            new empty storage.

    Raises:
        UserError: one line, password masked, naming the cause (no such file, full disk, missing driver, ...).
    """
    remember_secrets(url)
    local = sqlite_file(url) or journal_file(url)
    if local is not None and local.parts[:1] == ("~",):
        raise UserError(f"storage file {str(local)!r} {_tilde_problem(url, local)}")
    if must_exist and local is None:  # a reader given a bare file name: said as run says it, not as SQLAlchemy's parse error
        if not url.strip():
            raise UserError("--storage is empty; pass a storage URL such as sqlite:///autotune.db")
        problem = storage_problem(url)
        if problem is not None and problem.startswith(("is not a storage URL", "is not a valid storage URL")):
            raise UserError(f"--storage {mask_url(url)} {problem}")
    if must_exist and local is not None and not local.exists():
        raise UserError(f"no storage file {str(local)!r} (from {mask_url(url)}); run 'autotune run' here first, or pass --storage URL")
    if must_exist and local is not None and sqlite_file(url) is not None and not _has_optuna_tables(local):  # opening would add them: a reader never writes
        raise UserError(f"{str(local)!r} (from {mask_url(url)}) holds no Optuna study tables, so it is not a storage 'autotune run' wrote; "
                        "pass the --storage a run wrote to")
    if local is not None and not must_exist and not local.parent.exists():
        try:  # as --out does: a storage in a folder not made yet gets its folder
            local.parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            pass  # the open below names the cause
    # a new SQLite file gets Optuna's tables and their version from this Optuna: checking that they match it would
    # read every schema migration Optuna ships, for nothing
    new_sqlite = local is not None and sqlite_file(url) is not None and not local.exists()
    for attempt in range(1, 6):
        try:
            journal = journal_file(url)
            if journal is not None:
                from optuna.storages.journal import JournalFileBackend

                _check_journal_start(journal)
                if not must_exist:  # a writer: a record cut short would join the next one into a line no reader takes
                    _drop_cut_record(journal)
                storage: optuna.storages.BaseStorage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
            else:
                kwargs: dict[str, Any] = {}
                if url.startswith("sqlite"):
                    kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
                storage = optuna.storages.RDBStorage(driver_url(url), heartbeat_interval=None, skip_compatibility_check=new_sqlite, **kwargs)
            break
        except Exception as e:  # noqa: BLE001 - sqlalchemy's many errors
            if attempt < 5 and _schema_race(e):  # runs started together on a new database: one made the tables first
                time.sleep(0.2 * attempt)
                continue
            raise storage_failure(url, e, opening=True) from None
    opened = _opened.get()
    if opened is not None:
        opened.append(storage)
    return storage
