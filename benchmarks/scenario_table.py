#!/usr/bin/env python
"""The scenario table of ``RESULTS.md``, written from ``results/scenarios.json`` (so the two never disagree):
per scenario and machine, every peer's samples/s and fraction of the tuned config's, the failures with their
error, and the tuning time.  ``python benchmarks/scenario_table.py``"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from tuner_bench import RESULTS, write_section

KIND = "scenarios"


def beyond_noise(tuned: dict, peers: list[dict]) -> bool:
    """Whether the tuned config's slowest round beat the fastest round of every peer that completed."""
    slowest = min(tuned.get("scores") or [tuned["samples_per_s"]])
    return all(slowest > max(p.get("scores") or [p["samples_per_s"]]) for p in peers)


def table(rows: list[dict]) -> str:
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["machine"]), []).append(r)
    meets = clears = 0
    out = [f"<!-- section: {KIND} -->", "## Where rules of thumb fail: scenarios", "",
           "Written by `python benchmarks/scenario_table.py` from `results/scenarios.json`; each scenario's rows come from",
           "one `benchmarks/scenarios.py` run (or a `time_to_quality.py` compare), every peer re-measured side by side,",
           "interleaved, in fresh processes. `best peer` is the best rule of thumb; the tuned config should be at least",
           "97 % of it. `beyond noise`: every round of the tuned config was faster than every round of every peer",
           "that completed (the rounds are interleaved, so a slow spell of the machine hits all peers alike).", "",
           "| scenario | machine | peer | config | samples/s | of tuned | note |", "|---|---|---|---|---:|---:|---|"]
    for (scenario, machine), rs in groups.items():
        tuned = next((r for r in rs if r["peer"] == "tuned"), None)
        peers = [r for r in rs if r["peer"] != "tuned" and r.get("samples_per_s")]
        best = max(peers, key=lambda r: r["samples_per_s"], default=None)
        first = True
        for r in rs:
            rate = f"{r['samples_per_s']:,.0f}" if r.get("samples_per_s") else "failed"
            frac = f"{100 * r['fraction_of_tuned']:.0f} %" if r.get("fraction_of_tuned") else "–"
            note = (r.get("error") or "")[:90]
            if r["peer"] == "tuned" and r.get("tuning_s") is not None:
                peaks = [f"{what} {r[k]:,.0f} MiB" for what, k in (("host", "peak_host_mib"), ("GPU", "peak_gpu_mib")) if r.get(k)]
                note = f"tuned in {r['tuning_s']:.0f} s" + (f"; peak {', '.join(peaks)}" if peaks else "")
            if r is best:
                note = (note + "; " if note else "") + "best peer"
            name = f"**{r['peer']}**" if r["peer"] == "tuned" else r["peer"]
            out.append(f"| {scenario if first else ''} | {machine if first else ''} | {name} | `{r.get('config') or ''}` | {rate} | {frac} | {note} |")
            first = False
        if tuned and tuned.get("samples_per_s") and best:
            verdict = tuned["samples_per_s"] / best["samples_per_s"]
            clear = beyond_noise(tuned, peers)
            meets += verdict >= 0.97
            clears += clear
            out.append(f"| | | *tuned / best peer* | | | **{100 * verdict:.0f} %** | {'meets' if verdict >= 0.97 else 'misses'} the 97 % goal"
                       f"{'; beyond noise' if clear else ''} |")
    out += ["", f"The tuned config is at least 97 % of the best peer in {meets} of {len(groups)} scenario runs, and beyond noise in "
                f"{clears}.", "", f"<!-- /section: {KIND} -->"]
    return "\n".join(out)


def main() -> int:
    rows = json.loads((HERE / "results" / "scenarios.json").read_text())
    write_section(KIND, table(rows))
    print(f"wrote the scenario table of {RESULTS.relative_to(HERE.parent)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
