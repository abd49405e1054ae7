#!/usr/bin/env bash
old=$(findmnt -no OPTIONS /dev/shm | tr ',' '\n' | sed -n 's/^size=//p' | head -1)
trap 'mount -o remount,size="$old" /dev/shm; df -h /dev/shm' EXIT
mount -o remount,size=64m /dev/shm && df -h /dev/shm
cd /work/main && AUTOTUNE_BENCH_COMMIT=$(git rev-parse HEAD) python benchmarks/user_pipelines.py --pipelines a,c --data /tmp/synth2k --batch-size 32 --device cpu \
  --work /tmp/user-cpu-shm --limit shm64m --limit-how "mount -o remount,size=64m /dev/shm (was $old)"
