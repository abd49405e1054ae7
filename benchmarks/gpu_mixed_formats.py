"""Mixed-format dataset through the DALI GPU backend and the torch backend: same labels, RGB, same pictures.

Builds a small dataset of the images decoders disagree on most (grayscale and CMYK JPEGs, grayscale, alpha and
palette PNGs, a PNG named .jpg, a file name that is not UTF-8) plus files the scan must skip (zero-byte,
garbage, a decompression-bomb header, a symlink loop), then reads it with the eval preset through

- the torch backend (PIL decode, torchvision transforms), delivered to ``cuda``;
- the DALI backend with GPU decoding (``loader.dali.device: gpu``, the ``mixed`` decoder), delivered to ``cuda``;

and prints, per file: label agreement, the image shape (3 channels), the per-channel means of both and their
largest difference. Exit code 0 only if every file agrees (labels equal, 3 x 224 x 224, means within
``--tol``) and the files that must be skipped were skipped.

Run on the GPU machine, from the repository root::

    python benchmarks/gpu_mixed_formats.py            # or: --keep DIR to keep the generated dataset
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path


def build_dataset(root: Path) -> tuple[list[str], list[str]]:
    """The odd images (2 classes) and the files the scan must skip; returns (usable names, skipped names)."""
    from PIL import Image

    from autotune.dataset.synth import mixed_formats, png_bomb

    mixed_formats(root)
    usable = ["rgb.jpg", "gray.jpg", "cmyk.jpg", "gray.png", "rgba.png", "palette.png", "png_named.jpg", "caf\\xe9.jpg"]

    (root / "a" / "zero.jpg").write_bytes(b"")
    (root / "a" / "garbage.jpg").write_bytes(b"not an image" * 20)

    (root / "b" / "bomb.png").write_bytes(png_bomb(60000, 60000))
    jpg = io.BytesIO()
    Image.new("RGB", (8, 8)).save(jpg, "JPEG")
    data = bytearray(jpg.getvalue())
    i = data.find(b"\xff\xc0")
    struct.pack_into(">HH", data, i + 5, 50000, 50000)
    (root / "b" / "bomb.jpg").write_bytes(bytes(data))
    os.symlink("..", root / "b" / "loop")
    return usable, ["zero.jpg", "garbage.jpg", "bomb.png", "bomb.jpg"]


def read_all(backend: str, dataset, device: str):
    """Every image and label of the eval preset, one batch per file, in file order."""
    import torch

    from autotune.config.schema import DaliOptions, LoaderConfig, TorchOptions
    from autotune.loaders.backends import get_backend
    from autotune.loaders.presets import get_preset

    if backend == "torch":
        cfg = LoaderConfig("torch", 1, torch=TorchOptions(num_workers=0))
    else:
        cfg = LoaderConfig("dali", 1, dali=DaliOptions(device="gpu", num_threads=2, hw_decoder_load=0.0))
    loader = get_backend(backend).build(dataset, get_preset("imagenet-eval"), cfg, device)
    try:
        xs, ys = [], []
        for x, y in loader:
            xs.append(x.float().cpu())
            ys.append(y.cpu())
    finally:
        loader.close()
    return torch.cat(xs), torch.cat(ys)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda", help="where batches are delivered (default: %(default)s)")
    p.add_argument("--tol", type=float, default=0.05, help="largest per-channel mean difference allowed, normalized units (default: %(default)s)")
    p.add_argument("--keep", metavar="DIR", help="build the dataset in DIR and keep it")
    args = p.parse_args(argv)

    import torch

    from autotune.dataset.paths import printable
    from autotune.dataset.scan import scan

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA GPU visible: this check needs the DALI GPU decoder", file=sys.stderr)
        return 2
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="autotune-mixed-"))
    root = work / "train"
    if root.exists():
        shutil.rmtree(root)
    try:
        usable, must_skip = build_dataset(root)
        ds = scan(root)
        ok = True
        skipped = sorted(printable(os.path.basename(f)) for f, _ in ds.skipped)
        print(f"scan: {len(ds)} images, skipped {len(ds.skipped)}: " + "; ".join(f"{printable(os.path.basename(f))} ({why})" for f, why in ds.skipped))
        if sorted(must_skip) != skipped or len(ds) != len(usable):
            print(f"FAIL scan: expected {len(usable)} images and {sorted(must_skip)} skipped")
            ok = False

        x_t, y_t = read_all("torch", ds, args.device)
        x_d, y_d = read_all("dali", ds, args.device)
        if len(x_t) != len(ds) or len(x_d) != len(ds):
            print(f"FAIL: torch gave {len(x_t)} images, DALI {len(x_d)}, the dataset has {len(ds)}")
            return 1
        print(f"{'file':<16} {'label t/d/scan':<15} {'shape t':<14} {'shape d':<14} {'mean torch (R,G,B)':<24} {'mean dali (R,G,B)':<24} {'max |d|':>8}  verdict")
        for i, f in enumerate(ds.files):
            mt = x_t[i].mean(dim=(1, 2))
            md = x_d[i].mean(dim=(1, 2))
            diff = (mt - md).abs().max().item()
            labels_ok = int(y_t[i]) == int(y_d[i]) == ds.labels[i]
            shape_ok = tuple(x_t[i].shape) == tuple(x_d[i].shape) == (3, 224, 224)
            good = labels_ok and shape_ok and diff < args.tol
            ok &= good
            fmt = lambda m: "(" + ", ".join(f"{v:+.3f}" for v in m.tolist()) + ")"  # noqa: E731
            print(
                f"{printable(os.path.basename(f)):<16} {f'{int(y_t[i])}/{int(y_d[i])}/{ds.labels[i]}':<15} {str(tuple(x_t[i].shape)):<14} "
                f"{str(tuple(x_d[i].shape)):<14} {fmt(mt):<24} {fmt(md):<24} {diff:>8.4f}  {'ok' if good else 'FAIL'}"
            )
        print("all files agree" if ok else "some files disagree")
        return 0 if ok else 1
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
