#!/usr/bin/env python
"""How fast does each method reach a near-best loader config? Wall time against the fraction of the grid's best.

One command, four stages, each resumable (a stage whose result is already in the work folder is skipped, so a
call cut off by a time limit can be run again as it was); ``--stages`` runs some of them:

``grid``
    The ground truth: every config of ``tuner_bench.py``'s grid for this machine, measured once each as a trial
    (``tuner_bench.py grid``, in ``WORK/grid.db``); ``--grid-batches 128,256`` keeps only those batch sizes.
    The grid's wall time is the sum of its trial durations. Result: ``WORK/grid.json``.
``methods``
    Per seed, each method is a real ``python -m autotune run`` process, timed from its start to its YAML written:
    ``autotune`` (the default budget), ``autotune --budget 30``, ``random`` and ``optuna`` (60 s each, no
    baselines, no re-measurement) and ``warm start`` (``--warm-start`` the ``autotune`` YAML of the same seed,
    20 s). The arguments after ``--`` go to every run (``-- --space cpu --device cpu``); the grid and the
    re-measurement use the same space, device and pipeline. Results: ``WORK/methods/<method>-seed<N>.json``
    (a run that fails is recorded as failed; delete its file to run it again).
``compare``
    In one process, re-measures side by side, interleaved (``--rounds``; a fresh process per measurement,
    forked from one zygote; a new order each round), the grid's top 3 (``--grid-top``), every method's chosen config and the
    rules of thumb of ``scenarios.py``. A fraction of the grid's best is a median rate over the best median
    among the grid's top 3. Writes ``--json`` (``{"method", "seed", "wall_s", "fraction_of_grid_best",
    "config", "samples_per_s"}`` rows; the grid's wall time is its trial time, a rule of thumb's is 0), this
    machine's section of ``--results`` and, with ``--scenario NAME``, the rules of thumb and the default
    ``autotune`` run's config as rows of ``--scenarios-json``. Measurements: ``WORK/compare.json``.
``plot``
    ``--png`` from ``--json``: wall time (log scale) against the fraction of the grid's best; needs the
    ``plot`` extra (matplotlib), skipped with a message without it.

The search's harder truth (``--grid-wide`` on a GPU machine: 60+ configs; ``--grid-top 8``; ``--search-json``): per
default ``autotune`` run, a row of what its search measured (the YAML's ``study.configs_measured``,
``sampled_measured``, ``winner_from``), its winner's re-measured median and the grid's best's, every round of both,
appended with a run id and the commit::

    python benchmarks/time_to_quality.py --tag h200 --dataset /tmp/s8k --work /tmp/search --grid-wide --stages grid --time-budget 480
    python benchmarks/time_to_quality.py --tag h200 --dataset /tmp/s8k --work /tmp/search --methods autotune --seed 1 --seeds 3 --stages methods
    python benchmarks/time_to_quality.py --tag h200 --dataset /tmp/s8k --work /tmp/search --grid-top 8 --rounds 3 --stages compare \
        --json /tmp/search/ttq.json --results /tmp/search/RESULTS.md --search-json benchmarks/results/h200-search.json

Exit codes: 0 done, 2 bad input, 3 stopped by ``--time-budget`` (run the same command again to continue), 130
interrupted (what finished is kept).

Example (the H200, in calls of under 9 minutes)::

    python -m autotune synth /tmp/synth8k --images 8000 --classes 100
    python benchmarks/time_to_quality.py --tag h200 --dataset /tmp/synth8k --grid-batches 128,256 --stages grid --time-budget 480
    python benchmarks/time_to_quality.py --tag h200 --dataset /tmp/synth8k --stages methods --time-budget 480
    python benchmarks/time_to_quality.py --tag h200 --dataset /tmp/synth8k --stages compare,plot --scenario 1xH200-ttq
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import harness
import scenarios
import tuner_bench
from harness import ROOT
from harness import read_json as read
from harness import write_json as write

from autotune.errors import UserError

STAGES = ("grid", "methods", "compare", "plot")
WARM = "{warm}"  # stands for the autotune method's YAML of the same seed
#: file name -> (label, the method's own `autotune run` arguments)
METHODS: dict[str, tuple[str, list[str]]] = {
    "autotune": ("autotune", []),
    "autotune-b30": ("autotune --budget 30", ["--budget", "30"]),
    "random": ("random", ["--budget", "60", "--sampler", "random", "--pruner", "none", "--no-baselines", "--confirm-top", "0"]),
    "optuna": ("optuna", ["--budget", "60", "--sampler", "tpe", "--pruner", "median", "--no-baselines", "--confirm-top", "0"]),
    "warm-start": ("warm start", ["--warm-start", WARM, "--budget", "20"]),
}
#: `autotune run` options this script sets itself, or that would change what is compared
OWN_OPTIONS = ("dataset", "demo", "budget", "n_trials", "timeout", "seed", "out", "storage", "study_name", "resume", "json", "quiet", "warm_start",
               "sampler", "pruner", "no_baselines", "confirm_top", "model", "step_ms", "gpus", "reuse", "if_stale", "no_report", "reports_dir")
GRID_TOP = 3
#: the peer every winner is held against as well as the grid's best: DALI's usual settings (scenarios.peers)
USUAL = "DALI's usual start"


# ----------------------------------------------------------------------------------------------- arguments
def parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], argparse.Namespace]:
    """This script's arguments, the extra ``autotune run`` arguments (after ``--``), and those parsed by autotune's parser."""
    own, extra = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(prog="time_to_quality", description=__doc__.split("\n")[0], epilog="arguments after -- go to every autotune run")
    p.add_argument("--tag", required=True, help="machine tag of the result files, e.g. h200 or cpu")
    p.add_argument("--dataset", required=True, help="image folder (autotune synth DIR --images 8000 --classes 100)")
    p.add_argument("--work", default=None, help="studies, YAMLs and stage results (default: benchmarks/work/ttq-TAG)")
    p.add_argument("--stages", default=",".join(STAGES), help="comma-separated, among %(default)s (default: all)")
    p.add_argument("--grid-batches", type=tuner_bench.batch_list, default=None, metavar="B,B", help="only these batch sizes in the grid, e.g. 128,256")
    p.add_argument("--grid-wide", action="store_true",
                   help="on a GPU machine, tuner_bench's wide grid (60+ configs: threads 1-16, hw_decoder_load 0-1 by 0.25, queues 1-4)")
    p.add_argument("--grid-top", type=int, default=GRID_TOP, help="the grid's best configs re-measured in the compare stage (default: %(default)s)")
    p.add_argument("--search-json", default=None, help="also append, per default autotune run, a row of the search's account to this JSON "
                   "(seed, wall_s, configs_measured, sampled_measured, winner, winner_is_start, winner_rate, grid_best, grid_best_rate, fraction)")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated, among %(default)s (default: all)")
    p.add_argument("--seeds", type=int, default=1, help="seeds per method (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="first seed (default: %(default)s)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds of re-measurement (default: %(default)s)")
    p.add_argument("--window", type=float, default=0.5, help="seconds per timed window, grid and re-measurement (default: %(default)s)")
    p.add_argument("--windows", type=int, default=3, help="timed windows per measurement, grid and re-measurement (default: %(default)s)")
    p.add_argument("--warmup-batches", type=int, default=2)
    p.add_argument("--trial-timeout", type=float, default=120.0)
    p.add_argument("--time-budget", type=float, default=0.0, help="start no grid trial or method run after about S seconds; 0: no limit")
    p.add_argument("--scenario", default=None, help="also write the rules of thumb and autotune's config as rows of this scenario")
    p.add_argument("--machine", default=None, help="the scenario rows' machine (default: a line from the fingerprint)")
    p.add_argument("--json", default=None, help="default: benchmarks/results/TAG-time-to-quality.json")
    p.add_argument("--png", default=None, help="default: benchmarks/results/TAG-time-to-quality.png")
    p.add_argument("--results", default=str(harness.RESULTS), help="the Markdown results file (default: benchmarks/RESULTS.md)")
    p.add_argument("--scenarios-json", default=str(scenarios.RESULTS_JSON), help="default: benchmarks/results/scenarios.json")
    a = p.parse_args(own)
    a.dataset = str(Path(a.dataset).resolve())
    a.work = Path(a.work or ROOT / "benchmarks" / "work" / f"ttq-{a.tag}").resolve()
    results = harness.RESULTS_DIR
    a.json, a.png = Path(a.json or results / f"{a.tag}-time-to-quality.json"), Path(a.png or results / f"{a.tag}-time-to-quality.png")
    a.results, a.scenarios_json = Path(a.results), Path(a.scenarios_json)
    a.search_json = Path(a.search_json) if a.search_json else None
    a.stages = [s.strip() for s in a.stages.split(",") if s.strip()]
    a.methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    for name, got, allowed in (("--stages", a.stages, STAGES), ("--methods", a.methods, tuple(METHODS))):
        bad = [x for x in got if x not in allowed]
        if bad or not got:
            raise UserError(f"{name} must be among {', '.join(allowed)}, but got {(bad or [''])[0]!r}")
    a.command = harness.command_line(__file__, argv)
    return a, extra, run_options(a.dataset, extra)


def run_options(dataset: str, extra: list[str]) -> argparse.Namespace:
    """``autotune run``'s reading of the extra arguments; refuses those this script sets or that change what is compared."""
    from autotune.cli import build_parser

    try:
        base, got = (build_parser().parse_args(["run", "--dataset", dataset, *x]) for x in ([], extra))
    except SystemExit:
        raise UserError(f"the arguments after -- must be valid for autotune run, but got {shlex.join(extra)!r}") from None
    for name in OWN_OPTIONS:
        if getattr(got, name) != getattr(base, name):
            raise UserError(f"--{name.replace('_', '-')} after -- is set per method by this script (or measures more than the loader); leave it out")
    from autotune.tuning.request import DEFAULT_PIPELINE, DEFAULT_SPACE

    # the run's own defaults where the flags are left out (the parser leaves them unset: the request fills them in)
    got.space, got.pipeline = got.space or DEFAULT_SPACE, got.pipeline or DEFAULT_PIPELINE
    return got


# -------------------------------------------------------------------------------------------------- helpers
def note_command(a: argparse.Namespace) -> None:
    """Keep each distinct command line of this script, for the RESULTS.md section."""
    path = a.work / "commands.json"
    cmds = read(path) or []
    if a.command not in cmds:
        write(path, [*cmds, a.command])


class Clock:
    """``--time-budget``: what is left of it, for starting no new work that would not end in time."""

    def __init__(self, budget_s: float) -> None:
        self.budget_s, self.start = budget_s, time.monotonic()

    def left(self) -> float:
        return float("inf") if not self.budget_s else self.budget_s - (time.monotonic() - self.start)


# ----------------------------------------------------------------------------------------------------- grid
def stage_grid(a: argparse.Namespace, opts: argparse.Namespace, clock: Clock) -> int:
    out = a.work / "grid.json"
    if out.exists():
        print(f"grid: done ({out})", file=sys.stderr)
        return 0
    if clock.left() <= 0:
        return 3
    storage = f"sqlite:///{a.work / 'grid.db'}"
    argv = ["grid", "--dataset", a.dataset, "--storage", storage, "--prefix", "ttq", "--space", opts.space, "--pipeline", opts.pipeline,
            "--window", str(a.window), "--windows", str(a.windows), "--warmup-batches", str(a.warmup_batches), "--trial-timeout", str(a.trial_timeout),
            "--time-budget", str(0 if clock.left() == float("inf") else max(1.0, clock.left()))]
    argv += ["--device", opts.device] if opts.device else []
    argv += ["--batches", ",".join(map(str, a.grid_batches))] if a.grid_batches else []
    argv += ["--wide"] if a.grid_wide else []
    rc = tuner_bench.main(argv)
    if rc != 0:
        return rc
    import optuna

    from autotune.study.storage import open_storage

    study = optuna.load_study(study_name="ttq-grid", storage=open_storage(storage))
    g = tuner_bench.grid_summary(study)
    write(out, {"size": g["size"], "wall_s": round(g["wall_s"], 2), "backends": g["backends"], "batches": a.grid_batches,
                "top": [{"config": t.user_attrs["config"], "params": t.user_attrs["loader"], "rate": t.value} for t in g["top"][:max(GRID_TOP, a.grid_top)]],
                "dataset": study.user_attrs.get("dataset"), "device": study.user_attrs.get("device"), "space": study.user_attrs.get("space"),
                "pipeline": study.user_attrs.get("pipeline"), "measurement": study.user_attrs.get("measurement"), "hardware": study.user_attrs.get("hardware")})
    print(f"grid: {g['size']} configs in {g['wall_s']:.0f} s of trials; wrote {out}", file=sys.stderr)
    return 0


# -------------------------------------------------------------------------------------------------- methods
def method_command(a: argparse.Namespace, extra: list[str], name: str, seed: int) -> list[str]:
    """The ``autotune run`` command of one method and seed (``python`` for this interpreter)."""
    d = a.work / "methods"
    own = [str(d / f"autotune-seed{seed}.yaml") if x == WARM else x for x in METHODS[name][1]]
    return ["python", "-m", "autotune", "run", "--dataset", a.dataset, "--out", str(d / f"{name}-seed{seed}.yaml"),
            "--storage", f"sqlite:///{d / f'{name}-seed{seed}.db'}", "--study-name", f"ttq-{name}-seed{seed}", "--seed", str(seed),
            "--json", "--quiet", "--no-report", "--reports-dir", str(a.work / "reports"), *own, *extra]


def run_method(a: argparse.Namespace, extra: list[str], name: str, seed: int) -> dict[str, Any]:
    """One method and seed: a real ``autotune run``, timed from its start to its YAML written."""
    from autotune.config import load_config

    d = a.work / "methods"
    d.mkdir(parents=True, exist_ok=True)
    yaml_path, db = d / f"{name}-seed{seed}.yaml", d / f"{name}-seed{seed}.db"
    for f in (yaml_path, db):  # left by a run that was cut off: start afresh
        f.unlink(missing_ok=True)
    cmd = method_command(a, extra, name, seed)
    print(f"$ {shlex.join(cmd)}", file=sys.stderr, flush=True)
    start = time.time()
    proc = subprocess.run([sys.executable, *cmd[1:]], stdout=subprocess.PIPE, text=True, check=False, env=harness.child_env())
    ended = time.time()
    if proc.returncode < 0 or proc.returncode in (130, 143):
        raise KeyboardInterrupt  # stopped from outside: nothing recorded, the next call runs it again
    rec: dict[str, Any] = {"method": METHODS[name][0], "name": name, "seed": seed, "command": shlex.join(cmd), "exit_code": proc.returncode,
                           "process_s": round(ended - start, 2)}
    try:
        rec["summary"] = json.loads(proc.stdout)
    except json.JSONDecodeError:
        rec["summary"] = None
    if proc.returncode == 0 and yaml_path.exists():
        cfg = load_config(yaml_path)
        rec |= {"wall_s": round(yaml_path.stat().st_mtime - start, 2), "config": cfg.loader.to_params(), "config_key": cfg.loader.describe(), "yaml": str(yaml_path)}
    else:
        rec |= {"wall_s": round(ended - start, 2), "config": None, "config_key": None, "error": f"autotune run exited with {proc.returncode}"}
    return rec


def method_seconds(name: str) -> float:
    from autotune.tuning.request import DEFAULT_BUDGET_S

    own = METHODS[name][1]
    return (float(own[own.index("--budget") + 1]) if "--budget" in own else DEFAULT_BUDGET_S) + 15.0  # start-up and writing


def stage_methods(a: argparse.Namespace, extra: list[str], clock: Clock) -> int:
    left = 0
    for seed in range(a.seed, a.seed + a.seeds):
        for name in [m for m in METHODS if m in a.methods]:
            out = a.work / "methods" / f"{name}-seed{seed}.json"
            if out.exists():
                print(f"methods: {name} seed {seed} done ({out})", file=sys.stderr)
                continue
            warm = read(a.work / "methods" / f"autotune-seed{seed}.json")
            if WARM in METHODS[name][1] and not (warm and warm.get("config")):
                print(f"methods: {name} seed {seed} needs the autotune run of seed {seed} first; skipped", file=sys.stderr)
                left += 1
                continue
            if method_seconds(name) > clock.left():
                left += 1
                continue
            rec = run_method(a, extra, name, seed)
            write(out, rec)
            print(f"methods: {rec['method']} seed {seed}: {rec.get('config_key') or rec.get('error')} in {rec['wall_s']:.1f} s", file=sys.stderr)
    if left:
        print(f"methods: {left} runs left: run the same command again", file=sys.stderr)
    return 3 if left else 0


def method_records(a: argparse.Namespace) -> list[dict[str, Any]]:
    order = list(METHODS)
    recs = [read(p) for p in sorted((a.work / "methods").glob("*-seed*.json"))]
    return sorted((r for r in recs if r), key=lambda r: (order.index(r["name"]), r["seed"]))


# -------------------------------------------------------------------------------------------------- compare
def stage_compare(a: argparse.Namespace, opts: argparse.Namespace, clock: Clock) -> int:
    from autotune._imports import is_available
    from autotune.config import load_config
    from autotune.dataset import pagecache
    from autotune.dataset.scan import scan

    grid, recs = read(a.work / "grid.json"), method_records(a)
    if grid is None:
        raise UserError(f"no grid in {a.work}; run the grid stage first (--stages grid)")
    if not any(r.get("config") for r in recs):
        raise UserError(f"no method has chosen a config in {a.work}; run the methods stage first (--stages methods)")
    fp = harness.machine()
    device = opts.device or ("cuda" if fp.get("gpus") else "cpu")
    measured = {t["config"]: t["params"] for t in grid["top"][:a.grid_top]} | {r["config_key"]: r["config"] for r in recs if r.get("config")}
    path = a.work / "compare.json"
    cmp = read(path)
    setting = {"rounds": a.rounds, "window": a.window, "windows": a.windows, "warmup_batches": a.warmup_batches, "device": device}
    if cmp and all(cmp.get(k) == v for k, v in setting.items()) and set(measured) <= set(cmp["configs"]):
        print(f"compare: measured already ({path}); writing the results from it", file=sys.stderr)
    else:
        if clock.left() <= 0:
            return 3
        autotune_recs = [r for r in recs if r["name"] == "autotune" and r.get("yaml")]
        tuned = load_config(autotune_recs[0]["yaml"]) if autotune_recs else None
        cores, cuda = int(fp["cpus"]), device.startswith("cuda")
        dataset = scan(a.dataset)
        cand = scenarios.peers(tuned, cores, cuda, [b for b in (512, 256, 128) if b <= len(dataset)], is_available("dali"))
        cand.pop("tuned", None)  # measured as the autotune method's config
        pagecache.warm(dataset)
        with harness.SideBySide(dataset, pipeline=opts.pipeline, device=device, window=a.window, windows=a.windows, trial_timeout=a.trial_timeout) as side:
            side.keep_largest_batch(cand)
            from autotune.config.schema import LoaderConfig

            peer_keys = {k: LoaderConfig.from_params(p).describe() for k, p in cand.items()}
            configs = measured | {peer_keys[k]: p for k, p in cand.items()}
            print(f"compare: {len(configs)} configs, {a.rounds} rounds, interleaved", file=sys.stderr)
            scores, errors = side.rounds(configs, a.rounds)
        cmp = setting | {"when": harness.utc_now(), "configs": configs, "scores": scores,
                         "errors": errors, "peers": peer_keys, "hardware": fp}
        write(path, cmp)
    rows = result_rows(grid, recs, cmp, a.grid_top)
    write(a.json, rows)
    if a.search_json:
        found = search_rows(grid, recs, cmp, a.grid_top)
        harness.append_rows(a.search_json, found)  # every run kept: a run id and the commit on each row
        print(f"compare: appended {len(found)} rows to {a.search_json}", file=sys.stderr)
    print(f"compare: wrote {a.json}", file=sys.stderr)
    kind = f"time to quality, {harness.machine_kind(cmp['hardware'])}"
    harness.write_section(kind, section(a, kind, grid, recs, cmp, rows), a.results)
    print(f"compare: wrote the section '{kind}' of {a.results}", file=sys.stderr)
    if a.scenario:
        save_scenario(a, cmp, recs, device)
    return 0


def medians(cmp: dict[str, Any]) -> dict[str, float | None]:
    return {k: statistics.median(v) if v else None for k, v in cmp["scores"].items()}


def grid_best(grid: dict[str, Any], cmp: dict[str, Any], top: int = GRID_TOP) -> tuple[str, float]:
    """The reference: the best median among the grid's ``top`` configs, re-measured."""
    med = medians(cmp)
    rated = [t["config"] for t in grid["top"][:top] if med.get(t["config"])]
    if not rated:
        raise UserError("none of the grid's top configs completed when re-measured; see the errors in compare.json")
    key = max(rated, key=lambda k: med[k])
    return key, med[key]


def search_rows(grid: dict[str, Any], recs: list[dict[str, Any]], cmp: dict[str, Any], top: int = GRID_TOP) -> list[dict[str, Any]]:
    """A row per default ``autotune`` run: what its search measured (the YAML's study section), whether its winner is
    a built-in start, and the winner's re-measured median over the grid's best's, with every round of both."""
    from autotune.config import load_config

    med = medians(cmp)
    ref_key, ref = grid_best(grid, cmp, top)
    run_id, commit = harness.new_run_id(), harness.commit()
    usual = (cmp.get("peers") or {}).get(USUAL)  # measured in the same rounds as every winner (a peer of the compare stage)
    usual_rate = med.get(usual) if usual else None
    out = []
    for r in recs:
        if r["name"] != "autotune" or not r.get("yaml"):
            continue
        study = load_config(r["yaml"]).study or {}
        key = r.get("config_key")
        rate = med.get(key) if key else None
        out.append({"seed": r["seed"], "wall_s": r["wall_s"], "configs_measured": study.get("configs_measured"),
                    "sampled_measured": study.get("sampled_measured"), "winner": key,
                    "winner_is_start": study["winner_from"] != "search" if study.get("winner_from") else None,
                    "winner_from": study.get("winner_from"), "winner_rate": round(rate, 1) if rate else None,
                    "winner_rounds": cmp["scores"].get(key) if key else None, "grid_best": ref_key, "grid_best_rate": round(ref, 1),
                    "grid_best_rounds": cmp["scores"].get(ref_key), "fraction": round(rate / ref, 4) if rate else None,
                    "usual": usual, "usual_rate": round(usual_rate, 1) if usual_rate else None,
                    "usual_rounds": cmp["scores"].get(usual) if usual else None,
                    "fraction_of_usual": round(rate / usual_rate, 4) if rate and usual_rate else None,
                    "grid_size": grid.get("size"), "rounds": cmp.get("rounds"), "machine": harness.machine_kind(cmp["hardware"]),
                    "when": cmp.get("when"), "run_id": run_id, "commit": commit,
                    "command": r.get("command"), "compare_command": "python " + shlex.join([sys.argv[0], *sys.argv[1:]])})
    return out


def _winner_from(rec: dict[str, Any]) -> dict[str, Any]:
    """What found a run's winner, as its YAML recorded it (``study.winner_from``), for the headlines; {} for a YAML
    written before it was recorded, or none."""
    from autotune.config import load_config

    if not rec.get("yaml") or not Path(rec["yaml"]).exists():
        return {}
    found = (load_config(rec["yaml"]).study or {}).get("winner_from")
    return {"winner_from": found} if found else {}


def result_rows(grid: dict[str, Any], recs: list[dict[str, Any]], cmp: dict[str, Any], top: int = GRID_TOP) -> list[dict[str, Any]]:
    """The JSON rows: the grid, each method and seed, each rule of thumb (wall time 0)."""
    med = medians(cmp)
    ref_key, ref = grid_best(grid, cmp, top)

    def row(method: str, seed: int | None, wall: float, key: str | None) -> dict[str, Any]:
        rate = med.get(key) if key else None
        return {"method": method, "seed": seed, "wall_s": round(wall, 2), "fraction_of_grid_best": round(rate / ref, 4) if rate else None,
                "config": key, "samples_per_s": round(rate, 1) if rate else None}

    rows = [row("grid", None, grid["wall_s"], ref_key)]
    rows += [row(r["method"], r["seed"], r["wall_s"], r.get("config_key")) | _winner_from(r) for r in recs]
    rows += [row(peer, None, 0.0, key) for peer, key in cmp["peers"].items()]
    return rows


def _pct(x: float | None) -> str:
    return "failed" if x is None else f"{100 * x:.1f} %"


def section(a: argparse.Namespace, kind: str, grid: dict[str, Any], recs: list[dict[str, Any]], cmp: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    """This machine's section of RESULTS.md: a row per method (median and worst over seeds), the commands, the re-measurement."""
    ref_key, ref = grid_best(grid, cmp, a.grid_top)
    med = medians(cmp)
    ds, m = grid.get("dataset") or {}, grid.get("measurement") or {}
    labels = [METHODS[n][0] for n in METHODS]
    lines = [f"<!-- section: {kind} -->", f"## Time to a near-best config ({harness.machine_kind(cmp['hardware'])})", "",
             f"- Machine: {harness.machine_line(cmp['hardware'])}",
             f"- Run: {cmp['when']}; dataset {ds.get('path')}: {ds.get('samples')} images, {ds.get('classes')} classes; space `{grid.get('space')}`; "
             f"device {grid.get('device')}; pipeline {grid.get('pipeline')}",
             f"- Grid: {grid['size']} configs ({', '.join(grid['backends'])}"
             + (f"; batch sizes {', '.join(map(str, grid['batches']))} only, while the methods search all of the space's" if grid.get("batches") else "")
             + f"), each measured once ({m.get('warmup_batches')} warm-up batches, windows of {m.get('window_s')} s x {m.get('windows')}), "
             f"{grid['wall_s']:.0f} s of trials (the sum of their durations); best: `{ref_key}`, {ref:,.1f} samples/s (the best of its top {len(grid['top'])}, re-measured)",
             "- A method's wall time runs from the start of its `autotune run` process to its YAML written (start-up, reading the data, trials and "
             "re-measurement included); `warm start` starts from the `autotune` YAML of the same seed and counts its own run only",
             f"- Re-measurement: side by side, interleaved, {cmp['rounds']} round{'s' if cmp['rounds'] != 1 else ''} of windows of {cmp['window']} s x {cmp['windows']}, each in a fresh process; "
             "fraction = the config's median over the grid's best median", "",
             "| method | seeds | chosen config(s) | fraction of the grid's best (median, worst) | wall time, s (median, worst) | of the grid's time (median) |",
             "|---|---|---|---|---|---|",
             f"| grid | – | `{ref_key}` | 100.0 % | {grid['wall_s']:.0f} | 100.0 % |"]
    for label in labels:
        mine = [r for r in rows if r["method"] == label]
        if not mine:
            continue
        frac = [r["fraction_of_grid_best"] or 0.0 for r in mine]
        wall = [r["wall_s"] for r in mine]
        chosen = "; ".join(f"`{k}`" for k in sorted({r["config"] or "failed" for r in mine}))
        lines.append(f"| {label} | {len(mine)} | {chosen} | {_pct(statistics.median(frac))}, {_pct(min(frac))} | {statistics.median(wall):.1f}, {max(wall):.1f} "
                     f"| {_pct(statistics.median(wall) / grid['wall_s'])} |")
    for r in rows:
        if r["method"] != "grid" and r["method"] not in labels:
            lines.append(f"| {r['method']} (rule of thumb) | – | `{r['config']}` | {_pct(r['fraction_of_grid_best'])} | 0 | – |")
    lines += ["", "Commands:", "", "```", *(read(a.work / "commands.json") or [a.command]), *(r["command"] for r in recs), "```", "",
              "Re-measured (samples/s per round; median):", "", "| config | rounds | median | of the grid's best |", "|---|---|---|---|"]
    for k in sorted(cmp["scores"], key=lambda k: -(med[k] or 0.0)):
        lines.append(f"| `{k}` | {', '.join(f'{x:,.1f}' for x in cmp['scores'][k]) or cmp['errors'].get(k, 'failed')} | "
                     f"{f'{med[k]:,.1f}' if med[k] else 'failed'} | {_pct(med[k] / ref if med[k] else None)} |")
    apart = told_apart(cmp, ref)
    lines += ["", *([apart, ""] if apart else []), f"Figure: `{a.png.name}`.", "", f"<!-- /section: {kind} -->"]
    return "\n".join(lines)


def told_apart(cmp: dict[str, Any], ref: float, within: float = 0.2) -> str | None:
    """Can the configs near the top be told apart? A Kruskal-Wallis test over the rounds of every config whose
    median is within ``within`` of the grid's best (needs scipy and at least 3 rounds; otherwise no line)."""
    try:
        from scipy.stats import kruskal
    except ImportError:
        return None
    near = {k: v for k, v in cmp["scores"].items() if len(v) >= 3 and statistics.median(v) >= (1 - within) * ref}
    if len(near) < 2:
        return None
    h, pval = kruskal(*near.values())
    verdict = "no evidence that they differ" if pval >= 0.05 else "they differ"
    return (f"Told apart? Kruskal-Wallis over the {len(near)} configs within {within:.0%} of the grid's best, "
            f"{cmp['rounds']} rounds each: H = {h:.1f}, p = {pval:.2f}: {verdict} (at the 5 % level).")


def save_scenario(a: argparse.Namespace, cmp: dict[str, Any], recs: list[dict[str, Any]], device: str) -> None:
    """The rules of thumb and the default autotune run's config (its median seed) as rows of ``--scenario``."""
    from autotune.config import load_config

    med = medians(cmp)
    runs = sorted((r for r in recs if r["name"] == "autotune" and r.get("config_key")), key=lambda r: med.get(r["config_key"]) or 0.0)
    if not runs:
        print("compare: no autotune run chose a config: no scenario rows", file=sys.stderr)
        return
    mid = runs[(len(runs) - 1) // 2]
    cand = {peer: cmp["configs"][key] for peer, key in cmp["peers"].items()} | {"tuned": mid["config"]}
    keys = {peer: key for peer, key in cmp["peers"].items()} | {"tuned": mid["config_key"]}
    scores = {peer: cmp["scores"][key] for peer, key in keys.items()}
    errors = {peer: cmp["errors"][key] for peer, key in keys.items() if key in cmp["errors"]}
    machine = a.machine or scenarios.machine_name(cmp["hardware"], device.startswith("cuda"))
    rows = scenarios.scenario_rows(a.scenario, machine, cand, scores, errors)
    rows[-1].update(scenarios.tuned_details(load_config(mid["yaml"]), mid["wall_s"], f"{a.command}  # {mid['command']}"))
    scenarios.save_rows(a.scenarios_json, a.scenario, machine, rows, harness.new_run_id())
    print(f"compare: wrote {len(rows)} rows of scenario {a.scenario} to {a.scenarios_json}", file=sys.stderr)


# ----------------------------------------------------------------------------------------------------- plot
def stage_plot(a: argparse.Namespace) -> int:
    from autotune._imports import is_available

    rows = read(a.json)
    if rows is None:
        raise UserError(f"no results in {a.json}; run the compare stage first (--stages compare)")
    if not is_available("plot"):
        print('plot: matplotlib is not installed (pip install -e ".[plot]"); no figure', file=sys.stderr)
        return 0
    plot(rows, a.png, f"Time to a near-best loader config ({a.tag})")
    print(f"plot: wrote {a.png}", file=sys.stderr)
    return 0


def plot(rows: list[dict[str, Any]], png: Path, title: str) -> None:
    """Wall time (log) against the fraction of the grid's best: a marker per method and seed, the grid a star, rules of thumb lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [METHODS[n][0] for n in METHODS]
    fig, ax = plt.subplots(figsize=(9, 5))
    ys = [1.0]
    for i, label in enumerate(lab for lab in labels if any(r["method"] == lab for r in rows)):
        pts = [(r["wall_s"], r["fraction_of_grid_best"]) for r in rows if r["method"] == label and r["fraction_of_grid_best"] is not None]
        if pts:
            ax.scatter(*zip(*pts), marker="osD^v"[i % 5], s=50, color=f"C{i}", label=label, zorder=3)
            ys += [y for _, y in pts]
    g = next(r for r in rows if r["method"] == "grid")
    ax.scatter([g["wall_s"]], [1.0], marker="*", s=220, color="black", label="grid (its best, re-measured)", zorder=3)
    rules = [r for r in rows if r["method"] != "grid" and r["method"] not in labels]
    for j, r in enumerate(rules):
        if r["fraction_of_grid_best"] is not None:
            ax.axhline(r["fraction_of_grid_best"], ls=(0, (4, 2 + j)), lw=1, color=f"C{len(labels) + j}", label=f"{r['method']} (no tuning)")
            ys.append(r["fraction_of_grid_best"])
    ax.set_xscale("log")
    ax.set_ylim(0, max(ys) * 1.08)
    ax.set_xlabel("wall time, s (log scale)")
    ax.set_ylabel("fraction of the grid's best")
    ax.yaxis.set_major_formatter(matplotlib.ticker.PercentFormatter(1.0))
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=8)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=120, bbox_inches="tight")
    plt.close(fig)


# ------------------------------------------------------------------------------------------------------ cli
def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        a, extra, opts = parse(argv)
        a.work.mkdir(parents=True, exist_ok=True)
        note_command(a)
        clock = Clock(a.time_budget)
        for stage in [s for s in STAGES if s in a.stages]:
            rc = {"grid": lambda: stage_grid(a, opts, clock), "methods": lambda: stage_methods(a, extra, clock),
                  "compare": lambda: stage_compare(a, opts, clock), "plot": lambda: stage_plot(a)}[stage]()
            if rc:
                if rc == 3:
                    print(f"{stage}: stopped for --time-budget; run the same command again to continue", file=sys.stderr)
                return rc
        return 0
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: what finished is kept; run the same command again to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
