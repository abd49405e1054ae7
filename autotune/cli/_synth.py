"""``autotune synth``: write a synthetic ImageNet-like dataset (for demos, tests and benchmarks)."""

from __future__ import annotations

import argparse
import sys

NAME = "synth"
HELP = "generate a synthetic ImageNet-like dataset of JPEGs"
EXAMPLES = """examples:
  autotune synth /tmp/synth --images 8000 --classes 100
  autotune synth /tmp/tiny --images 64 --classes 4 --min-side 64 --max-side 96
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="folder to write class sub-folders into (existing files are kept)")
    p.add_argument("--images", type=int, default=2000, help="number of images (default: %(default)s)")
    p.add_argument("--classes", type=int, default=10, help="number of class folders (default: %(default)s)")
    p.add_argument("--min-side", type=int, default=300, help="smallest image side in px (default: %(default)s)")
    p.add_argument("--max-side", type=int, default=500, help="largest image side in px (default: %(default)s)")
    p.add_argument("--quality", type=int, default=90, help="JPEG quality (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0)


def run(args: argparse.Namespace) -> int:
    from autotune.dataset.synth import synthesize

    root = synthesize(args.dir, images=args.images, classes=args.classes, min_side=args.min_side, max_side=args.max_side, quality=args.quality, seed=args.seed)
    print(f"wrote {args.images} images in {args.classes} classes under {root}", file=sys.stderr)
    return 0
