#!/usr/bin/env bash
# The 2-core CPU's search account (benchmarks/time_to_quality.py): three default `autotune run`s (seeds 1-3) on the
# demo set, then their winners and the best 8 of the 51-config grid of benchmarks/cpu-logs/2026-12-06-search in 3
# interleaved rounds, and where each run's trials' time went. About 10 minutes; nothing else running. Run from the
# root of a worktree of the commit measured (its autotune and benchmark scripts are the ones run), e.g.
#   git worktree add /tmp/wt COMMIT && cd /tmp/wt && WORK=/tmp/cpus13 bash /work/main/benchmarks/cpu_search.sh
# It writes WORK/methods.log, WORK/compare.log, WORK/ttq.json, WORK/trials.log, and WORK/cpu-search.json: a copy of
# benchmarks/results/cpu-search.json of this script's checkout (RESULTS_FROM: another) with the 3 rows appended, to
# copy back whole before `python benchmarks/headlines.py`.
set -uo pipefail
W=${WORK:?set WORK to an empty folder}; D=${DATA:-$HOME/.cache/autotune/demo-2000x10}
from=${RESULTS_FROM:-$(cd "$(dirname "$0")/.." && pwd)}
mkdir -p "$W" && cp "$from/benchmarks/cpu-logs/2026-12-06-search/grid.json" "$from/benchmarks/results/cpu-search.json" "$W/" || exit 1
export PYTHONPATH=$PWD
python benchmarks/time_to_quality.py --tag cpu --dataset "$D" --work "$W" --methods autotune --seed 1 --seeds 3 --stages methods > "$W/methods.log" 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset "$D" --work "$W" --grid-top 8 --rounds 3 --stages compare \
    --json "$W/ttq.json" --results "$W/RESULTS.md" --search-json "$W/cpu-search.json" > "$W/compare.log" 2>&1
for s in 1 2 3; do echo "== seed $s"; python benchmarks/trial_times.py "sqlite:///$W/methods/autotune-seed$s.db"; done > "$W/trials.log" 2>&1
