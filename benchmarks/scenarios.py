#!/usr/bin/env python
"""Where rules of thumb fail: the tuned config against every common rule, scenario by scenario.

One command per scenario. It tunes (``autotune run`` with the arguments after ``--``, timed), then re-measures
side by side, interleaved round by round, every peer on the same machine with the same measurement and the same
memory budgets: the torch defaults, ``num_workers`` = usable cores with pinning, ``num_workers`` = 75 % of the
cores (with several ranks: each rank's share of the cores, and also all the node's cores in every rank, the rule as
most training scripts write it), DALI's usual starting point (GPU decode where a GPU exists), the largest batch that fits (the rule of
Lightning's batch-size finder, with the cores heuristic), and the tuned config. Every measurement runs in a fresh
process forked like a trial, so a peer that runs out of memory is recorded as failing, with its error.

Rows go to ``benchmarks/results/scenarios.json`` (a list of ``{"scenario", "machine", "peer", "samples_per_s",
"fraction_of_tuned", "failed", "run_id", "commit", ...}``; every run is kept) and a table is printed.
``--table`` measures nothing: it writes RESULTS.md's scenario table from that JSON, so the two never disagree.

Examples (the ``--`` part is passed to ``autotune run``)::

    python benchmarks/scenarios.py --scenario cpu-2core --dataset /tmp/synth2k -- --space cpu --budget 60
    python benchmarks/scenarios.py --scenario small-images --dataset /tmp/small64 -- --budget 60
    python benchmarks/scenarios.py --scenario 1xH200-loader --dataset /tmp/synth8k -- --budget 90
    python benchmarks/scenarios.py --scenario 1xH200-resnet50 --dataset /tmp/synth8k --model resnet50 --amp --channels-last -- --budget 150
    python benchmarks/scenarios.py --scenario 1xH200-3GiB --dataset /tmp/synth8k --reserve-gpu-mem 137000 -- --budget 90
    python benchmarks/scenarios.py --scenario 2xH200-ranks --dataset /tmp/synth8k --gpus 2 -- --budget 120
    python benchmarks/scenarios.py --scenario 8xH200 --dataset /tmp/synth8k --gpus 8 -- --budget 150      # stages a (--tune-only) and p (--tuned) of benchmarks/gpu_node.sh
    python benchmarks/scenarios.py --table                                                                # RESULTS.md's table from the JSON
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness
from harness import ROOT as REPO
from harness import note

RESULTS_JSON = harness.RESULTS_DIR / "scenarios.json"
KIND = "scenarios"  # the RESULTS.md section of the scenario table


def _args(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    argv = list(sys.argv[1:] if argv is None else argv)
    run_args = argv[argv.index("--") + 1:] if "--" in argv else []
    own = argv[:argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--table", action="store_true", help="measure nothing: write RESULTS.md's scenario table from --json")
    p.add_argument("--scenario", help="a short name, e.g. 1xH200-loader")
    p.add_argument("--machine", default=None, help="default: a line from the fingerprint")
    p.add_argument("--dataset")
    p.add_argument("--pipeline", default="imagenet-train")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when a GPU is visible)")
    p.add_argument("--gpus", type=int, default=1, help="ranks loading at once (one process each)")
    p.add_argument("--model", default=None, help="score training steps of this torchvision model")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--channels-last", action="store_true")
    p.add_argument("--reserve-gpu-mem", type=float, default=0.0, metavar="MIB", help="GPU memory taken by the model")
    p.add_argument("--tuned", default=None, help="a tuned YAML to use instead of tuning first (its tuning time from the --tune-only run that wrote it)")
    p.add_argument("--tune-only", action="store_true", help="tune, write the YAML and its tuning time, and stop (the peers later, with --tuned)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds of re-measurement")
    p.add_argument("--window", type=float, default=1.0)
    p.add_argument("--windows", type=int, default=3)
    p.add_argument("--trial-timeout", type=float, default=120.0)
    p.add_argument("--out", default="benchmarks/work/scenarios", help="work folder (YAML, study)")
    p.add_argument("--json", default=str(RESULTS_JSON))
    p.add_argument("--results", default=str(harness.RESULTS), help="with --table: the Markdown results file (default: benchmarks/RESULTS.md)")
    a = p.parse_args(own)
    if not a.table and not (a.scenario and a.dataset):
        p.error("--scenario and --dataset are required (or --table)")
    return a, run_args


def tune(a: argparse.Namespace, run_args: list[str], work: Path) -> tuple[Path, float]:
    """``autotune run`` for the scenario; returns the YAML and the wall time from start to YAML."""
    yaml_path = work / f"{a.scenario}.yaml"
    cmd = [sys.executable, "-m", "autotune", "run", "--dataset", a.dataset, "--pipeline", a.pipeline, "--out", str(yaml_path),
           "--storage", f"sqlite:///{work / 'scenarios.db'}", "--study-name", f"{a.scenario}-{int(time.time())}", "--no-report", "--quiet"]
    if a.device:
        cmd += ["--device", a.device]
    if a.gpus > 1:
        cmd += ["--gpus", str(a.gpus)]
    if a.model:
        cmd += ["--model", a.model] + (["--amp"] if a.amp else []) + (["--channels-last"] if a.channels_last else [])
    if a.reserve_gpu_mem:
        cmd += ["--reserve-gpu-mem", str(a.reserve_gpu_mem)]
    cmd += run_args
    note("$ " + " ".join(cmd))
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=REPO)
    took = time.monotonic() - t0
    if proc.returncode != 0 or not yaml_path.exists():
        raise SystemExit(f"autotune run failed with exit code {proc.returncode}")
    timing_file(yaml_path).write_text(json.dumps({"tuning_s": round(took, 1), "command": " ".join(cmd)}) + "\n")
    return yaml_path, took


def timing_file(yaml_path: Path) -> Path:
    """Beside a scenario's YAML: how long its ``autotune run`` took, for a later ``--tuned`` run of the peers."""
    return yaml_path.with_name(yaml_path.name + ".tuning.json")


def tuning_of(yaml_path: Path) -> float | None:
    f = timing_file(yaml_path)
    return float(json.loads(f.read_text())["tuning_s"]) if f.exists() else None


def peers(tuned: Any | None, cores: int, cuda: bool, batch_sizes: list[int], dali: bool, node_cores: int | None = None) -> dict[str, dict[str, Any]]:
    """The rules of thumb, as loader parameters; ``cores`` is each rank's share; ``tuned`` (a Config) adds ``"tuned"``.

    ``node_cores``: the node's cores, when several ranks share them: adds the rule as written in most training
    scripts, ``num_workers = os.cpu_count()`` in every rank (over-subscribing the CPU ``node_cores / cores`` times).
    """
    b = 64
    out: dict[str, dict[str, Any]] = {
        "torch defaults": {"backend": "torch", "batch_size": b, "num_workers": 0, "pin_memory": False},
    }
    shared = node_cores is not None and node_cores > cores
    if shared:
        out["workers = all cores, every rank"] = {"backend": "torch", "batch_size": b, "num_workers": node_cores, "pin_memory": cuda,
                                                  "persistent_workers": True}
    per = " / ranks" if shared else ""  # with several ranks the next two rules take the rank's share of the cores
    out |= {
        f"workers = cores{per}, pinned": {"backend": "torch", "batch_size": b, "num_workers": cores, "pin_memory": cuda, "persistent_workers": True},
        f"workers = 75 % of cores{per}": {"backend": "torch", "batch_size": b, "num_workers": max(1, int(0.75 * cores)), "pin_memory": cuda,
                                          "persistent_workers": True},
    }
    if dali:
        out["DALI's usual start"] = {"backend": "dali", "batch_size": 128, "dali_device": "gpu" if cuda else "cpu", "num_threads": min(cores, 8),
                                     "prefetch_queue_depth": 2, **({"hw_decoder_load": 0.65} if cuda else {})}
    for bs in sorted(batch_sizes, reverse=True):  # filled in by the caller with the largest that completes
        out[f"largest batch ({bs})"] = {"backend": "torch", "batch_size": bs, "num_workers": cores, "pin_memory": cuda, "persistent_workers": True}
    if tuned is not None:
        out["tuned"] = tuned.loader.to_params()
    return out


def machine_name(fp: dict[str, Any], cuda: bool, gpus: int = 1) -> str:
    """The ``machine`` of a scenario row: a short line from the fingerprint."""
    return f"{gpus} x {fp.get('gpu_name') or fp.get('gpu') or 'GPU'}, {fp['cpus']} cores" if cuda else f"CPU, {fp['cpus']} cores"


def scenario_rows(scenario: str, machine: str, cand: dict[str, dict[str, Any]], scores: dict[str, list[float]], errors: dict[str, str],
                  tuned: str = "tuned") -> list[dict[str, Any]]:
    """One row per peer: its median rate and its fraction of the ``tuned`` peer's."""
    from autotune.config.schema import LoaderConfig

    med = {k: statistics.median(v) if v else None for k, v in scores.items()}
    tuned_rate = med.get(tuned)
    noise = {k: (max(v) - min(v)) / statistics.median(v) if len(v) > 1 else None for k, v in scores.items()}
    return [{
        "scenario": scenario, "machine": machine, "peer": k, "config": LoaderConfig.from_params(cand[k]).describe(),
        "samples_per_s": round(med[k], 1) if med[k] else None,
        "fraction_of_tuned": round(med[k] / tuned_rate, 3) if med[k] and tuned_rate else None,
        "failed": med[k] is None, "error": errors.get(k) if med[k] is None else None,
        "scores": [round(x, 1) for x in scores[k]], "spread": round(noise[k], 3) if noise[k] is not None else None,
    } for k in cand]


def tuned_details(tuned: Any, tuning_s: float | None, command: str) -> dict[str, Any]:
    """What the ``tuned`` row adds: the tuning time, the peaks the tuner measured, the command."""
    return {"tuning_s": round(tuning_s, 1) if tuning_s is not None else None, "threads": tuned.loader.describe(),
            "peak_host_mib": tuned.result.get("peak_host_mib"), "peak_gpu_mib": tuned.result.get("peak_gpu_mib"), "command": command}


def save_rows(path: Path, scenario: str, machine: str, rows: list[dict[str, Any]], run_id: str) -> None:
    """Add one run's ``rows`` to the JSON list at ``path`` with its ``run_id`` and commit: every run is kept (a run
    that lost stays in the table), and only this run's rows of an earlier round are replaced."""
    stamped = [{**r, "scenario": scenario, "machine": machine, "run_id": run_id, "commit": harness.commit()} for r in rows]
    harness.append_rows(path, stamped, replaces=lambda r: r.get("run_id") == run_id)


# ------------------------------------------------------------------------------------------ the table
def beyond_noise(tuned: dict[str, Any], peers: list[dict[str, Any]]) -> bool:
    """Whether the tuned config's slowest round beat the fastest round of every peer that completed."""
    slowest = min(tuned.get("scores") or [tuned["samples_per_s"]])
    return all(slowest > max(p.get("scores") or [p["samples_per_s"]]) for p in peers)


def runs_of(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[list[dict[str, Any]]]]:
    """Each scenario and machine's runs, oldest first: the rows of one ``run_id`` (rows from before run ids were kept
    are one run each scenario and machine: a run replaced the one before it then)."""
    groups: dict[tuple[str, str], dict[str, list[dict[str, Any]]]] = {}
    for r in rows:
        groups.setdefault((r["scenario"], r["machine"]), {}).setdefault(str(r.get("run_id") or "earlier"), []).append(r)
    return {k: list(v.values()) for k, v in groups.items()}


def verdict(run: list[dict[str, Any]]) -> tuple[float, bool] | None:
    """A run's tuned / best peer (medians) and whether it is beyond noise; None when either is missing."""
    tuned = next((r for r in run if r["peer"] == "tuned"), None)
    peers = [r for r in run if r["peer"] != "tuned" and r.get("samples_per_s")]
    best = max(peers, key=lambda r: r["samples_per_s"], default=None)
    if not (tuned and tuned.get("samples_per_s") and best):
        return None
    return tuned["samples_per_s"] / best["samples_per_s"], beyond_noise(tuned, peers)


def _run_rows(scenario: str, machine: str, run: list[dict[str, Any]]) -> list[str]:
    """The detail rows of one run: every peer, the failures with their error, and the verdict."""
    peers = [r for r in run if r["peer"] != "tuned" and r.get("samples_per_s")]
    best = max(peers, key=lambda r: r["samples_per_s"], default=None)
    out, first = [], True
    for r in run:
        rate = f"{r['samples_per_s']:,.0f}" if r.get("samples_per_s") else "failed"
        frac = f"{100 * r['fraction_of_tuned']:.0f} %" if r.get("fraction_of_tuned") else "–"
        note_ = (r.get("error") or "")[:90]
        if r["peer"] == "tuned" and r.get("tuning_s") is not None:
            peaks = [f"{what} {r[k]:,.0f} MiB" for what, k in (("host", "peak_host_mib"), ("GPU", "peak_gpu_mib")) if r.get(k)]
            note_ = f"tuned in {r['tuning_s']:.0f} s" + (f"; peak {', '.join(peaks)}" if peaks else "")
        if r is best:
            note_ = (note_ + "; " if note_ else "") + "best peer"
        name = f"**{r['peer']}**" if r["peer"] == "tuned" else r["peer"]
        out.append(f"| {scenario if first else ''} | {machine if first else ''} | {name} | `{r.get('config') or ''}` | {rate} | {frac} | {note_} |")
        first = False
    v = verdict(run)
    if v is not None:
        out.append(f"| | | *tuned / best peer* | | | **{100 * v[0]:.0f} %** | {'meets' if v[0] >= 0.97 else 'misses'} the 97 % goal"
                   f"{'; beyond noise' if v[1] else ''} |")
    return out


def table(rows: list[dict[str, Any]]) -> str:
    """RESULTS.md's scenario section: per scenario and machine, every run's tuned / best peer with their median and
    the worst run, then the latest run's peers (samples/s, fraction of the tuned config's, failures with their
    error, the tuning time)."""
    groups = runs_of(rows)
    out = [f"<!-- section: {KIND} -->", "## Where rules of thumb fail: scenarios", "",
           "Written by `python benchmarks/scenarios.py --table` from `results/scenarios.json`, which keeps every run (its",
           "`run_id` and commit). Each run is one `benchmarks/scenarios.py` run (or a `time_to_quality.py` compare), every peer",
           "re-measured side by side, interleaved, in fresh processes. `best peer` is the best rule of thumb; the tuned config",
           "should be at least 97 % of it. `beyond noise`: every round of the tuned config was faster than every round of",
           "every peer that completed (the rounds are interleaved, so a slow spell of the machine hits all peers alike).", "",
           "| scenario | machine | runs | tuned / best peer, each run | median | worst run | beyond noise |", "|---|---|---:|---|---:|---:|---:|"]
    meets = worst_meets = 0
    for (scenario, machine), runs in groups.items():
        vs = [v for v in map(verdict, runs) if v is not None]
        if not vs:
            out.append(f"| {scenario} | {machine} | {len(runs)} | – | – | – | – |")
            continue
        fr = [v[0] for v in vs]
        med, worst = statistics.median(fr), min(fr)
        meets += med >= 0.97
        worst_meets += worst >= 0.97
        out.append(f"| {scenario} | {machine} | {len(runs)} | {', '.join(f'{100 * f:.0f} %' for f in fr)} | {100 * med:.0f} % | "
                   f"{100 * worst:.0f} % | {sum(v[1] for v in vs)} of {len(vs)} |")
    out += ["", f"The tuned config's median run is at least 97 % of the best peer in {meets} of {len(groups)} scenarios; its worst run in "
                f"{worst_meets}.", "", "Each scenario's latest run, peer by peer:", "",
            "| scenario | machine | peer | config | samples/s | of tuned | note |", "|---|---|---|---|---:|---:|---|"]
    for (scenario, machine), runs in groups.items():
        latest = runs[-1]
        label = f"{scenario} ({len(runs)} runs)" if len(runs) > 1 else scenario
        out += _run_rows(label, machine, latest)
    out += ["", f"<!-- /section: {KIND} -->"]
    return "\n".join(out)


def write_table(json_path: Path, results: Path) -> int:
    harness.write_section(KIND, table(json.loads(json_path.read_text())), results)
    note(f"wrote the scenario table of {results}")
    return 0


def main(argv: list[str] | None = None) -> int:
    a, run_args = _args(argv)
    if a.table:
        return write_table(Path(a.json), Path(a.results))
    os.chdir(REPO)
    from autotune.config import fingerprint, load_config
    from autotune.dataset.scan import scan
    from autotune.trials.model import ModelSpec

    work = REPO / a.out
    work.mkdir(parents=True, exist_ok=True)
    fp = fingerprint.collect()
    cuda = bool(fp.get("gpus")) if a.device is None else a.device.startswith("cuda")
    device = "cuda" if cuda else "cpu"
    cores = max(1, int(fp["cpus"]) // a.gpus)
    machine = a.machine or machine_name(fp, cuda, a.gpus)
    if a.tuned:
        yaml_path = Path(a.tuned)
        tuning_s = tuning_of(yaml_path)
    else:
        yaml_path, tuning_s = tune(a, run_args, work)
        if a.tune_only:
            print(f"{a.scenario}: tuned in {tuning_s:.0f} s -> {yaml_path}")
            return 0
    tuned = load_config(yaml_path)
    try:
        import nvidia.dali  # noqa: F401

        dali = True
    except ImportError:
        dali = False
    model = ModelSpec(name=a.model, amp=a.amp, channels_last=a.channels_last) if a.model else None
    dataset = scan(a.dataset)
    cand = peers(tuned, cores, cuda, [512, 256, 128], dali, node_cores=int(fp["cpus"]) if a.gpus > 1 else None)
    command, run_id = harness.command_line(__file__, argv), harness.new_run_id()

    def save(scores: dict[str, list[float]], errors: dict[str, str]) -> list[dict[str, Any]]:
        rows = scenario_rows(a.scenario, machine, cand, scores, errors)
        next(r for r in rows if r["peer"] == "tuned").update(tuned_details(tuned, tuning_s, command))
        save_rows(Path(a.json), a.scenario, machine, rows, run_id)
        return rows

    with harness.SideBySide(dataset, pipeline=a.pipeline, device=device, window=a.window, windows=a.windows, trial_timeout=a.trial_timeout,
                    ranks=a.gpus, model=model, reserve_gpu_mib=a.reserve_gpu_mem) as side:
        side.keep_largest_batch(cand)
        scores, errors = side.rounds(cand, a.rounds, after_round=save)  # each round saved: a run cut short keeps what it measured
    rows = save(scores, errors)
    print(f"\n{a.scenario} on {machine}" + (f", tuned in {tuning_s:.0f} s" if tuning_s else ""))
    print("| peer | config | samples/s | of tuned | spread |\n|---|---|---:|---:|---:|")
    for r in rows:
        rate = f"{r['samples_per_s']:,.0f}" if r["samples_per_s"] else f"failed: {r['error']}"
        frac = f"{r['fraction_of_tuned']:.0%}" if r["fraction_of_tuned"] else "–"
        print(f"| {r['peer']} | {r['config']} | {rate} | {frac} | {r['spread'] if r['spread'] is not None else '–'} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
