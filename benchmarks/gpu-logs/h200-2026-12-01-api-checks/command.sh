#!/usr/bin/env bash
# One H200, after the API's argument checks, the short-run warnings and the demo's progress lines: the CUDA tests,
# ResNet-50 in the loop with the default model budget (120 s), the default run (60 s), and the README's demo run
# from a folder outside the clone, every line kept, on 8,000 synthetic JPEGs. Run at 6e1b828: its ResNet-50 run
# shows three warnings for the unmeasured torch loaders, which the next commit made one line.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
{
echo "== ResNet-50 in the loop, default budget"
cd /tmp && mkdir -p m && cd m && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --model resnet50 --amp --channels-last 2>&1 | tail -14
grep -E "^  (samples_per_s|model_ceiling|fraction_of|dali_heuristic|speedup_vs_dali)" autotune.yaml; grep -A3 "^loader:" autotune.yaml
echo "== default run"
cd /tmp && mkdir -p d1 && cd d1 && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k 2>&1 | tail -30
echo "== the demo, from a folder outside the clone"
cd /tmp && mkdir -p demo && cd demo && XDG_CACHE_HOME=/tmp/cache /usr/bin/time -f "wall %e s" python3 -m autotune run --demo 2>&1 | tail -30
echo "== AutoLoader: a typo in a candidate, on the GPU"
python3 - <<'PY'
import autotune
try:
    autotune.AutoLoader("/tmp/s8k", candidates=[{"backend": "dali", "dali_device": "gpu", "threads": 4}], config=None, storage=None)
except autotune.UserError as e:
    print("UserError:", e)
PY
} 2>&1 | tee $OUT/verify.log
