"""``autotune.tune``: ``autotune run`` from Python, with typed keyword arguments and no command line.

Imported by ``import autotune``: it stays light (the run's modules, optuna and torch load on the first call).
"""

from __future__ import annotations

import logging
import math
import numbers
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autotune.errors import UserError, expect

if TYPE_CHECKING:
    from autotune.config.schema import Config
    from autotune.tuning.reporter import Reporter


def tune(
    dataset: str | os.PathLike[str] | Any = None,
    *,
    demo: bool = False,
    batch_size: int | None = None,
    tune_batch_size: bool = False,
    device: str | None = None,
    budget_s: float | None = None,
    n_trials: int | None = None,
    timeout_s: float | None = None,
    out: str | os.PathLike[str] | None = None,
    space: str | os.PathLike[str] = "default",
    pipeline: str = "imagenet-train",
    gpus: int | None = None,
    storage: str = "sqlite:///autotune.db",
    study_name: str | None = None,
    resume: bool = False,
    warm_start: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    model: str | None = None,
    step_ms: float | None = None,
    amp: bool = False,
    channels_last: bool = False,
    window_s: float | None = None,
    windows: int | None = None,
    warmup_batches: int = 2,
    confirm_top: int | None = None,
    confirm_repeats: int | None = None,
    remeasure: str = "paired",
    trial_timeout_s: float = 180.0,
    baselines: bool = True,
    report: bool = True,
    reports_dir: str | os.PathLike[str] = "reports",
    reporter: Reporter | None = None,
) -> Config:
    """Tune the data loader for ``dataset`` on this machine, write the winner's YAML to ``out``, and return it.

    What ``autotune run`` does, from Python: each trial builds a loader in a fresh process and measures the
    samples/s it delivers; the best configs are measured again, and the winner is written as YAML (with the
    study in ``storage`` and, with ``report``, ``reports_dir/<study>/``).

    ```python
    import autotune
    cfg = autotune.tune("/data/train", budget_s=60, out="autotune.yaml")
    loader = autotune.build_loader("/data/train", cfg)
    ```

    Each argument is the flag of ``autotune run`` with the same name (``budget_s``: ``--budget``,
    ``timeout_s``: ``--timeout``, ``window_s``: ``--window``, ``trial_timeout_s``: ``--trial-timeout``,
    ``baselines=False``: ``--no-baselines``, ``report=False``: ``--no-report``); see [Usage](usage.md).

    Args:
        dataset: the image folder, one sub-folder per class; or your own map-style torch Dataset, a zero-argument
            function that returns one (or an :class:`autotune.DatasetSpec`), or ``"FILE.py:FUNC"``: then ``batch_size``
            is required, and the DataLoader's worker knobs are tuned over it.
        demo: tune on the demo set instead (2,000 JPEGs, made once in the cache folder).
        batch_size: fix the batch size instead of tuning it.
        tune_batch_size: your own Dataset: tune the batch size too (half, once and twice ``batch_size``).
        device: where batches are delivered, ``cuda``, ``cuda:N`` or ``cpu``; None: cuda when a GPU is visible.
        budget_s: seconds from the call to the YAML, 10 or more; None: 60 (120 with a model), or none when
            ``n_trials`` or ``timeout_s`` is given.
        n_trials: measured trials to run (under a budget: at most).
        timeout_s: stop sampling new trials after this many seconds.
        out: where the YAML goes; None: ``autotune.yaml``, which is not replaced where it holds another dataset's
            config (name it here to replace it).
        space: a search space YAML, or a shipped name: ``default``, ``torch``, ``dali``, ``cpu``.
        pipeline: the preset: ``imagenet-train`` or ``imagenet-eval``.
        gpus: ranks measured at once, one loader per GPU; None: every visible GPU (1 on the CPU).
        storage: the Optuna storage URL (or a journal file) that keeps the study.
        study_name: None: ``<dataset>-<key>-<time>``, the key a hash of this machine, the data and the settings.
        resume: continue ``study_name`` (or the latest study for this machine and dataset).
        warm_start: an earlier YAML whose winner and its neighbours are measured first.
        seed: for the sampler and the loaders.
        model: score training steps of this torchvision model (random weights), e.g. ``resnet50``.
        step_ms: or simulate a model that takes this many milliseconds per step.
        amp: with ``model``, bf16 autocast on the GPU.
        channels_last: with ``model``, the channels_last memory format.
        window_s: seconds per timed window; None: 1.0, or planned from the budget.
        windows: timed windows per trial, whose median is its score; None: 5, or planned from the budget.
        warmup_batches: untimed batches after the first.
        confirm_top: re-measure this many of the best configs before choosing (0 or 1: none); None: 3, or planned.
        confirm_repeats: re-measurements of each; None: 2, or planned from the budget.
        remeasure: ``"paired"``: the best side by side in one process (a kept one of their kind, else fresh); ``"fresh"``: each alone.
        trial_timeout_s: the wall-clock limit of one trial.
        baselines: measure the torch DataLoader defaults and the common settings first (the speedup's base).
        report: write the HTML report to ``reports_dir/<study>/``.
        reports_dir: where reports and the trials' logs go.
        reporter: what the run tells as it goes; None: log records of ``autotune.tuning`` (the account at INFO,
            the warnings at WARNING).

    Returns:
        The written :class:`Config`, as :func:`load_config` reads it.

    Raises:
        UserError: bad input, one line naming the setting by its argument here (not by the command line's flag); exit
            code 1 when no trial completed, with its cause.
        KeyboardInterrupt: Ctrl-C; after the first completed trial, the best config so far is written first.
    """
    given = dict(locals())  # the arguments, by name: nothing else is bound yet
    return _in_python_terms(lambda: _tune(_asked({k: v for k, v in given.items() if k != "reporter"}), reporter))


def _in_python_terms(call: Callable[[], Config]) -> Config:
    """``call()``; its :class:`UserError` said with :func:`tune`'s arguments where it named ``autotune run``'s flags."""
    try:
        return call()
    except UserError as e:
        said = in_python_terms(str(e))
        if said == str(e):
            raise
        raise type(e)(said, exit_code=e.exit_code) from None


def in_python_terms(message: str) -> str:
    """``message`` with each ``autotune run`` flag that :func:`tune` takes as an argument named as that argument:
    ``--batch-size`` as ``batch_size``, ``--no-report`` as ``report=False``, ``--demo`` as ``demo=True``. A command
    quoted in it (``'autotune run --dataset DIR'``) stays as it is: it is one to type in a shell."""
    import re

    words: dict[str, str] = {}
    valued: set[str] = set()
    for argument, (setting, check) in _ARGUMENTS.items():
        flag = f"--{setting.replace('_', '-')}"
        words[flag] = f"{argument}=False" if check is _unless else f"{argument}=True" if check is _switch else argument
        if check not in (_unless, _switch):
            valued.add(flag)

    def said(m: re.Match[str]) -> str:
        flag, space, token = m.group(1), m.group(2) or "", m.group(3)
        if flag not in words:
            return m.group(0)
        # the value, without what closes the sentence or the bracket around it: "(--storage URL);", "--budget 5:"
        value, tail = re.fullmatch(r"(.*?)((?:'s)?[)\]:!?.,;'\"]*)", token or "").groups()  # type: ignore[union-attr]  # always matches
        if flag not in valued or not value or not re.search(r"[./0-9]|^[A-Z]+$", value):  # "--out another file"
            return words[flag] + space + (token or "")
        if re.fullmatch(r"[0-9.]+|[A-Z]+", value):  # a number, or a placeholder such as N
            return f"{words[flag]}={value}{tail}"
        return f"{words[flag]}={value!r}{tail}"  # --out autotune.yaml: out='autotune.yaml'

    parts = re.split(r"('[^']*')", message)  # the quoted parts (odd indices) are left alone
    # a flag, and the word after it unless that is another flag; said() takes its value out of that word
    flag_and_value = r"(--[a-z][a-z-]*)(?:(\s+)(?!--)(\S+))?"
    return "".join(p if i % 2 else re.sub(flag_and_value, said, p) for i, p in enumerate(parts))


def _tune(asked: dict[str, Any], reporter: Reporter | None) -> Config:
    import optuna

    from autotune.config.files import load_config
    from autotune.tuning.reporter import LoggingReporter
    from autotune.tuning.request import resolve_request
    from autotune.tuning.run import run

    # Optuna's own lines ("A new study created ...") only where autotune's diagnostics are on; as the caller had it after
    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO if logging.getLogger("autotune").isEnabledFor(logging.INFO) else optuna.logging.WARNING)
    try:
        summary = run(resolve_request(asked), reporter if reporter is not None else LoggingReporter())
    finally:
        optuna.logging.set_verbosity(verbosity)
    if summary.get("interrupted"):  # the best config so far is written: the stop still ends the caller's work
        raise KeyboardInterrupt(f"wrote the best config so far to {summary['config_path']}; continue with resume=True")
    return load_config(summary["config_path"])


def _asked(given: dict[str, Any]) -> dict[str, Any]:
    """The run's settings (by the request's names) from :func:`tune`'s arguments, each checked: one line naming it."""
    if given["dataset"] is not None and given["demo"]:
        raise UserError("pass a dataset or demo=True, not both")
    if given["dataset"] is None and not given["demo"]:
        raise UserError("no dataset given; pass the image folder (one sub-folder per class) or demo=True")
    asked = {}
    if given["dataset"] is not None and not isinstance(given["dataset"], (str, os.PathLike)):
        if given.get("batch_size") is None:  # said here: past this point the dataset is a module the trials import
            raise UserError(f"the {type(given['dataset']).__name__} given is your own Dataset: pass its batch_size (the one training uses)")
        given = {**given, "dataset": _user_target(given["dataset"])}
    for name, value in given.items():
        if name == "out" and value is None:  # the usual file, not named: another dataset's config in it is kept
            continue
        setting, check = _ARGUMENTS[name]
        asked[setting] = check(value, name)
    return asked


def _user_target(value: Any) -> str:
    """Your own Dataset as the ``FILE.py:FUNC`` the trials import: a module-level function by its name; a Dataset object
    or another callable pickled beside a small module that loads it (the trials are other processes)."""
    import hashlib
    import pickle
    import sys
    import tempfile

    module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", "")
    if callable(value) and not hasattr(value, "__getitem__") and module and qualname and "<" not in qualname:
        if module != "__main__":
            return f"{module}:{qualname}"
        main_file = getattr(sys.modules["__main__"], "__file__", None)
        if main_file:
            return f"{os.path.abspath(main_file)}:{qualname}"
    try:
        data = pickle.dumps(value() if callable(value) and not hasattr(value, "__getitem__") else value)
    except Exception as e:  # noqa: BLE001 - any failure to pickle: the trials cannot get it
        raise UserError(f"the dataset does not pickle ({type(e).__name__}: {e}), so the trials cannot load it; pass a module-level function "
                        "that returns it, or 'FILE.py:FUNC'") from None
    folder = Path(tempfile.gettempdir()) / "autotune-datasets"
    folder.mkdir(exist_ok=True)
    digest = hashlib.sha256(data).hexdigest()[:16]
    pkl, py = folder / f"dataset_{digest}.pkl", folder / f"dataset_{digest}.py"
    pkl.write_bytes(data)
    py.write_text(f"import pickle\n\n\ndef dataset():\n    with open({str(pkl)!r}, 'rb') as f:\n        return pickle.load(f)\n")
    return f"{py}:dataset"


def _path(value: Any, name: str) -> str | None:
    if value is None:
        return None
    expect(value, name, (str, os.PathLike), "a path")
    return os.fspath(value)


def _text(value: Any, name: str) -> str | None:
    if value is not None:
        expect(value, name, str, "text")
    return value


def _switch(value: Any, name: str) -> bool:
    expect(value, name, bool, "True or False")
    return bool(value)


def _count(value: Any, name: str, least: int = 1, most: int | None = None) -> int | None:
    if value is None:
        return None
    expect(value, name, numbers.Integral, f"a whole number of {least} or more")
    if value < least or (most is not None and value > most):
        raise UserError(f"{name} must be a whole number of {least} or more" + (f" and {most} or less" if most is not None else "") + f", but got {value}")
    return int(value)


def _seconds(value: Any, name: str) -> float | None:
    if value is None:
        return None
    expect(value, name, numbers.Real, "a number")
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{name} must be a finite number greater than 0, but got {value}")
    return float(value)


def _count0(value: Any, name: str) -> int | None:
    return _count(value, name, least=0)


def _seed(value: Any, name: str) -> int | None:
    return _count(value, name, least=0, most=2**32 - 1)


def _unless(value: Any, name: str) -> bool:
    """A switch that turns a flag off: ``report=False`` is ``--no-report``."""
    return not _switch(value, name)


#: each argument of :func:`tune`: the run's setting it gives (``autotune run``'s flag by its name) and its check
_ARGUMENTS: dict[str, tuple[str, Callable[[Any, str], Any]]] = {
    "dataset": ("dataset", _path), "demo": ("demo", _switch), "batch_size": ("batch_size", _count), "device": ("device", _text),
    "tune_batch_size": ("tune_batch_size", _switch),
    "budget_s": ("budget", _seconds), "n_trials": ("n_trials", _count), "timeout_s": ("timeout", _seconds), "out": ("out", _path),
    "space": ("space", _path), "pipeline": ("pipeline", _text), "gpus": ("gpus", _count), "storage": ("storage", _text),
    "study_name": ("study_name", _text), "resume": ("resume", _switch), "warm_start": ("warm_start", _path), "seed": ("seed", _seed),
    "model": ("model", _text), "step_ms": ("step_ms", _seconds), "amp": ("amp", _switch), "channels_last": ("channels_last", _switch),
    "window_s": ("window", _seconds), "windows": ("windows", _count), "warmup_batches": ("warmup_batches", _count0),
    "confirm_top": ("confirm_top", _count0), "confirm_repeats": ("confirm_repeats", _count0), "remeasure": ("remeasure", _text),
    "trial_timeout_s": ("trial_timeout", _seconds),
    "baselines": ("no_baselines", _unless), "report": ("no_report", _unless), "reports_dir": ("reports_dir", _path),
}
