"""The contract every backend keeps (see ``autotune.loaders.backends._base.BatchLoader``), checked on the CPU."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import pytest
import torch

from autotune._imports import is_available
from autotune.config.schema import DaliOptions, LoaderConfig, TorchOptions
from autotune.dataset.scan import Dataset, scan
from autotune.loaders.backends import BatchLoader, get_backend
from autotune.loaders.presets import get_preset

BATCH = 5  # 24 images: train gives 4 full batches, eval 4 full + 1 of 4
BACKENDS = [
    "torch",
    pytest.param("dali", marks=pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")),
]
PRESETS = ["imagenet-train", "imagenet-eval"]


def _config(backend: str, batch_size: int = BATCH) -> LoaderConfig:
    if backend == "torch":
        return LoaderConfig(backend, batch_size, torch=TorchOptions(num_workers=0))
    return LoaderConfig(backend, batch_size, dali=DaliOptions(device="cpu", num_threads=1))


def _build(backend: str, dataset: Dataset, preset: str, **kwargs) -> BatchLoader:
    return get_backend(backend).build(dataset, get_preset(preset), _config(backend, kwargs.pop("batch_size", BATCH)), "cpu", **kwargs)


def _epoch(loader: BatchLoader) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    images, labels = [], []
    for x, y in loader:
        images.append(x)
        labels.append(y)
    return images, labels


def _by_index(dataset: Dataset) -> Dataset:
    """The same files with label = position, so labels name the file a sample came from."""
    return dataclasses.replace(dataset, labels=tuple(range(len(dataset))))


def _eval_all(backend: str, dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    loader = _build(backend, dataset, "imagenet-eval")
    try:
        images, labels = _epoch(loader)
    finally:
        loader.close()
    return torch.cat(images), torch.cat(labels)


@pytest.fixture(scope="module")
def odd_dataset(odd_images: Path) -> Dataset:
    return scan(odd_images)


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_batches_shape_dtype_device_range(backend: str, preset: str, dataset: Dataset) -> None:
    p = get_preset(preset)
    loader = _build(backend, dataset, preset, seed=0)
    try:
        images, labels = _epoch(loader)
    finally:
        loader.close()
    assert images
    mean = torch.tensor(p.mean).view(1, 3, 1, 1)
    std = torch.tensor(p.std).view(1, 3, 1, 1)
    for x, y in zip(images, labels, strict=False):
        assert x.dtype == torch.float32 and y.dtype == torch.int64
        assert x.device.type == "cpu" and y.device.type == "cpu"
        assert x.shape[1:] == (3, p.crop, p.crop) and y.shape == (x.shape[0],)
        # normalized [0, 1] pixels: (0 - mean) / std <= x <= (1 - mean) / std
        assert bool(((-mean / std - 1e-3) <= x).all()) and bool((x <= (1 - mean) / std + 1e-3).all())
        assert set(y.tolist()) <= set(range(len(dataset.classes)))
    whole = torch.cat(images)
    assert whole.std() > 0.1  # not a constant image


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_len_is_batches_per_epoch_for_two_epochs(backend: str, preset: str, dataset: Dataset) -> None:
    n = len(dataset)
    train = get_preset(preset).train
    loader = _build(backend, dataset, preset, seed=0)
    try:
        expected = n // BATCH if train else -(-n // BATCH)
        assert len(loader) == expected
        for _ in range(2):
            _, labels = _epoch(loader)
            assert len(labels) == expected
            sizes = [len(y) for y in labels]
            if train:
                assert sizes == [BATCH] * expected  # the last partial batch is dropped
            else:
                assert sizes == [BATCH] * (n // BATCH) + [n % BATCH]  # and kept for eval
    finally:
        loader.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_eval_reads_files_in_order_with_their_labels(backend: str, dataset: Dataset) -> None:
    _, labels = _eval_all(backend, _by_index(dataset))
    assert labels.tolist() == list(range(len(dataset)))
    _, labels = _eval_all(backend, dataset)
    assert labels.tolist() == list(dataset.labels)


@pytest.mark.parametrize("backend", BACKENDS)
def test_train_shuffles_every_sample_once(backend: str, dataset: Dataset) -> None:
    loader = _build(backend, _by_index(dataset), "imagenet-train", batch_size=4, seed=0)  # 24 = 6 x 4: nothing dropped
    try:
        seen = torch.cat(_epoch(loader)[1]).tolist()
    finally:
        loader.close()
    assert sorted(seen) == list(range(len(dataset)))
    assert seen != sorted(seen)


@pytest.mark.parametrize("backend", BACKENDS)
def test_two_shards_cover_the_dataset_without_overlap(backend: str, dataset: Dataset) -> None:
    ds = _by_index(dataset)
    parts = []
    for shard_id in range(2):
        loader = _build(backend, ds, "imagenet-eval", shard_id=shard_id, num_shards=2)
        try:
            assert len(loader) == -(-(len(ds) // 2) // BATCH)
            parts.append(torch.cat(_epoch(loader)[1]).tolist())
        finally:
            loader.close()
    assert len(parts[0]) == len(parts[1]) == len(ds) // 2
    assert not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == list(range(len(ds)))


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.parametrize("backend", BACKENDS)
def test_indices_read_exactly_those_samples_in_that_order(backend: str, preset: str, dataset: Dataset) -> None:
    """``indices``: the samples at these positions, in this order, no shuffle and no shard of the loader's own
    (what AutoLoader builds over the part of an epoch not yet delivered)."""
    ds = _by_index(dataset)
    wanted = [17, 3, 22, 0, 9, 14, 5, 11, 20, 1, 7]  # 11 = 2 batches of 5 + 1
    for _ in range(2):  # and again on the next iter()
        loader = _build(backend, ds, preset, seed=3, shard_id=1, num_shards=2, indices=wanted)
        try:
            got = torch.cat(_epoch(loader)[1]).tolist()
            assert len(loader) == (2 if preset == "imagenet-train" else 3)
        finally:
            loader.close()
        assert got == (wanted[:10] if preset == "imagenet-train" else wanted)


def _assert_same_pictures(a: torch.Tensor, b: torch.Tensor) -> None:
    """Per image and channel, mean and std within a small tolerance (resampling filters differ slightly)."""
    assert a.shape == b.shape
    mean_diff = (a.mean(dim=(2, 3)) - b.mean(dim=(2, 3))).abs().max().item()
    std_diff = (a.std(dim=(2, 3)) - b.std(dim=(2, 3))).abs().max().item()
    assert mean_diff < 0.03, f"per-channel means differ by {mean_diff:.4f}"
    assert std_diff < 0.03, f"per-channel stds differ by {std_diff:.4f}"
    assert (a - b).abs().mean().item() < 0.05


@pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")
def test_eval_pixels_agree_between_backends(dataset: Dataset) -> None:
    x_torch, y_torch = _eval_all("torch", dataset)
    x_dali, y_dali = _eval_all("dali", dataset)
    assert y_torch.tolist() == y_dali.tolist()
    _assert_same_pictures(x_torch, x_dali)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grayscale_cmyk_png_and_non_utf8_names_decode_as_rgb(backend: str, odd_dataset: Dataset) -> None:
    assert any(not _utf8(f) for f in odd_dataset.files)
    images, labels = _eval_all(backend, _by_index(odd_dataset))
    assert labels.tolist() == list(range(len(odd_dataset)))
    assert images.shape == (len(odd_dataset), 3, 224, 224)
    gray = [i for i, f in enumerate(odd_dataset.files) if os.path.basename(f).startswith("gray")]
    p = get_preset("imagenet-eval")
    for i in gray:  # grayscale becomes R = G = B (before normalization)
        rgb = images[i] * torch.tensor(p.std).view(3, 1, 1) + torch.tensor(p.mean).view(3, 1, 1)
        assert (rgb[0] - rgb[1]).abs().max() < 0.02 and (rgb[1] - rgb[2]).abs().max() < 0.02


@pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")
def test_odd_images_agree_between_backends(odd_dataset: Dataset) -> None:
    x_torch, _ = _eval_all("torch", odd_dataset)
    x_dali, _ = _eval_all("dali", odd_dataset)
    _assert_same_pictures(x_torch, x_dali)


@pytest.mark.skipif(not is_available("dali"), reason="DALI is not installed")
def test_16_bit_float_and_exif_turned_images_agree_between_backends(deep_images: Path) -> None:
    """The torch backend clipped a mid-grey 16-bit PNG to white and ignored the EXIF orientation that DALI applies:
    AutoLoader, switching backends, would have trained on both pictures."""
    ds = scan(deep_images)
    assert len(ds) == 3 and ds.skipped == ()
    x_torch, _ = _eval_all("torch", ds)
    x_dali, _ = _eval_all("dali", ds)
    for i, f in enumerate(ds.files):
        assert (x_torch[i] - x_dali[i]).abs().mean().item() < 0.05, os.path.basename(f)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_closed_loader_says_so_when_iterated(backend, dataset):
    """DALI's said it was closed; torch's started its workers again, which nothing would shut down."""
    from autotune.errors import UserError

    loader = _build(backend, dataset, "imagenet-train")
    next(iter(loader))
    loader.close()
    loader.close()  # twice is harmless
    shown = backend.upper() if backend == "dali" else backend
    with pytest.raises(UserError, match=f"^this {shown} loader was closed; build a new one with autotune.build_loader$"):
        next(iter(loader))
