#!/usr/bin/env bash
# One H200, with exact host reads spaced by their cost (guard.TreeMemory): the trial against a plain process and an
# unwatched trial again, then the default 60 s run.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
[ -d /tmp/s8k ] || python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
python3 benchmarks/trial_vs_plain.py --dataset /tmp/s8k --device cuda --config dali-gpu:b=128,t=8,q=2,hw=0.65 --rounds 3 --windows 10 \
  --ways plain,trial,trial-unwatched --out $OUT/after.json
echo "== autotune run --dataset /tmp/s8k --budget 60"
python3 -m autotune run --dataset /tmp/s8k --budget 60 --out $OUT/r.yaml --storage sqlite:////tmp/r.db --no-report
} 2>&1 | tee $OUT/log.txt
