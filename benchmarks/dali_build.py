"""Where a DALI trial's build goes: the pipeline's definition, ``Pipeline.build``, the PyTorch iterator, the first batch.

A default run's DALI trial spends 1.7-2.2 s building its pipeline in a warm process on an H100 and 2.2-2.6 s on an
H200, against 1.5 s of measured windows: the build decides how many configs a minute sees. This probe builds the
same pipeline as ``autotune.build_loader`` (:func:`autotune.loaders.backends._dali._graph`), several configs, in
interleaved rounds, all in one process (as a warm trial process builds them one after another), and times each
step, so that a change aimed at the build knows which step to aim at:

- ``define_s``: ``Pipeline(...)`` and the graph (the operators' Python side);
- ``build_s``: ``Pipeline.build()`` (the operators' set-up: threads, the decoders' and their memory);
- ``iterator_s``: ``DALIGenericIterator`` (it prepares no batch);
- ``first_s``: the first batch, then ``close_s``: the pipeline released.

Each config is named by ``--config NAME=JSON`` (LoaderConfig params); by default a set that varies one knob at a time
on the device (``--device cuda``: GPU decode with the hardware decoder's share 0, 0.65 and 1, threads 4 and 12,
queue 1 and 3, batch 64 and 256, and DALI's CPU decode; ``--device cpu``: CPU decode only). Rounds visit the configs
in a rotated order. The JSON has every reading, the per-config medians, the command and the commit.

``--held`` also builds each config beside the idle pipeline with a GPU decoder that
:func:`autotune.loaders.backends._dali.hold_decoders` keeps built in a process (``..., held`` rows, right after the
same config alone; the held pipeline released again after each), to show the codec library's set-up that every build
pays when none is kept. ``--rate-s S`` times S seconds of batches after the first (``rate``: images/s), to show that
the held pipeline costs the measured one nothing.

``--parallel 2,3`` also builds the first config in that many fresh processes at once, each released from a barrier once
its CUDA context and DALI are ready (as trial processes built ahead would, beside the trial that builds its own),
once a round: whether two or three builds side by side take the time of one (``parallel`` rows, each process's steps).

    python benchmarks/dali_build.py --dataset /tmp/s8k --device cuda --rounds 3 --out /tmp/dali-build.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import harness  # first: puts the repository on sys.path (the checkout's autotune)

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.loaders.presets import get_preset

STEPS = ("define_s", "build_s", "iterator_s", "first_s", "close_s")


def default_configs(device: str) -> dict[str, dict[str, Any]]:
    """One knob at a time around DALI's usual start on ``device``."""
    cpu = {"backend": "dali", "batch_size": 128, "dali_device": "cpu", "num_threads": 8, "prefetch_queue_depth": 2}
    if device == "cpu":
        return {"cpu t8 b128": cpu, "cpu t2 b128": {**cpu, "num_threads": 2}, "cpu t8 b32": {**cpu, "batch_size": 32},
                "cpu t8 q1": {**cpu, "prefetch_queue_depth": 1}}
    usual = {**cpu, "dali_device": "gpu", "hw_decoder_load": 0.65}
    return {
        "usual b128 t8 q2 hw.65": usual,
        "hw0": {**usual, "hw_decoder_load": 0.0},
        "hw1": {**usual, "hw_decoder_load": 1.0},
        "t4": {**usual, "num_threads": 4},
        "t12": {**usual, "num_threads": 12},
        "q1": {**usual, "prefetch_queue_depth": 1},
        "q3": {**usual, "prefetch_queue_depth": 3},
        "b64": {**usual, "batch_size": 64},
        "b256": {**usual, "batch_size": 256},
        "cpu decode": cpu,
    }


def build_once(dataset: Any, loader: LoaderConfig, device: str, rate_s: float = 0.0) -> dict[str, float]:
    """Build ``loader``'s train pipeline as the backend does, step by step; each step's seconds (and with ``rate_s``,
    the images/s of that many seconds of batches after the first)."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline
    from nvidia.dali.plugin.pytorch import DALIGenericIterator, LastBatchPolicy

    from autotune.loaders.backends._dali import READER_NAME, _graph, dali_file_list

    opts = loader.dali
    assert opts is not None
    device_id = 0 if device.startswith("cuda") else None
    files, tmpdir = dali_file_list(dataset.files)
    out: dict[str, float] = {}
    t = time.perf_counter()
    pipe = Pipeline(batch_size=loader.batch_size, num_threads=opts.num_threads, device_id=device_id, seed=1,
                    prefetch_queue_depth=opts.prefetch_queue_depth)
    with pipe:
        images, labels = _graph(fn, types, get_preset("imagenet-train"), opts, files, list(dataset.labels), to_gpu=device_id is not None,
                                shard_id=0, num_shards=1)
        pipe.set_outputs(images, labels)
    out["define_s"] = time.perf_counter() - t
    t = time.perf_counter()
    pipe.build()
    out["build_s"] = time.perf_counter() - t
    t = time.perf_counter()
    it = DALIGenericIterator([pipe], ["images", "labels"], reader_name=READER_NAME, auto_reset=True,
                             last_batch_policy=LastBatchPolicy.DROP, prepare_first_batch=False)
    out["iterator_s"] = time.perf_counter() - t
    t = time.perf_counter()
    next(iter(it))
    if device_id is not None:
        import torch

        torch.cuda.synchronize()
    out["first_s"] = time.perf_counter() - t
    if rate_s > 0:
        n, t = 0, time.perf_counter()
        while time.perf_counter() - t < rate_s:
            try:
                n += len(next(it)[0]["labels"])
            except StopIteration:  # an epoch ended (auto_reset: the next call starts the next one)
                continue
        if device_id is not None:
            torch.cuda.synchronize()
        out["rate"] = n / (time.perf_counter() - t)
    t = time.perf_counter()
    del it, pipe
    if tmpdir:
        shutil.rmtree(tmpdir, ignore_errors=True)
    out["close_s"] = time.perf_counter() - t
    return {k: round(v, 3) for k, v in out.items()}


def held(build: Any) -> dict[str, float]:
    """``build()`` beside the held decoder pipeline (built first, untimed, released after); what it returns."""
    import gc

    from autotune.loaders.backends import _dali

    if not _dali.hold_decoders(0):
        raise RuntimeError("no GPU decoder pipeline could be held on device 0")
    try:
        return build()
    finally:
        _dali._HELD.pop(0, None)
        gc.collect()


def _side_by_side(dataset_dir: str, params: dict[str, Any], device: str, barrier: Any, results: Any) -> None:
    """One of ``--parallel``'s processes: ready CUDA and DALI, wait for the others, build, report the steps."""
    dataset = scan(dataset_dir)
    _ready(device)
    barrier.wait()
    results.put(build_once(dataset, LoaderConfig.from_params(params), device))


def _ready(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.init()
        torch.zeros(1, device="cuda")  # the CUDA context exists before the first build, as in a warm trial process
    import nvidia.dali.plugin.pytorch  # noqa: F401 - imported before the first build, as the backend's preload does


def parallel_builds(dataset_dir: str, params: dict[str, Any], device: str, n: int) -> list[dict[str, float]]:
    """``params`` built in ``n`` fresh processes at once; each process's steps."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    barrier, results = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_side_by_side, args=(dataset_dir, params, device, barrier, results)) for _ in range(n)]
    for proc in procs:
        proc.start()
    got = [results.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join(timeout=60)
    return got


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="image folder")
    p.add_argument("--device", default="cpu", help="cpu or cuda (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: %(default)s)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=JSON", help="a config to build (default: one knob at a time)")
    p.add_argument("--held", action="store_true", help="also build each config beside a held GPU decoder pipeline")
    p.add_argument("--rate-s", type=float, default=0.0, help="seconds of batches timed after the first (default: none)")
    p.add_argument("--parallel", default="", help="comma-separated counts of fresh processes building the first config at once")
    p.add_argument("--out", required=True, help="the JSON written")
    args = p.parse_args(argv)
    counts = [int(n) for n in args.parallel.split(",") if n.strip()]
    configs = default_configs(args.device)
    if args.config:
        configs = {}
        for item in args.config:
            name, _, params = item.partition("=")
            configs[name] = json.loads(params)
    loaders = {name: LoaderConfig.from_params(params) for name, params in configs.items()}
    dataset = scan(args.dataset)
    _ready(args.device)
    names = list(loaders)
    keys = STEPS + (("rate",) if args.rate_s > 0 else ())
    rows: list[dict[str, Any]] = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            got = build_once(dataset, loaders[name], args.device, args.rate_s)
            rows.append({"round": r + 1, "config": name, "describe": loaders[name].describe(), **got})
            print(f"round {r + 1} {name}: " + " ".join(f"{k} {got[k]:.3f}" for k in keys), flush=True)
            if args.held:
                got = held(lambda name=name: build_once(dataset, loaders[name], args.device, args.rate_s))
                rows.append({"round": r + 1, "config": f"{name}, held", "describe": loaders[name].describe(), **got})
                print(f"round {r + 1} {name}, held: " + " ".join(f"{k} {got[k]:.3f}" for k in keys), flush=True)
        for n in counts:
            for i, got in enumerate(parallel_builds(args.dataset, configs[names[0]], args.device, n)):
                rows.append({"round": r + 1, "config": names[0], "parallel": n, "process": i + 1, **got})
                print(f"round {r + 1} {names[0]} {n} at once, process {i + 1}: " + " ".join(f"{k} {got[k]:.3f}" for k in STEPS), flush=True)
    alone = [row for row in rows if "parallel" not in row]
    every = names + [f"{name}, held" for name in names if args.held]
    summary = {name: {k: round(statistics.median(row[k] for row in alone if row["config"] == name), 3) for k in keys} for name in every}
    for n in counts:
        summary[f"{names[0]}, {n} at once"] = {k: round(statistics.median(row[k] for row in rows if row.get("parallel") == n), 3) for k in STEPS}
    for name, s in summary.items():
        print(f"median {name}: " + " ".join(f"{k} {v:.3f}" for k, v in s.items()))
    out = {"command": " ".join(["python", "benchmarks/dali_build.py", *(sys.argv[1:] if argv is None else argv)]), "commit": harness.commit(),
           "machine": harness.machine_line(harness.machine()), "rows": rows, "median": summary}
    harness.write_json(Path(args.out), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
