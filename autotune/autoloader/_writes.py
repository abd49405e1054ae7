"""Rank 0's study and YAML writes, on one worker thread off the training loop, in the order they were asked for.

The training loop does not wait for the storage: a commit or an fsync that stalls on a busy disk (a checkpoint
being written, a dataset just copied) would otherwise stall a step, and be scored against the candidate. Only
asking for the next candidate waits (for the answer, after the writes before it).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from autotune.autoloader._setup import one_line
from autotune.errors import UserError

logger = logging.getLogger(__package__)  # autotune.autoloader, not its private modules

_THREAD = "autotune-study"


class Background:
    """One worker thread, started at the first write; :meth:`drain` waits for what was handed to it."""

    def __init__(self) -> None:
        self._worker: ThreadPoolExecutor | None = None

    def run(self, what: str, fn: Callable[..., Any], *args: Any, quiet: bool = True, **kw: Any) -> Future:
        """Run ``fn`` on the worker thread, after what was handed to it before, and return its future.

        A write that fails is a warning (``quiet``): the loop never sees an error from storing a result. Asking
        (``quiet=False``) raises what it raised. Once the worker is shut down (interpreter exit), it runs here.
        """
        def run() -> Any:
            try:
                return fn(*args, **kw)
            except Exception as e:  # storage trouble must not reach the training loop (asking re-raises)
                if not quiet:
                    raise
                logger.warning("%s failed: %s", what, one_line(e))
                return None

        if self._worker is None:
            self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix=_THREAD)
        try:
            return self._worker.submit(run)
        except RuntimeError:  # "cannot schedule new futures after interpreter shutdown": close() from atexit
            done: Future = Future()
            try:
                done.set_result(run())
            except Exception as e:  # noqa: BLE001 - handed back through the future, as submit would
                done.set_exception(e)
            return done

    def drain(self) -> None:
        """Wait for every write handed over (not on the worker's own thread, where a dropped loader may be finalised:
        it cannot wait for itself)."""
        if self._worker is not None:
            self._worker.shutdown(wait=not threading.current_thread().name.startswith(_THREAD))
            self._worker = None


def write_yaml(source: Any, path: str | None, extra: dict[str, Any], *, whole_epochs: int, slowest: str) -> Any:
    """The winner's YAML, from the worker thread: the Config written, or None (nothing completed, or a write that
    failed: a warning, training goes on). ``whole_epochs``: candidates were scored over whole epochs of that many
    batches, which the YAML's measurement then says."""
    if whole_epochs:
        m = dict(source.study.user_attrs.get("measurement") or {})
        m.update({"warmup_batches": 0, "measure_batches": whole_epochs,
                  "statistic": "training-loop seconds per sample over whole epochs (first batch and end included, loader build left out)" + slowest})
        source.study.set_user_attr("measurement", m)
    try:
        return source.write_config(path, extra)
    except (OSError, UserError) as e:  # a YAML that cannot be written must not stop training
        logger.warning("could not write %s: %s", path, e)
        return None
