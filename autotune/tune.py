"""What ``autotune run`` does, hop by hop: resolve settings, open the study, tune, confirm, write YAML and report.

Kept apart from the argument parser so that tests and scripts can call :func:`tune` with a namespace.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import logging
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import optuna

from autotune.config import fingerprint
from autotune.config.files import folder_problem, foreign_problem, save_config, write_problem
from autotune.config.schema import DEVICE_RE, Config
from autotune.dataset.paths import printable, safe_name
from autotune.dataset.scan import scan
from autotune.errors import DatasetError, UserError, interrupt_detail, interrupt_exit_code, interrupt_said, with_detail
from autotune.loaders.presets import get_preset
from autotune.loaders.shards import drop_problem
from autotune.outcomes import Outcome
from autotune.study.budget import MIN_BUDGET_S, WRITE_RESERVE_S, Plan, TimeBudget, plan
from autotune.study.evidence import contenders
from autotune.study.fleet import previous_best, reuse, studies_for
from autotune.study.result import config_from_study, mark_written, no_completion_message
from autotune.study.space import SearchSpace, load_space
from autotune.study.storage import (
    absolute_url,
    closing_storages,
    is_storage_error,
    journal_file,
    mask_log_secrets,
    mask_url,
    sqlite_file,
    storage_failure,
    storage_problem,
)
from autotune.study.tuner import Tuner, TuneSettings
from autotune.trials.guard import OtherLoad, cores_taken, too_busy
from autotune.trials.logs import trial_log
from autotune.trials.runner import deferred_signals
from autotune.trials.zygote import Zygote

logger = logging.getLogger(__name__)

#: what `autotune run` spends with no --n-trials, --timeout or --budget: seconds from the command's start to the YAML
DEFAULT_BUDGET_S = 60.0
#: the same with a model in the loop (--model or --step-ms): each trial also starts the model
DEFAULT_MODEL_BUDGET_S = 120.0
#: study attribute: the latest run was stopped by Ctrl-C or SIGTERM (--resume continues it)
INTERRUPTED = "interrupted"
#: study attribute: the winner was chosen but the YAML could not be written; --resume writes it without tuning
UNWRITTEN = "config_unwritten"
#: the longest --budget taken: a day (a run settles in minutes; more is a typo's extra digits)
MAX_BUDGET_S = 86_400.0
#: the trial cap under --budget without --n-trials: the budget stops the study long before it
BUDGET_MAX_TRIALS = 500



def budget_header(budget: TimeBudget) -> str:
    """The first line's account of the budget; setup that already took it all says so (not "-11 s left")."""
    left = budget.remaining()
    if left > 0:
        return f"trials until the {budget.total_s:.0f} s budget ({left:.0f} s left)"
    return f"the {budget.total_s:.0f} s budget went on setting up ({budget.elapsed():.0f} s): one trial, then the YAML"


def short_run_warnings(cfg: Config, space: SearchSpace, budget: TimeBudget | None, study: optuna.Study | None = None,
                       elapsed: float | None = None) -> list[str]:
    """What a run too short for this machine left out, each with its fix (printed after the summary). ``elapsed``:
    the run's time as the summary states it (default: now)."""
    out = []
    if budget is not None and elapsed is None:
        elapsed = budget.elapsed()
    longer = f"--budget {max(60, int(2 * elapsed) // 10 * 10)}" if budget is not None else "a larger --n-trials"
    if budget is not None and elapsed > budget.total_s + 5:
        out.append(f"the run took {elapsed:.0f} s, over its {budget.total_s:.0f} s budget (setting up alone took "
                   f"{budget.spent.get('setup', 0.0):.0f} s on this machine); pass {longer}")
    if "torch" in space.backends() and cfg.loader.backend.value != "torch" and not cfg.torch_fallback:
        ran = [t for t in study.get_trials(deepcopy=False) if t.state.is_finished() and (t.user_attrs.get("loader") or {}).get("backend") == "torch"
               and t.user_attrs.get("outcome") != Outcome.INTERRUPTED.value] if study else []  # one cut by the budget's end did not run
        if not ran:  # torch trials that ran and failed have their own cause, in the report: a longer budget is no fix
            out.append(f"no torch DataLoader was measured in this run, so cfg.dataloader_kwargs() has nothing to give "
                       f"(autotune.build_loader works); for both, pass {longer}")
    ran_out = f"the {budget.total_s:.0f} s budget left too little time to measure" if budget is not None else "the trials ended before measuring"
    unmeasured: list[tuple[str, str, str]] = []
    every = study.get_trials(deepcopy=False) if study is not None else []
    dali_measured = any(t.state == optuna.trial.TrialState.COMPLETE and (t.user_attrs.get("loader") or {}).get("backend") == "dali" for t in every)
    for role, figure, name, lost in BASELINE_WARNINGS:
        if study is None or (cfg.result or {}).get(figure):
            continue
        if role == "dali-heuristic" and dali_measured:
            continue  # DALI was measured in another config: the choice saw it
        trials = [t for t in every if t.user_attrs.get("role") == role]
        # queued and never run, or cut by the budget's end (one that failed otherwise says why in the report); a
        # first trial that met an undecodable file is measured again without it, if the budget leaves the time
        unrun = [t for t in trials if not t.state.is_finished() or t.user_attrs.get("outcome") == Outcome.INTERRUPTED.value]
        bad = [t for t in trials if t.user_attrs.get("outcome") == Outcome.BAD_DATA.value]
        if unrun and len(unrun) + len(bad) == len(trials):
            unmeasured.append((role, name + (" again without the undecodable file its first trial met" if bad else ""), lost))
    if unmeasured:  # one line for them all: each has the same fix
        roles = [r for r, _, _ in unmeasured]
        lost = unmeasured[0][2] if len(unmeasured) == 1 else ("there is no speedup over them" if "defaults" in roles else "the winner was not compared with them")
        out.append(f"{ran_out} {' or '.join(n for _, n, _ in unmeasured)}, so {lost}; pass {longer}")
    return out


#: the baselines whose absence the end of a run names: (role, result figure, name, what is missing without it)
BASELINE_WARNINGS = (
    ("defaults", "defaults_samples_per_s", "the torch DataLoader defaults", "there is no speedup over them"),
    ("heuristic", "heuristic_samples_per_s", "the common torch settings (num_workers = cores)", "the winner was not compared with them"),
    ("dali-heuristic", "dali_heuristic_samples_per_s", "DALI's usual start", "the winner was not compared with it"),
)


def busy_warnings(load: dict[str, Any] | None) -> list[str]:
    """A warning when other processes took a fair share of the cores the run may use (study attr ``other_load``)."""
    if not too_busy(load):
        return []
    assert load is not None
    of = int(load.get("cpus") or load["usable_cores"])
    quota = f", {cores_taken(load):.1f} of the {float(load['usable_cores']):g} it may use" if of != load["usable_cores"] else ""
    return [f"other processes kept about {float(load['cores']):.1f} of the {of} cores busy during the run{quota}: "
            "every figure, the speedups above all, moved with them; tune again when the machine is idle"]


def _keep_busier(study: optuna.Study, load: dict[str, Any] | None) -> None:
    """Store this run's ``other_load``; a resumed study keeps the busier of its runs (its trials saw both)."""
    if load is None:
        return
    before = study.user_attrs.get("other_load")
    if isinstance(before, dict) and cores_taken(before) > cores_taken(load):
        return
    study.set_user_attr("other_load", load)


def _default_device(fp: dict[str, Any]) -> str:
    return "cuda" if fp.get("gpus") else "cpu"


def _study_key(fp: dict[str, Any], dataset_sig: str, pipeline: str, space: str, ranks: int, model: str | None, device: str = "cpu") -> str:
    """What makes two studies comparable: the machine, the data, the pipeline, the space, the ranks, the model, the
    kind of device (a study measured on the CPU says nothing of GPU delivery on the same machine)."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    return fingerprint.key(fp, f"{dataset_sig}|{pipeline}|{space}|{ranks}|{model or ''}" + ("|cuda" if kind == "cuda" else ""))


def settings_from_args(args: argparse.Namespace, fp: dict[str, Any], device: str) -> TuneSettings:
    from autotune.trials import guard

    ranks = args.gpus if args.gpus is not None else (max(1, fp.get("gpus") or 1) if device.startswith("cuda") else 1)
    if device.startswith("cuda") and ranks > (fp.get("gpus") or 0):
        raise UserError(f"--gpus {ranks} asks for more GPUs than the {fp.get('gpus') or 0} visible here; pass --gpus {fp.get('gpus') or 1} or fewer")
    cores = fingerprint.usable_cpus()
    if not device.startswith("cuda") and ranks > cores:  # CPU ranks (a gloo job) measured as they would run: slowly
        logger.warning("--gpus %d on the CPU measures %d rank processes on %d usable cores, as a gloo job of that size would run; "
                       "for a GPU node, tune there (or pass --device cuda)", ranks, ranks, cores)
    if (getattr(args, "amp", False) or getattr(args, "channels_last", False)) and not args.model and not args.step_ms:  # ModelSpec: --step-ms
        raise UserError("--amp and --channels-last apply to the model's steps; add --model NAME (e.g. resnet50), or drop them")
    model = None
    if args.model or args.step_ms:
        from autotune.trials.model import ModelSpec

        model = ModelSpec.from_args(args)
    budgets = guard.default_budgets(host_mib=args.host_budget, gpu_mib=args.gpu_budget, reserve_gpu_mib=args.reserve_gpu_mem, shm_mib=args.shm_budget, device=device)
    budget_s = getattr(args, "budget", None)
    if budget_s is not None:
        m = plan(budget_s, window_s=args.window, windows=args.windows, confirm_top=args.confirm_top, confirm_repeats=args.confirm_repeats)
    else:
        m = Plan(args.window if args.window is not None else 1.0, args.windows if args.windows is not None else 5,
                 args.confirm_top if args.confirm_top is not None else 3, args.confirm_repeats if args.confirm_repeats is not None else 2)
    trial_timeout = args.trial_timeout if budget_s is None else min(args.trial_timeout, max(15.0, budget_s / 2))
    if m.window_s * m.windows >= trial_timeout:  # every trial would run out of time measuring
        limit = "--trial-timeout" if budget_s is None or trial_timeout == args.trial_timeout else f"set by the {budget_s:g} s --budget"
        raise UserError(f"--window {m.window_s:g} s x {m.windows} windows is {m.window_s * m.windows:g} s of measuring per trial, "
                        f"more than the {trial_timeout:g} s a trial may take ({limit}); pass a shorter --window or fewer --windows")
    return TuneSettings(
        pipeline=args.pipeline, device=device, n_trials=args.n_trials, timeout=args.timeout, seed=args.seed,
        warmup_batches=args.warmup_batches, window_s=m.window_s, windows=m.windows, trial_timeout=trial_timeout,
        confirm_top=m.confirm_top, confirm_repeats=m.confirm_repeats, sampler=args.sampler, pruner=args.pruner,
        baselines=not args.no_baselines, cores=max(1, fp["cpus"] // ranks), cache=args.cache, ranks=ranks, budgets=budgets, model=model,
        planned=frozenset(k for k, given in (("window_s", args.window), ("windows", args.windows)) if given is None),
    )


class _Silent:
    """The progress hooks :func:`tune` calls (the CLI passes ``autotune.cli._output.Reporter``): here, none."""

    def start(self, trials: int, remeasurements: int, settings: TuneSettings | None = None, done: int = 0, budget_s: float | None = None,
              best: float | None = None) -> None: ...
    def __call__(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None: ...
    def remeasure(self, k: int, n: int, trial: optuna.trial.FrozenTrial, result: Any) -> None: ...
    def note(self, text: str) -> None: ...
    def stop(self) -> None: ...


def _fit_batch_sizes(space, samples_per_rank: int, drop_last: bool, ranks: int = 1):
    """Leave out batch sizes that give no full batch (train presets drop the last partial one)."""
    p = space["batch_size"]
    if not drop_last or p.kind != "choices":
        return space
    fitting = tuple(b for b in p.choices if b <= samples_per_rank)
    if not fitting:
        fix = "pass fewer --gpus, a smaller --batch-size, or use more images" if ranks > 1 else "pass a smaller --batch-size or use more images"
        raise UserError(f"every batch size in the space ({', '.join(map(str, p.choices))}) is larger than the {samples_per_rank} images per rank"
                        + (f" (the images split over {ranks} ranks)" if ranks > 1 else "") + f"; {fix}")
    if len(fitting) < len(p.choices):
        logger.warning("leaving out batch sizes larger than the dataset's %d images: %s", samples_per_rank, [b for b in p.choices if b not in fitting])
    return space.restrict("batch_size", fitting)


def tune(args: argparse.Namespace, progress: Any = None) -> dict[str, Any]:
    """Run ``autotune run``; returns the summary (printed with ``--json``). Raises :class:`UserError` on bad input.

    ``progress`` gets the run's events (``start``, Optuna's callback per trial, ``remeasure``, ``note``, ``stop``);
    the CLI passes its reporter, and None prints nothing. Every storage it opens is closed when it returns, so
    scripts can call it again and again.
    """
    args.written = None  # the YAML's path once it is whole
    try:
        with closing_storages(), contextlib.ExitStack() as early:
            return _tune(args, progress or _Silent(), early)
    except UserError:
        raise
    except KeyboardInterrupt as e:  # before the study began (the scan, the set-up): nothing to keep, and the line says so
        if not interrupt_detail(e):
            written = getattr(args, "written", None)
            with_detail(e, f"wrote {written}" if written else "stopped before any trial completed; no config was written")
        raise
    except Exception as e:  # the database failed (a full disk mid-run): one line; the trials stored so far stay
        if is_storage_error(e):
            raise storage_failure(args.storage, e) from None
        raise


def _launch_zygote(early: contextlib.ExitStack) -> tuple[Zygote | None, str]:
    """The process trials are forked from, started now so that it imports torch while the dataset is scanned; its
    output goes to a temporary log until the study's log folder is known. ``early`` closes it at the end unless
    a tuner has taken it over (closing twice is harmless)."""
    fd, log = tempfile.mkstemp(prefix="autotune-zygote-", suffix=".log")
    os.close(fd)
    early.callback(lambda: Path(log).unlink(missing_ok=True))
    zygote = Zygote.launch(log=log)
    if zygote is not None:
        early.callback(zygote.close)
    return zygote, log


#: the flags that make a study what it is beyond its dataset: flag -> (the argument, its kind); not given, each is
#: None (False for a switch): ``--pipeline`` and ``--space`` take their defaults after ``--if-stale`` had its say
SETTING_FLAGS: dict[str, tuple[str, str]] = {
    "--pipeline": ("pipeline", "text"), "--space": ("space", "text"), "--device": ("device", "text"), "--gpus": ("gpus", "count"),
    "--batch-size": ("batch_size", "count"), "--model": ("model", "text"), "--amp": ("amp", "switch"),
    "--channels-last": ("channels_last", "switch"), "--step-ms": ("step_ms", "ms"),
}
#: flags taken from FILE together or not at all: a command that gives one of a group gives that group
FLAG_GROUPS = (("--model", "--step-ms", "--amp", "--channels-last"),)
DEFAULT_PIPELINE, DEFAULT_SPACE = "imagenet-train", "default"


def retune_flags(args: argparse.Namespace) -> list[str]:
    """The setting flags this run was given (the YAML's ``study.retune_flags``); a space file by its absolute path."""
    out: list[str] = []
    for flag, (dest, kind) in SETTING_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None or value is False or (flag, value) in (("--pipeline", DEFAULT_PIPELINE), ("--space", DEFAULT_SPACE)):
            continue
        if kind == "switch":
            out.append(flag)
            continue
        if dest == "space" and Path(value).is_file():  # a cron job re-tunes from another folder
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


def _take_recorded_flags(args: argparse.Namespace) -> list[str]:
    """``--if-stale FILE``: FILE's setting flags (its pipeline, space, ranks, model) where this command gives none of
    their group; a place this machine lacks (GPUs) is left out, and said. Returns the flags taken."""
    from autotune.config.files import read_yaml

    where = f"--if-stale {printable(str(args.if_stale))}"
    flags = Config.from_dict(read_yaml(args.if_stale, "config"), path=str(args.if_stale)).retune_flags()
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
    given = {flag for flag, (dest, _) in SETTING_FLAGS.items() if getattr(args, dest, None) not in (None, False)}
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
    device = str(args.device or recorded.get("--device") or ("cuda" if gpus else "cpu"))
    if device.startswith("cuda") and recorded.get("--gpus", 0) > gpus:
        lacking.append("--gpus")
    shown = " ".join(f"{f} {recorded.pop(f)}" for f in dict.fromkeys(lacking) if f in recorded)
    if shown:
        logger.warning("%s was tuned with %s, which this machine (%d GPU%s) cannot run: re-tuned for what it has", printable(str(args.if_stale)), shown, gpus, "" if gpus == 1 else "s")
    space = recorded.get("--space")
    if space is not None and os.sep in space and not Path(space).is_file():
        raise UserError(f"{where} was tuned with --space {printable(space)}, which is not here (from its study.retune_flags); pass --space FILE")
    taken: list[str] = []
    for flag, value in recorded.items():
        setattr(args, SETTING_FLAGS[flag][0], value)
        taken += [flag] if value is True else [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return taken


def default_budget(args: argparse.Namespace) -> float | None:
    """The run's time budget: ``--budget``, or a default when neither ``--n-trials`` nor ``--timeout`` says otherwise."""
    if getattr(args, "budget", None) is not None:
        return float(args.budget)
    if args.n_trials is not None or args.timeout is not None:
        return None
    return DEFAULT_MODEL_BUDGET_S if (args.model or getattr(args, "step_ms", None)) else DEFAULT_BUDGET_S


def _checked_outputs(args: argparse.Namespace) -> Path:
    """``--out`` as a path, once it, ``--storage`` and ``--reports-dir`` are known to be writable: before the study
    and the set-up, not after them. Raises :class:`UserError` naming the flag."""
    if args.out == "-":  # the shell's "standard output": a file named '-' was written instead
        raise UserError("--out '-' would write a file named '-'; the config goes to a file (pass a name such as autotune.yaml), "
                        "and --json prints the run's summary on standard output")
    out_path = Path(args.out)
    store = sqlite_file(args.storage) or journal_file(args.storage)
    if store is not None and os.path.realpath(store) == os.path.realpath(out_path):  # the YAML would replace every study
        raise UserError(f"--out {str(out_path)!r} is the study storage (--storage {mask_url(args.storage)}); pass another file name such as autotune.yaml")
    # the text as given: 'configs/' names a folder, which Path() forgets
    problem = write_problem(args.out) or foreign_problem(out_path)
    if problem is not None:
        raise UserError(f"--out {str(args.out)!r} {problem}")
    problem = storage_problem(args.storage)  # the study's storage and the trial logs' folder: before the set-up too
    if problem is not None:
        raise UserError(f"--storage {mask_url(args.storage)} {problem}")
    problem = folder_problem(args.reports_dir)  # the trial logs go there from the first trial
    if problem is not None:
        raise UserError(f"--reports-dir {str(args.reports_dir)!r} {problem}")
    return out_path


def _write_report(args: argparse.Namespace, study: Any, out_path: Path, summary: dict[str, Any]) -> Path | None:
    """The run's report, after its YAML; its folder, or None where it was not written (a warning says why)."""
    if args.no_report:
        return None
    try:
        from autotune.report import write_report

        try:
            report_dir = write_report(study, args.storage, args.reports_dir)
        except KeyboardInterrupt as stop:  # the YAML is whole: say so, not only "terminated"
            raise with_detail(stop, f"wrote {out_path}; the report was not written ('autotune report' writes it)") from None
        summary["report"] = str(report_dir / "report.html")
        return report_dir
    except (ImportError, UserError) as e:
        logger.warning("no report written: %s", e)
    except OSError as e:  # a full disk, a folder that went away: the YAML is written, the report is not
        logger.warning("no report written: %s; the YAML is written, and 'autotune report' writes the report later", e.strerror or e)
    return None


def _print_result(cfg: Config, study: Any, out_path: Path, report_dir: Path | None, summary: dict[str, Any], budget: TimeBudget | None) -> None:
    """The run's last lines on stderr: the winner with the YAML's figures, what was set aside or repeated, where the
    YAML and the report went, the time the budget took, and the warnings."""
    r = cfg.result
    from autotune.report._render import fmt_rate, fmt_speedup

    # the YAML's figures as the YAML, show and the report write them (1.37x, not 1.4x beside a YAML's 1.37)
    line = f"best: {cfg.loader.describe()}: {fmt_rate(r['samples_per_s'])} samples/s"
    if r.get("speedup_vs_defaults"):
        line += f" ({fmt_speedup(r['speedup_vs_defaults'])} the defaults' {fmt_rate(r['defaults_samples_per_s'])})"
    if len(r.get("scores") or ()) > 1:  # the bar's "best" is a single trial's: say why this figure differs
        line += f"; the median of its {len(r['scores'])} measurements"
    if r.get("fraction_of_ceiling"):
        line += f", {r['fraction_of_ceiling']:.0%} of the model's ceiling ({r.get('model_ceiling_samples_per_s', 0):,.0f})"
    print(line, file=sys.stderr)
    aside = (study.user_attrs.get("confirmation") or {}).get("set_aside") or []
    if aside:  # the progress lines showed it: say why the winner's figure does not count it
        told = ", ".join(f"trial {a['trial']}'s {a['score']:,.0f}" for a in aside)
        print(f"the budget ended the re-measurement round part-way: {told} set aside, so that every candidate "
              "is judged on as many measurements", file=sys.stderr)
    repeats = (cfg.study or {}).get("repeats") or 0
    if repeats:  # the progress lines count measured trials: say where the missing trial numbers went
        print(f"{repeats} sampled {'config' if repeats == 1 else 'configs'} repeated one already measured and "
              f"{'was' if repeats == 1 else 'were'} not measured again", file=sys.stderr)
    print(f"wrote {out_path}" + (f" and {report_dir}/" if report_dir else ""), file=sys.stderr)
    if budget is not None:
        t = summary["time"]
        print(f"took {t['elapsed_s']:.0f} s of the {t['budget_s']:.0f} s budget: " + ", ".join(f"{k} {v:.0f} s" for k, v in t["spent_s"].items()), file=sys.stderr)
    for warning in summary["warnings"]:
        print(f"warning: {warning}", file=sys.stderr)


def _tune(args: argparse.Namespace, progress: Any, early: contextlib.ExitStack) -> dict[str, Any]:
    # FILE re-tuned as it was tuned: an eval config stays one, a config for 8 ranks is not re-tuned for 1
    taken = _take_recorded_flags(args) if args.if_stale and Path(args.if_stale).is_file() else []
    args.pipeline = args.pipeline or DEFAULT_PIPELINE
    args.space = args.space or DEFAULT_SPACE
    args.budget = default_budget(args)
    started = getattr(args, "started", None)  # the CLI's: when the command's process started
    budget = TimeBudget(args.budget, start=started) if args.budget is not None else None
    if budget is not None and budget.total_s < MIN_BUDGET_S:
        raise UserError(f"--budget {args.budget:g} is too short to measure anything; pass --budget {MIN_BUDGET_S:.0f} or more")
    if budget is not None and budget.total_s > MAX_BUDGET_S:  # a typo's extra digits: no run needs more than a day
        raise UserError(f"--budget {args.budget:g} is more than a day; pass --budget {MAX_BUDGET_S:.0f} or less (a few minutes usually settle it)")
    get_preset(args.pipeline)  # unknown pipeline: fail before any work
    if args.study_name:
        try:
            args.study_name.encode("utf-8")
        except UnicodeEncodeError:  # bytes that are not UTF-8 (or a C locale's): SQLAlchemy's traceback, and an empty report folder
            raise UserError(f"--study-name {printable(args.study_name)} is not UTF-8 text; pass a name of letters, digits, '-' and '_'") from None
    mask_log_secrets()  # a storage password never reaches the logs
    if args.out is None:  # --if-stale FILE re-tunes FILE: written elsewhere, FILE would stay stale and re-tune every night
        args.out = args.if_stale or "autotune.yaml"
    if args.dataset is not None and not args.dataset.strip():  # an unset $DATA: not the current folder, not FILE's folder
        raise DatasetError("--dataset is empty; pass the image folder (one sub-folder per class)")
    if args.if_stale and args.dataset is None and not args.demo:  # found now, not on the night the file goes stale
        from autotune.config.staleness import recorded_dataset

        args.dataset = recorded_dataset(args.if_stale)
    out_path = _checked_outputs(args)
    fp = fingerprint.collect()
    others = OtherLoad(usable=fp.get("cpus"))  # other jobs' CPU use over the run: on a busy machine the figures are not to be trusted

    if args.if_stale:
        from autotune.config.staleness import is_stale

        stale, reasons = is_stale(args.if_stale, fp, max_age_days=args.max_age, dataset=args.dataset)
        if not stale:
            if not args.quiet:
                print(f"{args.if_stale} still matches this machine: nothing to do", file=sys.stderr)
            return {"action": "none", "reason": "config matches this machine", "config": args.if_stale}
        if not args.quiet:
            print(f"{args.if_stale} is stale ({'; '.join(reasons)}): re-tuning" + (f" with its {' '.join(taken)}" if taken else ""), file=sys.stderr)
        if not args.warm_start and Path(args.if_stale).exists():
            args.warm_start = args.if_stale

    if args.n_trials is None:
        args.n_trials = 20 if budget is None else BUDGET_MAX_TRIALS  # with a budget, time decides when to stop

    device = args.device or _default_device(fp)
    if not DEVICE_RE.fullmatch(device):  # "cuda:abc" passed here and failed later
        raise UserError(f"--device must be cpu, cuda or cuda:N, but got {device!r}")
    if device.startswith("cuda") and not fp.get("gpus"):
        raise UserError("--device cuda asked for, but no NVIDIA GPU is visible here (NVML found none); run 'autotune doctor' or pass --device cpu")

    settings = settings_from_args(args, fp, device)  # bad flags are a lone error line, before the scan
    # 'cores' in a space: each rank's share; a bad --space is a lone error line, before the scan and its set-up line
    space = load_space(args.space, cores=settings.cores, device=device)
    warm = None
    if args.warm_start:  # read before the scan and the study: a bad --warm-start is a lone line and leaves no empty study
        warm = previous_best(args.warm_start, args.storage, backends=space.backends())  # a DALI winner into --space torch: its fallback
    # the dataset after every check of the flags: a bad flag does not wait for the demo set to be made
    from autotune import doctor

    nw = space["num_workers"] if "num_workers" in space else None
    workers = "torch" in space.backends() and nw is not None and max(nw.choices or (nw.high,)) > 0
    if args.demo:
        from autotune.dataset import synth

        if not (synth.demo_root() / synth.DEMO_COMPLETE).exists():
            doctor.preflight(None, device, workers=workers)  # a torch that cannot run trials: told before a minute of image-making
        if not args.quiet and not (synth.demo_root() / synth.DEMO_COMPLETE).exists():
            print(f"making the demo dataset in {printable(str(synth.demo_root()))} (once; about a minute on two cores) ...", file=sys.stderr)
        dataset_path = str(synth.demo_dataset(progress=None if args.quiet else synth.quarter_lines("demo images")))
        if budget is not None:  # making the demo set once is not tuning time
            budget = TimeBudget(budget.total_s)
    elif args.dataset:
        dataset_path = args.dataset
    else:
        raise UserError("no dataset given; pass --dataset DIR (one sub-folder per class) or --demo")
    # the set-up overlaps: the torch probe of the preflight and the trials' zygote import while the dataset is scanned
    doctor.start_probe()
    # --reuse: a stored study usually answers, and then nothing is measured; the measuring process waits for a miss
    zygote, zygote_log = (None, "") if args.reuse else _launch_zygote(early)
    try:
        dataset = scan(dataset_path)  # each unusable file is named once, as a warning; a bad folder is a lone error line
    except DatasetError as e:
        raise DatasetError(f"{e}, or use --demo" if "does not exist" in str(e) else str(e)) from None
    if not args.quiet:  # the set-up takes seconds (torch imports twice, in the probe and the zygote): say what happens
        doing = "looking for a finished study to reuse" if args.reuse else "starting the measuring process"
        print(f"setting up: {len(dataset):,} images in {printable(dataset_path)}, {doing} ...", file=sys.stderr, flush=True)
    if budget is not None:
        spend = budget
        settings.time_left = lambda: spend.remaining() - WRITE_RESERVE_S  # a trial past it is cut
        settings.measure_left = spend.measure_left  # a trial past it ends at its next window: the re-measurement keeps its time
    checks = doctor.preflight(dataset_path, device, scanned=dataset, workers=workers)
    undecodable = [f for c in checks or () if c.name == "unreadable" for f in c.files]
    if undecodable:  # the headers were fine, the pixels are not (a truncated JPEG): found now, not one trial at a time
        logger.warning("%d of the files decoded before the trials cannot be decoded (first %s): left out of the trials; "
                       "fix or remove them before training", len(undecodable), printable(undecodable[0]))
        dataset = dataset.without([dataset.name_of(f) for f in undecodable], "cannot be decoded")
    if args.model:
        doctor.check_model_name(args.model)  # before the ceiling's trial (seconds), from the probe that ran meanwhile
    if args.batch_size is not None:
        space = space.fix("batch_size", args.batch_size)
    space = _fit_batch_sizes(space, len(dataset) // settings.ranks, get_preset(args.pipeline).train, settings.ranks)
    sig = dataset.signature()
    key = _study_key(fp, sig, args.pipeline, space.name, settings.ranks, args.model or (f"step{args.step_ms}" if args.step_ms else None), device)

    if args.reuse:
        reused = reuse(args.storage, key, out_path, max_age_days=args.max_age)
        if reused is not None:
            if not args.quiet:
                n = reused.get("fresh_studies", 1)
                why = f" (the best of {n} finished studies for this machine and dataset{' within --max-age' if args.max_age is not None else ''})" if n > 1 else ""
                print(f"reused study {reused['study']}{why}: {reused['result'].get('samples_per_s', 0):,.0f} samples/s; "
                      f"wrote {out_path} without tuning", file=sys.stderr)
            return reused
        zygote, zygote_log = _launch_zygote(early)  # nothing to reuse: this run tunes

    study_name = args.study_name
    if args.resume and not study_name:
        found = studies_for(args.storage, key, must_exist=True)  # --resume: a storage file not there is an error
        if not found:
            raise UserError(f"--resume: no study for this machine and dataset in {mask_url(args.storage)}; run without --resume to start one")
        study_name = found[-1].study_name
    if not study_name:
        study_name = f"{safe_name(Path(dataset.root).name)}-{key}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S')}"

    attrs = {
        "fingerprint_key": key,
        "dataset": dataset.summary(),
        "pipeline": args.pipeline,
        "device": device,
        "hardware": fp,
        "measurement": settings.measurement(),
        "budgets": settings.budgets.to_dict(),
        "space": space.name,
        "sampler": settings.sampler,
        "pruner": settings.pruner,
        "ranks": settings.ranks,
        "retune_flags": retune_flags(args),
        "created": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }
    if settings.model is not None:
        attrs["model"] = settings.model.describe()
    from autotune.report import LOGS
    from autotune.report import report_dir as report_folder

    settings.log_dir = str(report_folder(study_name, args.reports_dir) / LOGS)  # each trial's output: <log_dir>/<trial>.log
    try:  # before any study exists: a --reports-dir that cannot hold the trial logs is a one-line error
        Path(settings.log_dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"--reports-dir {str(args.reports_dir)!r}: cannot create {settings.log_dir!r} ({e.strerror or e}); pass a folder you can write") from None
    tuner = Tuner(dataset, space, settings, storage=args.storage, study_name=study_name, resume=args.resume, attrs=attrs, zygote=zygote,
                  made_up_name=not args.study_name and not args.resume)
    if tuner.study.study_name != study_name:  # NAME-2: another run made NAME in the same second, and logs to its folder
        study_name = tuner.study.study_name
        settings.log_dir = str(report_folder(study_name, args.reports_dir) / LOGS)
        Path(settings.log_dir).mkdir(parents=True, exist_ok=True)
    if zygote is not None:
        shutil.move(zygote_log, trial_log(settings.log_dir, "zygote"))
    if budget is not None and not tuner.created:  # a resumed study: the time attr counts its earlier runs
        budget.follow(tuner.study.user_attrs.get("time"))
    # a finished study whose YAML could not be written: --resume writes it, without tuning again
    unwritten = bool(args.resume and tuner.study.user_attrs.get(UNWRITTEN) and "confirmation" in tuner.study.user_attrs)
    if warm is not None and not unwritten:
        tuner.enqueue_warm_start(warm)
    done_before = sum(t.state.is_finished() for t in tuner.study.trials)  # enqueued trials are still to run
    if not args.quiet:
        if unwritten:
            print(f"study {study_name} in {mask_url(args.storage)} chose its config, which was not written: writing it without tuning again", file=sys.stderr)
        else:
            print(f"study {study_name} in {mask_url(args.storage)}: {len(dataset)} images, {settings.device}, space {space.name}, "
                  + (f"{args.n_trials} {'trial' if args.n_trials == 1 else 'trials'}" if budget is None else budget_header(budget))
                  + (f", resuming after {done_before}" if done_before else "")
                  + (" (--resume: no such study yet, so it starts here)" if args.resume and tuner.created else ""), file=sys.stderr)

    n_contenders = min(settings.confirm_top, args.n_trials + done_before)  # one trial has no other to be compared with
    remeasurements = n_contenders * settings.confirm_repeats if n_contenders > 1 else 0
    if not unwritten:
        # a resumed study's best so far: the progress line's "best" starts there
        rates = [float(t.user_attrs.get("samples_per_s") or t.value) for t in contenders(tuner.study)]
        progress.start(args.n_trials, remeasurements, settings, done=done_before, budget_s=budget.remaining() if budget is not None else None,
                       best=max(rates) if rates else None, since=budget.start if budget is not None and budget.clock is time.monotonic else None)
    interrupted: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (errors.Terminated) under the CLI
    t0 = time.monotonic()
    stage = budget.stage if budget is not None else (lambda name: contextlib.nullcontext())
    if budget is not None:
        budget.spent["setup"] = budget.elapsed()
    try:
        if settings.model is not None and not unwritten:
            from autotune.study.ceiling import measure_ceiling

            progress.note("measuring the model's ceiling ...")
            with stage("ceiling"):
                tuner.study.set_user_attr("model_ceiling", measure_ceiling(tuner))
        callbacks: list = [progress]
        if budget is not None:
            callbacks.append(budget.stop_callback(settings.confirm_top, settings.confirm_repeats))
        if not unwritten:
            with stage("trials"):
                tuner.optimize(callbacks=callbacks, keep_warm=True)  # closed below, after the re-measurement
        if tuner.complete_trials() and not unwritten:
            if budget is not None:
                budget.confirm_planned = budget.confirm_fit(settings.confirm_top, settings.confirm_repeats, budget.contender_cost(tuner.study, settings.confirm_top))
                settings.confirm_top, settings.confirm_repeats = budget.confirm_planned
            with stage("re-measurement"):
                tuner.confirm(on_step=progress.remeasure, fits=budget.fits if budget is not None else None)
    except KeyboardInterrupt as e:
        interrupted = e
    finally:
        progress.stop()
        tuner.close()
        if budget is not None:
            tuner.study.set_user_attr("time", budget.to_dict())
        if not unwritten:  # a run that only writes the YAML measured nothing
            _keep_busier(tuner.study, others.to_dict())
        if interrupted is not None or tuner.study.user_attrs.get(INTERRUPTED):  # `autotune studies` names it; --resume clears it
            tuner.study.set_user_attr(INTERRUPTED, interrupted is not None)
    tuning_s = time.monotonic() - t0

    if settings.model is not None and tuner.complete_trials():
        from autotune.study.selection import choose_enough

        choose_enough(tuner.study, args.tolerance)

    summary: dict[str, Any] = {"study": study_name, "storage": mask_url(absolute_url(args.storage)), "interrupted": interrupted is not None, "tuning_s": round(tuning_s, 1)}
    if not tuner.complete_trials():
        if interrupted is not None:
            raise with_detail(interrupted, f"no trial had completed, so no config was written; study {study_name} keeps what ran: "
                                           "continue it with the same command and --resume")
        if not args.no_report:  # the failures by outcome, for the user to read
            try:
                from autotune.report import write_report

                failed_report = write_report(tuner.study, args.storage, args.reports_dir)
                if not args.quiet:
                    print(f"the failed trials are shown in {failed_report}/report.html", file=sys.stderr)
            except (ImportError, UserError, OSError) as e:
                logger.warning("no report written: %s", e)
        raise UserError(no_completion_message(tuner.study), exit_code=1)  # the dominant cause and its fix
    cfg = config_from_study(tuner.study, args.storage)
    kept = None
    if interrupted is not None:
        from autotune.config.files import interrupted_path

        target = interrupted_path(out_path, cfg.study)
        if target != out_path:
            kept, out_path = out_path, target
    try:
        with deferred_signals():  # a Ctrl-C or SIGTERM now comes after the file is whole
            save_config(cfg, out_path)
    except OSError as e:  # a full disk, or a folder that changed since the check at the start
        tuner.study.set_user_attr(UNWRITTEN, True)
        raise UserError(
            f"cannot write {str(out_path)!r} ({e.strerror or e}); the study {study_name} is kept: "
            "fix that, then run the same command with --resume to write the config without tuning again"
        ) from None
    args.written = str(out_path)  # a stop from here on says the file is whole
    mark_written(tuner.study, cfg)  # after the file, outside its error handling: a storage error here is not the YAML's
    if interrupted is None:  # this study's best so far, put aside by an interrupted run, is now --out's
        from autotune.config.files import holds_study, side_path

        side = side_path(out_path)
        if holds_study(side, cfg.study):
            side.unlink(missing_ok=True)
    if tuner.study.user_attrs.get(UNWRITTEN):
        tuner.study.set_user_attr(UNWRITTEN, False)
    if kept is not None:
        summary["kept_config"] = str(kept)
    summary.update({"config_path": str(out_path), "loader": cfg.loader.to_dict(), "result": cfg.result, "study_section": cfg.study})
    report_dir = _write_report(args, tuner.study, out_path, summary)
    if budget is not None:
        budget.spent["writing"] = budget.spent.get("writing", 0.0) + budget.elapsed() - sum(budget.spent.values())
        summary["time"] = budget.to_dict()
        tuner.study.set_user_attr("time", summary["time"])
    stated = summary["time"]["elapsed_s"] if budget is not None else None  # the "took N s" line's figure: one number, not two
    summary["warnings"] = ([] if interrupted is not None else short_run_warnings(cfg, space, budget, tuner.study, stated)) + busy_warnings(tuner.study.user_attrs.get("other_load"))
    per_rank, where = len(dataset) // settings.ranks, "images per rank" if settings.ranks > 1 else "images"
    dropped = drop_problem(cfg.loader.batch_size, per_rank, where) if get_preset(args.pipeline).train else None
    if dropped is not None:  # a small set at the largest batch: what training on it loses, before the script finds out
        summary["warnings"].append(f"the winner's {dropped}; to train on them all, pass a --batch-size that divides them more closely")
    if not args.quiet:
        _print_result(cfg, tuner.study, out_path, report_dir, summary, budget)
    if interrupted is not None:
        summary["exit_code"] = interrupt_exit_code(interrupted)
        how = interrupt_said(interrupted)
        if kept is not None:
            print(f"{how}: wrote the best config so far to {out_path} and kept {kept} (written before this run); "
                  f"continue with --resume, which writes {kept} when it finishes", file=sys.stderr)
        else:
            print(f"{how}: wrote the best config so far to {out_path}; continue with --resume", file=sys.stderr)
    return summary
