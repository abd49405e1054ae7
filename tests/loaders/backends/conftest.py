from __future__ import annotations

from pathlib import Path

import pytest

from autotune.dataset.scan import Dataset, scan


@pytest.fixture(scope="module")
def dataset(tiny_dataset: Path) -> Dataset:
    """The tiny dataset, scanned: what every backend is built on in these tests."""
    return scan(tiny_dataset)
