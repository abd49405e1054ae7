"""``autotune show``: print an autotune.yaml (or a stored study) for a person."""

from __future__ import annotations

import argparse
import json
import sys

NAME = "show"
HELP = "print an autotune.yaml or a stored study"
EXAMPLES = """examples:
  autotune show autotune.yaml
  autotune show autotune.yaml --json
  autotune show --storage sqlite:///autotune.db --study NAME
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", nargs="?", default=None, metavar="FILE", help="an autotune.yaml")
    p.add_argument("--storage", default=None, metavar="URL", help="show a study from this storage instead")
    p.add_argument("--study", default=None, metavar="NAME", help="the study to show (with --storage)")
    p.add_argument("--json", action="store_true", help="machine-readable output")


def _config_rows(cfg) -> list[tuple[str, str]]:
    r = cfg.result
    rows = [
        ("loader", cfg.loader.describe()),
        ("samples/s", f"{r.get('samples_per_s', 0):,.0f}  spread {r.get('spread')}"),
        ("defaults", f"{r.get('defaults_samples_per_s') or '-'}  (speedup {r.get('speedup_vs_defaults') or '-'}x)"),
        ("heuristic", f"{r.get('heuristic_samples_per_s') or '-'}  (speedup {r.get('speedup_vs_heuristic') or '-'}x)"),
        ("peak memory", f"gpu {r.get('peak_gpu_mib') or '-'} MiB, host {r.get('peak_host_mib') or '-'} MiB"),
        ("pipeline", f"{cfg.pipeline} on {cfg.device}"),
        ("dataset", f"{cfg.dataset.get('path')} ({cfg.dataset.get('samples')} images)"),
        ("hardware", f"{cfg.hardware.get('gpu') or 'no GPU'} x{cfg.hardware.get('gpus') or 0}, {cfg.hardware.get('cpus')} cpus, torch {cfg.hardware.get('torch')}, dali {cfg.hardware.get('dali') or '-'}"),
        ("study", f"{cfg.study.get('name')} ({cfg.study.get('trials')} trials) in {cfg.study.get('storage')}"),
        ("created", cfg.created),
    ]
    if cfg.loader.backend.value == "torch":
        rows.append(("DataLoader kwargs", json.dumps(cfg.dataloader_kwargs())))
    return rows


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from autotune.config import Config, read_yaml
    from autotune.errors import UserError

    if args.storage or args.study:
        if not (args.storage and args.study):
            raise UserError("showing a study needs both --storage URL and --study NAME; list studies with 'autotune studies --storage URL'")
        from autotune.result import config_from_study
        from autotune.study import open_storage

        import optuna

        try:
            study = optuna.load_study(study_name=args.study, storage=open_storage(args.storage))
        except KeyError:
            raise UserError(f"no study named {args.study!r} in that storage; list them with 'autotune studies --storage URL'") from None
        cfg = config_from_study(study, args.storage)
    elif args.file:
        cfg = Config.from_dict(read_yaml(args.file, "config"), path=args.file)
    else:
        raise UserError("nothing to show; pass an autotune.yaml, or --storage URL --study NAME")
    if args.json:
        json.dump(cfg.to_dict(), sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    table = Table(title=str(args.file or args.study), show_header=False)
    table.add_column(style="bold")
    table.add_column()
    for k, v in _config_rows(cfg):
        table.add_row(k, v)
    Console().print(table)
    return 0
