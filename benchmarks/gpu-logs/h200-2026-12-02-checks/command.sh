#!/usr/bin/env bash
# One H200, 2026-12-02: the CUDA tests, then three default runs (60 s budget) on 8,000 JPEGs after the torch defaults
# were let run as the budget stops sampling when their first window and the smallest re-measurement fit: whether each
# YAML has its speedup over the defaults, what was re-measured, and the last line (the median of the winner's scores).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
{
for i in 1 2 3; do
  echo "== default run $i"
  mkdir -p /tmp/r$i && cd /tmp/r$i && python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -E "^(trial|best|took|re-measur|warning)" | cut -c1-220
  grep -E "^  (samples_per_s|speedup_vs_defaults|defaults_samples_per_s)|^  confirmed" autotune.yaml | cut -c1-200
done
} 2>&1 | tee $OUT/verify.log
