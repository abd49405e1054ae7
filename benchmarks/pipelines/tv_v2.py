"""Pipeline (a): torchvision's transforms v2 in a Dataset written as a user writes one.

``CustomImageDataset(img_dir, transform)`` reads the folder's JPEGs itself (``torchvision.io.decode_jpeg``) and
applies RandomResizedCrop(224), RandomHorizontalFlip, TrivialAugmentWide, ToDtype/Normalize and RandomErasing.

    autotune run --dataset benchmarks/pipelines/tv_v2.py:train_set --batch-size 256     # AUTOTUNE_BENCH_DATA=/tmp/s8k
"""

from __future__ import annotations

from typing import Any

import torch
from _bench_images import MEAN, SIZE, STD, data_dir, labelled_files
from torch.utils.data import Dataset
from torchvision.io import ImageReadMode, decode_jpeg, read_file
from torchvision.transforms import v2


def train_transform() -> v2.Compose:
    """The training transform, on a uint8 CHW tensor (or a PIL image)."""
    return v2.Compose([
        v2.ToImage(),
        v2.RandomResizedCrop(SIZE, antialias=True),
        v2.RandomHorizontalFlip(),
        v2.TrivialAugmentWide(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
        v2.RandomErasing(),
    ])


class CustomImageDataset(Dataset):
    """An image folder read by hand: ``(transform(image), class index)``."""

    def __init__(self, img_dir: Any, transform: Any = None) -> None:
        self.samples = labelled_files(img_dir)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, idx: int) -> tuple[Any, int]:
        path, label = self.samples[idx]
        image = decode_jpeg(read_file(path), mode=ImageReadMode.RGB)
        if self.transform is not None:
            image = self.transform(image)
        return image, label


def train_set() -> CustomImageDataset:
    return CustomImageDataset(data_dir(), transform=train_transform())
