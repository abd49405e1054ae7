"""Decoding images to RGB the same way for every backend, with a guard against decompression bombs.

:func:`read_header` reads only an image's header (PIL opens lazily), so the dataset scan can refuse files that
no decoder can read, or that declare more pixels than :data:`MAX_PIXELS`, before any backend allocates memory
for them. :func:`open_rgb` checks the same limit before it decodes.
"""

from __future__ import annotations

import re
import warnings

from PIL import Image

from autotune.dataset.paths import printable

#: Refuse images with more pixels than this: PIL's own decompression-bomb error threshold
#: (2 x its default ``Image.MAX_IMAGE_PIXELS``), about 13,377 x 13,377.
MAX_PIXELS = 2 * 89_478_485

#: Formats (as PIL names them) that both backends decode; DALI reads JPEG, PNG, BMP, TIFF, PNM and WebP.
DECODABLE_FORMATS = frozenset({"JPEG", "MPO", "PNG", "BMP", "TIFF", "PPM", "WEBP"})


class BadImageError(Exception):
    """An image that cannot be decoded; the message starts with the file's path (bytes that are not UTF-8 as ``\\xNN``)."""


def _bomb_message(path: str, pixels: int, size: str = "") -> str:
    return (
        f"{printable(path)}: refusing to decode an image of {size}{pixels:,} pixels, over the {MAX_PIXELS:,} pixel limit "
        "(a decompression bomb or a huge image); remove it from the dataset or downscale it"
    )


def _check_size(path: str, img: Image.Image) -> None:
    pixels = img.width * img.height
    if pixels > MAX_PIXELS:
        raise BadImageError(_bomb_message(path, pixels, f"{img.width}x{img.height} = "))


def _open(path: str, f) -> Image.Image:
    """``Image.open`` (header only) with PIL's bomb error turned into a :class:`BadImageError` naming the file."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # our own limit decides
            img = Image.open(f)
    except Image.DecompressionBombError as e:
        m = re.search(r"\((\d+) pixels\)", str(e))
        raise BadImageError(_bomb_message(path, int(m.group(1)) if m else MAX_PIXELS + 1)) from None
    _check_size(path, img)
    return img


def read_header(path: str) -> tuple[str, int, int]:
    """The format PIL detects from the content (not the name) and the size, reading only the header.

    Args:
        path: the image file.

    Returns:
        ``(format, width, height)``, e.g. ``("PNG", 640, 480)`` for a PNG named ``.jpg``.

    Raises:
        BadImageError: the header is not an image PIL knows, or it declares more than :data:`MAX_PIXELS`.
    """
    try:
        with open(path, "rb") as f:
            img = _open(path, f)
            return str(img.format), img.width, img.height
    except BadImageError:
        raise
    except Image.UnidentifiedImageError:
        raise BadImageError(f"{printable(path)}: not a readable image (no image format recognised in its header)") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise BadImageError(f"{printable(path)}: not a readable image ({e})") from None


def open_rgb(path: str) -> Image.Image:
    """Open ``path`` as an RGB ``PIL.Image`` (grayscale, CMYK, palette and PNG-named-.jpg included).

    Raises:
        BadImageError: the file cannot be decoded, or it declares more than :data:`MAX_PIXELS` pixels
            (checked from the header, before the pixels are allocated).
    """
    try:
        with open(path, "rb") as f:
            img = _open(path, f)
            return img.convert("RGB")
    except BadImageError:
        raise
    except (OSError, SyntaxError, ValueError) as e:
        raise BadImageError(f"{printable(path)}: cannot decode image ({e})") from e
