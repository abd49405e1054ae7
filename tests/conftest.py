from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

# keep every test on the CPU and out of the user's cache
os.environ.setdefault("AUTOTUNE_TEST", "1")


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """24 small JPEGs in 3 classes (64-96 px): fast to decode on 2 cores."""
    from autotune.dataset.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("tiny") / "train", images=24, classes=3, min_side=64, max_side=96, workers=1)


@pytest.fixture()
def workdir(tmp_path, monkeypatch) -> Path:
    """Run in a temporary folder so autotune.yaml, autotune.db and reports/ land there."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture(scope="session")
def deep_images(tmp_path_factory) -> Path:
    """3 images PIL's plain convert("RGB") and DALI read differently: 16-bit grey PNG and TIFF and an EXIF-turned
    JPEG; 2 classes."""
    from autotune.dataset.synth import deep_formats

    return deep_formats(tmp_path_factory.mktemp("deep") / "train")


@pytest.fixture(scope="session")
def odd_images(tmp_path_factory) -> Path:
    """8 images PIL and decoders disagree on most: grayscale and CMYK JPEGs, grayscale/alpha/palette PNGs,
    a PNG named .jpg, and a file name that is not UTF-8; 2 classes."""
    from autotune.dataset.synth import mixed_formats

    return mixed_formats(tmp_path_factory.mktemp("odd") / "train")


@pytest.fixture(scope="module")
def zygote():
    """A pre-imported process that trials fork from, one for the test module; closed after its last test."""
    from autotune.trials.zygote import Zygote

    z = Zygote.start()
    assert z is not None
    yield z
    z.close()


@pytest.fixture()
def sigint_as_in_a_terminal():
    """SIGINT raises KeyboardInterrupt in this process, as in a terminal, for one test. A shell that starts the suite
    in the background (``nohup python -m pytest ... &``) ignores SIGINT, and a test that raises it would then see
    nothing happen. Children started with ``tests.helpers.start_autotune`` reset it on their own."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)
