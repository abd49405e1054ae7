#!/usr/bin/env python
"""Scenario rows for ``results/scenarios.json`` from what a GPU run left, when its own JSON was lost: from a ``time_to_quality.py`` ``compare.json`` (the
stored measurements) or from the table a ``scenarios.py`` run printed in its log. Nothing is measured here.

    python benchmarks/rows_from_logs.py compare benchmarks/gpu-logs/h200-2026-11-30/compare.json \
        benchmarks/gpu-logs/h200-2026-11-30/autotune-seed0.json --scenario 1xH200-loader --machine "1 x H200, 16 cores"
    python benchmarks/rows_from_logs.py log benchmarks/gpu-logs/h200-2026-11-30/b-3gib.log --machine "1 x H200, 16 cores"
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import scenarios


def from_compare(compare: Path, method: Path, scenario: str, machine: str) -> list[dict]:
    c = json.loads(compare.read_text())
    m = json.loads(method.read_text())
    by_key = {k: k for k in c["configs"]}
    cand = {peer: c["configs"][key] for peer, key in c["peers"].items()}
    cand["tuned"] = c["configs"][by_key[m["config_key"]]]
    scores = {peer: c["scores"][key] for peer, key in {**c["peers"], "tuned": m["config_key"]}.items()}
    errors = {peer: c["errors"].get(key) for peer, key in {**c["peers"], "tuned": m["config_key"]}.items() if c["errors"].get(key)}
    rows = scenarios.scenario_rows(scenario, machine, cand, scores, errors)
    for r in rows:
        r["source"] = str(compare)
        if r["peer"] == "tuned":
            r.update({"tuning_s": m.get("wall_s"), "command": m.get("command")})
    return rows


ROW = re.compile(r"^\| (?P<peer>[^|]+?) \| (?P<config>[^|]+?) \| (?P<rate>[^|]+?) \| (?P<frac>[^|]+?) \| (?P<spread>[^|]+?) \|$")


def from_log(log: Path, machine: str) -> list[dict]:
    text = log.read_text()
    title = re.search(r"^(?P<scenario>\S+) on (?P<machine>.+?)(?:, tuned in (?P<s>\d+) s)?$", text, re.MULTILINE)
    if title is None:
        raise SystemExit(f"{log}: no scenario table in it")
    rows = []
    for line in text.splitlines():
        m = ROW.match(line.strip())
        if not m or m["peer"] in ("peer",) or set(m["peer"]) <= {"-", "|"}:
            continue
        failed = m["rate"].startswith("failed")
        rate = None if failed else float(m["rate"].replace(",", ""))
        rows.append({"scenario": title["scenario"], "machine": machine, "peer": m["peer"], "config": m["config"], "samples_per_s": rate,
                     "fraction_of_tuned": None if failed else round(float(m["frac"].rstrip("%")) / 100, 3), "failed": failed,
                     "error": m["rate"].removeprefix("failed: ") if failed else None, "source": str(log)})
    for r in rows:
        if r["peer"] == "tuned" and title["s"]:
            r["tuning_s"] = float(title["s"])
    return rows


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("compare")
    c.add_argument("compare", type=Path)
    c.add_argument("method", type=Path, help="the method's JSON whose config is the tuned one")
    c.add_argument("--scenario", required=True)
    lg = sub.add_parser("log")
    lg.add_argument("log", type=Path)
    for s in (c, lg):
        s.add_argument("--machine", required=True)
        s.add_argument("--json", type=Path, default=scenarios.RESULTS_JSON)
    a = p.parse_args()
    rows = from_compare(a.compare, a.method, a.scenario, a.machine) if a.cmd == "compare" else from_log(a.log, a.machine)
    scenarios.save_rows(a.json, rows[0]["scenario"], a.machine, rows)
    for r in rows:
        print(r["scenario"], r["peer"], r["samples_per_s"], r["fraction_of_tuned"], r.get("error") or "")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
