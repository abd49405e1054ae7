from __future__ import annotations

import os
from pathlib import Path

import pytest

# keep every test on the CPU and out of the user's cache
os.environ.setdefault("AUTOTUNE_TEST", "1")


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """24 small JPEGs in 3 classes (64-96 px): fast to decode on 2 cores."""
    from autotune.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("tiny") / "train", images=24, classes=3, min_side=64, max_side=96, workers=1)


@pytest.fixture()
def workdir(tmp_path, monkeypatch) -> Path:
    """Run in a temporary folder so autotune.yaml, autotune.db and reports/ land there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture(scope="session")
def odd_images(tmp_path_factory) -> Path:
    """8 images PIL and decoders disagree on most: grayscale and CMYK JPEGs, grayscale/alpha/palette PNGs,
    a PNG named .jpg, and a file name that is not UTF-8; 2 classes."""
    import shutil

    import numpy as np
    from PIL import Image

    root = tmp_path_factory.mktemp("odd") / "train"
    (root / "a").mkdir(parents=True)
    (root / "b").mkdir()
    rng = np.random.default_rng(1)
    base = Image.fromarray((rng.random((9, 11, 3)) * 255).astype(np.uint8)).resize((88, 72), Image.BICUBIC)
    base.save(root / "a" / "rgb.jpg", quality=95)
    base.convert("L").save(root / "a" / "gray.jpg", quality=95)
    base.convert("CMYK").save(root / "a" / "cmyk.jpg", quality=95)
    base.convert("L").save(root / "b" / "gray.png")
    base.convert("RGBA").save(root / "b" / "rgba.png")
    base.convert("P").save(root / "b" / "palette.png")
    base.save(root / "b" / "png_named.jpg", "PNG")
    shutil.copyfile(root / "a" / "rgb.jpg", os.path.join(os.fsencode(root / "b"), b"caf\xe9.jpg"))
    return root
