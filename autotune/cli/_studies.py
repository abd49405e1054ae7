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

    cells = [_cells(r) for r in rows]
    headers = ("name", "trials", "best samples/s", "vs defaults", "best config", "created")
    console = Console(width=max(120, Console().width))
    widths = _fit([[cell(h), *(c[i] for c in cells)] for i, h in enumerate(headers)], console.width)
    if sum(widths) + _FRAME * len(widths) + 1 > console.width:  # a name wider than the terminal: one line, which it wraps, rather than a name cut
        console = Console(width=sum(widths) + _FRAME * len(widths) + 1)
    table = Table(title=cell(f"studies in {mask_url(absolute_url(args.storage))}"))
    for h, w in zip(headers, widths, strict=True):
        table.add_column(h, width=w, justify="right" if h in ("trials", "best samples/s", "vs defaults") else "left", overflow="fold")
    for r, c in zip(rows, cells, strict=True):
        table.add_row(*c, style="red" if r.get("error") else ("dim" if r.get("foreign") else None))
    console.print(table)
    if any(r.get("in_training") and r.get("best_samples_per_s") for r in rows):
        print("(loop): tuned by AutoLoader inside training: samples/s of the whole training loop (loader plus step), not of the loader alone")
    return 0


_FRAME = 3  # a column's border and padding in a Rich table: '│ ' before, ' ' after


def _cells(r: dict):
    """The cells of one study's row: name, trials, best samples/s, vs defaults, best config, created."""
    from autotune.cli._text import cell
    from autotune.report._render import fmt_speedup

    if r.get("error"):
        return [cell(r["name"]), cell("-"), cell("-"), cell("-"), cell(f"unreadable: {r['error']}"), _when(r["created"])]
    if r.get("foreign"):
        return [cell(r["name"]), cell(r["trials"]), cell("-"), cell("-"), cell(f"not made by autotune: {r['foreign']}"), _when(r["created"])]
    return [
        cell(r["name"]),
        cell(f"{r['trials'] - (r.get('queued') or 0)} ({r['complete']} ok)" + (f", {r['queued']} queued" if r.get("queued") else "")
             + (", interrupted (--resume)" if r.get("interrupted") else "")),
        _number(r["best_samples_per_s"], "{:,.1f} (loop)" if r.get("in_training") else "{:,.1f}"),  # the YAML's precision
        cell(fmt_speedup(r["speedup_vs_defaults"]) if r["speedup_vs_defaults"] else "-"),  # as the YAML, show and the report write it
        cell(r["best_config"] or "-"),
        _when(r["created"]),
    ]


def _fit(columns: list[list], width: int, words_fold: tuple[int, ...] = (1,)) -> list[int]:
    """The width of each column (its header and cells) in a table ``width`` characters wide: the first column, the
    names, whole on one line, to be copied into ``--study``; the others from their widest cell down to their
    longest word, the widest first, so that the config keeps its words (squeezed, it read 'dali…', 'thre…'). Where
    that is not enough, the words of the columns ``words_fold`` (the trials) fold too, down to 6 characters;
    figures, configs and times stay whole. A table wider than ``width`` then is one a terminal wraps."""
    widest = [max(text.cell_len for text in column) for column in columns]
    words = [widest[0], *(max(max((len(word) for word in text.plain.split()), default=1) for text in column) for column in columns[1:])]
    folded = [min(w, 6) if i in words_fold else w for i, w in enumerate(words)]
    room = width - _FRAME * len(columns) - 1
    widths = list(widest)
    for least in (words, folded) if sum(folded) <= room else (words,):  # folding words that would not make it fit helps no one
        while sum(widths) > room:
            wide = [i for i in range(1, len(widths)) if widths[i] > least[i]]
            if not wide:
                break
            widths[max(wide, key=lambda i: widths[i])] -= 1
    return widths


def _when(created: object):
    """The creation time to the minute (``2026-11-30 05:06``), UTC as stored; ``--json`` keeps the full stamp."""
    from autotune.cli._text import cell

    if not created:
        return cell("-")
    text = str(created)
    return cell(text[:16].replace("T", " ") if len(text) >= 16 and text[10:11] in ("T", " ") else text)


def _number(value: object, fmt: str):
    """A figure from the study; one that is not a number is shown as it is (escaped), never a crash."""
    from autotune.cli._text import cell

    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return cell(fmt.format(value) if value else "-")
    return cell("-" if value is None else value)
