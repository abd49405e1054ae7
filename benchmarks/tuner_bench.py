"""Does the tuner find the best loader config fast? A ground-truth grid against three search methods.

Three subcommands, each resumable, all sharing one Optuna storage (``--storage``):

``grid``
    Every config of a grid made for this machine (its usable cores; GPU decode when a GPU is present),
    at least 48 of them over torch and DALI, measured once each as trials of one study (role ``grid``,
    no pruning, no re-measurement). ``--time-budget S`` ends a call after about S seconds; the next call
    continues with the configs not measured yet. The grid's wall time is the sum of its trial durations.
``methods``
    Per seed and method, a study of the same budget counted in measurements: ``autotune`` (what
    ``autotune run`` does: multivariate TPE, the baselines, median pruning, the top candidates
    re-measured, those re-measurements counted against the budget), ``random`` (random search, nothing
    else) and ``optuna`` (``TPESampler()`` and Optuna's default pruner, no baselines, no re-measurement).
    Variants for choosing the defaults from data: ``autotune-random``, ``autotune-qmc``,
    ``autotune-percentile``, ``autotune-nopruner``. A method's wall time runs from its first trial to
    its chosen config, Optuna's own work included.
``compare``
    In one process run, re-measures the grid's top configs, every method's chosen config and the
    framework defaults, interleaved, ``--rounds`` times, and writes this machine's section of
    ``benchmarks/RESULTS.md`` (other machines' sections are kept).

Run from the repository root: ``python benchmarks/tuner_bench.py grid --dataset DIR``; see benchmarks/README.md.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import harness
import optuna
from harness import ROOT, machine, machine_kind, machine_line, write_section

from autotune.config.schema import LoaderConfig
from autotune.dataset import pagecache
from autotune.dataset.scan import scan
from autotune.errors import UserError
from autotune.loaders.presets import get_preset
from autotune.study.evidence import MeasuredTrials, trial_attrs
from autotune.study.result import winner
from autotune.study.space import SearchSpace, load_space
from autotune.study.storage import open_storage
from autotune.study.tuner import Tuner, TuneSettings, baseline_configs

logger = logging.getLogger("tuner_bench")

RESULTS = harness.RESULTS
MIN_GRID = 48
CACHE = "warm, read once per command"  # not "warm": the Tuner would re-read the dataset on every optimize()
#: method -> (sampler, pruner, baselines, re-measure the top candidates); sampler/pruner None: Optuna's defaults
METHODS: dict[str, tuple[str | None, str | None, bool, bool]] = {
    "autotune": ("tpe", "median", True, True),
    "random": ("random", "none", False, False),
    "optuna": (None, None, False, False),
    "autotune-random": ("random", "median", True, True),
    "autotune-qmc": ("qmc", "median", True, True),
    "autotune-percentile": ("tpe", "percentile", True, True),
    "autotune-nopruner": ("tpe", "none", True, True),
}
DEFAULT_METHODS = "autotune,random,optuna"


# --------------------------------------------------------------------------------------------- the grid
def _levels(cores: int, divisors: tuple[int, ...]) -> list[int]:
    """``cores // d`` for each divisor, at least 1, without repeats."""
    return sorted({max(1, cores // d) for d in divisors})


def wide_grid_configs(space: SearchSpace, cores: int) -> list[dict[str, Any]]:
    """The search's harder truth on a GPU machine (at least 60 configs): DALI GPU decode over threads 1 to ``cores``
    and ``hw_decoder_load`` 0 to 1 in steps of 0.25 at the largest batch, queue depths 1 to 4, the smaller batches at
    two thread counts, DALI CPU decode, and the torch side (workers 0 to ``cores`` at every batch size), each value
    inside ``space`` (a config outside it is left out)."""
    batches = list(space["batch_size"].choices) if space["batch_size"].kind == "choices" else [int(space["batch_size"].low)]
    big = max(batches)
    threads = sorted({t for t in (1, 2, 4, 8, 12, 16, cores) if t <= cores})
    mid = [t for t in (4, 8) if t <= cores] or threads[:1]
    gpu = {"backend": "dali", "dali_device": "gpu"}
    out: list[dict[str, Any]] = []
    loads = (0.0, 0.25, 0.5, 0.75, 1.0)
    out += [gpu | {"batch_size": big, "num_threads": t, "prefetch_queue_depth": 2, "hw_decoder_load": hl} for t in threads for hl in loads]
    out += [gpu | {"batch_size": big, "num_threads": t, "prefetch_queue_depth": q, "hw_decoder_load": 1.0} for t in mid for q in (1, 3, 4)]
    out += [gpu | {"batch_size": b, "num_threads": t, "prefetch_queue_depth": 2, "hw_decoder_load": hl} for b in batches if b != big
            for t in mid for hl in (0.5, 1.0)]
    out += [{"backend": "dali", "dali_device": "cpu", "batch_size": big, "num_threads": t, "prefetch_queue_depth": 2} for t in _levels(cores, (4, 2, 1))]
    for b in batches:
        out.append({"backend": "torch", "batch_size": b, "num_workers": 0, "pin_memory": True})
        out += [{"backend": "torch", "batch_size": b, "num_workers": w, "pin_memory": True, "prefetch_factor": 2, "persistent_workers": True}
                for w in sorted({max(1, cores // 4), max(1, cores // 2), max(1, cores * 3 // 4), cores})]

    def inside(p: dict[str, Any]) -> bool:
        names = {"num_threads": "num_threads", "prefetch_queue_depth": "prefetch_queue_depth", "hw_decoder_load": "hw_decoder_load",
                 "num_workers": "num_workers", "dali_device": "dali_device"}
        return all(space[n].contains(p[k]) for k, n in names.items() if k in p and n in space)

    unique = {LoaderConfig.from_params(p).describe(): p for p in out if inside(p)}
    return list(unique.values())


def grid_configs(space: SearchSpace, cores: int, cuda: bool) -> list[dict[str, Any]]:
    """The grid for this machine: loader params (``LoaderConfig.from_params``), every value inside ``space``.

    On a CPU machine: workers 0, 1, cores/2, cores with prefetch 2 and 4, persistent or not; DALI CPU decode
    with 1, cores/2, cores threads and queue depths 1-4. With a GPU: workers 0, cores/4, cores/2, cores,
    pinned or not; DALI CPU and GPU decode with cores/4, cores/2, cores threads, hw_decoder_load 0, 0.5, 1.
    Every batch size of the space.
    """

    def allowed(name: str, values: list[Any]) -> list[Any]:
        if name not in space:
            return []
        return [v for v in values if space[name].contains(v)]

    out: list[dict[str, Any]] = []
    batches = list(space["batch_size"].choices) if space["batch_size"].kind == "choices" else [int(space["batch_size"].low)]
    backends = space.backends()
    workers = allowed("num_workers", [0, *_levels(cores, (4, 2, 1))] if cuda else [0, *_levels(cores, (cores, 2, 1))])
    pins = allowed("pin_memory", [True, False] if cuda else [False]) or [None]
    prefetch = allowed("prefetch_factor", [2] if cuda else [2, 4]) or [None]
    persistent = allowed("persistent_workers", [True] if cuda else [True, False]) or [None]
    dali_devices = allowed("dali_device", ["gpu", "cpu"]) if "dali" in backends else []
    threads = allowed("num_threads", _levels(cores, (4, 2, 1)) if cuda else _levels(cores, (cores, 2, 1)))
    queues = allowed("prefetch_queue_depth", [2] if cuda else [1, 2, 3, 4]) or [2]
    loads = allowed("hw_decoder_load", [0.0, 0.5, 1.0])
    for b in batches:
        if "torch" in backends:
            for w in workers:
                for pin in pins:
                    base = {"backend": "torch", "batch_size": b, "num_workers": w} | ({"pin_memory": pin} if pin is not None else {})
                    if w == 0:
                        out.append(base)
                        continue
                    for pf in prefetch:
                        for pers in persistent:
                            out.append(base | ({"prefetch_factor": pf} if pf else {}) | ({"persistent_workers": pers} if pers is not None else {}))
        for dev in dali_devices:
            for t in threads:
                for q in queues:
                    base = {"backend": "dali", "batch_size": b, "dali_device": dev, "num_threads": t, "prefetch_queue_depth": q}
                    if dev == "gpu":
                        out.extend(base | {"hw_decoder_load": hl} for hl in loads)
                    else:
                        out.append(base)
    unique = {LoaderConfig.from_params(p).describe(): p for p in out}
    return list(unique.values())


# ------------------------------------------------------------------------------------------ shared set-up
class Bench:
    """What every subcommand needs: the dataset, the space fitted to this machine, the settings, the storage."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.fp = machine()
        self.cores = int(self.fp["cpus"])
        self.device = args.device or ("cuda" if self.fp.get("gpus") else "cpu")
        self.dataset = scan(args.dataset)
        space = load_space(args.space, cores=self.cores, device=self.device)
        p = space["batch_size"]
        if get_preset(args.pipeline).train and p.kind == "choices":
            fitting = tuple(b for b in p.choices if b <= len(self.dataset))
            if not fitting:
                raise UserError(f"every batch size of space {space.name} is larger than the {len(self.dataset)} images; use a larger dataset")
            space = space.restrict("batch_size", fitting)
        batches = getattr(args, "batches", None)
        if batches:
            space = restrict_batches(space, batches)
        self.space = space
        self.storage = args.storage
        if self.storage.startswith("sqlite:///"):
            Path(self.storage.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)

    def settings(self, **kw: Any) -> TuneSettings:
        a = self.args
        base = dict(pipeline=a.pipeline, device=self.device, warmup_batches=a.warmup_batches, window_s=a.window, windows=a.windows,
                    trial_timeout=a.trial_timeout, cores=self.cores, cache=CACHE)
        return TuneSettings(**(base | kw))

    def name(self, *parts: str) -> str:
        return "-".join((self.args.prefix, *parts))

    def studies(self) -> dict[str, optuna.study.StudySummary]:
        return {s.study_name: s for s in optuna.get_all_study_summaries(open_storage(self.storage), include_best_trial=False)}

    def load(self, name: str) -> optuna.Study:
        return optuna.load_study(study_name=name, storage=open_storage(self.storage))

    def note_command(self, study: optuna.Study, step: str) -> None:
        """Keep the exact command of each step (once each) in the grid study, for RESULTS.md."""
        cmds = dict(study.user_attrs.get("commands") or {})
        line = harness.command_line(__file__, self.args.argv)
        seen = cmds.get(step, [])
        if line not in seen:
            cmds[step] = [*seen, line]
            study.set_user_attr("commands", cmds)


def restrict_batches(space: SearchSpace, batches: list[int]) -> SearchSpace:
    """``space`` with only the batch sizes ``batches`` (each must be one of its choices)."""
    p = space["batch_size"]
    have = tuple(p.choices) if p.kind == "choices" else (int(p.low),) if p.low == p.high else ()
    missing = [x for x in batches if x not in have]
    if missing:
        raise UserError(f"--batches must be batch sizes of space {space.name} that fit the dataset ({', '.join(map(str, have)) or 'a range, not a list'}), "
                        f"but got {missing[0]}")
    return space.restrict("batch_size", tuple(batches))


def batch_list(text: str) -> list[int]:
    """``"128,256"`` -> ``[128, 256]``, for argparse."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be batch sizes separated by commas, e.g. 128,256, but got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"must be positive batch sizes separated by commas, e.g. 128,256, but got {text!r}")
    return out


def trials_of(study: optuna.Study, role: str | None = None) -> list[optuna.trial.FrozenTrial]:
    return [t for t in study.get_trials(deepcopy=False) if role is None or t.user_attrs.get("role") == role]


# ---------------------------------------------------------------------------------------------- grid
def cmd_grid(b: Bench) -> int:
    a = b.args
    name = b.name("grid")
    exists = name in b.studies()
    cuda = b.device.startswith("cuda")
    configs = wide_grid_configs(b.space, b.cores) if a.wide and cuda else grid_configs(b.space, b.cores, cuda)
    if len(configs) < MIN_GRID and not a.batches:  # a grid restricted on purpose may be smaller
        raise UserError(f"the grid for this machine has {len(configs)} configs, fewer than {MIN_GRID}; use a space with more batch sizes (e.g. a dataset of at least 256 images for the default space)")
    attrs = {"dataset": b.dataset.summary(), "device": b.device, "hardware": b.fp, "space": b.space.name, "pipeline": a.pipeline,
             "measurement": b.settings().measurement(), "grid_size": len(configs)}
    tuner = Tuner(b.dataset, b.space, b.settings(sampler="random", pruner="none", confirm_top=0, confirm_repeats=0), storage=b.storage, study_name=name, resume=exists, attrs=attrs)
    if not exists:
        for p in configs:
            tuner._enqueue(p, "grid")
    # a call killed mid-trial leaves it RUNNING: measure that config again
    for t in tuner.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        tuner.study._storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)
        tuner._enqueue(t.user_attrs["loader_params"], "grid")
    b.note_command(tuner.study, "grid")
    waiting = len(tuner.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
    done = len(tuner.study.trials) - waiting
    print(f"grid {name}: {len(configs)} configs, {done} measured, {waiting} to go", file=sys.stderr)
    if waiting:
        pagecache.warm(b.dataset)
        durations = [trial_attrs(t).get("duration_s") or 0.0 for t in tuner.study.trials if t.state.is_finished()]
        per_trial = statistics.mean(durations) if durations else 30.0
        timeout = max(1.0, a.time_budget - per_trial) if a.time_budget else None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        try:
            tuner.study.optimize(tuner.objective, n_trials=waiting, timeout=timeout, catch=(Exception,), callbacks=[_echo], gc_after_trial=False)
        finally:
            tuner.close()
    left = len(tuner.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.WAITING,)))
    g = grid_summary(tuner.study)
    print(f"grid: {g['measured']} of {g['size']} measured in {g['wall_s']:.0f} s of trials" + (f"; {left} left: run the same command again" if left else "; complete")
          + (f"; best so far {g['best_config']}: {g['best_rate']:,.1f} samples/s" if g["best_config"] else ""), file=sys.stderr)
    return 0 if not left else 3


def _echo(study: optuna.Study, t: optuna.trial.FrozenTrial) -> None:
    attrs = trial_attrs(t)  # the measurement's fields are one attribute, ``result``
    rate = attrs.get("samples_per_s")
    print(f"  #{t.number} {attrs.get('config', '')}: {attrs.get('outcome', t.state.name.lower())}"
          + (f" {rate:,.1f}/s" if rate else "") + f" ({attrs.get('duration_s') or 0:.1f} s)", file=sys.stderr)


def grid_summary(study: optuna.Study) -> dict[str, Any]:
    trials = trials_of(study, "grid")
    finished = [t for t in trials if t.state.is_finished()]
    complete = sorted((t for t in finished if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None), key=lambda t: t.value, reverse=True)
    return {
        "size": study.user_attrs.get("grid_size", len(trials)),
        "measured": len(finished),
        "waiting": sum(t.state == optuna.trial.TrialState.WAITING for t in trials),
        "wall_s": sum(trial_attrs(t).get("duration_s") or 0.0 for t in finished),
        "top": complete,
        "best_config": complete[0].user_attrs.get("config") if complete else None,
        "best_rate": complete[0].value if complete else None,
        "backends": sorted({t.user_attrs.get("config", "").split(" ")[0] for t in finished}),
    }


# ------------------------------------------------------------------------------------------- methods
def run_method(b: Bench, method: str, seed: int, budget: int) -> dict[str, Any]:
    sampler, pruner, baselines, confirm = METHODS[method]
    a = b.args
    confirm_top, confirm_repeats = (a.confirm_top, a.confirm_repeats) if confirm else (0, 0)
    remeasure = confirm_top * confirm_repeats if confirm_top > 1 else 0
    n_trials = budget - remeasure
    if n_trials < (3 if baselines else 1):
        raise UserError(f"--budget {budget} leaves {n_trials} trials after {remeasure} re-measurements; raise --budget or lower --confirm-top/--confirm-repeats")
    settings = b.settings(n_trials=n_trials, seed=seed, sampler=sampler or "tpe", pruner=pruner or "none", baselines=baselines,
                          confirm_top=confirm_top, confirm_repeats=confirm_repeats)
    name = b.name(method, f"seed{seed}")
    tuner = Tuner(b.dataset, b.space, settings, storage=b.storage, study_name=name, attrs={"method": method, "seed": seed, "budget": budget, "space": b.space.name})
    if sampler is None:
        tuner.study.sampler = optuna.samplers.TPESampler(seed=seed)
    if pruner is None:
        tuner.study.pruner = optuna.pruners.MedianPruner()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    t0 = time.monotonic()
    if baselines:
        tuner.enqueue_baselines()
    try:
        # the budget counts measurements: a repeat of a measured config (told its earlier result) costs none
        tuner.study.optimize(tuner.objective, n_trials=None, catch=(Exception,), gc_after_trial=False,
                             callbacks=[MeasuredTrials(n_trials, max_repeats=max(10, n_trials))])
    finally:
        tuner.close()
    searched = time.monotonic() - t0
    if tuner.complete_trials() and remeasure:
        tuner.confirm()
    wall = time.monotonic() - t0
    record: dict[str, Any] = {"method": method, "seed": seed, "budget": budget, "trials": n_trials, "remeasured": remeasure,
                              "wall_s": round(wall, 2), "search_s": round(searched, 2),
                              "pruned": sum(t.state == optuna.trial.TrialState.PRUNED for t in tuner.study.trials),
                              "trial_s": round(sum(trial_attrs(t).get("duration_s") or 0.0 for t in tuner.study.trials), 2)}
    if tuner.complete_trials():
        best, scores = winner(tuner.study)
        record |= {"chosen": best.user_attrs["loader"], "chosen_config": best.user_attrs.get("config"), "rate_in_study": round(statistics.median(scores), 1)}
    tuner.study.set_user_attr("bench", record)
    return record


def cmd_methods(b: Bench) -> int:
    a = b.args
    grid_name = b.name("grid")
    if grid_name not in b.studies():
        raise UserError(f"no grid study {grid_name!r} in {b.storage}; run the grid subcommand first")
    grid = b.load(grid_name)
    b.note_command(grid, "methods")
    budget = a.budget or max(8, round(0.14 * grid.user_attrs.get("grid_size", MIN_GRID)))
    methods = [m.strip() for m in a.methods.split(",") if m.strip()]
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise UserError(f"--methods must be among {', '.join(METHODS)}, but got {unknown[0]!r}")
    pagecache.warm(b.dataset)
    start = time.monotonic()
    left = 0
    for seed in range(a.seed, a.seed + a.seeds):
        for method in methods:
            name = b.name(method, f"seed{seed}")
            have = b.studies().get(name)
            if have is not None and (have.user_attrs.get("bench") or {}).get("budget") == budget:
                continue
            if a.time_budget and time.monotonic() - start > a.time_budget:
                left += 1
                continue
            if have is not None:  # unfinished, or another budget: measure it again
                optuna.delete_study(study_name=name, storage=open_storage(b.storage))
            r = run_method(b, method, seed, budget)
            print(f"{method} seed {seed}: {r.get('chosen_config')} {r.get('rate_in_study', 0):,.1f}/s in {r['wall_s']:.0f} s "
                  f"({r['trials']} trials, {r['pruned']} pruned, {r['remeasured']} re-measurements)", file=sys.stderr)
    if left:
        print(f"{left} method-seed studies left: run the same command again", file=sys.stderr)
    return 0 if not left else 3


# ------------------------------------------------------------------------------------------- compare
def cmd_compare(b: Bench) -> int:
    a = b.args
    grid = b.load(b.name("grid"))
    g = grid_summary(grid)
    if g["waiting"] or not g["top"]:
        raise UserError(f"the grid is not complete ({g['measured']} of {g['size']} measured); run the grid subcommand again")
    b.note_command(grid, "compare")
    runs: dict[str, list[dict[str, Any]]] = {}
    prefix = b.args.prefix + "-"
    for name, s in b.studies().items():
        rec = s.user_attrs.get("bench")
        if name.startswith(prefix) and rec and rec.get("chosen"):
            runs.setdefault(rec["method"], []).append(rec)
    if not runs:
        raise UserError("no method has run yet; run the methods subcommand first")
    configs: dict[str, dict[str, Any]] = {}
    for t in g["top"][: a.grid_top]:
        configs[t.user_attrs["config"]] = t.user_attrs["loader"]
    for recs in runs.values():
        for r in recs:
            configs.setdefault(r["chosen_config"], r["chosen"])
    defaults = LoaderConfig.from_params(baseline_configs(b.space, b.settings())["defaults"])
    configs.setdefault(defaults.describe(), defaults.to_params())
    pagecache.warm(b.dataset)
    print(f"re-measuring {len(configs)} configs, {a.rounds} rounds, interleaved", file=sys.stderr)
    # every measurement a fresh process, as in the studies; a config that fails scores 0 in that round
    with harness.SideBySide(b.dataset, pipeline=a.pipeline, device=b.device, window=a.window, windows=a.windows,
                            trial_timeout=a.trial_timeout, warmup_batches=a.warmup_batches) as side:
        scores: dict[str, list[float]] = {k: [] for k in configs}
        keys = list(configs)
        for r in range(a.rounds):
            for k in keys[r % len(keys):] + keys[: r % len(keys)]:  # each round starts elsewhere: no config always goes first
                rate, err = side.once(configs[k])
                scores[k].append(rate or 0.0)
                print(f"  round {r + 1}: {k}: {scores[k][-1]:,.1f}/s" + (f" ({err})" if err else ""), file=sys.stderr)
    med = {k: statistics.median(v) for k, v in scores.items()}
    grid_keys = [t.user_attrs["config"] for t in g["top"][: a.grid_top]]
    ref_key = max(grid_keys, key=lambda k: med[k])
    section = results_section(b, grid, g, runs, med, scores, ref_key, defaults.describe())
    write_section(machine_kind(b.fp), section)
    print(section)
    print(f"wrote {RESULTS.relative_to(ROOT)}", file=sys.stderr)
    return 0


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def results_section(b: Bench, grid: optuna.Study, g: dict[str, Any], runs: dict[str, list[dict[str, Any]]], med: dict[str, float],
                    scores: dict[str, list[float]], ref_key: str, defaults_key: str) -> str:
    a = b.args
    ref = med[ref_key]
    ds = grid.user_attrs.get("dataset", {})
    m = grid.user_attrs.get("measurement", {})
    cmds = grid.user_attrs.get("commands", {})
    rows, summary = [], {}
    for method in [x for x in METHODS if x in runs]:
        recs = sorted(runs[method], key=lambda r: r["seed"])
        rate = [med[r["chosen_config"]] / ref for r in recs]
        wall = [r["wall_s"] / g["wall_s"] for r in recs]
        summary[method] = (statistics.median(rate), min(rate), statistics.median(wall), max(wall))
        chosen = "; ".join(sorted({r["chosen_config"] for r in recs}))
        rows.append((method, recs, chosen))
    tol = 0.02
    lines = [f"<!-- section: {machine_kind(b.fp)} -->",
             f"## {machine_kind(b.fp)}", "",
             f"- Machine: {machine_line(b.fp)}",
             f"- Run: {harness.utc_now()}; dataset {ds.get('path')}: {ds.get('samples')} images, "
             f"{ds.get('classes')} classes, mean {ds.get('mean_bytes', 0) / 1000:.0f} KB; space `{grid.user_attrs.get('space')}`; device {grid.user_attrs.get('device')}; "
             f"pipeline {grid.user_attrs.get('pipeline')}; measurement: {m.get('warmup_batches')} warm-up batches, windows of {m.get('window_s')} s x {m.get('windows')}, page cache warm",
             f"- Grid: {g['size']} configs ({', '.join(g['backends'])}), {g['wall_s']:.0f} s of trials (sum of trial durations, each a fresh process); "
             f"best re-measured: `{ref_key}` {ref:,.1f} samples/s (the best of the grid's top {len(scores) and min(a.grid_top, len(g['top']))}, re-measured)",
             f"- Budget: {next(iter(runs.values()))[0]['budget']} measurements per method and seed (autotune's re-measurements of its top candidates count against it); "
             f"a method's time runs from its first trial to its chosen config, Optuna's own work included",
             "", "Commands:", "", "```"]
    for step in ("grid", "methods", "compare"):
        lines += cmds.get(step, [])
    lines += ["```", "",
              "| method | seeds | chosen config(s) | rate vs grid best (median, worst) | tuning time vs grid's (median, worst) | >= random? | >= optuna? |",
              "|---|---|---|---|---|---|---|"]
    for method, recs, chosen in rows:
        r_med, r_worst, w_med, w_worst = summary[method]

        def vs(other: str) -> str:
            if other == method or other not in summary:
                return "-"
            o = summary[other]
            ok = r_med >= o[0] - tol and r_worst >= o[1] - tol
            return ("yes" if ok else "no") + f" ({_pct(o[0])}, {_pct(o[1])})"

        lines.append(f"| {method} | {len(recs)} | {chosen} | {_pct(r_med)}, {_pct(r_worst)} | {_pct(w_med)}, {_pct(w_worst)} | {vs('random')} | {vs('optuna')} |")
    lines += ["", f"'>=' means the median and the worst rate are each within {tol:.0%} of the other method's or above (re-measurement noise).", ""]
    if "autotune" in runs:
        recs = sorted(runs["autotune"], key=lambda r: med[r["chosen_config"]])
        mid = recs[(len(recs) - 1) // 2]
        tuned = med[mid["chosen_config"]]
        d = med.get(defaults_key) or 0.0
        lines.append(f"**Headline:** the tuned config (autotune, median seed: `{mid['chosen_config']}`) delivers {tuned:,.1f} samples/s: "
                     + (f"{tuned / d:.1f}x the defaults (`{defaults_key}`, {d:,.1f} samples/s) and " if d else "")
                     + f"{_pct(tuned / ref)} of the grid's best, in {_pct(mid['wall_s'] / g['wall_s'])} of the grid's wall time.")
        better = [x for x in summary if x.startswith("autotune-") and summary[x][0] > summary["autotune"][0] + tol]
        if better:
            lines.append(f"\nSetting that did better than the default sampler/pruner here: {', '.join(f'{x} ({_pct(summary[x][0])} median)' for x in better)}.")
    lines += ["", "Re-measured, interleaved (samples/s per round; median):", "", "| config | rounds | median | vs grid best |", "|---|---|---|---|"]
    for k in sorted(scores, key=lambda k: -med[k]):
        lines.append(f"| `{k}` | {', '.join(f'{x:,.1f}' for x in scores[k])} | {med[k]:,.1f} | {_pct(med[k] / ref)} |")
    lines += ["", f"<!-- /section: {machine_kind(b.fp)} -->"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------- cli
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tuner_bench", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("grid", "methods", "compare"):
        s = sub.add_parser(name)
        s.add_argument("--dataset", required=True, help="image folder (autotune synth DIR --images 8000 --classes 100)")
        s.add_argument("--storage", default="sqlite:///benchmarks/work/bench.db", help="Optuna storage shared by the steps (default: %(default)s)")
        s.add_argument("--prefix", default="bench", help="study name prefix (default: %(default)s)")
        s.add_argument("--space", default="default")
        s.add_argument("--pipeline", default="imagenet-train")
        s.add_argument("--device", default=None, help="cpu or cuda (default: cuda when a GPU is present)")
        s.add_argument("--window", type=float, default=0.5, help="seconds per timed window (default: %(default)s)")
        s.add_argument("--windows", type=int, default=3, help="steady windows per measurement (default: %(default)s)")
        s.add_argument("--warmup-batches", type=int, default=2)
        s.add_argument("--trial-timeout", type=float, default=120.0)
        s.add_argument("-v", "--verbose", action="store_true")
        if name in ("grid", "methods"):
            s.add_argument("--time-budget", type=float, default=480.0, help="end the call after about this many seconds; 0: no limit (default: %(default)s)")
        if name == "grid":
            s.add_argument("--batches", type=batch_list, default=None, metavar="B,B",
                           help="only these batch sizes of the space, e.g. 128,256 (a smaller grid: no minimum size)")
            s.add_argument("--wide", action="store_true", help="on a GPU machine, the search's harder truth: wide_grid_configs (60+ configs)")
        if name == "methods":
            s.add_argument("--methods", default=DEFAULT_METHODS, help=f"comma-separated, among {', '.join(METHODS)} (default: %(default)s)")
            s.add_argument("--seeds", type=int, default=1)
            s.add_argument("--seed", type=int, default=0, help="first seed (default: %(default)s)")
            s.add_argument("--budget", type=int, default=None, help="measurements per method and seed (default: 14 %% of the grid's configs, at least 8)")
            s.add_argument("--confirm-top", type=int, default=2)
            s.add_argument("--confirm-repeats", type=int, default=1)
        if name == "compare":
            s.add_argument("--rounds", type=int, default=3)
            s.add_argument("--grid-top", type=int, default=3, help="re-measure the grid's best N; the best of them is the reference (default: %(default)s)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        b = Bench(args)
        return {"grid": cmd_grid, "methods": cmd_methods, "compare": cmd_compare}[args.cmd](b)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
