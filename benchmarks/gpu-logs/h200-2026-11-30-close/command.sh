#!/usr/bin/env bash
# One H200 (16 cores), DALI and Optuna from wheels under /tmp/site; run from the repository root.
# After DaliLoader.close() shuts its pipeline down itself: the CUDA and DALI tests, a default run, and Ctrl-C sent to
# an AutoLoader training loop on the GPU at several moments of its exploration.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100
echo "== CUDA tests"; python3 -m pytest -m cuda -q -p no:cacheprovider 2>&1 | tail -1
echo "== DALI backend tests"; python3 -m pytest -q -p no:cacheprovider tests/backends 2>&1 | tail -1
echo "== autotune run --dataset /tmp/s8k --budget 60"
python3 -m autotune run --dataset /tmp/s8k --budget 60 --out $OUT/default.yaml --reports-dir $OUT/reports; echo "exit $?"
echo "== Ctrl-C during AutoLoader exploration (cuda)"
python3 benchmarks/gpu-logs/h200-2026-11-30-close/sigint.py /tmp/s8k cuda $OUT 8 12 16 20 25 30
} 2>&1 | tee $OUT/log.txt
