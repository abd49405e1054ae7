"""What ``autotune run`` does, as named steps over one frozen request, telling one reporter.

- :mod:`~autotune.tuning.request`: :class:`RunRequest`, every setting of a run, defaults resolved
  (:func:`resolve_request`; the command line and :func:`tune` both build one);
- :mod:`~autotune.tuning.reporter`: :class:`Reporter`, what a run tells as it goes (the steps never print);
- :mod:`~autotune.tuning.run`: the steps in order, :mod:`~autotune.tuning.prepare`,
  :mod:`~autotune.tuning.search`, :mod:`~autotune.tuning.confirm`, :mod:`~autotune.tuning.write`;
- :mod:`~autotune.tuning.api`: :func:`tune`, the run from Python (``autotune.tune``).

Importing this package stays light: the steps load optuna and torch, and load when a run starts.
"""

from __future__ import annotations

from autotune.tuning.api import tune
from autotune.tuning.reporter import LoggingReporter, Reporter
from autotune.tuning.request import RunRequest, resolve_request

__all__ = ["LoggingReporter", "Reporter", "RunRequest", "resolve_request", "tune"]
