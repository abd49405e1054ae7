#!/usr/bin/env bash
# One H200, after command.sh (same /tmp/s8k): a finished 60 s run, check, then a second run stopped by SIGTERM at 25 s
# with the same --out: the finished run's YAML is kept, the second's best so far goes beside it.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1; mkdir -p /tmp/g
{ cd /tmp && python3 -m autotune run --dataset /tmp/s8k --budget 60 --out /tmp/g/autotune.yaml --storage sqlite:////tmp/g/a.db --no-report 2>&1 | tail -4
python3 -m autotune check /tmp/g/autotune.yaml; echo "check rc=$?"; md5sum /tmp/g/autotune.yaml
python3 -m autotune run --dataset /tmp/s8k --budget 60 --out /tmp/g/autotune.yaml --storage sqlite:////tmp/g/a.db --no-report 2>/tmp/g/err.txt & sleep 25; kill -TERM $!; wait $!; echo "rc=$?"
tail -2 /tmp/g/err.txt; md5sum /tmp/g/autotune.yaml; ls /tmp/g; grep -E "backend|device|samples_per_s" /tmp/g/autotune.interrupted.yaml | head -5; } 2>&1 | tee $OUT/log.txt
