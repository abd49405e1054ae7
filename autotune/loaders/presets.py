"""Pipeline presets shared by every backend, so that a comparison is fair and the tuned loader is the one training uses."""

from __future__ import annotations

import dataclasses

from autotune.errors import UserError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclasses.dataclass(frozen=True)
class Preset:
    """An image pipeline: ``train`` = random resized crop + flip + normalize; eval = resize + center crop + normalize."""

    name: str
    train: bool
    crop: int = 224
    resize: int = 256  # eval: shorter side before the center crop
    scale: tuple[float, float] = (0.08, 1.0)  # train: RandomResizedCrop area range
    ratio: tuple[float, float] = (3 / 4, 4 / 3)
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD


PRESETS: dict[str, Preset] = {
    "imagenet-train": Preset("imagenet-train", train=True),
    "imagenet-eval": Preset("imagenet-eval", train=False),
}


def get_preset(name: str) -> Preset:
    if not isinstance(name, str) or name not in PRESETS:  # a list from a hand-edited YAML is no name either
        raise UserError(f"unknown pipeline {name!r}; use one of: {', '.join(PRESETS)}")
    return PRESETS[name]
