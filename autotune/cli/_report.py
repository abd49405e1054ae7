"""``autotune report``: write ``reports/<study>/`` (Markdown, self-contained HTML, PNG plots) for a stored study."""

from __future__ import annotations

import argparse
import sys

from autotune.cli._output import hand_edited, write_json
from autotune.cli._types import given

NAME = "report"
HELP = "write the Markdown + HTML report of a stored study"
DESCRIPTION = (
    "Read a study from its storage and write <reports-dir>/<study>/ with report.md, a self-contained report.html\n"
    "and PNG plots: throughput over time, by backend and by knob, parameter importance, the winner against the\n"
    "baselines, memory peaks against the budget, and failures by outcome. 'autotune run' does this at its end.\n"
    "Plots need matplotlib: pip install matplotlib (in the project's folder: pip install -e \".[plot]\")."
)
EXAMPLES = """examples:
  autotune report                                          # the latest study in sqlite:///autotune.db
  autotune report --storage sqlite:///autotune.db --study NAME
  autotune report --study NAME --reports-dir /tmp/reports --json

exit codes: 0 written; 2 bad input (no such storage or study, or another program's study); 130 interrupted
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--storage", type=given, default="sqlite:///autotune.db", metavar="URL", help="Optuna storage URL or journal file (default: %(default)s)")
    p.add_argument("--study", type=given, default=None, metavar="NAME", help="the study (default: the latest one in the storage)")
    p.add_argument("--reports-dir", type=given, default="reports", metavar="DIR", help="where reports go (default: %(default)s)")
    p.add_argument("--json", action="store_true", help="print {study, report_dir, html, markdown, images} as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="print nothing but errors (and the JSON with --json)")


def run(args: argparse.Namespace) -> int:
    from autotune.report import IMAGES, latest_study_name, load, write_report

    name = args.study or latest_study_name(args.storage)
    if not args.study and not args.quiet:
        print(f"study {name} (the latest in the storage)", file=sys.stderr)
    study = load(args.storage, name)
    with hand_edited(name):
        folder = write_report(study, args.storage, args.reports_dir)
    images = [f for _, _, f in IMAGES if (folder / f).exists()]
    if args.json:
        out = {"study": name, "report_dir": str(folder), "html": str(folder / "report.html"), "markdown": str(folder / "report.md"), "images": images}
        write_json(out, indent=2)
        sys.stdout.write("\n")
    elif not args.quiet:
        print(f"wrote {folder}/report.html, report.md and {len(images)} plots", file=sys.stderr)
        print(folder / "report.html")
    return 0
