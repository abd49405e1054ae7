#!/usr/bin/env python
"""AutoLoader against the alternatives, in a real training loop of a fixed number of samples.

Variants (each in a fresh process, the page cache warmed first, the same model, batch size and samples; a
throwaway run of a few steps goes first, so that no variant pays the machine's first start alone):

- ``autoloader``: ``autotune.AutoLoader`` from nothing (no YAML): it explores, settles and writes a YAML;
- ``autoloader-rerun``: ``AutoLoader`` again, finding that YAML: no exploration (what a second run costs);
- ``offline-yaml``: ``autotune.build_loader`` with the offline-tuned YAML (``--yaml``, from ``autotune run``);
- ``dali-start``: DALI's usual starting point (a thread per core, queue depth 2, GPU decode on a GPU);
- ``torch-defaults``: the ``DataLoader`` defaults (``num_workers=0``).

Each reports the total wall time from building the loader to the last sample (tuning included) and the
throughput after settling (``--skip`` batches after the loader settled, to the end). Writes a JSON list of
``{"variant", "samples", "wall_s", "settled_samples_per_s"}`` to ``--json``.

On the GPU machine (ResNet-50, bf16, channels_last; the offline YAML from the model-in-the-loop study)::

    autotune synth /tmp/autotune-synth-8000 --images 8000 --classes 100
    autotune run --dataset /tmp/autotune-synth-8000 --model resnet50 --amp --channels-last --batch-size 256 \\
        --out /tmp/autoloader-bench/offline.yaml --storage sqlite:////tmp/autoloader-bench/offline.db
    python benchmarks/autoloader_gpu.py --data /tmp/autotune-synth-8000 --yaml /tmp/autoloader-bench/offline.yaml \\
        --variants autoloader --json /tmp/autoloader-bench/a.json          # one variant per command: ~5 minutes each

A smoke check anywhere (seconds)::

    python benchmarks/autoloader_gpu.py --device cpu --model tiny --data /tmp/tiny --images 48 --classes 3 --batch-size 4 \\
        --samples 96 --budget-s 10 --skip 2 --json /tmp/smoke.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness

VARIANTS = ("autoloader", "autoloader-rerun", "offline-yaml", "dali-start", "torch-defaults")


def make_step(model: str, device: str, batch_size: int, num_classes: int):
    """One training step per batch: forward (bf16 autocast on CUDA), cross-entropy, backward, SGD."""
    import torch

    if model != "tiny":
        from autotune.loaders.presets import get_preset
        from autotune.trials.model import ModelSpec, prepare_consumer

        step, _ = prepare_consumer(ModelSpec(name=model, amp=True, channels_last=True), batch_size, device, get_preset("imagenet-train"), num_classes)
        return step
    import torch.nn.functional as F

    net = harness.tiny_model(num_classes, device)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)

    def step(batch: Any) -> None:
        images, labels = batch
        loss = F.cross_entropy(net(images.to(device)), labels.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def dali_start(batch_size: int, device: str) -> dict[str, Any]:
    """DALI's usual starting point, as the study's baseline has it."""
    from autotune.config.fingerprint import usable_cpus
    from autotune.study.space import load_space
    from autotune.study.tuner import TuneSettings, baseline_configs

    space = load_space("default", cores=usable_cpus(), device=device, dali=True).fix("batch_size", batch_size)
    return baseline_configs(space, TuneSettings(device=device, cores=usable_cpus()))["dali-heuristic"]


def warm_machine(a: argparse.Namespace) -> dict[str, Any]:
    """A throwaway run before the measured ones: a few training steps and a few DALI batches.

    The first process on a fresh machine reads the CUDA, cuDNN and nvJPEG libraries from disk and fills their
    caches; on an H200 that made its first batch some 10 s later than the next process's (RESULTS.md, "Where the first
    batches' time goes").
    Without this the variant that runs first pays it alone.
    """
    import torch

    import autotune
    from autotune._imports import is_available
    from autotune.config.schema import LoaderConfig

    t0 = time.perf_counter()
    step = make_step(a.model, a.device, a.batch_size, a.classes)
    params = dali_start(a.batch_size, a.device) if is_available("dali") else {"backend": "torch", "batch_size": a.batch_size, "num_workers": 2}
    loader = autotune.build_loader(a.data, LoaderConfig.from_params(params), device=a.device, seed=0)
    for i, batch in enumerate(loader):
        step((batch[0], batch[1] % a.classes))
        if i == 4:
            break
    if a.device == "cuda":
        torch.cuda.synchronize()
    loader.close()
    print(f"warm-up: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
    return {"variant": "warm-up"}


def run_one(a: argparse.Namespace) -> dict[str, Any]:
    """One variant in this process: the loader, the loop, the clock."""

    import autotune
    from autotune.config.schema import LoaderConfig

    device = "cuda" if a.device == "cuda" else "cpu"
    data = Path(a.data)
    from autotune.dataset import pagecache
    from autotune.dataset.scan import scan

    dataset = scan(data)
    pagecache.warm(dataset)
    step = make_step(a.model, device, a.batch_size, len(dataset.classes))
    work = Path(a.work)
    al_yaml = work / "autoloader.yaml"
    if a.one == "autoloader" and al_yaml.exists():
        al_yaml.unlink()  # from nothing
    def sync() -> None:
        harness.cuda_sync(device)

    sync()
    t0 = time.perf_counter()
    exploring = lambda: False
    if a.one in ("autoloader", "autoloader-rerun"):
        loader: Any = autotune.AutoLoader(data, device=device, config=str(al_yaml), batch_size=a.batch_size, budget_s=a.budget_s,
                                          storage=f"sqlite:///{work}/autoloader.db", seed=0)
        exploring = lambda: loader.exploring
        describe = lambda: loader.settled.describe() if loader.settled else "exploring"
    else:
        if a.one == "offline-yaml":
            cfg: Any = autotune.load_config(a.yaml)
            if cfg.loader.batch_size != a.batch_size:
                print(f"note: {a.yaml} has batch size {cfg.loader.batch_size}, the others run {a.batch_size}", file=sys.stderr)
        elif a.one == "dali-start":
            cfg = LoaderConfig.from_params(dali_start(a.batch_size, device))
        else:
            cfg = LoaderConfig.from_params({"backend": "torch", "batch_size": a.batch_size, "num_workers": 0})
        loader = autotune.build_loader(data, cfg, device=device, seed=0)
        desc = (cfg.loader if hasattr(cfg, "loader") else cfg).describe()
        describe = lambda: desc
    samples = batches = 0
    settled_at: int | None = None
    mark: tuple[float, int] | None = None
    deadline = t0 + a.max_wall_s
    while samples < a.samples and time.perf_counter() < deadline:
        for batch in loader:
            step((batch[0], batch[1]))
            samples += int(batch[1].shape[0])
            batches += 1
            if settled_at is None and not exploring():
                settled_at = batches
            if settled_at is not None and mark is None and batches >= settled_at + a.skip:
                sync()
                mark = (time.perf_counter(), samples)
            if samples >= a.samples or time.perf_counter() >= deadline:
                break
    sync()
    t1 = time.perf_counter()
    loader.close()
    settled = round((samples - mark[1]) / (t1 - mark[0]), 1) if mark and t1 > mark[0] and samples > mark[1] else None
    print(f"{a.one}: {samples} samples in {t1 - t0:.1f} s; settled {settled} samples/s on {describe()}"
          + ("" if samples >= a.samples else f" (stopped at --max-wall-s {a.max_wall_s:g})"), file=sys.stderr)
    for h in getattr(loader, "history", []):  # what AutoLoader did, switch by switch
        print(f"  epoch {h['epoch']} batch {h['batch']}: {h['action']} to {h['config']} ({h['reason']})"
              + (", from the next epoch" if h.get("from_next_epoch") else ""), file=sys.stderr)
    return {"variant": a.one, "samples": samples, "wall_s": round(t1 - t0, 2), "settled_samples_per_s": settled}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", default="/tmp/autotune-synth-8000", help="dataset folder (a synthetic one is made if missing)")
    p.add_argument("--images", type=int, default=8000)
    p.add_argument("--classes", type=int, default=100)
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    p.add_argument("--model", default="resnet50", help="a torchvision model (bf16, channels_last) or 'tiny' (a one-layer net, for smoke checks)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--work", default="/tmp/autoloader-bench", help="AutoLoader's YAML and study go here")
    p.add_argument("--yaml", default=None, help="the offline-tuned YAML (autotune run) for the offline-yaml variant")
    p.add_argument("--samples", type=int, default=1_375_000,
                   help="training samples per variant (1,375,000: about five minutes of ResNet-50 bf16 at the 4,580 samples/s of an H200)")
    p.add_argument("--budget-s", type=float, default=180.0, help="AutoLoader's exploration budget")
    p.add_argument("--skip", type=int, default=20, help="batches after settling left out of the settled throughput")
    p.add_argument("--max-wall-s", type=float, default=560.0, help="stop a variant after this long (the torch defaults are slow)")
    p.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, from: {', '.join(VARIANTS)}")
    p.add_argument("--json", required=True, help="write the results here (a JSON list)")
    p.add_argument("--no-warm-up", action="store_true", help="leave out the throwaway run before the variants (a few steps and batches)")
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)  # internal: run one variant in this process
    a = p.parse_args(argv)
    if a.one:
        print(json.dumps(warm_machine(a) if a.one == "warm-up" else run_one(a)))
        return 0
    wanted = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [v for v in wanted if v not in VARIANTS]
    if bad:
        p.error(f"--variants: unknown {bad[0]!r}; use some of: {', '.join(VARIANTS)}")
    from autotune._imports import is_available

    if "offline-yaml" in wanted and not a.yaml:
        print("skipping offline-yaml: pass --yaml (the YAML autotune run wrote)", file=sys.stderr)
        wanted.remove("offline-yaml")
    if "dali-start" in wanted and not is_available("dali"):
        print("skipping dali-start: DALI is not installed", file=sys.stderr)
        wanted.remove("dali-start")
    Path(a.work).mkdir(parents=True, exist_ok=True)
    harness.ensure_data(Path(a.data), a.images, a.classes, small=a.model == "tiny")
    results = []
    args = [a for a in (argv if argv is not None else sys.argv[1:])]
    env = harness.child_env()
    if not a.no_warm_up:
        subprocess.run([sys.executable, __file__, *args, "--one", "warm-up"], env=env, stdout=subprocess.DEVNULL, check=False)
    for v in wanted:
        proc = subprocess.run([sys.executable, __file__, *args, "--one", v], env=env, stdout=subprocess.PIPE, text=True, check=False)
        if proc.returncode != 0:
            print(f"{v} exited with {proc.returncode}", file=sys.stderr)
            continue
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    harness.write_json(Path(a.json), results, indent=2)
    print(json.dumps(results, indent=2))
    return 0 if len(results) == len(wanted) else 1


if __name__ == "__main__":
    sys.exit(main())
