"""Pipeline (c): Albumentations in a Dataset written as a user writes one: OpenCV reads each JPEG, then
RandomResizedCrop, HorizontalFlip, ColorJitter, Normalize and ToTensorV2.

OpenCV's own thread pool is left as it is (a user's script seldom calls ``cv2.setNumThreads``).

    autotune run --dataset benchmarks/pipelines/albu.py:train_set --batch-size 256     # AUTOTUNE_BENCH_DATA=/tmp/s8k
"""

from __future__ import annotations

from typing import Any

import albumentations as A
import cv2
from _bench_images import MEAN, SIZE, STD, data_dir, labelled_files
from albumentations.pytorch import ToTensorV2
from torch.utils.data import Dataset


def train_transform() -> A.Compose:
    return A.Compose([
        A.RandomResizedCrop(size=(SIZE, SIZE)),
        A.HorizontalFlip(),
        A.ColorJitter(),
        A.Normalize(mean=MEAN, std=STD),
        ToTensorV2(),
    ])


class CustomImageDataset(Dataset):
    """An image folder read with OpenCV: ``(transform(image=rgb)["image"], class index)``."""

    def __init__(self, img_dir: Any, transform: Any = None) -> None:
        self.samples = labelled_files(img_dir)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, idx: int) -> tuple[Any, int]:
        path, label = self.samples[idx]
        image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
        if self.transform is not None:
            image = self.transform(image=image)["image"]
        return image, label


def train_set() -> CustomImageDataset:
    return CustomImageDataset(data_dir(), transform=train_transform())
