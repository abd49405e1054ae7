#!/usr/bin/env bash
# The 2-core CPU's search account at 0b3d889, against the 51-config grid of 2026-12-06-search (grid.json there), and
# the same with --window 0.35 beside it: per seed, the default run, then the run with --window 0.35 (interleaved),
# seeds 1-3; then each side's compare (the grid's best 8 and its runs' winners, 3 interleaved rounds, fresh processes).
# Run from a worktree of the commit (git worktree add /tmp/wt 0b3d889). The default runs' 3 rows were appended to
# benchmarks/results/cpu-search.json (the copy below, whole); the --window 0.35 rows are window035-rows.json here, not
# results (not a default run). trials-both.log: python benchmarks/trial_times.py on each run's study.
D=~/.cache/autotune/demo-2000x10; G=benchmarks/cpu-logs/2026-12-06-search/grid.json
for v in base w35; do mkdir -p /tmp/ab-$v && cp /work/main/$G /work/main/benchmarks/results/cpu-search.json /tmp/ab-$v/; done
export PYTHONPATH=/tmp/wt; cd /tmp/wt
for seed in 1 2 3; do
  for v in base w35; do
    extra=(); [ $v = w35 ] && extra=(-- --window 0.35)
    python benchmarks/time_to_quality.py --tag cpu --dataset $D --work /tmp/ab-$v --methods autotune --seed $seed --seeds 1 --stages methods "${extra[@]}" >> /tmp/ab-$v/methods.log 2>&1
  done
done
for v in base w35; do W=/tmp/ab-$v
  python benchmarks/time_to_quality.py --tag cpu --dataset $D --work $W --grid-top 8 --rounds 3 --stages compare \
      --json $W/ttq.json --results $W/RESULTS.md --search-json $W/cpu-search.json > $W/compare.log 2>&1
done
