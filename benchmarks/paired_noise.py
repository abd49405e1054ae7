"""How well a re-measurement tells two configs apart: paired in one process against one fresh process each.

For each of ``--processes`` repetitions, interleaved:

- ``paired``: configs A and B built in one fresh trial process and timed in turn, ``--rounds`` rounds of one
  ``--window`` each (what ``autotune run`` does by default, :mod:`autotune.trials.paired`); the ratio B/A is the
  median of the per-round ratios, and the verdict is the noise rule's (:func:`autotune.study.paired.choose_paired`):
  the slower by the medians is ``alike`` when it is not slower in every round and its median ratio to the faster is
  within 3 %;
- ``fresh``: A, then B, each in a fresh trial process of its own (``--windows`` windows, a default 60 s run's trial),
  what ``--remeasure fresh`` does; the ratio B/A is of their two scores, and the verdict the rule for single
  readings: ``alike`` within 3 %;
- ``null`` (with ``--null``): A against A, paired, to show the rule's false alarms.

The spread of the ratios over the repetitions is the noise each method has to beat. The JSON has every repetition,
the command and the commit; nothing else is written.

    python benchmarks/paired_noise.py --dataset ~/.cache/autotune/demo-2000x10 --device cpu \
        --a '{"backend": "dali", "batch_size": 128, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 2}' \
        --b '{"backend": "dali", "batch_size": 256, "dali_device": "cpu", "num_threads": 2, "prefetch_queue_depth": 3}' \
        --processes 5 --rounds 6 --null --out /tmp/paired-noise.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from typing import Any

import harness  # first: puts the repository on sys.path (the checkout's autotune)

from autotune.config.schema import LoaderConfig
from autotune.dataset.scan import scan
from autotune.outcomes import Outcome
from autotune.study.evidence import INDISTINGUISHABLE
from autotune.study.paired import slower_in_every_round
from autotune.trials.runner import run_trial
from autotune.trials.spec import TrialSpec


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", required=True, help="image folder")
    p.add_argument("--device", default="cpu")
    p.add_argument("--a", required=True, help="config A, LoaderConfig params as JSON")
    p.add_argument("--b", required=True, help="config B, LoaderConfig params as JSON")
    p.add_argument("--processes", type=int, default=5, help="repetitions of each method (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=6, help="rounds of the paired measurement (default: %(default)s)")
    p.add_argument("--window", type=float, default=0.5, help="seconds per window (default: %(default)s)")
    p.add_argument("--windows", type=int, default=3, help="windows of a fresh measurement (default: %(default)s)")
    p.add_argument("--null", action="store_true", help="also A against A, paired")
    p.add_argument("--out", required=True, help="the JSON written")
    return p.parse_args(argv)


def paired(dataset: Any, device: str, a: LoaderConfig, b: LoaderConfig, rounds: int, window: float) -> dict[str, Any]:
    spec = TrialSpec(dataset=dataset, loader=a, paired=(b,), device=device, window_s=window, max_rounds=rounds)
    t0 = time.monotonic()
    r = run_trial(spec, timeout_s=300)
    if r.outcome is not Outcome.COMPLETE:
        return {"failed": f"{r.outcome.value}: {r.message}"}
    p = r.extra["paired"]
    steady = p["rounds"][p["steady_from"]:]
    ratios = [x[1] / x[0] for x in steady]
    return {"rounds": p["rounds"], "steady_from": p["steady_from"], "ratio": statistics.median(ratios), "verdict": verdict(steady),
            "seconds": round(time.monotonic() - t0, 2)}


def verdict(rounds: list[list[float]]) -> str:
    """The noise rule's verdict on a paired measurement of A (``r[0]``) and B (``r[1]``), as
    :func:`~autotune.study.paired.choose_paired` judges the slower of two."""
    fast = 1 if statistics.median(r[1] for r in rounds) > statistics.median(r[0] for r in rounds) else 0
    slow = 1 - fast
    ratio = statistics.median(r[slow] / r[fast] for r in rounds)
    if not slower_in_every_round(rounds, slow, fast) and ratio >= 1 - INDISTINGUISHABLE:
        return "alike"
    return "b faster" if fast == 1 else "b slower"


def fresh(dataset: Any, device: str, a: LoaderConfig, b: LoaderConfig, window: float, windows: int) -> dict[str, Any]:
    rates = []
    t0 = time.monotonic()
    for cfg in (a, b):
        r = run_trial(TrialSpec(dataset=dataset, loader=cfg, device=device, window_s=window, windows=windows), timeout_s=300)
        if r.outcome is not Outcome.COMPLETE or not r.samples_per_s:
            return {"failed": f"{r.outcome.value}: {r.message}"}
        rates.append(float(r.samples_per_s))
    ratio = rates[1] / rates[0]
    told = "alike" if abs(ratio - 1) <= INDISTINGUISHABLE else ("b faster" if ratio > 1 else "b slower")
    return {"rates": rates, "ratio": ratio, "verdict": told, "seconds": round(time.monotonic() - t0, 2)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method in ("paired", "fresh", "null"):
        got = [r for r in rows if r["method"] == method and "ratio" in r]
        if not got:
            continue
        ratios = [r["ratio"] for r in got]
        verdicts: dict[str, int] = {}
        for r in got:
            verdicts[r["verdict"]] = verdicts.get(r["verdict"], 0) + 1
        out[method] = {"n": len(got), "ratio_median": round(statistics.median(ratios), 4), "ratio_min": round(min(ratios), 4),
                       "ratio_max": round(max(ratios), 4), "verdicts": verdicts, "seconds_median": statistics.median(r["seconds"] for r in got)}
    return out


def main(argv: list[str] | None = None) -> int:
    a = _args(argv)
    ca, cb = LoaderConfig.from_params(json.loads(a.a)), LoaderConfig.from_params(json.loads(a.b))
    dataset = scan(a.dataset)
    rows: list[dict[str, Any]] = []
    for k in range(a.processes):
        order = ["paired", "fresh", *(["null"] if a.null else [])]
        for method in order if k % 2 == 0 else order[::-1]:  # interleaved, the order alternating
            if method == "fresh":
                row = fresh(dataset, a.device, ca, cb, a.window, a.windows)
            else:
                row = paired(dataset, a.device, ca, ca if method == "null" else cb, a.rounds, a.window)
            rows.append({"method": method, "repetition": k + 1, **row})
            sys.stdout.write(json.dumps(rows[-1]) + "\n")
            sys.stdout.flush()
    out = {"command": " ".join(["python", "benchmarks/paired_noise.py", *(sys.argv[1:] if argv is None else argv)]), "commit": harness.commit(),
           "a": ca.describe(), "b": cb.describe(), "device": a.device, "rows": rows, "summary": summary(rows)}
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    sys.stdout.write(json.dumps(out["summary"], indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
