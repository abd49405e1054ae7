#!/usr/bin/env bash
# One H200, at the last code of 2026-12-01: the CUDA tests; the default run; check, load_config(strict) and build_loader
# on hand-edited GPU YAMLs whose queue cannot fit the GPU (over it: no match; over twice it: refused); AutoLoader
# with a candidate batch size outside those it explores (refused) and a YAML batch larger than the dataset.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
{
echo "== default run"
cd /tmp && mkdir -p d && cd d && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -vE "^trial [0-9]+ \(" | tail -6
grep -E "^  (samples_per_s|speedup_vs_defaults|confirmed)" autotune.yaml | cut -c1-200
echo "== queue 1024 x batch 256 (over the GPU, under twice it) and x batch 1024 (over twice it)"
sed -e 's/prefetch_queue_depth: [0-9]*/prefetch_queue_depth: 1024/' -e 's/batch_size: [0-9]*/batch_size: 256/' autotune.yaml > big.yaml
sed -e 's/prefetch_queue_depth: [0-9]*/prefetch_queue_depth: 1024/' -e 's/batch_size: [0-9]*/batch_size: 1024/' autotune.yaml > huge.yaml
python3 -m autotune check big.yaml; echo "check rc=$?"
python3 -W ignore -c "
import autotune
try:
    autotune.load_config('big.yaml', strict=True); print('loaded (not refused)')
except autotune.UserError as e:
    print(type(e).__name__ + ':', str(e)[:300])
try:
    autotune.build_loader('/tmp/s8k', autotune.load_config('huge.yaml'), device='cuda'); print('built (not refused)')
except autotune.UserError as e:
    print('UserError:', e)
"
echo "== AutoLoader: a candidate batch outside those explored"
cd /tmp && mkdir -p al && cd al && python3 -W ignore -c "
import torch, autotune
try:
    autotune.AutoLoader('/tmp/s8k', device='cuda', config=None, storage=None, batch_size=256, candidates=[{'backend': 'dali', 'batch_size': 512}])
except autotune.UserError as e:
    print('UserError:', e)
"
} 2>&1 | tee $OUT/verify.log
