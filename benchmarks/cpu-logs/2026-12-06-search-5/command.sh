#!/usr/bin/env bash
# The 2-core CPU's search account at 1672b10 (the paired re-measurement in the search's kept process, the budget
# pricing it at four rounds: 11-17 s here, where the fresh trials' time had kept 7-8 s; adcbbd0 keeps the less of the
# two), against the 51-config grid of 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt 1672b10), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
W=/tmp/cpus11; D=~/.cache/autotune/demo-2000x10
mkdir -p $W && cp /work/main/benchmarks/cpu-logs/2026-12-06-search/grid.json /work/main/benchmarks/results/cpu-search.json $W/
export PYTHONPATH=/tmp/wt; cd /tmp/wt
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --methods autotune --seed 1 --seeds 3 --stages methods > $W/methods.log 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --grid-top 8 --rounds 3 --stages compare \
    --json $W/ttq.json --results $W/RESULTS.md --search-json $W/cpu-search.json > $W/compare.log 2>&1
for s in 1 2 3; do echo "== seed $s"; python benchmarks/trial_times.py sqlite:///$W/methods/autotune-seed$s.db; done > $W/trials.log 2>&1
