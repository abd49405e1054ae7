#!/usr/bin/env bash
# One H200, with exact host reads at least once a second (guard.TreeMemory.MAX_GAP_S): the trial against a plain
# process and an unwatched trial, two rounds; then the CUDA tests.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
[ -d /tmp/s8k ] || python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
python3 benchmarks/trial_vs_plain.py --dataset /tmp/s8k --device cuda --config dali-gpu:b=128,t=8,q=2,hw=0.65 --rounds 2 --windows 10 \
  --ways plain,trial,trial-unwatched --out $OUT/capped.json
echo "== python3 -m pytest -q -m cuda tests"
python3 -m pytest -q -m cuda tests -p no:cacheprovider 2>&1 | tail -1
} 2>&1 | tee $OUT/log.txt
