"""``autotune studies``: list the studies in a storage with their best config."""

from __future__ import annotations

import argparse
import json
import sys

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
    p.add_argument("--storage", default="sqlite:///autotune.db", metavar="URL", help="Optuna storage URL or journal file (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print a JSON list on stdout")


def run(args: argparse.Namespace) -> int:
    from autotune.report import list_studies
    from autotune.study.storage import mask_url

    rows = list_studies(args.storage)
    if args.json:
        json.dump(rows, sys.stdout, indent=2, default=str)
        sys.stdout.write("\n")
        return 0
    if not rows:
        print(f"no study in {mask_url(args.storage)}", file=sys.stderr)
        return 0
    from rich.console import Console
    from rich.table import Table

    from autotune.cli._text import cell

    table = Table(title=cell(f"studies in {mask_url(args.storage)}"))
    for col, kw in (("name", {"no_wrap": True}), ("trials", {"justify": "right"}), ("best samples/s", {"justify": "right"}),
                    ("vs defaults", {"justify": "right"}), ("best config", {}), ("created", {})):
        table.add_column(col, **kw)
    for r in rows:
        if r.get("error"):
            table.add_row(cell(r["name"]), "-", "-", "-", cell(f"unreadable: {r['error']}"), cell(r["created"] or "-"), style="red")
            continue
        table.add_row(
            cell(r["name"]),
            f"{r['trials']} ({r['complete']} ok)",
            _number(r["best_samples_per_s"], "{:,.0f}"),
            _number(r["speedup_vs_defaults"], "{:.1f}x"),
            cell(r["best_config"] or "-"),
            cell(r["created"] or "-"),
        )
    Console(width=max(120, Console().width)).print(table)
    return 0


def _number(value: object, fmt: str):
    """A figure from the study; one that is not a number is shown as it is (escaped), never a crash."""
    from autotune.cli._text import cell

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return fmt.format(value) if value else "-"
    return "-" if value is None else cell(value)
