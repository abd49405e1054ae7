#!/usr/bin/env bash
# The 2-core CPU's search account at f79ae7b: a fresh 51-config grid (one round each, kept here as grid.json for later
# compares), three default runs (seeds 1-3), then the grid's best 8 and each run's winner in 3 interleaved rounds.
# Run from a worktree of the commit (git worktree add /tmp/wt f79ae7b), so the tree being edited is not what runs.
# The 3 rows were appended to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py
W=/tmp/cpusearch7; D=~/.cache/autotune/demo-2000x10
mkdir -p $W && cp benchmarks/results/cpu-search.json $W/
export PYTHONPATH=/tmp/wt; cd /tmp/wt
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --stages grid > $W/grid.log 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --methods autotune --seed 1 --seeds 3 --stages methods > $W/methods.log 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --grid-top 8 --rounds 3 --stages compare \
    --json $W/ttq.json --results $W/RESULTS.md --search-json $W/cpu-search.json > $W/compare.log 2>&1
