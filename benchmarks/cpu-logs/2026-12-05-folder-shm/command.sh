#!/usr/bin/env bash
# An image folder under a real 64 MiB /dev/shm, before (cce3373: the image-folder kind had no worker_batch) and after
# (8ff56c8), alternating, 2 rounds: `autotune run --demo` (60 s) and AutoLoader over the demo folder (batch 64, budget_s 30,
# 4 epochs, the loop reads every page of each batch). before: a worktree (git worktree add -f /tmp/wt-old cce3373).
# Run as root from the repository's root: bash benchmarks/cpu-logs/2026-12-05-folder-shm/command.sh > benchmarks/cpu-logs/2026-12-05-folder-shm/run.log 2>&1
old=$(findmnt -no OPTIONS /dev/shm | tr ',' '\n' | sed -n 's/^size=//p' | head -1)
trap 'mount -o remount,size="$old" /dev/shm; df -h /dev/shm' EXIT
mount -o remount,size=64m /dev/shm && df -h /dev/shm
here=$(pwd); demo=$HOME/.cache/autotune/demo-2000x10
for round in 1 2; do
  for side in before after; do
    tree=$here; [ $side = before ] && tree=/tmp/wt-old
    rm -f /dev/shm/torch_* 2>/dev/null
    w=/tmp/folder-shm/$side-$round; rm -rf "$w"; mkdir -p "$w"
    echo "== round $round $side ($(git -C $tree rev-parse --short HEAD)): autotune run --demo"
    (cd "$w" && PYTHONPATH=$tree python -m autotune run --demo --out "$w/autotune.yaml" 2>&1 | grep -E "^trial|^best|^measured|^took")
    echo "== round $round $side ($(git -C $tree rev-parse --short HEAD)): AutoLoader over $demo"
    (cd "$w" && PYTHONPATH=$tree python "$here/benchmarks/autoloader_user.py" --folder "$demo" --batch-size 64 --epochs 4 --budget 30 \
      --json "$w/autoloader.json" 2>&1 | grep -v "^\s*$" | grep -E "epoch [0-9]|candidate|settle|wall_s|failed\"|\"settled\"|module")
  done
done
