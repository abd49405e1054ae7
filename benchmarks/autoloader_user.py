"""AutoLoader over a user's own Dataset, in a training loop of a fixed number of epochs: the wall time, each epoch's
time, the configs it tried and what it settled on.

For the container limits of the user's pipelines (``/dev/shm`` at 64 MiB: the caller remounts it, as
``cpu-logs/2026-12-04-shm/command.sh`` does), run with the checkout under test first on ``PYTHONPATH``: the same
command over two checkouts compares them.

    AUTOTUNE_BENCH_DATA=/tmp/synth2k python benchmarks/autoloader_user.py --pipeline tv_v2 --batch-size 32 --epochs 6 --budget 30

``--folder DIR`` runs AutoLoader over an image folder instead (the built-in preset, ``AutoLoader(DIR, ...)``).

The loop does what a training step does to a batch on the CPU: it reads every page of it (a sum over every
1,024th value), so a loader whose batches wait in ``/dev/shm`` pays for the reads as training would.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pipeline", default="tv_v2", help="a module of benchmarks/pipelines/ with train_set() (default: %(default)s)")
    p.add_argument("--folder", default=None, help="an image folder: AutoLoader over it with the built-in preset, instead of --pipeline")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--epochs", type=int, default=6)
    p.add_argument("--budget", type=float, default=30.0, help="AutoLoader's budget_s")
    p.add_argument("--device", default="cpu")
    p.add_argument("--json", default=None, help="also write the result to this file")
    a = p.parse_args(argv)
    sys.path.insert(0, str(HERE / "pipelines"))
    import torch

    import autotune

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    dataset = a.folder or importlib.import_module(a.pipeline).train_set()
    start = time.monotonic()
    loader = autotune.AutoLoader(dataset, batch_size=a.batch_size, device=a.device, config=None, storage=None, budget_s=a.budget, seed=0)
    epochs = []
    try:
        for _ in range(a.epochs):
            t0, n = time.monotonic(), 0
            for images, *_labels in loader:
                float(torch.as_tensor(images).reshape(-1)[::1024].sum())
                n += len(images)
            epochs.append({"samples": n, "s": round(time.monotonic() - t0, 2)})
            print(f"epoch {len(epochs)}: {n} samples in {epochs[-1]['s']} s", flush=True)
    finally:
        loader.close()
    out = {"module": autotune.__file__, "pipeline": f"folder {a.folder}" if a.folder else a.pipeline, "batch_size": a.batch_size, "budget_s": a.budget, "epochs": epochs,
           "wall_s": round(time.monotonic() - start, 2), "settled": loader.settled.describe() if loader.settled else None,
           "failed": sum(h["reason"] == "failed" for h in loader.history), "tried": [h["config"] for h in loader.history]}
    print(json.dumps(out, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
