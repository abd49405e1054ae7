#!/usr/bin/env python
"""Several GPUs: the tool's multi-rank score beside the chosen config run by hand, one process per GPU.

1. ``autotune run --dataset DIR --space dali --gpus 2 --n-trials 8 --window 0.5 --windows 3``: the chosen
   config, the tool's total (slowest rank x N) and per-rank rates, read from the YAML it writes.
2. The chosen config run by hand as N independent processes at once, as ``torchrun`` would start them: process
   r has ``CUDA_VISIBLE_DEVICES=r`` and builds ``autotune.build_loader(DIR, cfg, device="cuda", shard_id=r,
   num_shards=N)``, loads a few warm-up batches, says it is ready, and times ``--seconds`` from a start time
   the parent hands every process once all are ready (so the windows overlap).
3. Writes both to ``--json`` (default ``benchmarks/results/h200x2-ranks.json``) as a list of
   ``{"measure": "autotune" | "independent", "ranks", "config", "total_samples_per_s", "per_rank"}`` and
   prints the ratio autotune / independent (the tool's score should be at least 95 % of it).

On the two-GPU machine, from the repository root (data generation apart, about 5 minutes)::

    python -m autotune synth /tmp/s8k --images 8000 --classes 100
    python benchmarks/ranks_gpu.py --data /tmp/s8k

A smoke test on any machine (CPU ranks, tiny settings; more ``autotune run`` flags pass through)::

    python benchmarks/ranks_gpu.py --data DIR --device cpu --ranks 2 --space cpu --n-trials 1 --window 0.2 \\
        --windows 2 --seconds 0.5 --json /tmp/ranks.json --batch-size 2 --confirm-top 0
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness

#: the tool's total should be at least this fraction of the independent processes' total
TARGET = 0.95


# ------------------------------------------------------------------------------------------ one rank by hand
def worker(a: argparse.Namespace) -> int:
    """One independent rank: build, warm up, print ``ready``, wait for the start time on stdin, time, print JSON."""
    import autotune

    cfg = autotune.load_config(a.config)
    device = "cuda" if a.device.startswith("cuda") else "cpu"  # CUDA_VISIBLE_DEVICES holds this rank's GPU only
    if device == "cuda":
        import torch

        torch.cuda.set_device(0)
    loader = autotune.build_loader(a.data, cfg, device=device, shard_id=a.rank, num_shards=a.ranks, seed=0)

    def batches():
        while True:  # whole epochs: a DALI epoch is never left half-read
            yield from loader

    it = batches()
    for _ in range(a.warmup):
        next(it)
    harness.cuda_sync(device)
    print("ready", flush=True)
    start = float(sys.stdin.readline())
    while time.time() < start:
        time.sleep(0.001)
    t0 = time.perf_counter()
    samples = 0
    while True:
        _, labels = next(it)
        samples += int(labels.shape[0])
        if time.perf_counter() - t0 >= a.seconds:
            break
    harness.cuda_sync(device)
    elapsed = time.perf_counter() - t0
    print(json.dumps({"rank": a.rank, "samples": samples, "seconds": elapsed, "samples_per_s": samples / elapsed}), flush=True)
    if hasattr(loader, "close"):
        loader.close()
    return 0


def independent(data: Path, config: Path, ranks: int, device: str, seconds: float, warmup: int, timeout: float = 600.0) -> list[float]:
    """Per-rank samples/s of ``ranks`` independent processes timed over the same ``seconds``."""
    procs = []
    for r in range(ranks):
        env = dict(os.environ)
        # each process its share of the cores for torch's intra-op threads, as torchrun and the tool's ranks
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // ranks)))
        if device.startswith("cuda"):
            env["CUDA_VISIBLE_DEVICES"] = str(r)
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--data", str(data), "--config", str(config), "--rank", str(r),
               "--ranks", str(ranks), "--device", device, "--seconds", str(seconds), "--warmup", str(warmup)]
        procs.append(subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
    try:
        deadline = time.monotonic() + timeout
        for p in procs:  # the barrier: every process built and warmed up (a library may print first)
            while (line := p.stdout.readline()) and line.strip() != "ready":
                pass
            if not line:
                raise RuntimeError(f"an independent rank did not get ready (exit code {p.wait(10)})")
            if time.monotonic() > deadline:
                raise RuntimeError("the independent ranks did not get ready in time")
        start = time.time() + 0.5
        for p in procs:
            p.stdin.write(f"{start}\n")
            p.stdin.flush()
        rates = []
        for p in procs:
            out, _ = p.communicate(timeout=max(1.0, deadline - time.monotonic()))
            if p.returncode != 0:
                raise RuntimeError(f"an independent rank exited with code {p.returncode}")
            rates.append(json.loads(out.strip().splitlines()[-1])["samples_per_s"])
        return rates
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()


# ------------------------------------------------------------------------------------------------- the tool
def run_args(data: Path, out: Path, a: argparse.Namespace, extra: list[str]) -> list[str]:
    """``autotune run`` arguments: the study in ``out``, its YAML at ``out/autotune.yaml``."""
    return ["run", "--dataset", str(data), "--space", a.space, "--gpus", str(a.ranks), "--device", a.device,
            "--n-trials", str(a.n_trials), "--window", str(a.window), "--windows", str(a.windows), "--out", str(out / "autotune.yaml"),
            "--storage", f"sqlite:///{out}/autotune.db", "--no-report", "--quiet", *extra]


def tool(data: Path, out: Path, a: argparse.Namespace, extra: list[str]) -> tuple[Path, dict[str, Any]]:
    """Run ``autotune run --gpus N`` and return its YAML's path and ``{config, total, per_rank}``."""
    from autotune.config.files import load_config

    out.mkdir(parents=True, exist_ok=True)
    yaml_path = out / "autotune.yaml"
    cmd = [sys.executable, "-m", "autotune", *run_args(data, out, a, extra)]
    print("$", " ".join(cmd), file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=out)
    cfg = load_config(yaml_path)
    r = cfg.result
    return yaml_path, {"config": cfg.loader.describe(), "total": float(r["samples_per_s"]), "per_rank": [float(x) for x in r.get("per_rank_samples_per_s") or []]}


def rows(config: str, ranks: int, ours: dict[str, Any], by_hand: list[float]) -> list[dict[str, Any]]:
    return [
        {"measure": "autotune", "ranks": ranks, "config": config, "total_samples_per_s": round(ours["total"], 1), "per_rank": [round(x, 1) for x in ours["per_rank"]]},
        {"measure": "independent", "ranks": ranks, "config": config, "total_samples_per_s": round(sum(by_hand), 1), "per_rank": [round(x, 1) for x in by_hand]},
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="ImageFolder dataset (python -m autotune synth DIR --images 8000 --classes 100)")
    p.add_argument("--out", default="/tmp/autotune-ranks-gpu", help="the study, its YAML and logs go here (default: %(default)s)")
    p.add_argument("--json", default=str(harness.RESULTS_DIR / "h200x2-ranks.json"), help="results file (default: %(default)s)")
    p.add_argument("--device", default="cuda", help="cuda (one GPU per rank) or cpu (smoke test) (default: %(default)s)")
    p.add_argument("--ranks", type=int, default=2, help="ranks, one GPU each (default: %(default)s)")
    p.add_argument("--space", default="dali", help="search space for autotune run (default: %(default)s)")
    p.add_argument("--n-trials", type=int, default=8)
    p.add_argument("--window", type=float, default=0.5)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--seconds", type=float, default=4.0, help="timed seconds of each independent process (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=5, help="untimed batches of each independent process first (default: %(default)s)")
    # the worker's side (one independent rank)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--config", help=argparse.SUPPRESS)
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    a, extra = p.parse_known_args(argv)
    if a.worker:
        return worker(a)

    data, out = Path(a.data).resolve(), Path(a.out).resolve()
    yaml_path, ours = tool(data, out, a, extra)
    by_hand = independent(data, yaml_path, a.ranks, a.device, a.seconds, a.warmup)
    result = rows(ours["config"], a.ranks, ours, by_hand)
    path = Path(a.json)
    harness.write_json(path, result, indent=2)
    ratio = ours["total"] / sum(by_hand) if sum(by_hand) else float("nan")
    print(f"config: {ours['config']}")
    print(f"autotune:    {ours['total']:,.0f} samples/s in total, per rank {ours['per_rank']}")
    print(f"independent: {sum(by_hand):,.0f} samples/s in total, per rank {[round(x, 1) for x in by_hand]}")
    print(f"ratio autotune/independent: {ratio:.3f} ({'at least' if ratio >= TARGET else 'below'} {TARGET:.0%}); written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
