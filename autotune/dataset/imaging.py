"""Decoding images to RGB the same way for every backend, with a guard against decompression bombs.

:func:`read_header` reads only an image's header (PIL opens lazily), so the dataset scan can refuse files that
no decoder can read, or that declare more pixels than :data:`MAX_PIXELS`, before any backend allocates memory
for them. :func:`open_rgb` checks the same limit before it decodes, and decodes as DALI's decoder does: the EXIF
orientation applied, 16-bit and floating-point pixels scaled to 8 bits (PIL's ``convert("RGB")`` clipped them:
a mid-grey 16-bit PNG came out white), so that a batch holds the same pictures whichever backend built it.
"""

from __future__ import annotations

import re
import struct
import warnings

import numpy as np
from PIL import Image, ImageOps

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


#: JPEG start-of-frame markers (baseline, progressive, lossless, arithmetic): they carry the image size
_SOF = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})
_PNG = b"\x89PNG\r\n\x1a\n"
#: the fast reader gives up (and PIL decides) after this many bytes of JPEG segments before the frame header
_FAST_LIMIT = 1 << 20


def _fast_header(f) -> tuple[str, int, int] | None:
    """``(format, width, height)`` of a well-formed JPEG or PNG read from its first segments, about ten times
    faster than ``Image.open``; None for anything else or anything unusual (PIL then reads it, with its errors)."""
    head = f.read(32)
    if head[:8] == _PNG and head[12:16] == b"IHDR":
        w, h = struct.unpack(">II", head[16:24])
        return ("PNG", w, h) if w and h else None
    if head[:3] != b"\xff\xd8\xff":
        return None
    pos = 2
    while pos < _FAST_LIMIT:
        f.seek(pos)
        seg = f.read(9)
        if len(seg) < 4 or seg[0] != 0xFF:
            return None
        marker = seg[1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        if marker == 0xDA or marker == 0xD9 or marker == 0xE2:  # scan data before a frame header; APP2 may be MPO
            return None
        length = (seg[2] << 8) | seg[3]
        if marker in _SOF:
            if len(seg) < 9:
                return None
            h, w = (seg[5] << 8) | seg[6], (seg[7] << 8) | seg[8]
            return ("JPEG", w, h) if w and h else None
        if length < 2:
            return None
        pos += 2 + length
    return None


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
            fast = _fast_header(f)
            if fast is not None:
                if fast[1] * fast[2] > MAX_PIXELS:
                    raise BadImageError(_bomb_message(path, fast[1] * fast[2], f"{fast[1]}x{fast[2]} = "))
                return fast
            f.seek(0)
            img = _open(path, f)
            if img.format == "TIFF" and img.mode in ("I", "I;32", "I;32B", "I;32S"):  # DALI's decoder fails on every batch holding one
                raise BadImageError(f"{printable(path)}: a 32-bit integer TIFF, which DALI cannot decode; convert it to 8 or 16 bits per channel")
            if img.format == "TIFF" and img.mode.startswith("F"):  # nvTIFF: "FP32 conversion is not supported", and the image is black
                raise BadImageError(
                    f"{printable(path)}: a floating-point TIFF, which DALI's GPU decoder reads as black; convert it to 8 or 16 bits per channel"
                )
            return str(img.format), img.width, img.height
    except BadImageError:
        raise
    except Image.UnidentifiedImageError:
        raise BadImageError(f"{printable(path)}: not a readable image (no image format recognised in its header)") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise BadImageError(f"{printable(path)}: not a readable image ({e})") from None


def _to_8_bits(img: Image.Image) -> Image.Image:
    """A 16-bit (``I;16*``, or ``I`` as PIL opens a 16-bit PPM) or floating-point (``F``, 0 to 1) grey image at 8
    bits, rounded as DALI rounds (``v / 257``, ``f * 255``); any other image as it is."""
    if img.mode.startswith("I;16") or img.mode == "I":
        scaled = np.asarray(img, dtype=np.float64) / 257.0
    elif img.mode == "F":
        scaled = np.asarray(img, dtype=np.float64) * 255.0
    else:
        return img
    return Image.fromarray(np.clip(np.floor(scaled + 0.5), 0, 255).astype(np.uint8), "L")


def open_rgb(path: str) -> Image.Image:
    """Open ``path`` as an RGB ``PIL.Image`` (grayscale, CMYK, palette and PNG-named-.jpg included).

    Raises:
        BadImageError: the file cannot be decoded, or it declares more than :data:`MAX_PIXELS` pixels
            (checked from the header, before the pixels are allocated).
    """
    try:
        with open(path, "rb") as f:
            img = _open(path, f)
            ImageOps.exif_transpose(img, in_place=True)  # upright, as DALI decodes it
            return _to_8_bits(img).convert("RGB")
    except BadImageError:
        raise
    except (OSError, SyntaxError, ValueError) as e:
        raise BadImageError(f"{printable(path)}: cannot decode image ({e})") from e
