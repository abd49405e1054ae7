"""What the dropped last batch costs a DALI loader: the same folder with and without the partial batch's images.

Train presets drop the last partial batch. A torch ``DataLoader`` never loads those samples; DALI's reader still fills
the last batch and decodes it, and the iterator drops it. On a set of a few batches that is a large share of the work.

    python benchmarks/dali_tail.py --dataset DIR --batch-size 256 [--threads 2] [--epochs 5]

Copies DIR to a temporary folder cut to a whole number of batches, then times ``autotune.build_loader`` (DALI, CPU
decode) over ``--epochs`` epochs of each, after one untimed epoch, and prints samples delivered per second.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path


def rate(root: Path, batch: int, threads: int, epochs: int) -> tuple[float, int]:
    import autotune
    from autotune.config.schema import LoaderConfig

    cfg = LoaderConfig.from_params({"backend": "dali", "batch_size": batch, "dali_device": "cpu", "num_threads": threads, "prefetch_queue_depth": 2})
    loader = autotune.build_loader(root, cfg, device="cpu")
    try:
        for _ in loader:  # one untimed epoch: the pipeline's start
            pass
        n, t0 = 0, time.perf_counter()
        for _ in range(epochs):
            for _, labels in loader:
                n += len(labels)
        return n / (time.perf_counter() - t0), n // epochs
    finally:
        loader.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument("--batch-size", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--epochs", type=int, default=5)
    a = ap.parse_args()
    from autotune.dataset.scan import scan

    files = sorted(Path(f) for f in scan(a.dataset).files)  # the images the loader reads (no marker or stray files)
    whole = len(files) // a.batch_size * a.batch_size
    if whole == 0 or whole == len(files):
        raise SystemExit(f"{len(files)} files: pick a --batch-size that leaves a partial last batch (and at least one whole one)")
    with tempfile.TemporaryDirectory() as tmp:
        cut = Path(tmp) / "cut"
        for p in files[:whole]:
            (cut / p.relative_to(a.dataset)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, cut / p.relative_to(a.dataset))
        for name, root in ((f"{len(files)} images (last {len(files) - whole} dropped)", a.dataset), (f"{whole} images (none dropped)", cut)):
            r, per_epoch = rate(root, a.batch_size, a.threads, a.epochs)
            print(f"{name}: {per_epoch} delivered per epoch, {r:,.0f} samples/s")


if __name__ == "__main__":
    main()
