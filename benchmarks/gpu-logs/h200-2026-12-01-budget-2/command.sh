#!/usr/bin/env bash
# One H200, 2026-12-01: three default runs (60 s budget) on 8,000 JPEGs, the re-measurement's time kept from the trials and
# sampling stopped while two contenders still fit at their own trial time: where the time went, what was re-measured.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
{
for i in 1 2 3; do
  echo "== default run $i"
  mkdir -p /tmp/r$i && cd /tmp/r$i && python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -E "^(trial|best|took|re-measur)" | cut -c1-200
  grep -E "^  (samples_per_s|speedup_vs_defaults)|^  confirmed" autotune.yaml | cut -c1-200
done
} 2>&1 | tee $OUT/verify.log
