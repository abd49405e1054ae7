#!/usr/bin/env bash
# One H200, after the re-measurement kept the trials' pre-imported process: the default run (60 s) three times on
# 8,000 JPEGs, each with its re-measurement record, and the README's demo from a folder outside the clone.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
test -d /tmp/s8k || python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
{
for i in 1 2 3; do
echo "== default run $i"
cd /tmp && rm -rf w$i && mkdir w$i && cd w$i && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -vE "^trial [0-9]+ \(" | tail -6
grep -E "^  (samples_per_s|speedup_vs_defaults|confirmed)" autotune.yaml | cut -c1-200
done
echo "== the demo, from a folder outside the clone"
cd /tmp && rm -rf demo && mkdir demo && cd demo && XDG_CACHE_HOME=/tmp/demo/cache /usr/bin/time -f "wall %e s" python3 -m autotune run --demo 2>&1 | grep -vE "^trial [0-9]+ \(" | tail -8
} 2>&1 | tee $OUT/verify.log
