"""Pipeline (b): timm's training transform (RandAugment ``rand-m9-mstd0.5-inc1``) over timm's ``ImageDataset``.

    autotune run --dataset benchmarks/pipelines/timm_aug.py:train_set --batch-size 256     # AUTOTUNE_BENCH_DATA=/tmp/s8k
"""

from __future__ import annotations

from typing import Any

from _bench_images import SIZE, data_dir
from timm.data import ImageDataset, create_transform


def train_set() -> Any:
    transform = create_transform(SIZE, is_training=True, auto_augment="rand-m9-mstd0.5-inc1")
    return ImageDataset(str(data_dir()), transform=transform)
