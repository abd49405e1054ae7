"""Where AutoLoader's time goes before it settles: its construction, each loader it builds, and the first batches.

Runs, in one process, on one dataset: ``build_loader`` of a config twice (a first start and a rebuild, each to
its first batch), then AutoLoader from nothing in a training loop of ``--samples`` samples, timing its
construction and every loader it builds (build, first batch). Prints one line per event and writes them as JSON.

    python3 benchmarks/autoloader_costs.py --data /tmp/s8k --json costs.json              # ResNet-50 bf16 on CUDA
    python3 benchmarks/autoloader_costs.py --device cpu --model tiny --samples 4000 --json costs.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from autoloader_gpu import add_common_args, dali_start, ensure_data, make_step


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_args(p)
    p.add_argument("--samples", type=int, default=60_000, help="training samples of the AutoLoader loop")
    p.add_argument("--json", required=True)
    a = p.parse_args(argv)
    ensure_data(Path(a.data), a.images, a.classes, small=a.model == "tiny")
    import torch

    import autotune
    from autotune._imports import is_available
    from autotune.autoloader import _loader
    from autotune.config.schema import LoaderConfig

    cuda = a.device == "cuda"
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    events: list[dict[str, Any]] = []
    t_start = time.perf_counter()

    def event(what: str, seconds: float, **extra: Any) -> None:
        row = {"at_s": round(time.perf_counter() - t_start, 2), "event": what, "seconds": round(seconds, 3), **extra}
        events.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    step = make_step(a.model, a.device, a.batch_size, a.classes)
    params = dali_start(a.batch_size, a.device) if is_available("dali") else {"backend": "torch", "batch_size": a.batch_size, "num_workers": 4}
    cfg = LoaderConfig.from_params(params)
    for what in ("first start", "rebuild"):
        t0 = time.perf_counter()
        loader = autotune.build_loader(a.data, cfg, device=a.device, seed=0)
        t1 = time.perf_counter()
        it = iter(loader)
        next(it)
        sync()
        event(f"build_loader {what}", time.perf_counter() - t0, build_s=round(t1 - t0, 3), config=cfg.describe())
        loader.close()

    real = _loader.build_from_dataset

    class Timed:
        def __init__(self, inner: Any, desc: str, built_s: float, reads: int | None) -> None:
            self.inner, self.desc, self.built_s, self.reads = inner, desc, built_s, reads

        def __iter__(self):
            t0 = time.perf_counter()
            first = True
            for batch in self.inner:
                if first:
                    event("autoloader first batch", time.perf_counter() - t0, build_s=round(self.built_s, 3), config=self.desc, reads=self.reads)
                    first = False
                yield batch

        def close(self) -> None:
            t0 = time.perf_counter()
            self.inner.close()
            event("autoloader close", time.perf_counter() - t0, config=self.desc)

    def build(ds: Any, loader: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        inner = real(ds, loader, **kw)
        return Timed(inner, loader.describe(), time.perf_counter() - t0, None if kw.get("indices") is None else len(kw["indices"]))

    _loader.build_from_dataset = build
    work = Path(tempfile.mkdtemp(prefix="autoloader-costs-"))
    sync()
    t0 = time.perf_counter()
    al = autotune.AutoLoader(a.data, device=a.device, config=str(work / "autoloader.yaml"), batch_size=a.batch_size, storage=f"sqlite:///{work}/al.db", seed=0)
    event("autoloader construct", time.perf_counter() - t0)
    samples = batches = 0
    t_loop = time.perf_counter()
    explored = False
    gaps: list[float] = []  # seconds between consecutive batches (the loop's step included), the first 60
    prev = t_loop
    while samples < a.samples:
        for images, labels in al:
            if len(gaps) < 60:
                sync()
                now = time.perf_counter()
                gaps.append(round(now - prev, 3))
                prev = now
            step((images, labels))
            samples += int(labels.shape[0])
            batches += 1
            if not explored and not al.exploring:
                sync()
                explored = True
                event("settled", time.perf_counter() - t_loop, batches=batches, config=al.settled.describe())
            if samples >= a.samples:
                break
    sync()
    event("loop", time.perf_counter() - t_loop, samples=samples, batches=batches)
    event("first batches", sum(gaps), gaps=gaps)
    al.close()
    for h in al.history:
        print(f"  epoch {h['epoch']} batch {h['batch']}: {h['action']} to {h['config']} ({h['reason']})", file=sys.stderr)
    Path(a.json).write_text(json.dumps({"events": events, "history": al.history}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
