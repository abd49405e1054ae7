"""Scan an ImageFolder-style dataset (one sub-folder per class) into the file list every backend reads.

The rules are torchvision's ``ImageFolder``: every sub-folder is a class (hidden ones too), classes sorted by
name give the label indices, files with an image extension (case-insensitive) are found recursively with
symlinks followed, in ``sorted(os.walk(..., followlinks=True))`` order. Both backends get the very same
``(file, label)`` list. Where ImageFolder would hang, fail later or fail outright, the scan skips and reports:

- a symlink loop is walked once (ImageFolder repeats it until the OS refuses the path);
- zero-byte files, files that are not regular files (a FIFO would block a reader), unreadable files;
- files whose header is not an image, whose format not every backend decodes (a GIF named ``.jpg``), or
  whose header declares more than :data:`autotune.imaging.MAX_PIXELS` pixels (a decompression bomb):
  only the header is read, about 0.1 ms a file; ``scan(path, check_headers=False)`` turns this off;
- a class folder with no usable image keeps its label index (ImageFolder raises instead), with a warning.

File names that are not UTF-8 stay ``str`` with surrogate escapes, as ``os.scandir`` returns them, in the file
list both backends read; what is shown or recorded (messages, ``summary()`` in the YAML and the report) has
``\\xNN`` escapes instead (:func:`autotune._paths.printable`), so it prints and serialises anywhere.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from autotune.dataset.imaging import DECODABLE_FORMATS, BadImageError, read_header
from autotune.dataset.paths import printable
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
    excluded: tuple[str, ...] = ()  # files left out after the scan (:meth:`without`), named as :meth:`name_of` does

    def __len__(self) -> int:
        return len(self.files)

    def count_text(self) -> str:
        """How much there is, as the run's lines say it: "1,200 images"."""
        return f"{len(self):,} {self.unit}"

    @property
    def unit(self) -> str:
        """What one item is called in the run's lines."""
        return "images"

    @property
    def mean_bytes(self) -> int:
        return self.total_bytes // max(1, len(self.files))

    def signature(self) -> str:
        """A cheap content signature: hash of every file's relative path and size.

        The scan computes it as it goes (no second pass over a million files); a dataset made from another
        (``dataclasses.replace``, :meth:`without`) stats its files again once, then keeps it too.
        """
        kept = self.__dict__.get("_signature")  # the fields are frozen: a kept signature never goes stale
        if kept is not None:
            return kept
        h = _Signature(self.root)
        for f in self.files:
            try:
                h.add(f, os.stat(f).st_size)
            except OSError:
                h.add(f, None)
        return self._keep_signature(h.hexdigest())

    def _keep_signature(self, sig: str) -> str:
        object.__setattr__(self, "_signature", sig)  # not a field: replace() drops it
        return sig

    def summary(self) -> dict:
        """What the YAML and the report record; a path that is not UTF-8 is shown with ``\\xNN`` escapes.

        ``excluded`` (only when files were left out with :meth:`without`) names them relative to the root; the
        other figures describe the files that remain.
        """
        out = {
            "path": printable(self.root),
            "samples": len(self.files),
            "classes": len(self.classes),
            "mean_bytes": self.mean_bytes,
            "signature": self.signature(),
        }
        if self.excluded:
            out["excluded"] = list(self.excluded)
        return out

    def name_of(self, path: str) -> str:
        """``path`` relative to the root, printable: how ``dataset.excluded`` in the YAML names a file."""
        return printable(os.path.relpath(path, self.root))

    def without(self, names: Iterable[str], reason: str = "excluded") -> Dataset:
        """This dataset less the files ``names`` (relative to the root, as :meth:`name_of` writes them).

        Each name is added to ``excluded``, present or not: a file removed since keeps counting as left out.
        Files that are left out move to ``skipped`` with ``reason``.
        """
        names = [n for n in dict.fromkeys(names) if n not in self.excluded]
        if not names:
            return self
        drop = set(names)
        keep = [i for i, f in enumerate(self.files) if self.name_of(f) not in drop]
        gone = [f for i, f in enumerate(self.files) if self.name_of(f) in drop]
        size = 0
        for f in gone:
            try:
                size += os.stat(f).st_size
            except OSError:
                pass
        return dataclasses.replace(
            self, files=tuple(self.files[i] for i in keep), labels=tuple(self.labels[i] for i in keep),
            total_bytes=self.total_bytes - size, skipped=(*self.skipped, *((f, reason) for f in gone)),
            excluded=(*self.excluded, *names),
        )

    def shard(self, shard_id: int, num_shards: int) -> Dataset:
        """Every ``num_shards``-th sample starting at ``shard_id`` (how DistributedSampler splits without shuffle)."""
        if num_shards == 1:
            return self
        return dataclasses.replace(self, files=self.files[shard_id::num_shards], labels=self.labels[shard_id::num_shards])


def _folder_key(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


#: file systems that hold the kernel's views (processes, devices, cgroups), never images: a link into one (``/sys``
#: links every device from several places) is a walk without end
PSEUDO_FILE_SYSTEMS = frozenset({
    "proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs", "securityfs", "pstore", "bpf",
    "configfs", "fusectl", "mqueue", "hugetlbfs", "binfmt_misc", "autofs", "efivarfs", "rpc_pipefs", "nsfs",
})


@functools.lru_cache(maxsize=1)
def _pseudo_devices() -> dict[int, str]:
    """The device number of each mounted pseudo file system (``/proc/self/mountinfo``), with its type."""
    out: dict[int, str] = {}
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                fields = line.split()
                if "-" not in fields:
                    continue
                fstype = fields[fields.index("-") + 1]
                if fstype in PSEUDO_FILE_SYSTEMS:
                    major, _, minor = fields[2].partition(":")
                    out[os.makedev(int(major), int(minor))] = fstype
    except (OSError, ValueError):  # not Linux, or no /proc: nothing is known to be such a file system
        return {}
    return out


def pseudo_file_system(path: str) -> str | None:
    """The type of the kernel's file system that ``path`` lies on (``sysfs`` for ``/sys``), or None."""
    try:
        return _pseudo_devices().get(os.stat(path).st_dev)
    except OSError:
        return None


def _walk_files(top: str, above: frozenset[tuple[int, int]] = frozenset(), skipped: list[tuple[str, str]] | None = None) -> list[str]:
    """Every non-folder entry under ``top`` in ``sorted(os.walk(top, followlinks=True))`` order.

    Like ``os.walk`` it follows symlinked folders, but a folder that is its own ancestor (a symlink loop), one
    of the folders in ``above`` (the dataset root and the folders that hold it), one already walked through
    another link, or one on a file system of the kernel's (``/proc``, ``/sys``) is skipped (added to ``skipped``
    with why, as a folder that cannot be listed) instead of being walked again and again.
    """
    skipped = [] if skipped is None else skipped
    found: list[tuple[str, list[str]]] = []
    stack: list[tuple[str, frozenset[tuple[int, int]]]] = [(top, above)]
    walked: set[tuple[int, int]] = set()
    pseudo = _pseudo_devices()
    while stack:
        d, ancestors = stack.pop()
        try:
            st = os.stat(d)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in ancestors:
            skipped.append((d, "symlink loop (links back to a folder above it)"))
            continue
        if key in walked:  # two links to one folder: its files once, as one sample each
            skipped.append((d, "a folder already walked through another link"))
            continue
        if st.st_dev in pseudo:
            skipped.append((d, f"on a {pseudo[st.st_dev]} file system (the kernel's), which holds no images"))
            continue
        walked.add(key)
        ancestors = ancestors | {key}
        try:
            entries = list(os.scandir(d))
        except OSError as e:
            skipped.append((d, f"folder cannot be listed ({e.strerror})"))
            continue
        names: list[str] = []
        # in reverse name order onto the stack, so that folders are walked in name order: of two links to one
        # folder, the first by name is the one walked, on every file system
        for entry in sorted(entries, key=lambda e: e.name, reverse=True):
            try:
                is_dir = entry.is_dir()  # follows symlinks, as os.walk does
            except OSError:
                is_dir = False
            if is_dir:
                stack.append((os.path.join(d, entry.name), ancestors))
            else:
                names.append(entry.name)
        found.append((d, sorted(names)))
    found.sort(key=lambda x: x[0])
    return [os.path.join(d, n) for d, names in found for n in names]


class _Signature:
    """The running hash behind :meth:`Dataset.signature`: each file's path relative to the root, then its size."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.prefix = root.rstrip(os.sep) + os.sep
        self.h = hashlib.sha1()

    def add(self, f: str, size: int | None) -> None:
        rel = f[len(self.prefix):] if f.startswith(self.prefix) else os.path.relpath(f, self.root)
        self.h.update(rel.encode("utf-8", "surrogateescape"))
        if size is not None:
            self.h.update(str(size).encode())

    def hexdigest(self) -> str:
        return self.h.hexdigest()[:16]


def _check_file(f: str, check_headers: bool) -> tuple[int, str | None]:
    """``(size, None)`` for a usable image, else ``(0, reason)``."""
    try:
        st = os.stat(f)
    except OSError as e:
        return 0, f"unreadable: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return 0, "not a regular file"
    if st.st_size == 0:
        return 0, "zero-byte file"
    if not os.access(f, os.R_OK):
        return 0, "permission denied"
    if check_headers:
        try:
            fmt, _, _ = read_header(f)
        except BadImageError as e:
            return 0, str(e).removeprefix(f"{printable(f)}: ")
        if fmt not in DECODABLE_FORMATS:
            return 0, f"{fmt} data, which not every backend decodes; convert it to JPEG or PNG"
    return st.st_size, None


def _class_dir(entry: os.DirEntry, skipped: list[tuple[str, str]]) -> bool:
    """Whether a top-level entry is a class folder; a link that loops or leads nowhere is skipped, and named."""
    try:
        return entry.is_dir(follow_symlinks=True)
    except OSError as e:  # ELOOP: a link to itself, or a cycle of links
        skipped.append((entry.path, str(e.strerror or e)))
        return False


def _tell_skipped(skipped: list[tuple[str, str]], root: Path, warn: bool) -> None:
    """Name the first few skipped files and folders as warnings, count the rest in one line (each at INFO)."""
    shown = skipped if not warn or len(skipped) <= SKIPPED_SHOWN + 1 else skipped[:SKIPPED_SHOWN]
    for f, why in shown:
        logger.log(logging.WARNING if warn else logging.INFO, "skipping %s: %s", f, why)
    if len(shown) < len(skipped):  # a folder of broken files is a few lines and a count, not a screenful
        logger.warning("skipping %d more unusable files or folders under %s (each is logged at level INFO: autotune --verbose shows them)",
                       len(skipped) - len(shown), root)
        for f, why in skipped[len(shown):]:
            logger.info("skipping %s: %s", f, why)


#: unusable files named one by one as warnings; the rest are counted in one line (all of them at --verbose)
SKIPPED_SHOWN = 5


def _from_here(p: Path) -> str:
    """`` (looked for from /where/the/process/runs)`` for a relative path: a script run from another folder misses it."""
    return "" if p.is_absolute() else f" (looked for from {printable(os.getcwd())})"


def _meant_a_function(path: str) -> str | None:
    """The line for a dataset path that is no folder but ``FILE.py:FUNC`` or half of it (the file alone, the file or
    the function missing beside the colon): the image folder's own line would not say what the form is."""
    module, colon, func = path.rpartition(":")
    form = "FILE.py:FUNC (FUNC: the function that returns your Dataset)"
    if colon and (module.endswith(".py") or not module) and not func:
        return f"dataset path {path!r} names no function after the colon; pass {form}"
    if colon and (module.endswith(".py") or not module) and not func.isidentifier():
        return f"dataset path {path!r}: {func!r} after the colon is not a function's name; pass {form}"
    if colon and not module:
        return f"dataset path {path!r} names no file before the colon; pass FILE.py:{func}, the file that defines {func}"
    if colon and module.endswith(".py"):  # a whole target, where only a folder or a Dataset object is taken
        return (f"dataset path {path!r} names a pipeline function, not a folder of images, which only `autotune run --dataset` "
                f"takes; here pass a folder, or in Python the Dataset that {func}() returns")
    if path.endswith(".py") and os.path.isfile(path):
        return f"dataset path {path!r} is a Python file, not a folder of images; pass {form} to `autotune run`, or in Python the Dataset"
    return None


def scan(path: str | os.PathLike[str], *, check_headers: bool = True, warn: bool = True) -> Dataset:
    """Scan ``path`` (one sub-folder per class) or raise a one-line :class:`DatasetError` with the fix.

    Args:
        path: the dataset folder.
        check_headers: read each image's header (about 0.1 ms a file) and skip files that are not images,
            are in a format not every backend decodes, or declare more than
            :data:`autotune.imaging.MAX_PIXELS` pixels (decompression bombs).
        warn: log each skipped file as a warning; False logs them as diagnostics only (a second scan of a
            folder already scanned, whose caller shows ``Dataset.skipped`` its own way).

    Returns:
        The :class:`Dataset`; skipped files and the reasons are in ``Dataset.skipped`` and logged.
    """
    if not str(path).strip():  # Path("") is the current folder: an unset variable must not scan wherever the process runs
        raise DatasetError("the dataset path is empty; pass the folder that holds one sub-folder per class")
    root = Path(path).expanduser()
    if not root.is_dir() and (hint := _meant_a_function(str(path))):
        raise DatasetError(hint)
    if not root.exists() and root.is_symlink():
        raise DatasetError(f"dataset path {str(root)!r} is a symbolic link that leads nowhere (a loop, or its target is gone); point it at the dataset folder")
    if not root.exists():
        raise DatasetError(
            f"dataset folder {str(root)!r} does not exist{_from_here(root)}; check the path: it names the folder that holds one sub-folder per class"
        )
    if not root.is_dir():
        raise DatasetError(f"dataset path {str(root)!r} is a file, not a folder; pass the folder that holds one sub-folder per class")
    kernel = pseudo_file_system(str(root))
    if kernel is not None:  # /sys links every device from several places: a walk of minutes and gigabytes
        raise DatasetError(f"dataset path {str(root)!r} is on a {kernel} file system (the kernel's), not a folder of images; "
                           "pass the folder that holds one sub-folder per class")
    root = root.resolve()
    folders: list[tuple[str, str]] = []  # skipped folders: told with the files, not counted among them (Dataset.skipped)
    try:
        class_dirs = sorted(e.name for e in os.scandir(root) if _class_dir(e, folders))
    except PermissionError as e:
        raise DatasetError(f"cannot read dataset folder {str(root)!r} ({e.strerror}); fix its permissions") from None
    if not class_dirs:
        _tell_skipped(folders, root, warn)  # a class folder link that loops: named before the error
        names = [e.name for e in os.scandir(root)]
        images = any(n.lower().endswith(IMG_EXTENSIONS) for n in names)
        what = (
            "has no class sub-folder but links that loop or lead nowhere (named above)"
            if folders
            else "has images but no class sub-folders"
            if images
            else f"holds no images and no class sub-folders (only {len(names)} other file{'s' if len(names) != 1 else ''}, such as {names[0]!r})"
            if names
            else "is empty"
        )
        raise DatasetError(f"dataset folder {str(root)!r} {what}; put the images in one sub-folder per class (root/cat/1.jpg, root/dog/2.jpg)")

    above = frozenset(k for k in map(_folder_key, [str(root), *map(str, root.parents)]) if k is not None)
    files: list[str] = []
    labels: list[int] = []
    skipped: list[tuple[str, str]] = []
    total = 0
    sig = _Signature(str(root))
    for index, name in enumerate(class_dirs):
        for f in _walk_files(str(root / name), above, folders):
            if not f.lower().endswith(IMG_EXTENSIONS):
                continue
            size, why = _check_file(f, check_headers)
            if why is not None:
                skipped.append((f, why))
                continue
            files.append(f)
            labels.append(index)  # ImageFolder's class_to_idx: position among the sorted class folders
            total += size
            sig.add(f, size)
    _tell_skipped(folders + skipped, root, warn)
    empty = sorted(set(class_dirs) - {class_dirs[i] for i in set(labels)})
    if empty and files and warn:
        logger.warning("class folder(s) with no usable image: %s (their label indices stay reserved)", ", ".join(empty))
    if not files:
        raise DatasetError(f"no readable images in {str(root)!r} (extensions {', '.join(IMG_EXTENSIONS)}); put JPEG/PNG files in one sub-folder per class")
    dataset = Dataset(str(root), tuple(class_dirs), tuple(files), tuple(labels), total, tuple(skipped))
    dataset._keep_signature(sig.hexdigest())
    return dataset
