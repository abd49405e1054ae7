# On the 2-core CPU machine: a user's Dataset whose module takes 4 s to import (heavy.py: spawn and forkserver
# workers pay it each), 60 s default runs with seeds 1-3, before (f8e0234: sampled spawn and forkserver configs
# measured) and after (7bf54b4: told the worst score, not measured, once a fork config completed), interleaved.
# Output: compare.txt (each run's last lines, and its spawn and forkserver trials). One run each. compare-failed.txt:
# the same at 3c8de97, where such trials were failed (the sampler ignores them) instead of scored.
git worktree add /tmp/wt-old f8e0234
cd benchmarks/cpu-logs/2026-12-06-later-start
for seed in 1 2 3; do for v in old new; do root=$([ $v = old ] && echo /tmp/wt-old || echo "$(git rev-parse --show-toplevel)"); rm -f autotune.db
  PYTHONPATH=$root python -m autotune run --dataset heavy.py:train_set --batch-size 32 --budget 60 --no-report --seed $seed > run.log 2>&1
  echo "seed $seed $v: $(grep -E '^took|^measured|^best|not measured: that start' run.log | tr '\n' ' ')"
  grep -E '^trial .*(spawn|forkserver)' run.log | sed "s/^/    /"; done; done | tee compare.txt
rm -f run.log autotune.db
