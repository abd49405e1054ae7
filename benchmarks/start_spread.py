"""How far one config's rate moves between fresh processes: every reading of the search's interleaved compares.

Each ``STAGE=compare`` of ``benchmarks/gpu_search.sh`` measures the grid's best 8 and the default runs' winners in
3 interleaved rounds, a fresh process per reading (its ``compare.log``). Read together, the configs measured in
several compares show what a run (which judges a config by one or two processes) and a user's training (one more)
can count on. Writes the section "start spread" of RESULTS.md (with ``--results``) and prints it.

    python benchmarks/start_spread.py --results benchmarks/RESULTS.md
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import harness

LOGS = "gpu-logs/*search*/compare.log"
READING = re.compile(r"^round \d+/\d+ (?P<config>\S.*?): (?P<rate>[\d,.]+)/s$")
MACHINE = re.compile(r"the section 'time to quality, gpu: 1x NVIDIA (?P<gpu>H\d+)")
ROUNDS = re.compile(r"^compare: \d+ configs, (?P<rounds>\d+) rounds", re.M)


def readings(paths: list[Path]) -> dict[str, list[tuple[str, float]]]:
    """Each config's readings over the logs: ``(the log's folder, images/s)``."""
    out: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for p in paths:
        for line in p.read_text().splitlines():
            m = READING.match(line.strip())
            if m:
                out[m["config"]].append((p.parent.name, float(m["rate"].replace(",", ""))))
    return out


def section(paths: list[Path], least: int, command: str) -> str:
    """The section: a row per config read at least ``least`` times, the steadiest (lowest spread) first."""
    machines = sorted({m["gpu"] for p in paths for m in [MACHINE.search(p.read_text())] if m})
    rounds = sorted({int(m["rounds"]) for p in paths for m in ROUNDS.finditer(p.read_text())})
    rows = []
    for config, rs in readings(paths).items():
        rates = sorted(r for _, r in rs)
        if len(rates) < least:
            continue
        q1, med, q3 = statistics.quantiles(rates, n=4, method="inclusive")
        cv = statistics.pstdev(rates) / statistics.mean(rates)
        rows.append((cv, f"| `{config}` | {len(rates)} ({len({c for c, _ in rs})} compares) | {med:,.0f} | "
                         f"{q1:,.0f}-{q3:,.0f} | {rates[0]:,.0f}-{rates[-1]:,.0f} | {cv:.2f} |"))
    lines = [
        "<!-- section: start spread -->",
        "## The starts across fresh processes",
        "",
        f"Every reading of {len(paths)} interleaved compares ({', '.join(machines) or 'GPU'}; {'/'.join(map(str, rounds)) or 'some'} "
        f"round{'s' if rounds != [1] else ''} each, a fresh process per "
        f"reading) of the configs read at least {least} times. `spread`: the standard deviation over the mean.",
        f"Command: `{command}`",
        "",
        "| config | readings | median | middle half | min-max | spread |",
        "| --- | --- | --- | --- | --- | --- |",
        *(r for _, r in sorted(rows)),
        "<!-- /section: start spread -->",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="*", type=Path, help=f"compare.log files (default: benchmarks/{LOGS})")
    ap.add_argument("--least", type=int, default=6, help="rows for configs read at least this many times")
    ap.add_argument("--results", type=Path, help="write the section into this RESULTS.md")
    a = ap.parse_args(argv)
    paths = a.logs or sorted((harness.ROOT / "benchmarks").glob(LOGS))
    if not paths:
        print("start_spread: no compare.log found; name them, or run STAGE=compare of benchmarks/gpu_search.sh", file=sys.stderr)
        return 2
    text = section(paths, a.least, "python benchmarks/start_spread.py" + (f" --results {a.results}" if a.results else ""))
    print(text, end="")
    if a.results:
        harness.write_section("start spread", text, a.results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
