"""Does a tuner's trial read a loader lower than a plain process does? One config, measured four ways, interleaved.

- ``plain``: a fresh ``python`` process that builds the loader and measures it (``window_ramp.py``'s way);
- ``trial``: :func:`autotune.trials.runner.run_trial` as ``autotune run`` calls it: forked from the pre-imported
  process (the zygote), its memory sampled ten times a second (host PSS, /dev/shm, GPU memory through NVML);
- ``trial-spawn``: the same, but a fresh interpreter instead of a fork of the zygote;
- ``trial-unwatched``: forked from the zygote, with the memory sampling turned off;
- ``trial-no-pss``, ``trial-no-nvml``: the sampling without its exact host reads (``/proc/PID/smaps_rollup``; RSS
  instead), or without its GPU reads (NVML's running processes).

The ``trial`` ways print what one memory sample cost the tuner's process (mean and largest, in ms).

    python benchmarks/trial_vs_plain.py --dataset /tmp/s8k --device cuda --config dali-gpu:b=128,t=8,q=2,hw=0.65 --rounds 3
    python benchmarks/trial_vs_plain.py --dataset DIR --device cpu --config dali-cpu:b=64,t=2,q=2 --rounds 1 --windows 4

Each round runs every way once; the JSON (``--out``) holds each measurement's windows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from window_ramp import params  # noqa: E402

WAYS = ("plain", "trial", "trial-spawn", "trial-unwatched")
MORE_WAYS = ("trial-no-pss", "trial-no-nvml")


def plain(dataset: str, device: str, config: str, window_s: float, windows: int) -> list[float]:
    p = subprocess.run([sys.executable, str(Path(__file__).parent / "window_ramp.py"), "--dataset", dataset, "--device", device,
                        "--one", config, "--window", str(window_s), "--windows", str(windows)], capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(p.stderr.strip().splitlines()[-1:])
    return json.loads(p.stdout.strip().splitlines()[-1])["windows"]


def trial(spec, way: str, zygote, costs: list[float]) -> list[float]:  # noqa: ANN001
    from autotune.outcomes import Outcome
    from autotune.trials.guard import _monitor as guard  # where the monitor looks its readers up
    from autotune.trials.runner import run_trial

    sample, pss, nvml = guard.Monitor.sample, guard.read_pss_mib, guard._Nvml.used_mib

    def timed(self, pid):  # noqa: ANN001, ANN202
        t0 = time.perf_counter()
        try:
            return sample(self, pid)
        finally:
            costs.append((time.perf_counter() - t0) * 1000)

    guard.Monitor.sample = (lambda self, pid: None) if way == "trial-unwatched" else timed
    if way == "trial-no-pss":
        guard.read_pss_mib = lambda pid: None
    if way == "trial-no-nvml":
        guard._Nvml.used_mib = lambda self, pids: None
    try:
        r = run_trial(spec, timeout_s=180, zygote=None if way == "trial-spawn" else zygote)
    finally:
        guard.Monitor.sample, guard.read_pss_mib, guard._Nvml.used_mib = sample, pss, nvml
    if r.outcome is not Outcome.COMPLETE:
        raise RuntimeError(f"{r.outcome.value}: {r.message}")
    return r.windows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--config", default="dali-gpu:b=128,t=8,q=2,hw=0.65")
    ap.add_argument("--window", type=float, default=0.5)
    ap.add_argument("--windows", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--ways", default=",".join(WAYS))
    ap.add_argument("--out", default=None)
    a = ap.parse_args()

    from autotune.config.schema import LoaderConfig
    from autotune.dataset.scan import scan
    from autotune.trials.spec import TrialSpec
    from autotune.trials.zygote import Zygote

    spec = TrialSpec(dataset=scan(a.dataset, warn=False), loader=LoaderConfig.from_params(params(a.config)), device=a.device,
                     warmup_batches=2, window_s=a.window, windows=a.windows)
    ways = a.ways.split(",")
    unknown = [w for w in ways if w not in WAYS + MORE_WAYS]
    if unknown:
        ap.error(f"unknown way {unknown[0]!r}; known: {', '.join(WAYS + MORE_WAYS)}")
    zygote = Zygote.start() if any(w.startswith("trial") and w != "trial-spawn" for w in ways) else None
    rows = []
    try:
        for r in range(a.rounds):
            for way in ways:
                t0 = time.perf_counter()
                costs: list[float] = []
                try:
                    w = plain(a.dataset, a.device, a.config, a.window, a.windows) if way == "plain" else trial(spec, way, zygote, costs)
                except RuntimeError as e:
                    print(f"[{r}] {way}: failed: {e}", flush=True)
                    continue
                row = {"round": r, "way": way, "windows": [round(x, 1) for x in w], "median": round(statistics.median(w), 1),
                       "wall_s": round(time.perf_counter() - t0, 1)}
                if costs:
                    row["sample_ms"] = {"n": len(costs), "mean": round(statistics.mean(costs), 2), "max": round(max(costs), 2)}
                rows.append(row)
                cost = f", a sample {row['sample_ms']['mean']:.1f}/{row['sample_ms']['max']:.1f} ms" if costs else ""
                print(f"[{r}] {way:16s} median {row['median']:>9,.0f}/s over {len(w)} windows ({row['wall_s']} s{cost}): "
                      + " ".join(f"{x:,.0f}" for x in w), flush=True)
    finally:
        if zygote is not None:
            zygote.close()
    print("summary (median of each way's medians):")
    for way in ways:
        m = [x["median"] for x in rows if x["way"] == way]
        if m:
            print(f"  {way:16s} {statistics.median(m):>9,.0f}/s  ({', '.join(f'{v:,.0f}' for v in m)})")
    if a.out:
        Path(a.out).write_text(json.dumps({"command": " ".join(sys.argv), "config": a.config, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
