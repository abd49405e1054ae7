"""What ``autotune run`` is asked to do: every setting in one frozen :class:`RunRequest`, defaults resolved.

:func:`resolve_request` turns the settings as given (the command's flags, or :func:`autotune.tune`'s arguments;
None where not given) into the request the run's steps read and never change. ``--if-stale FILE`` takes FILE's
recorded setting flags here, before the defaults: a setting flag not given is FILE's, else its default.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.config import fingerprint
from autotune.config.schema import Config
from autotune.dataset.paths import printable
from autotune.errors import DatasetError, UserError

logger = logging.getLogger(__name__)

#: what `autotune run` spends with no --n-trials, --timeout or --budget: seconds from the command's start to the YAML
DEFAULT_BUDGET_S = 60.0
#: the same with a model in the loop (--model or --step-ms): each trial also starts the model
DEFAULT_MODEL_BUDGET_S = 120.0
#: the longest --budget taken: a day (a run settles in minutes; more is a typo's extra digits)
MAX_BUDGET_S = 86_400.0
#: the trial cap under --budget without --n-trials: the budget stops the study long before it
BUDGET_MAX_TRIALS = 500
#: the trials run without a budget and without --n-trials (--timeout alone)
DEFAULT_N_TRIALS = 20
#: how the contenders are re-measured (``--remeasure``): side by side in one process (:mod:`autotune.study.paired`), or
#: each in fresh processes of its own
REMEASURE = ("paired", "fresh")
DEFAULT_PIPELINE, DEFAULT_SPACE, DEFAULT_OUT = "imagenet-train", "default", "autotune.yaml"

#: the flags that make a study what it is beyond its dataset: flag -> (the setting, its kind); not given, each is
#: None (False for a switch): ``--pipeline`` and ``--space`` take their defaults after ``--if-stale`` had its say
SETTING_FLAGS: dict[str, tuple[str, str]] = {
    "--pipeline": ("pipeline", "text"), "--space": ("space", "text"), "--device": ("device", "text"), "--gpus": ("gpus", "count"),
    "--batch-size": ("batch_size", "count"), "--tune-batch-size": ("tune_batch_size", "switch"), "--model": ("model", "text"), "--amp": ("amp", "switch"),
    "--channels-last": ("channels_last", "switch"), "--step-ms": ("step_ms", "ms"),
}
#: flags taken from FILE together or not at all: a command that gives one of a group gives that group
FLAG_GROUPS = (("--model", "--step-ms", "--amp", "--channels-last"),)


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """Every setting of ``autotune run``, by its flag's name (``--n-trials``: ``n_trials``), defaults resolved.

    None where the setting has no value: no ``--timeout``, no ``--budget`` (then ``n_trials`` decides), ``device``
    None for cuda when a GPU is visible, else cpu. What the terminal shows (``--quiet``, ``--json``) is the
    reporter's, not the request's. Build one with :func:`resolve_request`.
    """

    dataset: str | None = None
    demo: bool = False
    space: str = DEFAULT_SPACE
    n_trials: int = DEFAULT_N_TRIALS
    timeout: float | None = None
    out: str = DEFAULT_OUT
    storage: str = "sqlite:///autotune.db"
    study_name: str | None = None
    resume: bool = False
    pipeline: str = DEFAULT_PIPELINE
    device: str | None = None
    batch_size: int | None = None
    tune_batch_size: bool = False
    seed: int | None = None
    budget: float | None = None
    window: float | None = None
    windows: int | None = None
    warmup_batches: int = 2
    trial_timeout: float = 180.0
    confirm_top: int | None = None
    confirm_repeats: int | None = None
    #: paired: the contenders re-measured side by side in one process, alternating windows; fresh: each in its own
    remeasure: str = "paired"
    cache: str = "warm"
    #: auto: build the next trial while one measures on a CUDA device (autotune.trials.ahead); on; off
    build_ahead: str = "auto"
    sampler: str = "tpe"
    pruner: str = "median"
    no_baselines: bool = False
    host_budget: float | None = None
    gpu_budget: float | None = None
    reserve_gpu_mem: float = 0.0
    shm_budget: float | None = None
    warm_start: str | None = None
    if_stale: str | None = None
    reuse: bool = False
    max_age: float | None = None
    gpus: int | None = None
    model: str | None = None
    amp: bool = False
    channels_last: bool = False
    step_ms: float | None = None
    tolerance: float = 0.02
    no_report: bool = False
    reports_dir: str = "reports"
    #: when the command's process started (``time.monotonic``): the budget counts from there (None: from the run's start)
    started: float | None = None
    #: the setting flags taken from ``--if-stale FILE``, as FILE's ``study.retune_flags`` gave them
    recorded: tuple[str, ...] = ()
    #: whether ``--out`` (or ``--if-stale FILE``) named the YAML: only then may it replace a config for another dataset
    out_named: bool = False


#: the settings a request holds, by name
SETTINGS = frozenset(f.name for f in dataclasses.fields(RunRequest))


def resolve_request(asked: Mapping[str, Any]) -> RunRequest:
    """The request for the settings ``asked`` (setting -> value, None or absent where not given): FILE's recorded
    flags under ``--if-stale FILE``, then the defaults, each checked before any work.

    Raises:
        UserError: a setting no run can take (a budget under 10 s, an unknown pipeline, a study name that is not
            UTF-8), or a FILE whose recorded flags or dataset are not usable here.
    """
    unknown = sorted(set(asked) - SETTINGS)
    if unknown:
        raise UserError(f"{', '.join(unknown)} {'is no setting' if len(unknown) == 1 else 'are no settings'} of 'autotune run'")
    values = {k: v for k, v in asked.items() if v is not None}
    if_stale = values.get("if_stale")
    # FILE re-tuned as it was tuned: an eval config stays one, a config for 8 ranks is not re-tuned for 1
    taken = _take_recorded_flags(values, if_stale) if if_stale and Path(if_stale).is_file() else []
    values.setdefault("pipeline", DEFAULT_PIPELINE)
    values.setdefault("space", DEFAULT_SPACE)
    values["budget"] = _checked_budget(default_budget(values))
    from autotune.loaders.presets import get_preset

    get_preset(values["pipeline"])  # unknown pipeline: fail before any work
    if values.get("study_name"):
        try:
            values["study_name"].encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (or a C locale's): SQLAlchemy's traceback, and an empty report folder
            raise UserError(f"--study-name {printable(values['study_name'])} is not UTF-8 text; pass a name of letters, digits, '-' and '_'") from None
    # --if-stale FILE re-tunes FILE: written elsewhere, FILE would stay stale and re-tune every night
    values["out_named"] = bool(values.get("out_named") or "out" in values or if_stale)
    values.setdefault("out", if_stale or DEFAULT_OUT)
    if values.get("dataset") is not None and not values["dataset"].strip():  # an unset $DATA: not the current folder, not FILE's folder
        raise DatasetError("--dataset is empty; pass the image folder (one sub-folder per class)")
    if if_stale and values.get("dataset") is None and not values.get("demo"):  # found now, not on the night the file goes stale
        from autotune.config.staleness import recorded_dataset

        values["dataset"] = recorded_dataset(if_stale)
    values.setdefault("n_trials", DEFAULT_N_TRIALS if values["budget"] is None else BUDGET_MAX_TRIALS)  # with a budget, time decides when to stop
    return RunRequest(**values, recorded=tuple(taken))


def default_budget(asked: Mapping[str, Any]) -> float | None:
    """The run's time budget: ``--budget``, or a default when neither ``--n-trials`` nor ``--timeout`` says otherwise."""
    if asked.get("budget") is not None:
        return float(asked["budget"])
    if asked.get("n_trials") is not None or asked.get("timeout") is not None:
        return None
    return DEFAULT_MODEL_BUDGET_S if (asked.get("model") or asked.get("step_ms")) else DEFAULT_BUDGET_S


def _checked_budget(budget: float | None) -> float | None:
    from autotune.study.budget import MIN_BUDGET_S

    if budget is not None and budget < MIN_BUDGET_S:
        raise UserError(f"--budget {budget:g} is too short to measure anything; pass --budget {MIN_BUDGET_S:.0f} or more")
    if budget is not None and budget > MAX_BUDGET_S:  # a typo's extra digits: no run needs more than a day
        raise UserError(f"--budget {budget:g} is more than a day; pass --budget {MAX_BUDGET_S:.0f} or less (a few minutes usually settle it)")
    return budget


def retune_flags(request: RunRequest) -> list[str]:
    """The setting flags this run was given (the YAML's ``study.retune_flags``); a space file by its absolute path."""
    out: list[str] = []
    for flag, (name, kind) in SETTING_FLAGS.items():
        value = getattr(request, name)
        if value is None or value is False or (flag, value) in (("--pipeline", DEFAULT_PIPELINE), ("--space", DEFAULT_SPACE)):
            continue
        if kind == "switch":
            out.append(flag)
            continue
        if name == "space" and Path(value).is_file():  # a cron job re-tunes from another folder
            value = os.path.abspath(value)
        out += [flag, (f"{value:g}" if float(f"{value:g}") == value else repr(value)) if kind == "ms" else str(value)]
    return out


def _recorded_value(flag: str, kind: str, text: str) -> Any:
    """A value of FILE's ``study.retune_flags`` as the flag's own type would take it; ValueError when it would not."""
    if kind == "count":
        n = int(text)
        if n < 1:
            raise ValueError(text)
        return n
    if kind == "ms":
        v = float(text)
        if not (math.isfinite(v) and v > 0):
            raise ValueError(text)
        return v
    if not text.strip():
        raise ValueError(text)
    return text


def recorded_flags(path: str) -> dict[str, Any]:
    """FILE's ``study.retune_flags`` as flag -> value (True for a switch), each checked as its flag checks it."""
    from autotune.config.files import read_yaml

    where = f"--if-stale {printable(str(path))}"
    flags = Config.from_dict(read_yaml(path, "config"), path=str(path)).retune_flags()
    recorded: dict[str, Any] = {}
    i = 0
    while i < len(flags):
        flag = flags[i]
        if flag not in SETTING_FLAGS:
            raise UserError(f"{where}: study.retune_flags holds {flag!r}, which is no setting flag of 'autotune run'; fix or remove study.retune_flags")
        kind = SETTING_FLAGS[flag][1]
        if kind == "switch":
            recorded[flag], i = True, i + 1
            continue
        try:
            recorded[flag], i = _recorded_value(flag, kind, flags[i + 1]), i + 2
        except (IndexError, ValueError):
            raise UserError(f"{where}: study.retune_flags gives {flag} no valid value; fix or remove study.retune_flags") from None
    return recorded


def _take_recorded_flags(values: dict[str, Any], path: str) -> list[str]:
    """``--if-stale FILE``: into ``values``, FILE's setting flags (its pipeline, space, ranks, model) where the
    settings give none of their group; a place this machine lacks (GPUs) is left out, and said. Returns the flags
    taken."""
    recorded = recorded_flags(path)
    given = {flag for flag, (name, _) in SETTING_FLAGS.items() if values.get(name) not in (None, False)}
    for group in FLAG_GROUPS:  # the command's own flags win, with their group: --step-ms over a recorded --model
        if given & set(group):
            for flag in group:
                recorded.pop(flag, None)
    for flag in given:
        recorded.pop(flag, None)
    gpus = fingerprint.collect().get("gpus") or 0
    lacking = []  # a place this machine lacks: FILE re-tuned for what it has (a cron job whose GPU died still runs)
    if str(recorded.get("--device", "")).startswith("cuda") and not gpus:
        lacking += ["--device", "--gpus"]
    device = str(values.get("device") or recorded.get("--device") or ("cuda" if gpus else "cpu"))
    if device.startswith("cuda") and recorded.get("--gpus", 0) > gpus:
        lacking.append("--gpus")
    shown = " ".join(f"{f} {recorded.pop(f)}" for f in dict.fromkeys(lacking) if f in recorded)
    if shown:
        logger.warning("%s was tuned with %s, which this machine (%d GPU%s) cannot run: re-tuned for what it has",
                       printable(str(path)), shown, gpus, "" if gpus == 1 else "s")
    space = recorded.get("--space")
    if space is not None and os.sep in space and not Path(space).is_file():
        raise UserError(f"--if-stale {printable(str(path))} was tuned with --space {printable(space)}, which is not here "
                        "(from its study.retune_flags); pass --space FILE")
    taken: list[str] = []
    for flag, value in recorded.items():
        values[SETTING_FLAGS[flag][0]] = value
        taken += [flag] if value is True else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return taken
