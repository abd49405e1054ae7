"""How a loader's rate moves over its first seconds: many short windows of one config, each in a fresh process.

A trial of a short budget scores a config on three half-second windows right after two warm-up batches. If a loader
is still speeding up then (DALI's GPU decoder, queues filling), the score reads low. This measures each config the
way a trial does (a fresh process, the same ``measure``), for many more windows, and writes every window's rate.

    python benchmarks/window_ramp.py --dataset /tmp/s8k --device cuda --out ramp.json
    python benchmarks/window_ramp.py --dataset DIR --device cpu --config torch:b=64,w=2 --windows 8
    python benchmarks/window_ramp.py --dataset /tmp/s8k --repeats 6 --cpus 0-7   # each process on cores 0-7

A config is ``torch:b=64,w=16,pin`` or ``dali-gpu:b=128,t=8,q=2,hw=0.65`` or ``dali-cpu:b=64,t=2,q=2``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

DEFAULT_CONFIGS = ["dali-gpu:b=128,t=8,q=2,hw=0.65", "dali-gpu:b=256,t=4,q=2,hw=1", "torch:b=64,w=16,pin"]


def params(spec: str) -> dict:
    kind, _, rest = spec.partition(":")
    kv = dict(p.split("=") if "=" in p else (p, "1") for p in rest.split(",") if p)
    if kind == "torch":
        w = int(kv.get("w", 0))
        out = {"backend": "torch", "batch_size": int(kv["b"]), "num_workers": w, "pin_memory": "pin" in kv}
        if w:
            out.update(prefetch_factor=int(kv.get("p", 2)), persistent_workers="persistent" in kv)
        return out
    device = kind.split("-")[1]
    out = {"backend": "dali", "batch_size": int(kv["b"]), "dali_device": device, "num_threads": int(kv["t"]),
           "prefetch_queue_depth": int(kv.get("q", 2))}
    if device == "gpu":
        out["hw_decoder_load"] = float(kv.get("hw", 0.65))
    return out


def cpu_list(text: str) -> set[int]:
    """``0-7,16-23`` -> {0, ..., 7, 16, ..., 23} (the kernel's cpulist format)."""
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def one(dataset: str, device: str, spec: str, window_s: float, windows: int, cpus: str | None = None) -> dict:
    """Runs in a fresh process: build, warm up as a trial does, then ``windows`` timed windows, none cut.
    ``cpus`` binds the process (and so every thread it starts) to those cores first."""
    import os
    import time

    if cpus:
        os.sched_setaffinity(0, cpu_list(cpus))

    import autotune
    from autotune.config.schema import LoaderConfig
    from autotune.trials.measure import measure

    t0 = time.perf_counter()
    loader = autotune.build_loader(dataset, LoaderConfig.from_params(params(spec)), device=device)
    build = time.perf_counter() - t0
    m = measure(loader, device, warmup_batches=2, window_s=window_s, windows=windows, max_windows=windows,
                on_window=lambda i, r, s: False)
    return {"config": spec, "cpus": cpus or "all", "build_s": round(build, 3), "startup_s": round(m.startup_s, 3), "warmup_s": round(m.warmup_s, 3),
            "windows": [round(r, 1) for r in m.windows]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", action="append", help="repeatable; default: %s" % " ".join(DEFAULT_CONFIGS))
    ap.add_argument("--window", type=float, default=0.5)
    ap.add_argument("--windows", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2, help="fresh processes per config")
    ap.add_argument("--cpus", default=None, help="bind each process to these cores (cpulist, e.g. 0-7)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.cpus:
        try:
            cpus = cpu_list(a.cpus)
        except ValueError:
            ap.error(f"--cpus {a.cpus!r} is not a cpulist such as 0-7 or 0,2,4")
        import os

        if not cpus <= os.sched_getaffinity(0):
            ap.error(f"--cpus {a.cpus!r} names cores this process may not use: {sorted(cpus - os.sched_getaffinity(0))[:4]}")
    if a.one:
        print(json.dumps(one(a.dataset, a.device, a.one, a.window, a.windows, a.cpus)))
        return
    rows = []
    for spec in a.config or DEFAULT_CONFIGS:
        for r in range(a.repeats):
            p = subprocess.run([sys.executable, __file__, "--dataset", a.dataset, "--device", a.device, "--one", spec,
                                "--window", str(a.window), "--windows", str(a.windows), *(["--cpus", a.cpus] if a.cpus else [])],
                               capture_output=True, text=True)
            if p.returncode:
                print(f"{spec}: failed: {p.stderr.strip().splitlines()[-1:]}")
                continue
            row = json.loads(p.stdout.strip().splitlines()[-1])
            w = row["windows"]
            row["first3_median"] = round(statistics.median(w[:3]), 1)
            row["last_half_median"] = round(statistics.median(w[len(w) // 2:]), 1)
            rows.append(row)
            print(f"{spec} #{r} cpus={row['cpus']}: build {row['build_s']} s, first batch {row['startup_s']} s, warm-up {row['warmup_s']} s; "
                  f"first 3 windows {row['first3_median']:,.0f}/s, last half {row['last_half_median']:,.0f}/s; "
                  + " ".join(f"{x:,.0f}" for x in w), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps({"command": " ".join(sys.argv), "window_s": a.window, "cpus": a.cpus or "all", "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
