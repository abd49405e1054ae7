"""The headline figures of README.md and RESULTS.md, written from the result files, never by hand.

For each machine it says what the default run chose and whether that is one of autotune's built-in starting points
or a config the search sampled, gives every figure with its spread (the rounds of fresh-process re-measurement, or
the runs of several seeds: median and worst), and presents a ratio as a gain only where the two sides can be told
apart: the tuned config's every round beats the peer's every round. Anything else is said to be within the noise.

    python benchmarks/headlines.py            # rewrite the block in README.md and RESULTS.md
    python benchmarks/headlines.py --check    # exit 1 when either block differs from what the JSON gives

Sources: ``results/scenarios.json`` (each config re-measured in interleaved rounds, every run kept),
``results/<tag>-time-to-quality.json`` (the grid, the default runs of each seed and the other methods) and
``results/<tag>-search.json`` (what each default run's search measured, its winner against the grid's best).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from typing import Any

import harness

README = harness.ROOT / "README.md"
BEGIN = "<!-- headlines: written by benchmarks/headlines.py from benchmarks/results/*.json; do not edit by hand -->"
END = "<!-- /headlines -->"

#: the machines the headlines speak of: the scenario's rows, the time-to-quality file, the starting points' machine
MACHINES = (
    {"title": "One NVIDIA H200 (16 cores), 8,000 ImageNet-like JPEGs, random-resized-crop 224", "scenario": "1xH200-loader",
     "machine": "1 x H200, 16 cores", "ttq": "h200-time-to-quality.json", "search": "h200-search.json", "cores": 16, "cuda": True},
    {"title": "A 2-core CPU machine, 2,000 synthetic JPEGs, nothing else running", "scenario": "cpu-2core",
     "machine": "CPU only, 2 cores", "ttq": "cpu-time-to-quality.json", "search": "cpu-search.json", "cores": 2, "cuda": False},
)

#: the starting points by role, as the run's own last lines name them
from autotune.tuning.write import STARTS as START_NAMES  # noqa: E402 - after harness put the checkout on sys.path
#: the peers a headline compares the winner with, by their name in scenarios.json, as the line names them
PEERS = (("torch defaults", "the `DataLoader` defaults"), ("workers = cores, pinned", "`num_workers` = cores with pinning"),
         ("DALI's usual start", "DALI's usual settings"))


def starts(cores: int, cuda: bool) -> dict[str, str]:
    """autotune's built-in starting points on such a machine, config (as described) to role."""
    from autotune.config.schema import LoaderConfig
    from autotune.loaders.backends import BACKENDS
    from autotune.loaders.backends._dali import HW_THREADS
    from autotune.study.space import load_space

    space = load_space("default", cores=cores, device="cuda" if cuda else "cpu", dali=True)  # the starts whether DALI is here or not
    sizes = tuple(space["batch_size"].choices)
    out: dict[str, str] = {}
    for backend in BACKENDS.values():
        if backend.reference or backend.name in space.backends():
            for role, params in backend.starting_points(space, batch_sizes=sizes, cores=cores, cuda=cuda).items():
                out[LoaderConfig.from_params(params).describe()] = role
    if cuda:  # the start the mixed-decode one replaced on 16 cores and more (every JPEG on the hardware decoder, 4
        # threads): runs written before the YAML said what found the winner were tuned with it
        former = {"backend": "dali", "batch_size": max(sizes), "dali_device": "gpu", "num_threads": min(cores, HW_THREADS),
                  "prefetch_queue_depth": 2, "hw_decoder_load": 1.0}
        out.setdefault(LoaderConfig.from_params(former).describe(), "dali-hw")
    return out


#: the fewest rounds on each side for a ratio to be called a gain (one reading says nothing of the noise)
MIN_ROUNDS = 2


def told_apart(high: list[float], low: list[float]) -> bool:
    """Whether ``high`` beats ``low`` beyond the noise: at least MIN_ROUNDS rounds each, every one of ``high``'s above
    every one of ``low``'s."""
    return len(high) >= MIN_ROUNDS and len(low) >= MIN_ROUNDS and min(high) > max(low)


def rate(v: float) -> str:
    return f"{v:,.0f}"


def pct(fraction: float) -> str:
    return f"{fraction * 100:.1f} %"


def spread(scores: list[float]) -> str:
    return f"{rate(min(scores))}-{rate(max(scores))}" if len(scores) > 1 else rate(scores[0])


def latest_scenario(rows: list[dict[str, Any]], scenario: str, machine: str) -> dict[str, dict[str, Any]]:
    """The peers of the latest run of ``scenario`` on ``machine``, by peer name (a run is its run id, or, for rows
    written before runs had ids, the rows that share none)."""
    mine = [r for r in rows if r.get("scenario") == scenario and r.get("machine") == machine]
    out: dict[str, dict[str, Any]] = {}
    for r in reversed(mine):  # the last rows written, back to another run's (or a peer seen twice: an older run)
        if r.get("run_id") != mine[-1].get("run_id") or r["peer"] in out:
            break
        out[r["peer"]] = r
    return out


def start_role(run: dict[str, Any], known: dict[str, str]) -> str | None:
    """The starting point a run's winner is, or None for a sampled one: as its YAML recorded it (``winner_from``), or,
    for a run written before the YAML recorded it, by autotune's starting points for such a machine."""
    if run.get("winner_from"):
        return None if run["winner_from"] == "search" else str(run["winner_from"])
    return known.get(run["config"])


def machine_lines(m: dict[str, Any], scenarios: list[dict[str, Any]], ttq: list[dict[str, Any]]) -> list[str]:
    known = starts(m["cores"], m["cuda"])
    runs = [r for r in ttq if r["method"] == "autotune"]
    grid = next((r for r in ttq if r["method"] == "grid"), None)
    peers = latest_scenario(scenarios, m["scenario"], m["machine"])
    tuned = peers.get("tuned")
    lines = [f"- **{m['title']}:**"]
    if runs:
        walls = [r["wall_s"] for r in runs]
        from_start = [r for r in runs if start_role(r, known)]
        if len(runs) == 1:
            r = runs[0]
            role = start_role(r, known)
            found = (f"**a built-in starting point** ({START_NAMES.get(role, role)}), not a config the search sampled" if role
                     else "a config **the search sampled**, not one of the built-in starting points")
            lines.append(f"  - The default run took **{r['wall_s']:.0f} s** and chose `{r['config']}`: {found}.")
        else:
            lines.append(f"  - {len(runs)} default runs (seeds {min(r['seed'] for r in runs)}-{max(r['seed'] for r in runs)}) took "
                         f"{statistics.median(walls):.0f} s (median; worst {max(walls):.0f} s). {len(from_start)} of them chose a built-in "
                         f"starting point, {len(runs) - len(from_start)} a config the search sampled.")
    if tuned:
        scores = tuned.get("scores") or [tuned["samples_per_s"]]
        lines.append(f"  - The latest scenario run's tuned config, `{tuned['config']}`, re-measured in {len(scores)} fresh-process rounds "
                     f"interleaved with the rules of thumb: **{rate(tuned['samples_per_s'])} images/s** (median; rounds {spread(scores)}).")
        gains, alike = [], []
        for name, said in PEERS:
            p = peers.get(name)
            if not p or not p.get("samples_per_s"):
                continue
            theirs = p.get("scores") or [p["samples_per_s"]]
            if told_apart(scores, theirs):
                gains.append(f"**{tuned['samples_per_s'] / p['samples_per_s']:.1f}×** {said} ({spread(theirs)})")
            elif min(len(scores), len(theirs)) < MIN_ROUNDS:
                alike.append(f"{said} ({spread(theirs)}; one reading, too few to judge)")
            else:
                alike.append(f"{said} ({spread(theirs)})")
        if gains:
            lines.append(f"  - Beyond the noise (each of the {len(scores)} rounds faster than every round of the peer): {'; '.join(gains)}.")
        if alike:
            lines.append(f"  - Within the noise, so no gain is claimed: {'; '.join(alike)}.")
    if runs and grid:
        fr = sorted(r["fraction_of_grid_best"] for r in runs)
        share = f"**{pct(statistics.median(fr))}**" + (f" (median; worst {pct(fr[0])})" if len(fr) > 1 else "")
        n_grid = _grid_size(m)
        noise = ""
        if tuned and len(tuned.get("scores") or ()) > 1:
            lo, hi = min(tuned["scores"]), max(tuned["scores"])
            rounds = spread(tuned["scores"])
            noise = (f": within the noise, the tuned config's rounds ({rounds}) hold the grid's best" if lo <= grid["samples_per_s"] <= hi
                     else f": the tuned config's rounds ({rounds}) are all under the grid's best" if hi < grid["samples_per_s"]
                     else f": the tuned config's rounds ({rounds}) are all above the grid's best, re-measured apart from it")
        best = f"{rate(grid['samples_per_s'])} images/s, `{grid['config']}`"
        lines.append(f"  - The default {'run' if len(runs) == 1 else 'runs'} reached {share} of the best config of a {n_grid}grid ({best}){noise}.")
        others = []
        for method, said in (("random", "random search"), ("optuna", "plain Optuna without the starts")):
            got = sorted(r["fraction_of_grid_best"] for r in ttq if r["method"] == method)
            if got:
                others.append(f"{said} {pct(statistics.median(got))}" + (f" (worst {pct(got[0])})" if len(got) > 1 else ""))
        usual = next((r for r in ttq if r["method"] == "DALI's usual start"), None)
        if usual:
            others.append(f"DALI's usual start alone {pct(usual['fraction_of_grid_best'])}")
        if others:
            lines.append(f"  - In the same minute: {'; '.join(others)}.")
    warm = sorted(r["wall_s"] for r in ttq if r["method"] == "warm start")
    if warm:
        lines.append(f"  - Re-tuning from an earlier YAML (`--warm-start`) took {statistics.median(warm):.0f} s"
                     + (f" (median of {len(warm)}; worst {warm[-1]:.0f} s)." if len(warm) > 1 else "."))
    return lines


def search_lines(m: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The newest run of ``results/<tag>-search.json``: what each default run's search measured, what found its winner,
    and its winner against the grid's best in the same interleaved rounds (a shortfall called one only beyond noise)."""
    if not rows:
        return []
    newest = rows[-1]["run_id"]
    runs = sorted((r for r in rows if r["run_id"] == newest), key=lambda r: r["seed"])
    configs, sampled = [r["configs_measured"] for r in runs], [r["sampled_measured"] for r in runs]
    found = ", ".join(f"seed {r['seed']}: " + ("a starting point" if r["winner_is_start"] else "sampled") for r in runs)
    fractions = []
    for r in runs:
        apart = told_apart(r["grid_best_rounds"], r["winner_rounds"]) and r["fraction"] < 1
        fractions.append(f"{pct(r['fraction'])}" + (" (below it beyond the noise)" if apart else ""))
    first = runs[0]
    lines = [f"  - The search's own account ({m['search']}, run {newest}, commit {first['commit']}): {len(runs)} default "
             f"{'run' if len(runs) == 1 else 'runs'} measured {'/'.join(map(str, configs))} configs, {'/'.join(map(str, sampled))} of them "
             f"sampled; the winner {found}. Re-measured with the best of a {first['grid_size']}-config grid in the same "
             f"{first['rounds']} interleaved rounds, the winners reached {', '.join(fractions)} of its median "
             f"({rate(first['grid_best_rate'])} images/s, `{first['grid_best']}`)."]
    if all(r.get("usual_rounds") and r.get("winner_rounds") for r in runs):  # rows written before the field existed have none
        against = []
        for r in runs:
            below = told_apart(r["usual_rounds"], r["winner_rounds"])
            against.append(f"{pct(r['fraction_of_usual'])}" + (" (below it beyond the noise)" if below else ""))
        lines.append(f"  - Against DALI's usual start (`{first['usual']}`, {spread(first['usual_rounds'])} images/s) in the same rounds, the "
                     f"winners reached {', '.join(against)} of its median; a shortfall inside the noise is no shortfall.")
    earlier = list(dict.fromkeys(r["run_id"] for r in rows if r["run_id"] != newest))
    if earlier:  # every run stays in the file, and is named here: a run that fell short is not left to prose
        said = []
        for run_id in earlier:
            were = sorted((r for r in rows if r["run_id"] == run_id), key=lambda r: r["seed"])
            said.append(f"run {run_id} (commit {were[0]['commit']}): {'/'.join(map(str, (r['configs_measured'] for r in were)))} configs, "
                        f"{'/'.join(map(str, (r['sampled_measured'] for r in were)))} sampled, "
                        f"{', '.join(pct(r['fraction']) if r.get('fraction') is not None else 'no rate' for r in were)} of that run's grid best")
        lines.append(f"  - Earlier runs in the file: {'; '.join(said)}.")
    return lines


def _grid_size(m: dict[str, Any]) -> str:
    """The grid's size as its time-to-quality section in RESULTS.md states it ('40-config '), or nothing."""
    import re

    text = harness.RESULTS.read_text() if harness.RESULTS.exists() else ""
    kind = "gpu: 1x NVIDIA H200, 16 cores" if m["cuda"] else "cpu: 2 cores, no GPU"
    section = text.split(f"<!-- section: time to quality, {kind} -->", 1)[-1]
    found = re.search(r"- Grid: (\d+) configs", section)
    return f"{found.group(1)}-config " if found else ""


def render(search: bool = True) -> str:
    """The block; ``search``: with each machine's search account (RESULTS.md; the README, kept short, links there)."""
    scenarios = harness.read_json(harness.RESULTS_DIR / "scenarios.json") or []
    lines = [BEGIN]
    for m in MACHINES:
        ttq = harness.read_json(harness.RESULTS_DIR / m["ttq"]) or []
        lines += machine_lines(m, scenarios, ttq)
        if search:
            lines += search_lines(m, harness.read_json(harness.RESULTS_DIR / m["search"]) or [])
    lines.append(END)
    return "\n".join(lines) + "\n"


def put(text: str, block: str) -> str:
    """``text`` with its headline block replaced by ``block``."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise SystemExit(f"no headline block ({BEGIN} ... {END}) found; add the two lines where the headlines go")
    return text[:start] + block.rstrip("\n") + text[end + len(END):]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when README.md or RESULTS.md differs from what the JSON gives")
    args = ap.parse_args(argv)
    stale = []
    for path, block in ((README, render(search=False)), (harness.RESULTS, render())):
        text = path.read_text()
        new = put(text, block)
        if new != text:
            if args.check:
                stale.append(path.name)
            else:
                tmp = path.with_suffix(".tmp")
                tmp.write_text(new)
                tmp.replace(path)
    if stale:
        harness.note(f"headlines differ from the JSON in {', '.join(stale)}; run python benchmarks/headlines.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
