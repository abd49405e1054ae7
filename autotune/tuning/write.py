"""The write step: the winner's YAML (whole or not at all), the report, the warnings and the run's last lines.

A run stopped by a signal writes the best config so far; one whose ``--out`` holds an earlier run's config
writes beside it (``NAME.interrupted.yaml``) and keeps it.
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any

import optuna

from autotune.config.files import save_config
from autotune.config.schema import Config
from autotune.errors import UserError, interrupt_detail, interrupt_exit_code, interrupt_said, with_detail
from autotune.loaders.presets import get_preset
from autotune.loaders.shards import drop_problem
from autotune.study.budget import TimeBudget
from autotune.study.result import config_from_study, mark_written, no_completion_message
from autotune.study.storage import absolute_url, mask_url
from autotune.trials.runner import deferred_signals
from autotune.tuning.caveats import busy_warnings, short_run_warnings, workers_failed_warnings
from autotune.tuning.prepare import Prepared
from autotune.tuning.reporter import Reporter
from autotune.tuning.request import RunRequest
from autotune.tuning.search import UNWRITTEN, OpenStudy

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Measured:
    """How the measuring ended."""

    interrupted: KeyboardInterrupt | None  # Ctrl-C, or SIGTERM (errors.Terminated) under the CLI
    tuning_s: float


def write(request: RunRequest, prep: Prepared, opened: OpenStudy, measured: Measured, reporter: Reporter) -> dict[str, Any]:
    """Write the winner's YAML and the report, and tell the result; returns the run's summary (``--json``).

    Raises:
        UserError: no trial completed (exit code 1, with the dominant cause), or the YAML could not be written.
        KeyboardInterrupt: the run was stopped before any trial completed.
    """
    study, interrupted = opened.tuner.study, measured.interrupted
    if opened.tuner.settings.model is not None and opened.tuner.complete_trials():
        from autotune.study.selection import choose_enough

        choose_enough(study, request.tolerance)
    summary: dict[str, Any] = {"study": opened.name, "storage": mask_url(absolute_url(request.storage)), "interrupted": interrupted is not None,
                               "tuning_s": round(measured.tuning_s, 1)}
    if not opened.tuner.complete_trials():
        _no_completion(request, opened, interrupted, reporter)
    cfg = config_from_study(study, request.storage)
    out_path, kept = _save(request, prep, opened, cfg, interrupted is not None)
    reporter.wrote(str(out_path))  # a stop from here on says the file is whole
    if kept is not None:
        so_far = (f"wrote the best config so far to {out_path} and kept {kept} (written before this run); "
                  f"continue with --resume, which writes {kept} when it finishes")
    else:
        so_far = f"wrote the best config so far to {out_path}; continue with --resume"
    try:
        _after_save(request, prep, opened, cfg, out_path, kept, summary, reporter)
    except KeyboardInterrupt as stop:
        detail = interrupt_detail(stop)  # "wrote X", and what was not done, where the stop said so
        if interrupted is not None:  # a stopped run's repeated Ctrl-C, landing here, says what the first would have
            with_detail(stop, so_far + detail.removeprefix(f"wrote {out_path}"))
        elif not detail:
            with_detail(stop, f"wrote {out_path}")
        raise
    if interrupted is not None:
        summary["exit_code"] = interrupt_exit_code(interrupted)
        reporter.stopped(f"{interrupt_said(interrupted)}: {so_far}")
    return summary


def _after_save(request: RunRequest, prep: Prepared, opened: OpenStudy, cfg: Config, out_path: Path, kept: Path | None,
                summary: dict[str, Any], reporter: Reporter) -> None:
    """Once the YAML is whole: the study marks it, the report is written, the summary completed and told."""
    study = opened.tuner.study
    mark_written(study, cfg)  # after the file, outside its error handling: a storage error here is not the YAML's
    if not summary["interrupted"]:  # this study's best so far, put aside by an interrupted run, is now --out's
        from autotune.config.files import holds_study, side_path

        side = side_path(out_path)
        if holds_study(side, cfg.study):
            side.unlink(missing_ok=True)
    if study.user_attrs.get(UNWRITTEN):
        study.set_user_attr(UNWRITTEN, False)
    if kept is not None:
        summary["kept_config"] = str(kept)
    summary.update({"config_path": str(out_path), "loader": cfg.loader.to_dict(), "result": cfg.result, "study_section": cfg.study})
    report_dir = _write_report(request, study, out_path, summary)
    budget = prep.budget
    if budget is not None:
        budget.spent["writing"] = budget.spent.get("writing", 0.0) + budget.elapsed() - sum(budget.spent.values())
        summary["time"] = budget.to_dict()
        study.set_user_attr("time", summary["time"])
    summary["warnings"] = _warnings(request, prep, opened, cfg, summary, summary["interrupted"])
    for line in result_lines(cfg, study, out_path, report_dir, summary, budget):
        reporter.say(line)
    for warning in summary["warnings"]:
        reporter.warn(warning)


def _no_completion(request: RunRequest, opened: OpenStudy, interrupted: KeyboardInterrupt | None, reporter: Reporter) -> None:
    """No trial completed: nothing to write. Raises the stop, or the dominant cause and its fix (exit code 1)."""
    if interrupted is not None:
        raise with_detail(interrupted, f"no trial had completed, so no config was written; study {opened.name} keeps what ran: "
                                       "continue it with the same command and --resume")
    if not request.no_report:  # the failures by outcome, for the user to read
        try:
            from autotune.report import write_report

            failed_report = write_report(opened.tuner.study, request.storage, request.reports_dir)
            reporter.say(f"the failed trials are shown in {failed_report}/report.html")
        except (ImportError, UserError, OSError) as e:
            logger.warning("no report written: %s", e)
    raise UserError(no_completion_message(opened.tuner.study), exit_code=1)  # the dominant cause and its fix


def _save(request: RunRequest, prep: Prepared, opened: OpenStudy, cfg: Config, interrupted: bool) -> tuple[Path, Path | None]:
    """Write the YAML; returns where, and the earlier config an interrupted run kept (None where there is none)."""
    out_path, kept = prep.out_path, None
    if interrupted:
        from autotune.config.files import interrupted_path

        target = interrupted_path(out_path, cfg.study)
        if target != out_path:
            kept, out_path = out_path, target
    try:
        with deferred_signals():  # a Ctrl-C or SIGTERM now comes after the file is whole
            save_config(cfg, out_path)
    except OSError as e:  # a full disk, or a folder that changed since the check at the start
        opened.tuner.study.set_user_attr(UNWRITTEN, True)
        raise UserError(
            f"cannot write {str(out_path)!r} ({e.strerror or e}); the study {opened.name} is kept: "
            "fix that, then run the same command with --resume to write the config without tuning again"
        ) from None
    return out_path, kept


def _warnings(request: RunRequest, prep: Prepared, opened: OpenStudy, cfg: Config, summary: dict[str, Any], interrupted: bool) -> list[str]:
    """The warnings of the summary: a run too short, a busy machine, a winner's batch that drops images."""
    study, budget = opened.tuner.study, prep.budget
    stated = summary["time"]["elapsed_s"] if budget is not None else None  # the "took N s" line's figure: one number, not two
    out = ([] if interrupted else short_run_warnings(cfg, prep.space, budget, study, stated)) + busy_warnings(study.user_attrs.get("other_load"))
    out += workers_failed_warnings(cfg, study)
    ranks = opened.tuner.settings.ranks
    unit = prep.dataset.unit
    per_rank, where = len(prep.dataset) // ranks, f"{unit} per rank" if ranks > 1 else unit
    dropped = drop_problem(cfg.loader.batch_size, per_rank, where) if get_preset(prep.settings.pipeline).train else None
    if dropped is not None:  # a small set at the largest batch: what training on it loses, before the script finds out
        out.append(f"the winner's {dropped}; to train on them all, pass a --batch-size that divides them more closely")
    return out


def _write_report(request: RunRequest, study: optuna.Study, out_path: Path, summary: dict[str, Any]) -> Path | None:
    """The run's report, after its YAML; its folder, or None where it was not written (a warning says why)."""
    if request.no_report:
        return None
    try:
        from autotune.report import write_report

        try:
            report_dir = write_report(study, request.storage, request.reports_dir)
        except KeyboardInterrupt as stop:  # the YAML is whole: say so, not only "terminated"
            raise with_detail(stop, f"wrote {out_path}; the report was not written ('autotune report' writes it)") from None
        summary["report"] = str(report_dir / "report.html")
        return report_dir
    except (ImportError, UserError) as e:
        logger.warning("no report written: %s", e)
    except OSError as e:  # a full disk, a folder that went away: the YAML is written, the report is not
        logger.warning("no report written: %s; the YAML is written, and 'autotune report' writes the report later", e.strerror or e)
    return None


def result_lines(cfg: Config, study: optuna.Study, out_path: Path, report_dir: Path | None, summary: dict[str, Any], budget: TimeBudget | None) -> list[str]:
    """The run's last lines: the winner with the YAML's figures, what was set aside or repeated, where the YAML
    and the report went, and the time the budget took (the warnings follow them)."""
    r = cfg.result or {}
    from autotune.report._render import fmt_rate, fmt_speedup

    # the YAML's figures as the YAML, show and the report write them (1.37x, not 1.4x beside a YAML's 1.37)
    line = f"best: {cfg.loader.describe()}: {fmt_rate(r['samples_per_s'])} samples/s"
    if r.get("speedup_vs_defaults"):
        line += f" ({fmt_speedup(r['speedup_vs_defaults'])} the defaults' {fmt_rate(r['defaults_samples_per_s'])})"
    if len(r.get("scores") or ()) > 1:  # the bar's "best" is a single trial's: say why this figure differs
        line += f"; the median of its {len(r['scores'])} measurements"
    if r.get("fraction_of_ceiling"):
        line += f", {r['fraction_of_ceiling']:.0%} of the model's ceiling ({r.get('model_ceiling_samples_per_s', 0):,.0f})"
    lines = [line]
    chosen = r.get("trial", (cfg.study or {}).get("best_trial"))  # the YAML names the winner's trial in its study section
    alike = [a for a in r.get("indistinguishable") or () if a.get("trial") != chosen]
    if alike:  # the noise rule chose among configs it could not tell apart: name the others, by what it judged
        def judged(a: dict[str, Any]) -> str:
            return f"{fmt_rate(a['remeasured_per_s'])} re-measured" if a.get("remeasured_per_s") is not None else fmt_rate(a["samples_per_s"])

        mine = next((a for a in r.get("indistinguishable") or () if a.get("trial") == chosen), None)
        others = "; ".join(f"{a['config']} ({judged(a)})" for a in alike)
        lines.append(f"the re-measurement could not tell it{f' ({judged(mine)})' if mine else ''} apart from {others}: "
                     "the cheapest (fewest loader threads, then least memory) is taken")
    aside = (study.user_attrs.get("confirmation") or {}).get("set_aside") or []
    if aside:  # the progress lines showed it: say why the winner's figure does not count it
        told = ", ".join(f"trial {a['trial']}'s {a['score']:,.0f}" for a in aside)
        lines.append(f"the budget ended the re-measurement round part-way: {told} set aside, so that every candidate "
                     "is judged on as many measurements")
    repeats = (cfg.study or {}).get("repeats") or 0
    if repeats:  # the progress lines count measured trials: say where the missing trial numbers went
        lines.append(f"{repeats} sampled {'config' if repeats == 1 else 'configs'} repeated one already measured and "
                     f"{'was' if repeats == 1 else 'were'} not measured again")
    later = (cfg.study or {}).get("later_start") or 0
    if later:
        lines.append(f"{later} sampled {'config' if later == 1 else 'configs'} starting workers otherwise than the start that completed "
                     f"{'was' if later == 1 else 'were'} not measured: that start only comes later, and the workers load alike")
    dominated = ((cfg.study or {}).get("dominated") or 0) - later
    if dominated:
        lines.append(f"{dominated} sampled {'config' if dominated == 1 else 'configs'} of a kind measured at a third or less of another's "
                     f"best {'was' if dominated == 1 else 'were'} not measured")
    searched = searched_line(cfg.study or {})
    if searched:
        lines.append(searched)
    lines.append(f"wrote {out_path}" + (f" and {report_dir}/" if report_dir else ""))
    if budget is not None:
        t = summary["time"]
        took = f"took {t['elapsed_s']:.0f} s of the {t['budget_s']:.0f} s budget: " + ", ".join(f"{k} {v:.0f} s" for k, v in t["spent_s"].items())
        warm = study.user_attrs.get("warm_processes") or {}
        freed = []  # what measuring in a warm process, and building the next trial during one, freed for more trials
        if warm.get("trials"):
            freed.append(f"{warm['trials']} {'trial' if warm['trials'] == 1 else 'trials'} in a warm process saved {warm['saved_s']:.0f} s of start-up")
        ahead = warm.get("built_ahead") or {}
        if ahead.get("trials"):
            freed.append(f"{ahead['trials']} built while the trial before built hid {ahead['hidden_s']:.0f} s of set-up and build")
        if freed:
            took += f" ({'; '.join(freed)})"
        lines.append(took)
    return lines


#: the starting points by their role, as a line names them
STARTS = {"dali-mixed": "the mixed-decode DALI start", "dali-hw": "the hardware-decoder DALI start", "dali-heuristic": "DALI's usual start",
          "heuristic": "the torch cores heuristic", "defaults": "the torch defaults", "warm-start": "the warm start", "user": "your own candidate"}


def searched_line(study: dict[str, Any]) -> str:
    """What the search measured, and whether the winner is a starting point or a config it sampled: a run that
    only measured its starts is not a search's find."""
    n, sampled, source = study.get("configs_measured"), study.get("sampled_measured"), study.get("winner_from")
    if n is None:
        return ""
    found = "the winner was sampled by the search" if source == "search" else f"the winner is a starting point ({STARTS.get(str(source), source)})"
    return f"measured {n} {'config' if n == 1 else 'configs'}, {sampled} of them sampled; {found}"

