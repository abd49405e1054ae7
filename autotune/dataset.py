"""Scan an ImageFolder-style dataset (one sub-folder per class) into the file list every backend reads.

The rules are torchvision's ``ImageFolder``: class folders sorted by name, files with an image extension
(case-insensitive) found recursively, symlinks followed. On top of that: symlink loops are visited once,
zero-byte files are skipped and reported, and both backends get the very same ``(file, label)`` list.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
from pathlib import Path

from autotune.errors import DatasetError

logger = logging.getLogger(__name__)

#: torchvision.datasets.folder.IMG_EXTENSIONS
IMG_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


@dataclasses.dataclass(frozen=True)
class Dataset:
    """The scanned dataset: what a backend needs to build a loader."""

    root: str
    classes: tuple[str, ...]
    files: tuple[str, ...]
    labels: tuple[int, ...]
    total_bytes: int
    skipped: tuple[tuple[str, str], ...] = ()  # (path, reason)

    def __len__(self) -> int:
        return len(self.files)

    @property
    def mean_bytes(self) -> int:
        return self.total_bytes // max(1, len(self.files))

    def signature(self) -> str:
        """A cheap content signature: hash of every file's relative path and size."""
        h = hashlib.sha1()
        for f in self.files:
            rel = os.path.relpath(f, self.root)
            h.update(rel.encode("utf-8", "surrogateescape"))
            try:
                h.update(str(os.stat(f).st_size).encode())
            except OSError:
                pass
        return h.hexdigest()[:16]

    def summary(self) -> dict:
        return {
            "path": self.root,
            "samples": len(self.files),
            "classes": len(self.classes),
            "mean_bytes": self.mean_bytes,
            "signature": self.signature(),
        }

    def shard(self, shard_id: int, num_shards: int) -> Dataset:
        """Every ``num_shards``-th sample starting at ``shard_id`` (how DistributedSampler splits without shuffle)."""
        if num_shards == 1:
            return self
        return dataclasses.replace(self, files=self.files[shard_id::num_shards], labels=self.labels[shard_id::num_shards])


def _walk_files(top: str) -> list[str]:
    """All files under ``top``, following symlinks, each real folder visited once (no hang on loops)."""
    out: list[str] = []
    seen: set[tuple[int, int]] = set()
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            st = os.stat(d)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            logger.warning("skipping %s: symlink loop or folder already visited", d)
            continue
        seen.add(key)
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError as e:
            logger.warning("cannot list %s: %s", d, e)
            continue
        subdirs = []
        for e in entries:
            try:
                if e.is_dir(follow_symlinks=True):
                    subdirs.append(e.path)
                elif e.is_file(follow_symlinks=True):
                    out.append(e.path)
            except OSError:
                continue
        stack.extend(reversed(subdirs))
    return out


def scan(path: str | os.PathLike[str]) -> Dataset:
    """Scan ``path`` (one sub-folder per class) or raise a one-line :class:`DatasetError` with the fix."""
    root = Path(path).expanduser()
    if not root.exists():
        raise DatasetError(f"dataset folder {str(root)!r} does not exist; pass --dataset DIR with one sub-folder per class, or use --demo")
    if not root.is_dir():
        raise DatasetError(f"dataset path {str(root)!r} is a file, not a folder; pass the folder that holds one sub-folder per class")
    root = root.resolve()
    try:
        class_dirs = sorted(e.name for e in os.scandir(root) if e.is_dir(follow_symlinks=True))
    except PermissionError as e:
        raise DatasetError(f"cannot read dataset folder {str(root)!r} ({e.strerror}); fix its permissions") from None
    if not class_dirs:
        has_files = any(True for _ in os.scandir(root))
        what = "has images but no class sub-folders" if has_files else "is empty"
        raise DatasetError(f"dataset folder {str(root)!r} {what}; put the images in one sub-folder per class (root/cat/1.jpg, root/dog/2.jpg)")

    files: list[str] = []
    labels: list[int] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    for index, name in enumerate(class_dirs):
        for f in _walk_files(str(root / name)):
            if not f.lower().endswith(IMG_EXTENSIONS):
                continue
            try:
                size = os.stat(f).st_size
            except OSError as e:
                skipped.append((f, f"unreadable: {e.strerror}"))
                continue
            if size == 0:
                skipped.append((f, "zero-byte file"))
                continue
            if not os.access(f, os.R_OK):
                skipped.append((f, "permission denied"))
                continue
            files.append(f)
            labels.append(index)  # ImageFolder's class_to_idx: position among the sorted class folders
            total += size
    for f, why in skipped:
        logger.warning("skipping %s: %s", f, why)
    if not files:
        raise DatasetError(
            f"no readable images in {str(root)!r} (extensions {', '.join(IMG_EXTENSIONS)}); "
            "put JPEG/PNG files in one sub-folder per class"
        )
    return Dataset(str(root), tuple(class_dirs), tuple(files), tuple(labels), total, tuple(skipped))
