#!/usr/bin/env bash
# One H200 (16 cores), DALI and Optuna from wheels under /tmp/site; run from the repository root.
# Does a tuner's trial read a DALI GPU config lower than a plain process? (benchmarks/trial_vs_plain.py)
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
echo "== dali-gpu b=128 threads=8 queue=2 hw_load=0.65"
python3 benchmarks/trial_vs_plain.py --dataset /tmp/s8k --device cuda --config dali-gpu:b=128,t=8,q=2,hw=0.65 --rounds 3 --windows 10 --out $OUT/b128.json
echo "== dali-gpu b=256 threads=4 queue=2 hw_load=1"
python3 benchmarks/trial_vs_plain.py --dataset /tmp/s8k --device cuda --config dali-gpu:b=256,t=4,q=2,hw=1 --rounds 2 --windows 10 --out $OUT/b256.json
} 2>&1 | tee $OUT/log.txt
