#!/usr/bin/env bash
# The 2-core CPU's search account at 331cdbd (the paired re-measurement in the search's kept process; the budget
# pricing the contenders the re-measurement takes, the less of their kept-process and fresh prices), against the
# 51-config grid of 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt 331cdbd), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
W=/tmp/cpus13; D=~/.cache/autotune/demo-2000x10
mkdir -p $W && cp /work/main/benchmarks/cpu-logs/2026-12-06-search/grid.json /work/main/benchmarks/results/cpu-search.json $W/
export PYTHONPATH=/tmp/wt; cd /tmp/wt
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --methods autotune --seed 1 --seeds 3 --stages methods > $W/methods.log 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --grid-top 8 --rounds 3 --stages compare \
    --json $W/ttq.json --results $W/RESULTS.md --search-json $W/cpu-search.json > $W/compare.log 2>&1
for s in 1 2 3; do echo "== seed $s"; python benchmarks/trial_times.py sqlite:///$W/methods/autotune-seed$s.db; done > $W/trials.log 2>&1
