# On the 2-core CPU machine: a user's Dataset whose module takes 4 s to import (heavy.py: spawn and forkserver
# workers pay it each), 60 s default runs with seeds 1-3, before (8251526: the re-measurement priced at the larger of
# the contenders' trial time and the median trial) and after (54d8efe: at the contenders' own), interleaved.
# Output: compare.txt (each run's last lines). One run each: the order of sampled configs follows the trials' timing.
git worktree add /tmp/wt-old 8251526
cd benchmarks/cpu-logs/2026-12-06-remeasure-price
for seed in 1 2 3; do for v in old new; do root=$([ $v = old ] && echo /tmp/wt-old || echo "$(git rev-parse --show-toplevel)"); rm -f autotune.db
  PYTHONPATH=$root python -m autotune run --dataset heavy.py:train_set --batch-size 32 --budget 60 --no-report --seed $seed 2>&1 |
  grep -E "^took|^measured" | tr '\n' ' ' | sed "s/^/seed $seed $v: /"; echo; done; done | tee compare.txt
