"""Fixtures of the trial tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def small_dataset(tmp_path_factory) -> Path:
    """96 small JPEGs in 3 classes: a few batches an epoch at every batch size of the cpu space."""
    from autotune.dataset.synth import synthesize

    return synthesize(tmp_path_factory.mktemp("faults") / "train", images=96, classes=3, min_side=64, max_side=96, workers=1)
