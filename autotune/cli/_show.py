"""``autotune show``: print an autotune.yaml (or a stored study) for a person."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from autotune.cli._output import hand_edited, write_json
from autotune.cli._types import given
from autotune.config.fingerprint import gpu_text
from autotune.outcomes import TOLD

NAME = "show"
HELP = "print an autotune.yaml or a stored study"
DESCRIPTION = (
    "Print an autotune.yaml for a person (or as JSON), or a stored study: its winner as the YAML would hold it,\n"
    "and one row per trial (outcome, samples/s, spread, memory peaks)."
)
EXAMPLES = """examples:
  autotune show autotune.yaml
  autotune show autotune.yaml --json
  autotune show --storage sqlite:///autotune.db --study NAME
  autotune show --study NAME --json          # {study, storage, config, outcomes, time, trials}

exit codes: 0 shown; 2 bad input (no such file, storage or study, or another program's study)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", type=given, nargs="?", default=None, metavar="FILE", help="an autotune.yaml (default: autotune.yaml, what autotune run writes)")
    p.add_argument("--storage", type=given, default=None, metavar="URL", help="show a study from this storage instead (default with --study: sqlite:///autotune.db)")
    p.add_argument("--study", type=given, default=None, metavar="NAME", help="the study to show")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _config_rows(cfg) -> list[tuple[str, str]]:
    from autotune.report._render import fmt_rate, fmt_speedup, fmt_spread, other_jobs_text

    r = cfg.result
    rows = [
        ("loader", cfg.loader.describe()),
        ("samples/s", f"{fmt_rate(r.get('samples_per_s'))}  spread {fmt_spread(r.get('spread'))}"),
        *([("tuned by", f"{r['tuned_by']}; scored by {r.get('score') or '-'}")] if r.get("tuned_by") else []),  # not the loader's own rate
        *([("exploration", f"cut short: {r.get('settled_because') or 'training ended while exploring'} after {r.get('exploration_s')} s; "
            "the next AutoLoader run explores on in its study")] if r.get("exploration_cut_short") else []),
        ("defaults", f"{fmt_rate(r.get('defaults_samples_per_s'))}  (speedup {fmt_speedup(r.get('speedup_vs_defaults'))})"),
        ("heuristic", f"{fmt_rate(r.get('heuristic_samples_per_s'))}  (speedup {fmt_speedup(r.get('speedup_vs_heuristic'))})"),
    ]
    if "dali_heuristic_samples_per_s" in r:
        rows.append(("DALI's usual", f"{fmt_rate(r.get('dali_heuristic_samples_per_s'))}  (speedup {fmt_speedup(r.get('speedup_vs_dali_heuristic'))})"))
    if isinstance(r.get("confirmed"), dict):
        rows.append(("confirmed", str(r["confirmed"].get("method"))))
    if isinstance(r.get("other_load"), dict) and isinstance(r["other_load"].get("cores"), (int, float)):
        rows.append(("other jobs", other_jobs_text(r["other_load"])))
    rows += [
        ("peak memory", f"gpu {r.get('peak_gpu_mib') or '-'} MiB, host {r.get('peak_host_mib') or '-'} MiB"),
        *_what_was_measured(cfg),
        ("hardware", f"{gpu_text(cfg.hardware)}, {cfg.hardware.get('cpus')} CPUs, torch {cfg.hardware.get('torch')}, dali {cfg.hardware.get('dali') or '-'}"),
        ("study", f"{cfg.study.get('name')} ({_trial_count(cfg.study)}) in {cfg.study.get('storage')}"),
        ("created", cfg.created),
    ]
    if cfg.torch_fallback and cfg.dataloader is not None:
        fb = cfg.torch_fallback
        rows.append(("torch fallback", f"the best torch DataLoader: trial #{fb.get('trial')}, {fmt_rate(fb.get('samples_per_s'))} samples/s"))
    if cfg.dataloader is not None:
        wb = cfg.dataloader.options.joined_from(cfg.dataloader.batch_size)
        rows.append(("DataLoader kwargs", f"none: workers hand over {wb} samples at a time (use autotune.build_loader)" if wb
                     else json.dumps(cfg.dataloader_kwargs())))
    return rows


def _config_table(cfg, title: str, extra: tuple[tuple[str, str], ...] = ()):
    from rich.table import Table

    from autotune.cli._text import cell

    table = Table(title=cell(title), show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in (*_config_rows(cfg), *extra):
        table.add_row(k, cell(v))
    return table


def _show_study(args: argparse.Namespace) -> int:
    with hand_edited(args.study):
        return _show_stored(args)


def _show_stored(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from autotune.cli._text import cell
    from autotune.errors import UserError
    from autotune.report import load, overview, trial_rows
    from autotune.report._render import TRIAL_COLUMNS, outcome_text, single_scores, time_text, trial_cells
    from autotune.study.result import config_from_study

    storage = args.storage or "sqlite:///autotune.db"
    study = load(storage, args.study)
    try:
        cfg, why = config_from_study(study, storage, as_written=True), ""
    except UserError as e:
        cfg, why = None, str(e)
    rows = trial_rows(study)
    ov = overview(study, storage)
    if args.json:
        out = {
            "study": study.study_name,
            "storage": ov["storage"],
            "config": cfg.to_dict() if cfg else None,
            "outcomes": ov["outcomes"],
            "time": ov["time"],
            "trials": rows,
        }
        write_json(out, indent=2)
        sys.stdout.write("\n")
        return 0
    console = Console(width=max(140, Console().width))
    spent = (("time", time_text(ov["time"], "the YAML and the report")),) if ov["time"] else ()
    if cfg is not None:
        console.print(_config_table(cfg, study.study_name, spent))
    else:
        console.print(cell(f"no config: {why}"))
        for k, v in spent:
            console.print(cell(f"{k}: {v}"))
    with_ceiling = any(r["fraction_of_ceiling"] is not None for r in rows)
    trials = Table(title=cell(f"{len(rows)} trials: " + ", ".join(f"{outcome_text(k)} {v}" for k, v in ov["outcomes"].items())))
    for col in list(TRIAL_COLUMNS) + (["of ceiling"] if with_ceiling else []):
        trials.add_column(col, justify="left" if col in ("outcome", "role", "config") else "right", overflow="fold")
    confirmed = (cfg.result.get("confirmed") or {}) if cfg is not None and isinstance(cfg.result.get("confirmed"), dict) else {}
    if confirmed and not single_scores(confirmed.get("method")):  # two figures of the winner: say which
        trials.caption = cell("samples/s: each trial's own measurement; the config's figure above is the median of the winner's and its re-measurements")
    best = ov["winner"]["trial"] if ov["winner"] else None
    for r in rows:
        style = "bold green" if r["trial"] == best else ("red" if r["outcome"] not in ("complete", *TOLD) else None)
        trials.add_row(*map(cell, trial_cells(r, with_ceiling)), style=style)
    console.print(trials)
    failed = [r for r in rows if r["outcome"] not in ("complete", *TOLD) and r["message"]]
    for r in failed:
        console.print(cell(f"  #{r['trial']} {r['outcome']}: {r['message'][:200]}"))
    return 0


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from autotune.config.files import read_yaml
    from autotune.config.schema import Config
    from autotune.errors import UserError

    if args.study:
        return _show_study(args)
    if args.storage:
        raise UserError("showing a study needs --study NAME; list the studies with 'autotune studies --storage URL'")
    if not args.file:
        if not Path("autotune.yaml").exists():
            raise UserError("nothing to show: no autotune.yaml in this folder; pass an autotune.yaml, or --storage URL --study NAME")
        args.file = "autotune.yaml"
    if not Path(args.file).exists() and _is_local_study(args.file):  # `show NAME`: "write it with autotune run" misled
        raise UserError(f"{args.file!r} is no file here but a study in autotune.db; show it with 'autotune show --study {args.file}'")
    cfg = Config.from_dict(read_yaml(args.file, "config"), path=args.file)
    if args.json:
        write_json(cfg.to_dict(), indent=2)
        sys.stdout.write("\n")
        return 0
    Console().print(_config_table(cfg, args.file))
    return 0


def _is_local_study(name: str) -> bool:
    """Whether ``autotune.db`` in this folder (``--study``'s default storage) holds a study named ``name``."""
    if not Path("autotune.db").is_file():
        return False
    import optuna

    from autotune.study.storage import close_storage, open_storage

    try:
        storage = open_storage("sqlite:///autotune.db", must_exist=True)
    except Exception:  # noqa: BLE001 - not a database, locked: the file's own error stands
        return False
    try:
        return name in optuna.study.get_all_study_names(storage=storage)
    except Exception:  # noqa: BLE001 - a storage that cannot list its studies holds none to show
        return False
    finally:
        close_storage(storage)


def _trial_count(study: dict) -> str:
    """``N trials`` run, and those queued that the budget left unrun, apart."""
    total, queued, repeats = study.get("trials"), study.get("queued_not_run") or 0, study.get("repeats") or 0
    dominated, later = study.get("dominated") or 0, study.get("later_start") or 0
    if not isinstance(total, int) or not all(isinstance(v, int) for v in (queued, repeats, dominated)):
        return f"{total} trials"
    run = total - queued
    return (
        f"{run} {'trial' if run == 1 else 'trials'} run"
        + (f", {repeats} of them repeats, not measured again" if repeats else "")
        + (f", {dominated - later} of a dominated kind, not measured" if dominated - later else "")
        + (f", {later} starting workers later than a start that completed, not measured" if later else "")
        + (f", {queued} queued and not run" if queued else "")
    )


def _what_was_measured(cfg) -> list[tuple[str, str]]:  # noqa: ANN001 - a Config, as _config_rows takes it
    """The pipeline and the dataset rows: a folder through a preset, or the user's own pipeline function or Dataset
    (its own transforms: the preset says only whether the last partial batch was dropped)."""
    function = cfg.dataset.get("function")
    if not isinstance(function, dict):
        return [("pipeline", f"{cfg.pipeline} on {cfg.device}"), ("dataset", f"{cfg.dataset.get('path')} ({cfg.dataset.get('samples')} images)")]
    n = function.get("samples")
    size = f"{n:,} samples" if isinstance(n, int) and n > 0 else "a stream of samples"
    kept = "drops" if cfg.pipeline == "imagenet-train" else "keeps"
    return [("pipeline", f"your own, {function.get('name') or '?'}, on {cfg.device} ({kept} the last partial batch)"),
            ("dataset", f"{cfg.dataset.get('path')} ({size})")]
