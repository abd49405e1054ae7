#!/usr/bin/env python
"""A real data-parallel training run from a tuned YAML: one process per GPU (``torchrun``), DDP, each rank's
loader built with ``autotune.build_loader(..., shard_id=rank, num_shards=world)``.

Prints and writes (``--json``) the total training samples/s of all ranks together, each rank's rate and the share
of its time its host thread was blocked in the loader's ``next()`` (``loader_wait_share``; the GPU may still be
busy with earlier steps meanwhile, so it is a guide: the rates are what to compare). With ``--ceiling``, one process measures the one-GPU ceiling (the same
training steps on one batch already on the GPU); with ``--resident``, the DDP run trains every rank on one batch it
keeps (gradients still all-reduced, no loader). Read together, N times the ceiling -> DDP resident -> DDP with the
loaders splits what a run loses into communication and loading.

On a GPU node (ResNet-50, bf16, channels_last; about 2 minutes)::

    torchrun --nproc_per_node 2 benchmarks/ddp_train.py --data /tmp/synth8k --yaml autotune.yaml \\
        --model resnet50 --amp --channels-last --seconds 30 --json ddp.json
    torchrun --nproc_per_node 2 benchmarks/ddp_train.py ... --resident   # the same, no loader
    python benchmarks/ddp_train.py --ceiling --data /tmp/synth8k --yaml autotune.yaml --model resnet50 --amp --channels-last

On a CPU machine (a smoke run: gloo, a tiny model)::

    torchrun --nproc_per_node 2 benchmarks/ddp_train.py --data DIR --yaml autotune.yaml --device cpu --model tiny --seconds 3
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import time
from pathlib import Path

import harness


def _args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="ImageFolder dataset")
    p.add_argument("--yaml", required=True, help="the tuned autotune.yaml")
    p.add_argument("--model", default="resnet50", help="a torchvision classification model, or 'tiny' (one conv layer, for smoke runs)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--warmup", type=int, default=10, help="training steps before the clock starts")
    p.add_argument("--seconds", type=float, default=30.0, help="timed training, after the warm-up")
    p.add_argument("--ceiling", action="store_true", help="one process: the model's rate on one resident batch")
    p.add_argument("--resident", action="store_true", help="DDP on one batch each rank keeps: communication, no loader")
    p.add_argument("--autoloader", action="store_true",
                   help="each rank's loader an autotune.AutoLoader from nothing (no YAML; the YAML's batch size), tuned in the loop")
    p.add_argument("--budget-s", type=float, default=60.0, help="the AutoLoader's exploration budget")
    p.add_argument("--json", help="append the result to this JSON list")
    return p.parse_args(argv)


def _model(args: argparse.Namespace, classes: int, device: str):
    import torch
    import torchvision

    if args.model == "tiny":
        model = harness.tiny_model(classes, device)
    else:
        model = getattr(torchvision.models, args.model)(num_classes=classes).to(device)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    return model


def _step_fn(model, args: argparse.Namespace, device: str):
    import torch

    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    dtype = torch.bfloat16 if args.amp else None

    def step(images, labels) -> None:
        if args.channels_last:
            images = images.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device_type="cuda" if device.startswith("cuda") else "cpu", dtype=dtype or torch.float32, enabled=args.amp):
            loss = loss_fn(model(images), labels)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


_sync = harness.cuda_sync


def _append(path: str | None, row: dict) -> None:
    print(json.dumps(row), flush=True)
    if path:
        harness.append_rows(Path(path), [row])


def ceiling(args: argparse.Namespace) -> None:
    import torch

    import autotune

    cfg = autotune.load_config(args.yaml)
    device = "cuda:0" if args.device == "cuda" else "cpu"
    b = cfg.batch_size
    classes = int(cfg.dataset.get("classes") or 1000) if isinstance(cfg.dataset, dict) else 1000
    model = _model(args, classes, device)
    step = _step_fn(model, args, device)
    images = torch.randn(b, 3, 224, 224, device=device)
    labels = torch.randint(0, classes, (b,), device=device)
    for _ in range(args.warmup):
        step(images, labels)
    _sync(device)
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < args.seconds:
        step(images, labels)
        n += b
        if n % (8 * b) == 0:
            _sync(device)
    _sync(device)
    rate = n / (time.perf_counter() - t0)
    _append(args.json, {"measure": "ceiling", "ranks": 1, "model": args.model, "batch_size": b, "samples_per_s": round(rate, 1)})


def train(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import autotune

    rank, world, local = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)), int(os.environ.get("LOCAL_RANK", 0))
    if args.device == "cuda":
        torch.cuda.set_device(local)  # before anything touches CUDA on this rank
        device = f"cuda:{local}"
    else:
        device = "cpu"
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    cfg = autotune.load_config(args.yaml, world_size=world)
    if args.autoloader:
        loader = autotune.AutoLoader(args.data, device=device, config=None, batch_size=cfg.batch_size, budget_s=args.budget_s, storage=None, seed=0)
    else:
        loader = autotune.build_loader(args.data, cfg, device=device, shard_id=rank, num_shards=world, seed=0)
    classes = int(cfg.dataset.get("classes") or 1000) if isinstance(cfg.dataset, dict) else 1000
    model = _model(args, classes, device)
    ddp = DDP(model, device_ids=[local] if args.device == "cuda" else None)
    step = _step_fn(ddp, args, device)

    def batches():
        while True:
            yield from loader

    gen = it = batches()
    if args.resident:  # one real batch, kept: the same steps and all-reduces with no loader behind them
        kept = next(it)
        it = iter(lambda: kept, None)
    for _ in range(args.warmup):
        images, labels = next(it)
        step(images, labels)
    _sync(device)
    dist.barrier()
    n, waited, t0 = 0, 0.0, time.perf_counter()
    settled_at: tuple[float, int] | None = None  # (seconds, samples) when an AutoLoader settled
    stop = torch.zeros(1, device=device)
    while True:
        if args.autoloader and settled_at is None and loader.settled is not None:
            settled_at = (time.perf_counter() - t0, n)
        w0 = time.perf_counter()
        images, labels = next(it)
        waited += time.perf_counter() - w0
        step(images, labels)
        n += int(labels.shape[0])
        if n // int(labels.shape[0]) % 8 == 0:  # agree on when to stop, every 8 steps
            stop.fill_(1.0 if time.perf_counter() - t0 >= args.seconds else 0.0)
            dist.all_reduce(stop, op=dist.ReduceOp.MAX)
            if stop.item() > 0:
                break
    _sync(device)
    elapsed = torch.tensor([time.perf_counter() - t0], device=device)
    counts = torch.tensor([float(n)], device=device)
    per_rank = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_gather(per_rank, counts / elapsed)
    wait_share = [torch.zeros(1, device=device) for _ in range(world)]
    dist.all_gather(wait_share, torch.tensor([waited], device=device) / elapsed)
    dist.all_reduce(counts)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    if rank == 0:
        row = {
            "measure": "ddp-resident" if args.resident else "ddp-autoloader" if args.autoloader else "ddp-training", "ranks": world,
            "model": args.model, "config": (loader.settled or cfg.loader).describe() if args.autoloader else cfg.loader.describe(),
            "total_samples_per_s": round(float(counts.item() / elapsed.item()), 1),
            "per_rank": [round(float(x.item()), 1) for x in per_rank],
            "loader_wait_share": [round(float(x.item()), 3) for x in wait_share],
        }
        if args.autoloader:  # the rate from the settling on, every rank alike (they switch at the same batch)
            row["settled_after_s"] = None if settled_at is None else round(settled_at[0], 1)
            if settled_at is not None and float(elapsed.item()) > settled_at[0]:
                row["settled_samples_per_s"] = round(world * (n - settled_at[1]) / (float(elapsed.item()) - settled_at[0]), 1)
            row["candidates"] = len([h for h in loader.history if h.get("action") != "settle"])
        _append(args.json, row)
    # an explicit end: the suspended epoch (and the loader's threads behind it) closed before the loader and the
    # process group, not finalised in any order at interpreter exit
    gen.close()
    del images, labels, it, gen
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    dist.barrier()
    # DDP holds the process group: dropped first, destroy_process_group ends gloo's threads here. Left to the
    # interpreter's exit, a gloo thread still freeing the barrier's tensors asked for the GIL while Python finalised,
    # and the process aborted ("terminate called without an active exception"), one run in a few on a busy machine
    del step, ddp, model
    gc.collect()
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    args = _args(argv)
    if args.resident and args.autoloader:
        raise SystemExit("error: --resident trains on one kept batch and --autoloader tunes the loader; pass one of them")
    ceiling(args) if args.ceiling else train(args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
