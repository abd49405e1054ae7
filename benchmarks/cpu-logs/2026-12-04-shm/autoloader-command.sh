#!/usr/bin/env bash
# before: a worktree of 42c3582 (git worktree add -f /tmp/wt-old 42c3582); after: this checkout. Round 1 "before" hung in its
# third epoch (every process waiting on a queue) and was killed by hand after 11 minutes; the grep below kept
# the traceback lines of round 2 "before" but not its message.
# AutoLoader over pipeline (a) under a real 64 MiB /dev/shm: 42c3582 (before) and HEAD (after), alternating, 2 rounds.
old=$(findmnt -no OPTIONS /dev/shm | tr ',' '\n' | sed -n 's/^size=//p' | head -1)
trap 'mount -o remount,size="$old" /dev/shm; df -h /dev/shm' EXIT
mount -o remount,size=64m /dev/shm && df -h /dev/shm
export AUTOTUNE_BENCH_DATA=/tmp/synth2k
for round in 1 2; do
  for side in before after; do
    tree=/work/main; [ $side = before ] && tree=/tmp/wt-old
    rm -f /dev/shm/torch_* 2>/dev/null
    echo "== round $round $side ($(git -C $tree rev-parse --short HEAD))"
    (cd /tmp/alcmp && PYTHONPATH=$tree python /work/main/benchmarks/autoloader_user.py --pipeline tv_v2 --batch-size 32 --epochs 6 --budget 30 \
      --json /tmp/alcmp/$side-$round.json 2>&1 | grep -v "^\s*$" | grep -E "epoch|settle|wall_s|failed\"|\"settled\"|module")
  done
done
