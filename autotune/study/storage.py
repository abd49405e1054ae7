"""Optuna storages: open any URL (or a journal file), and keep passwords out of every message and log line."""

from __future__ import annotations

import logging
import re
from typing import Any

import optuna

from autotune.errors import UserError

_USERINFO = re.compile(r"(?P<pre>//[^\s/:@'\"]*:)[^\s'\"]*@")  # //user:password@ (up to the last @)
_SECRET_PARAM = re.compile(r"(?i)(?P<pre>(?:password|passwd|pwd|token|secret|key|auth|credentials?|signature|sig)=)[^&;#\s'\"]*")


def mask_url(url: str) -> str:
    """``url`` (or any text holding URLs) with passwords and tokens shown as ``***``.

    Masks ``//user:password@`` (``postgresql://user:***@host/db``; a password holding ``@`` is masked up to
    the last ``@``) and query parameters such as ``?password=``, ``sslpassword=``, ``token=``, ``api_key=``.
    """
    url = _USERINFO.sub(r"\g<pre>***@", url)
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


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """Any Optuna storage URL (sqlite, postgresql, mysql ...) or a journal file (``journal:PATH`` or ``*.log``)."""
    try:
        if url.startswith("journal:") or url.endswith((".log", ".jsonl")):
            from optuna.storages.journal import JournalFileBackend

            return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["engine_kwargs"] = {"connect_args": {"timeout": 60}}
        return optuna.storages.RDBStorage(driver_url(url), heartbeat_interval=None, **kwargs)
    except ImportError as e:
        raise UserError(f"storage {mask_url(url)} needs a database driver that is not installed ({e}); for PostgreSQL: pip install -e \".[fleet]\"") from None
    except Exception as e:  # noqa: BLE001 - sqlalchemy's many errors
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise UserError(f"cannot open storage {mask_url(url)}: {mask_url(first)}; check the URL (e.g. sqlite:///autotune.db)") from None
