#!/usr/bin/env bash
# One H200 (16 cores), DALI and Optuna from wheels under /tmp/site; run from the repository root.
# AutoLoader on epochs of one batch (300 images, batch 256) on the GPU, after a short epoch's end counts in its score.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
python3 -m autotune synth /tmp/s300 --images 300 --classes 5
echo "== CUDA tests"; python3 -m pytest -m cuda -q -p no:cacheprovider 2>&1 | tail -1
for i in 1 2; do
  echo "== python benchmarks/autoloader_short_epochs.py /tmp/s300 30 40 cuda (#$i)"
  python3 benchmarks/autoloader_short_epochs.py /tmp/s300 30 40 cuda 2>&1 | tail -1
done
} 2>&1 | tee $OUT/log.txt
