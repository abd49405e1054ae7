"""``autotune synth``: write a synthetic ImageNet-like dataset (for demos, tests and benchmarks)."""

from __future__ import annotations

import argparse
import errno
import sys
from pathlib import Path

from autotune.cli._types import int_in

NAME = "synth"
HELP = "generate a synthetic ImageNet-like dataset of JPEGs"
EXAMPLES = """examples:
  autotune synth /tmp/synth --images 8000 --classes 100
  autotune synth /tmp/tiny --images 64 --classes 4 --min-side 64 --max-side 96
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", metavar="DIR", help="folder to write class sub-folders into (existing files are kept)")
    p.add_argument("--images", type=int_in(1, 10_000_000), default=2000, help="number of images (default: %(default)s)")
    p.add_argument("--classes", type=int_in(1, 100_000), default=10, help="number of class folders (default: %(default)s)")
    p.add_argument("--min-side", type=int_in(8, 8192), default=300, help="smallest image side in px, 8 to 8192 (default: %(default)s)")
    p.add_argument("--max-side", type=int_in(8, 8192), default=500, help="largest image side in px, 8 to 8192 (default: %(default)s)")
    p.add_argument("--quality", type=int_in(1, 100), default=90, help="JPEG quality, 1 to 100 (default: %(default)s)")
    p.add_argument("--seed", type=int_in(0, 2**32 - 1), default=0, help="random seed: the same seed writes the same images (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from concurrent.futures.process import BrokenProcessPool

    from autotune.dataset.paths import printable
    from autotune.dataset.synth import (
        check_counts,
        image_paths,
        quarter_lines,
        synthesize,
    )
    from autotune.errors import UserError

    if args.min_side > args.max_side:
        raise UserError(f"--min-side {args.min_side} is larger than --max-side {args.max_side}; swap them")
    if not args.dir.strip():  # Path("") is the current folder
        raise UserError("DIR is empty; pass the folder to write the class sub-folders into")
    check_counts(args.images, args.classes)  # before the folder is made: a refused command leaves nothing behind
    if Path(args.dir).exists() and not Path(args.dir).is_dir():
        raise UserError(f"{args.dir!r} is a file; pass a folder to write the class sub-folders into")
    try:
        Path(args.dir).mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create {args.dir!r} ({e.strerror or e}); pass a folder you can write") from None
    kept = sum(p.is_file() for p in image_paths(args.dir, args.images, args.classes))
    try:
        root = synthesize(
            args.dir,
            images=args.images,
            classes=args.classes,
            min_side=args.min_side,
            max_side=args.max_side,
            quality=args.quality,
            seed=args.seed,
            progress=quarter_lines("images") if args.images - kept >= 500 and not getattr(args, "quiet", False) else None,
        )
    except (MemoryError, BrokenProcessPool) as e:  # a large --max-side: each process draws a whole image in float64
        how = "not enough memory" if isinstance(e, MemoryError) else "a drawing process died, most often for want of memory,"
        raise UserError(
            f"{how} to draw images of up to {args.max_side} px ({args.max_side**2 * 3 * 8 // 2**20:,} MiB each while drawn, "
            "one per core); pass a smaller --max-side (the images written so far are kept)"
        ) from None
    except OSError as e:  # a full disk, a folder made read-only meanwhile: the images written so far are whole and kept
        fix = "free some space or pass another DIR" if e.errno in (errno.ENOSPC, errno.EDQUOT) else "pass a folder you can write"
        raise UserError(
            f"cannot write the images under {args.dir!r} ({e.strerror or e}); {fix} (the images written so far are kept, and the same command completes them)"
        ) from None
    if kept == args.images:
        print(
            f"wrote nothing: all {args.images} images were already under {printable(root)} (existing files are kept; pass another DIR for new ones)",
            file=sys.stderr,
        )
    else:
        print(
            f"wrote {args.images - kept} images in {args.classes} classes under {printable(root)}" + (f" ({kept} already there, kept)" if kept else ""),
            file=sys.stderr,
        )
    return 0
