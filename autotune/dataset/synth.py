"""A synthetic ImageNet-like dataset: class folders of photo-like JPEGs of varied size, made on the spot.

Each image is a smooth random colour field (low-frequency noise, upsampled), a few soft shapes and sensor-like
grain, saved as JPEG at quality 90, sized around 300-500 px like ImageNet's (about 50 KB at 400 px).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from autotune.errors import UserError

logger = logging.getLogger(__name__)

DEMO_IMAGES = 2000
DEMO_CLASSES = 10


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "autotune"


def _image(seed: int, min_side: int, max_side: int) -> np.ndarray:
    from PIL import Image, ImageDraw, ImageFilter

    rng = np.random.default_rng(seed)
    w, h = (int(x) for x in rng.integers(min_side, max_side + 1, size=2))
    # smooth colour field: coarse noise upsampled with bicubic filtering
    coarse = (rng.random((rng.integers(3, 8), rng.integers(3, 8), 3)) * 255).astype(np.uint8)
    img = Image.fromarray(coarse, "RGB").resize((w, h), Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(int(rng.integers(3, 9))):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        x1, y1 = x0 + int(rng.integers(w // 10, w // 2)), y0 + int(rng.integers(h // 10, h // 2))
        colour = tuple(int(c) for c in rng.integers(0, 256, 3))
        if rng.random() < 0.5:
            draw.ellipse((x0, y0, x1, y1), fill=colour)
        else:
            draw.rectangle((x0, y0, x1, y1), fill=colour)
    img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.5, 2.0))))
    arr = np.asarray(img, dtype=np.int16)
    arr = arr + rng.normal(0, 6, arr.shape).astype(np.int16)  # grain: makes the JPEG photo-sized
    return np.clip(arr, 0, 255).astype(np.uint8)


def _write(args: tuple[str, int, int, int, int]) -> int:
    from PIL import Image

    path, seed, min_side, max_side, quality = args
    part = f"{path}.part"  # a full disk leaves no truncated JPEG under the real name (a later run keeps what exists)
    try:
        Image.fromarray(_image(seed, min_side, max_side), "RGB").save(part, "JPEG", quality=quality)
        os.replace(part, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise
    return os.path.getsize(path)


def image_paths(root: str | os.PathLike[str], images: int, classes: int) -> list[Path]:
    """Where :func:`synthesize` writes image ``i`` of ``images``: ``class_<i mod classes>/img_<i>.jpg`` under ``root``."""
    return [Path(root) / f"class_{i % classes:04d}" / f"img_{i:06d}.jpg" for i in range(images)]


def check_counts(images: int, classes: int) -> None:
    """``images`` and ``classes`` a synthetic set can have, else one line (said before any folder is made)."""
    if images < 1:
        raise UserError(f"--images must be at least 1, but got {images}")
    if not 1 <= classes <= images:
        raise UserError(f"--classes must be between 1 and the number of images ({images}), but got {classes}")


def synthesize(
    root: str | os.PathLike[str],
    *,
    images: int = DEMO_IMAGES,
    classes: int = DEMO_CLASSES,
    min_side: int = 300,
    max_side: int = 500,
    quality: int = 90,
    seed: int = 0,
    workers: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Path:
    """Write ``images`` JPEGs spread over ``classes`` class folders under ``root``; existing files are kept.

    ``progress(done, total)`` is called after each image written (``total``: those missing when it started).

    Returns:
        ``root`` as a :class:`~pathlib.Path`.
    """
    check_counts(images, classes)
    if not 8 <= min_side <= max_side:
        raise UserError(f"image sides must satisfy 8 <= min_side <= max_side, but got {min_side}, {max_side}")
    root = Path(root)
    if root.exists() and not root.is_dir():
        raise UserError(f"{str(root)!r} is a file; pass a folder to write the dataset into")
    paths = image_paths(root, images, classes)
    for folder in dict.fromkeys(p.parent for p in paths):
        if folder.exists() and not folder.is_dir():
            raise UserError(f"{str(folder)!r} is a file where a class folder goes; move it away, or pass another folder")
    jobs = []
    for i, p in enumerate(paths):
        p.parent.mkdir(parents=True, exist_ok=True)
        if p.is_dir():  # not an image: counting it as one would leave the class an image short
            raise UserError(f"{str(p)!r} is a folder where an image goes; remove it, or pass another folder")
        if not p.exists():
            jobs.append((str(p), seed * 1_000_003 + i, min_side, max_side, quality))
    if jobs:
        n = workers or min(len(jobs) // 50 + 1, os.cpu_count() or 1)
        done: Iterator[int]
        if n <= 1:
            done = map(_write, jobs)
        else:
            pool = ProcessPoolExecutor(n)
            done = pool.map(_write, jobs, chunksize=32)
        try:
            for k, _ in enumerate(done, 1):
                if progress is not None:
                    progress(k, len(jobs))
        finally:
            if n > 1:
                pool.shutdown(cancel_futures=True)
    return root


def quarter_lines(what: str) -> Callable[[int, int], None]:
    """A ``progress(done, total)`` for :func:`synthesize` that prints a line to stderr at each quarter (plain
    lines: a pipe or a log reads them too)."""
    def progress(done: int, total: int) -> None:
        if done * 4 // total > (done - 1) * 4 // total:
            print(f"  {done:,}/{total:,} {what}", file=sys.stderr, flush=True)  # noqa: T201 - progress lines the caller asked for
    return progress


#: written in the demo folder once every image is there; a folder without it is completed on the next use
DEMO_COMPLETE = ".complete"


def demo_root(images: int = DEMO_IMAGES, classes: int = DEMO_CLASSES) -> Path:
    """Where the demo set lives: ``demo-<images>x<classes>`` under :func:`default_cache_dir`
    (``$XDG_CACHE_HOME/autotune``, by default ``~/.cache/autotune``)."""
    return default_cache_dir() / f"demo-{images}x{classes}"


def demo_dataset(images: int = DEMO_IMAGES, classes: int = DEMO_CLASSES, progress: Callable[[int, int], None] | None = None) -> Path:
    """The demo set in the cache folder (:func:`demo_root`), made on first use (``progress`` as :func:`synthesize`)."""
    root = demo_root(images, classes)
    marker = root / DEMO_COMPLETE
    if not marker.exists():
        logger.info("generating the demo dataset (%d JPEGs) in %s", images, root)
        try:
            root.mkdir(parents=True, exist_ok=True)
            synthesize(root, images=images, classes=classes, progress=progress)
            marker.write_text("ok\n")
        except OSError as e:
            from autotune.errors import UserError

            raise UserError(f"cannot write the demo dataset in {str(root)!r} ({e.strerror or e}); set XDG_CACHE_HOME to a folder you can write, "
                            "or pass --dataset DIR") from None
    return root


def mixed_formats(root: str | os.PathLike[str]) -> Path:
    """Eight images that decoders disagree on most, in 2 classes: grayscale and CMYK JPEGs, grayscale, alpha and
    palette PNGs, a PNG named ``.jpg``, and a file name that is not UTF-8 (``b/caf\\xe9.jpg``).

    Both backends must turn each into the same RGB batch (``tests/loaders/backends``: the CUDA test of the mixed decoder).
    """
    import shutil

    from PIL import Image

    root = Path(root)
    (root / "a").mkdir(parents=True, exist_ok=True)
    (root / "b").mkdir(exist_ok=True)
    rng = np.random.default_rng(1)
    base = Image.fromarray((rng.random((9, 11, 3)) * 255).astype(np.uint8)).resize((88, 72), Image.Resampling.BICUBIC)
    base.save(root / "a" / "rgb.jpg", quality=95)
    base.convert("L").save(root / "a" / "gray.jpg", quality=95)
    base.convert("CMYK").save(root / "a" / "cmyk.jpg", quality=95)
    base.convert("L").save(root / "b" / "gray.png")
    base.convert("RGBA").save(root / "b" / "rgba.png")
    base.convert("P").save(root / "b" / "palette.png")
    base.save(root / "b" / "png_named.jpg", "PNG")
    shutil.copyfile(root / "a" / "rgb.jpg", os.path.join(os.fsencode(root / "b"), b"caf\xe9.jpg"))
    return root


def deep_formats(root: str | os.PathLike[str]) -> Path:
    """Three images whose pixels PIL's plain ``convert("RGB")`` and DALI's decoders read differently, in 2 classes:
    16-bit grey PNG and TIFF, and a JPEG whose EXIF says to turn it a quarter. (A floating-point TIFF, which DALI's
    GPU decoder reads as black, is left out by the scan.)

    Both backends must turn each into the same RGB batch (``tests/loaders/backends``).
    """
    from PIL import Image

    root = Path(root)
    (root / "a").mkdir(parents=True, exist_ok=True)
    (root / "b").mkdir(exist_ok=True)
    ramp = np.linspace(0.0, 1.0, 96 * 64).reshape(64, 96)
    Image.fromarray(np.round(ramp * 65535).astype(np.uint16)).save(root / "a" / "gray16.png")
    Image.fromarray(np.round(ramp[::-1] * 65535).astype(np.uint16)).save(root / "a" / "gray16.tif")
    rng = np.random.default_rng(2)
    tall = Image.fromarray((rng.random((9, 5, 3)) * 255).astype(np.uint8)).resize((60, 108), Image.Resampling.BICUBIC)
    exif = Image.Exif()
    exif[0x0112] = 6  # shown turned a quarter clockwise: 108 wide, 60 high
    tall.save(root / "b" / "exif6.jpg", quality=95, exif=exif)
    return root


def png_bomb(width: int, height: int) -> bytes:
    """A tiny PNG whose header declares ``width x height`` pixels: a decompression bomb's header, for tests."""
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")
