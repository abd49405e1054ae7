"""The dataset layer: find the images (an ImageFolder-compatible scan that names and skips bad files), decode
them to RGB, make the demo set, and manage the page cache. Imports nothing of autotune but errors."""

from autotune.dataset.scan import IMG_EXTENSIONS, Dataset, scan

__all__ = ["IMG_EXTENSIONS", "Dataset", "scan"]
