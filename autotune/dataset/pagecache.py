"""Page-cache control for measurements: warm (read everything once, untimed) or cold (evict before a trial)."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

import psutil

if TYPE_CHECKING:
    from autotune.dataset.scan import Dataset

logger = logging.getLogger(__name__)

MODES = ("warm", "cold")


def fits_in_ram(dataset: Dataset, fraction: float = 0.5) -> bool:
    """Whether the dataset's files fit in ``fraction`` of the memory available now."""
    return dataset.total_bytes <= fraction * psutil.virtual_memory().available


def warm(dataset: Dataset, chunk: int = 1 << 20) -> bool:
    """Read every file once so trials measure the loader, not the disk. Skipped (False) when it won't fit."""
    if not fits_in_ram(dataset):
        logger.warning("dataset (%.1f GiB) does not fit in the page cache: measuring it as it is", dataset.total_bytes / 2**30)
        return False
    for f in dataset.files:
        try:
            with open(f, "rb", buffering=0) as fh:
                while fh.read(chunk):
                    pass
        except OSError:
            pass
    return True


def evict(dataset: Dataset) -> int:
    """Drop the dataset's files from the page cache (``posix_fadvise(DONTNEED)``; no root needed).

    Returns:
        How many files were advised.
    """
    n = 0
    for f in dataset.files:
        try:
            fd = os.open(f, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            n += 1
        except OSError:
            pass
        finally:
            os.close(fd)
    return n
