#!/usr/bin/env python
"""Where the first batches of a training loop spend their time: a plain tuned loader against AutoLoader.

Each variant runs in a fresh process (the same model, batch size and data; the page cache warmed first):

- ``plain``: ``autotune.build_loader`` of a fixed config (``--params``, default the GPU-decode config with every
  JPEG on the hardware decoder);
- ``autoloader``: ``autotune.AutoLoader`` from nothing, its study in SQLite and a YAML path (the README's use);
- ``autoloader-memory``: the same with ``storage=None, config=None`` (no file written).

Each records the wall clock from building the loader (``t=0``) to every batch of the first ``--batches``, the
time the loop waited inside ``next()``, and, sampled every 5 ms by a thread, the main thread's innermost frames
(where the loop's time goes). Prints a summary per variant and writes everything as JSON.

    python3 benchmarks/autoloader_first_batches.py --data /tmp/s8k --json first-batches.json          # ResNet-50 bf16
    python3 benchmarks/autoloader_first_batches.py --device cpu --model tiny --data /tmp/tiny --images 64 \\
        --batch-size 4 --batches 40 --params '{"backend": "torch", "num_workers": 0}' --json /tmp/fb.json
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoloader_gpu import add_common_args, ensure_data, make_step  # noqa: E402

VARIANTS = ("plain", "autoloader", "autoloader-memory")
MARKS = (1, 5, 10, 20, 36, 62, 93, 124, 155)


class Sampler(threading.Thread):
    """Counts the main thread's innermost frames (file:function) every ``period`` seconds."""

    def __init__(self, period: float = 0.005) -> None:
        super().__init__(daemon=True)
        self.period = period
        self.main = threading.main_thread().ident
        self.inner: collections.Counter[str] = collections.Counter()
        self.ours: collections.Counter[str] = collections.Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.period):
            frame = sys._current_frames().get(self.main)
            if frame is None:
                continue
            self.inner[f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_code.co_name}"] += 1
            f = frame
            while f is not None and "/autotune/" not in f.f_code.co_filename:
                f = f.f_back
            if f is not None:
                self.ours[f"{f.f_code.co_filename.split('/autotune/')[-1]}:{f.f_code.co_name}:{f.f_lineno}"] += 1


def run_one(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    import autotune
    from autotune.config.schema import LoaderConfig
    from autotune.dataset import pagecache
    from autotune.dataset.scan import scan

    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    dataset = scan(a.data)
    pagecache.warm(dataset)
    step = make_step(a.model, a.device, a.batch_size, len(dataset.classes))
    work = Path(tempfile.mkdtemp(prefix="first-batches-"))
    sampler = Sampler()
    sampler.start()
    sync()
    t0 = time.perf_counter()
    if a.one == "plain":
        loader: Any = autotune.build_loader(a.data, LoaderConfig.from_params({**json.loads(a.params), "batch_size": a.batch_size}), device=a.device, seed=0)
    elif a.one == "autoloader":
        loader = autotune.AutoLoader(a.data, device=a.device, config=str(work / "al.yaml"), batch_size=a.batch_size, storage=f"sqlite:///{work}/al.db", seed=0)
    else:
        loader = autotune.AutoLoader(a.data, device=a.device, config=None, batch_size=a.batch_size, storage=None, seed=0)
    built = time.perf_counter() - t0
    at: list[float] = []
    waits: list[float] = []
    while len(at) < a.batches:
        it = iter(loader)
        while len(at) < a.batches:
            w0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            now = time.perf_counter()
            waits.append(round(now - w0, 4))
            step((batch[0], batch[1]))
            at.append(round(time.perf_counter() - t0, 4))
    sync()
    total = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    loader.close()
    marks = {str(k): at[k - 1] for k in MARKS if k <= len(at)}
    n = sum(sampler.inner.values()) or 1
    out = {
        "variant": a.one, "construct_s": round(built, 3), "total_s": round(total, 3), "batches": len(at), "at_batch_s": marks,
        "wait_s": round(sum(waits), 3), "waits_over_50ms": [(i, w) for i, w in enumerate(waits) if w > 0.05],
        "innermost": [(k, round(v / n, 3)) for k, v in sampler.inner.most_common(15)],
        "in_autotune": [(k, round(v / n, 3)) for k, v in sampler.ours.most_common(15)],
        "history": getattr(loader, "history", []),
    }
    steady = [at[i] - at[i - 1] for i in range(len(at) - 30, len(at))] if len(at) > 40 else []
    if steady:
        out["last_30_per_batch_s"] = round(sum(steady) / len(steady), 4)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--batches", type=int, default=124, help="batches per variant (124: four epochs of 8,000 images at 256)")
    p.add_argument("--params", default='{"backend": "dali", "dali_device": "gpu", "num_threads": 4, "prefetch_queue_depth": 2, "hw_decoder_load": 1.0}',
                   help="the plain variant's loader parameters (flat names, JSON)")
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--json", required=True)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(run_one(a)))
        return 0
    ensure_data(Path(a.data), a.images, a.classes, small=a.model == "tiny")
    results = []
    args = list(argv if argv is not None else sys.argv[1:])
    for v in [v.strip() for v in a.variants.split(",") if v.strip()]:
        proc = subprocess.run([sys.executable, __file__, *args, "--one", v], stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            print(f"{v} exited with {proc.returncode}", file=sys.stderr)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        results.append(r)
        print(f"{v}: construct {r['construct_s']} s; at batch {r['at_batch_s']}; waited {r['wait_s']} s; "
              f"steady {r.get('last_30_per_batch_s')} s/batch", file=sys.stderr)
        print("   waits > 50 ms:", r["waits_over_50ms"][:12], file=sys.stderr)
        print("   innermost:", r["innermost"][:8], file=sys.stderr)
        print("   in autotune:", r["in_autotune"][:8], file=sys.stderr)
        for h in r["history"]:
            print(f"   epoch {h['epoch']} batch {h['batch']}: {h['action']} to {h['config']} ({h['reason']})", file=sys.stderr)
        Path(a.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
