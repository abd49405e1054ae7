"""``autotune check``: does this machine still match the one an autotune.yaml was tuned on?"""

from __future__ import annotations

import argparse
import sys

from autotune.cli._output import write_json
from autotune.cli._types import given, positive_float

NAME = "check"
HELP = "say whether an autotune.yaml still fits this machine (exit 0 yes, 1 no, 2 error)"
DESCRIPTION = (
    "Compare this machine's fingerprint (GPU model, count and memory, driver, CUDA, usable CPU cores, library\n"
    "versions) and the dataset with the ones recorded in the YAML. Each difference is printed with whether it\n"
    "matters (a change that can make the tuned config slow or unsafe) or not (hostname, RAM, /dev/shm size).\n"
    "The dataset is compared when --dataset is given, or else when the recorded folder exists here.\n\n"
    "exit codes: 0 this machine matches (differences that do not matter are allowed); 1 a difference that\n"
    "matters, or the file is older than --max-age; 2 the file is missing or not an autotune config."
)
EXAMPLES = """examples:
  autotune check autotune.yaml
  autotune check autotune.yaml --max-age 30          # also stale after 30 days
  autotune check autotune.yaml --dataset /data/train # compare the dataset at another path
  autotune check autotune.yaml || autotune run --dataset /data/train --warm-start autotune.yaml
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "file", type=given, metavar="FILE", nargs="?", default="autotune.yaml", help="the YAML to check (default: %(default)s, what autotune run writes)"
    )
    p.add_argument("--max-age", type=positive_float, default=None, metavar="DAYS", help="a config older than DAYS counts as stale")
    d = p.add_mutually_exclusive_group()
    d.add_argument("--dataset", metavar="DIR", default=None, help="compare this dataset folder (default: the recorded folder, if it exists here)")
    d.add_argument("--no-dataset", action="store_true", help="do not compare the dataset")
    p.add_argument("--json", action="store_true", help="print the differences as JSON on stdout")
    p.add_argument("--quiet", action="store_true", help="print nothing; the exit code says it")


def run(args: argparse.Namespace) -> int:
    from autotune.config import fingerprint
    from autotune.config.files import read_yaml
    from autotune.config.schema import Config
    from autotune.config.staleness import assess, dataset_not_compared
    from autotune.errors import ConfigError, DatasetError, UserError
    from autotune.loaders.presets import get_preset

    if args.dataset is not None and not str(args.dataset).strip():  # compare() would take the recorded folder instead
        raise DatasetError("--dataset is empty; pass the folder to compare with, or leave --dataset out to compare the recorded one")
    cfg = Config.from_dict(read_yaml(args.file, "config"), path=args.file)
    try:  # a YAML build_loader would refuse is no match for any machine
        get_preset(cfg.pipeline)
    except UserError as e:
        raise ConfigError(f"{args.file}: pipeline: {e}") from None
    current = fingerprint.collect()
    try:
        diffs = assess(cfg, current, max_age_days=args.max_age, dataset=args.dataset, compare_dataset=not args.no_dataset)
    except DatasetError as e:
        raise DatasetError(str(e) + ("" if args.dataset else "; or pass --no-dataset")) from None
    stale = any(d.matters for d in diffs)
    unchecked = dataset_not_compared(cfg, args.dataset, compare_dataset=not args.no_dataset)
    if args.json:
        write_json(
            {
                "file": args.file,
                "stale": stale,
                "differences": [d.to_dict() for d in diffs],
                "dataset_compared": unchecked is None and not args.no_dataset,
                **({"dataset_note": f"dataset not compared: {unchecked}"} if unchecked else {}),
            },
            indent=2,
        )
        sys.stdout.write("\n")
    elif not args.quiet:
        for d in sorted(diffs, key=lambda d: not d.matters):
            print(f"{'matters' if d.matters else 'ignored'}  {d}")
        if stale:
            n = sum(d.matters for d in diffs)
            if str((cfg.result or {}).get("tuned_by", "")).startswith("AutoLoader"):  # written by training: training re-tunes it
                fix = "run the training again: AutoLoader explores again and rewrites it"
            else:
                fix = f"re-tune with: {cfg.retune_command(args.file, args.dataset)}"  # as it was tuned: its pipeline, ranks, model
            print(f"{args.file}: STALE: {n} {'difference that matters' if n == 1 else 'differences that matter'}; {fix}")
        else:
            print(
                f"{args.file}: OK: this machine matches"
                + (f" ({len(diffs)} {'difference that does' if len(diffs) == 1 else 'differences that do'} not matter)" if diffs else "")
            )
        if unchecked:
            print(f"dataset not compared: {unchecked}")
    return 1 if stale else 0
