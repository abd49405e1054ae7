#!/usr/bin/env bash
# One H200, after command.sh: which part of the trial's memory sampling slows a DALI GPU loader? Exact host reads
# (/proc/PID/smaps_rollup) or GPU reads (NVML), each left out in turn; what one sample costs.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
[ -d /tmp/s8k ] || python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
python3 benchmarks/trial_vs_plain.py --dataset /tmp/s8k --device cuda --config dali-gpu:b=128,t=8,q=2,hw=0.65 --rounds 3 --windows 10 \
  --ways trial,trial-no-pss,trial-no-nvml,trial-unwatched --out $OUT/parts.json
} 2>&1 | tee $OUT/log.txt
