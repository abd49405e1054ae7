"""``autotune doctor``: a table of checks (ok / warn / fail), each with its measured value and a fix."""

from __future__ import annotations

import argparse
import json
import sys

NAME = "doctor"
HELP = "check this machine (and a dataset) for what would make tuning fail or mislead"
DESCRIPTION = (
    "Check Python, torch and CUDA, the GPUs and driver, DALI and its flavour, CPUs, /dev/shm, the locked-memory\n"
    "limit and the container, then read one batch with the torch DataLoader and with DALI (CPU, and GPU when\n"
    "there is one). With --dataset, also count the images, list their formats, look for unreadable files and say\n"
    "whether the dataset fits in the page cache. Every warning and failure comes with one line: the fix.\n\n"
    "exit codes: 0 all ok (on a CPU-only machine, no GPU is not a warning), 1 any warning, 2 any failure."
)
EXAMPLES = "examples:\n  autotune doctor\n  autotune doctor --dataset /data/train\n  autotune doctor --json --no-smoke"

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", metavar="DIR", help="also check this dataset folder (one sub-folder per class)")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON on stdout")
    parser.add_argument("--no-smoke", action="store_true", help="skip the one-batch loader tests (faster)")


def run(args: argparse.Namespace) -> int:
    from autotune import doctor

    checks = doctor.run_checks(args.dataset, smoke=not args.no_smoke)
    code = doctor.exit_code(checks)
    if args.json:
        status = {0: "ok", 1: "warn", 2: "fail"}[code]
        print(json.dumps({"status": status, "exit_code": code, "checks": [c.to_dict() for c in checks]}, indent=2))
        return code
    print_table(checks)
    return code


def print_table(checks: list, file=None) -> None:
    """The checks as a table, then one ``fix`` line for every warn and fail, then the counts."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(file=file or sys.stdout, width=max(100, Console(file=file or sys.stdout).width))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("value", overflow="fold")
    for c in checks:
        table.add_row(Text(c.name), Text(c.status.value, style=_STYLE[c.status.value]), Text(c.value))
    console.print(table)
    for c in checks:
        if c.fix and c.status.value != "ok":
            console.print(Text.assemble((f"{c.status.value} ", _STYLE[c.status.value]), (f"{c.name}: ", "bold"), ("fix: " + c.fix)), soft_wrap=True)
    counts = {s: sum(c.status.value == s for c in checks) for s in ("ok", "warn", "fail")}
    console.print(Text(f"{counts['ok']} ok, {counts['warn']} warn, {counts['fail']} fail"))
