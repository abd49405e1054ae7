"""Decoding images to RGB the same way for every backend, with a guard against decompression bombs."""

from __future__ import annotations

from PIL import Image

#: Refuse images with more pixels than this (a 16k x 16k image); PIL's own default only warns below 2x this.
MAX_PIXELS = 16384 * 16384


class BadImageError(Exception):
    """An image that cannot be decoded; the message names the file."""


def open_rgb(path: str) -> Image.Image:
    """Open ``path`` as an RGB ``PIL.Image`` (grayscale, CMYK, palette and PNG-named-.jpg included)."""
    try:
        with open(path, "rb") as f:
            img = Image.open(f)
            if img.width * img.height > MAX_PIXELS:
                raise BadImageError(f"{path}: {img.width}x{img.height} pixels is over the {MAX_PIXELS} limit (decompression bomb?)")
            return img.convert("RGB")
    except BadImageError:
        raise
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as e:
        raise BadImageError(f"{path}: cannot decode image ({e})") from e
