"""What the benchmark pipelines share: the image folder they read, named by ``AUTOTUNE_BENCH_DATA`` (a pipeline
function takes no arguments), its JPEGs with their class indices, and ImageNet's mean and standard deviation.

The folder is laid out as ``autotune synth`` writes it (and as torchvision's ``ImageFolder`` reads it): one
sub-folder per class.
"""

from __future__ import annotations

import os
from pathlib import Path

DATA_ENV = "AUTOTUNE_BENCH_DATA"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SIZE = 224


def data_dir() -> Path:
    """The image folder: ``$AUTOTUNE_BENCH_DATA``."""
    value = os.environ.get(DATA_ENV)
    if not value:
        raise RuntimeError(f"set {DATA_ENV} to the image folder (one sub-folder per class), e.g. {DATA_ENV}=/tmp/s8k")
    path = Path(value)
    if not path.is_dir():
        raise FileNotFoundError(f"{DATA_ENV}={value} is not a folder")
    return path


def labelled_files(root: Path) -> list[tuple[str, int]]:
    """Every JPEG under ``root`` with its class index (the sorted sub-folders' order), in a stable order."""
    classes = sorted(p.name for p in root.iterdir() if p.is_dir())
    found = [(str(f), i) for i, c in enumerate(classes) for f in sorted((root / c).iterdir())
             if f.suffix.lower() in (".jpg", ".jpeg")]
    if not found:
        raise FileNotFoundError(f"no JPEGs in the class folders of {root}")
    return found
