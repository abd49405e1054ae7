"""``autotune studies``: list the studies in a storage with their best config."""

from __future__ import annotations

import argparse
import sys

from autotune.cli._output import write_json
from autotune.cli._types import given

NAME = "studies"
HELP = "list the studies in a storage with their best samples/s and config"
DESCRIPTION = "List every study in an Optuna storage, newest first: trials, best samples/s (the confirmed winner), its config, creation time."
EXAMPLES = """examples:
  autotune studies
  autotune studies --storage postgresql://user:***@db/autotune
  autotune studies --json | jq -r '.[0].name'

exit codes: 0 listed (also when empty); 2 bad input (no such storage)
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", type=given, default="sqlite:///autotune.db", metavar="URL", help="Optuna storage URL or journal file (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print a JSON list on stdout")


def run(args: argparse.Namespace) -> int:
    from autotune.report import list_studies
    from autotune.study.storage import absolute_url, mask_url

    rows = list_studies(args.storage)
    if args.json:
        write_json(rows, indent=2)
        sys.stdout.write("\n")
        return 0
    if not rows:
        print(f"no study in {mask_url(absolute_url(args.storage))}", file=sys.stderr)
        return 0
    from rich.console import Console
    from rich.table import Table

    from autotune.cli._text import cell
    from autotune.report._render import fmt_speedup

    table = Table(title=cell(f"studies in {mask_url(absolute_url(args.storage))}"))
    # on a narrow terminal a long name folds onto more lines: the config, the column read most, keeps its words
    # (an AutoLoader study's name squeezed it to 'dali…', 'thre…', 'queu…')
    for col, kw in (("name", {"overflow": "fold", "min_width": 12}), ("trials", {"justify": "right", "no_wrap": True}),
                    ("best samples/s", {"justify": "right"}), ("vs defaults", {"justify": "right"}),
                    ("best config", {"min_width": 16}), ("created", {"no_wrap": True, "min_width": 16})):
        table.add_column(col, **kw)
    for r in rows:
        if r.get("error"):
            table.add_row(cell(r["name"]), "-", "-", "-", cell(f"unreadable: {r['error']}"), _when(r["created"]), style="red")
            continue
        if r.get("foreign"):
            table.add_row(cell(r["name"]), str(r["trials"]), "-", "-", cell(f"not made by autotune: {r['foreign']}"), _when(r["created"]), style="dim")
            continue
        table.add_row(
            cell(r["name"]),
            f"{r['trials'] - (r.get('queued') or 0)} ({r['complete']} ok)" + (f", {r['queued']} queued" if r.get("queued") else "")
            + (", interrupted (--resume)" if r.get("interrupted") else ""),
            _number(r["best_samples_per_s"], "{:,.1f} (loop)" if r.get("in_training") else "{:,.1f}"),  # the YAML's precision
            fmt_speedup(r["speedup_vs_defaults"]) if r["speedup_vs_defaults"] else "-",  # as the YAML, show and the report write it
            cell(r["best_config"] or "-"),
            _when(r["created"]),
        )
    Console(width=max(120, Console().width)).print(table)
    if any(r.get("in_training") and r.get("best_samples_per_s") for r in rows):
        print("(loop): tuned by AutoLoader inside training: samples/s of the whole training loop (loader plus step), not of the loader alone")
    return 0


def _when(created: object):
    """The creation time to the minute (``2026-11-30 05:06``), UTC as stored; ``--json`` keeps the full stamp."""
    from autotune.cli._text import cell

    if not created:
        return "-"
    text = str(created)
    return cell(text[:16].replace("T", " ") if len(text) >= 16 and text[10:11] in ("T", " ") else text)


def _number(value: object, fmt: str):
    """A figure from the study; one that is not a number is shown as it is (escaped), never a crash."""
    from autotune.cli._text import cell

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value) if value else "-"
    return "-" if value is None else cell(value)
