"""The settings of a study (:class:`TuneSettings`), and the Optuna sampler and pruner they name."""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable
from typing import Any

import optuna

warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)

from autotune.errors import UserError  # noqa: E402 - after the filter: TPE's multivariate and group are experimental
from autotune.trials.guard import Budgets  # noqa: E402 - after the filter, as the line above

SAMPLERS = ("tpe", "random", "qmc")
PRUNERS = ("median", "percentile", "none")


@dataclasses.dataclass
class TuneSettings:
    """How a study searches and measures: the flags of ``autotune run``, as the tuner takes them."""

    pipeline: str = "imagenet-train"
    device: str = "cpu"
    n_trials: int = 20
    timeout: float | None = None
    seed: int | None = None
    warmup_batches: int = 2
    window_s: float = 1.0
    windows: int = 5
    trial_timeout: float = 180.0
    confirm_top: int = 3
    confirm_repeats: int = 2
    #: re-measure the contenders side by side in one process, in alternating windows (:mod:`autotune.study.paired`);
    #: False: each in a fresh process of its own, round by round
    paired: bool = True
    sampler: str = "tpe"
    pruner: str = "median"
    baselines: bool = True
    cores: int = 1
    cache: str = "warm"
    ranks: int = 1
    budgets: Budgets = dataclasses.field(default_factory=Budgets)
    model: Any = None
    inject: dict[int, str] = dataclasses.field(default_factory=dict)  # trial number -> fault (tests)
    #: measure a kind's configs one after another in warm trial processes during the search, where the kind allows
    reuse_processes: bool = True
    #: build the search's next trial while this one measures, where its kind allows (:mod:`autotune.trials.ahead`)
    build_ahead: bool = False
    #: whether the time budget has room for a trial after the one measured now (None: no time budget)
    ahead_fits: Callable[[], bool] | None = None
    fork_trials: bool = True  # fork trial processes from a pre-imported one (autotune.trials.zygote) rather than spawn each
    log_dir: str | None = None  # each trial process's output goes to <log_dir>/<trial>.log (None: the tuner's stdout/stderr)
    time_left: Callable[[], float] | None = None  # seconds of the time budget left for trials: a trial past it is cut
    #: seconds a trial may still measure (time_left less the planned re-measurement): at 0 it ends at its next window
    measure_left: Callable[[], float] | None = None
    #: the measurement's fields planned from the budget, not given (``window_s``, ``windows``): a resumed study keeps its own
    planned: frozenset[str] = frozenset()

    def measurement(self) -> dict[str, Any]:
        return {"warmup_batches": self.warmup_batches, "window_s": self.window_s, "windows": self.windows, "cache": self.cache,
                "statistic": "median of steady windows"}


def make_sampler(name: str, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, group=True, n_startup_trials=4)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "qmc":
        return optuna.samplers.QMCSampler(seed=seed)
    raise UserError(f"--sampler must be one of {', '.join(SAMPLERS)}, but got {name!r}")


def make_pruner(name: str) -> optuna.pruners.BasePruner:
    if name == "median":
        return optuna.pruners.MedianPruner(n_startup_trials=4, n_warmup_steps=1)
    if name == "percentile":
        return optuna.pruners.PercentilePruner(25.0, n_startup_trials=4, n_warmup_steps=1)
    if name == "none":
        return optuna.pruners.NopPruner()
    raise UserError(f"--pruner must be one of {', '.join(PRUNERS)}, but got {name!r}")
