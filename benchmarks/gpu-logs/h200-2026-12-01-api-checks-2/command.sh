#!/usr/bin/env bash
# One H200, at the final code: the CUDA tests, ResNet-50 in the loop with the default model budget (120 s; the
# unmeasured torch loaders now one warning), and AutoLoader given a torch.device, every line kept, on 8,000 JPEGs.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
{
echo "== ResNet-50 in the loop, default budget"
cd /tmp && mkdir -p m && cd m && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --model resnet50 --amp --channels-last 2>&1 | tail -12
grep -E "^  (samples_per_s|model_ceiling|fraction_of|dali_heuristic|speedup_vs_dali)" autotune.yaml
echo "== AutoLoader with torch.device('cuda', 0), 20 s budget, the YAML above's machine"
python3 - <<'PY'
import logging, time, torch, autotune
logging.basicConfig(level=logging.WARNING)
al = autotune.AutoLoader("/tmp/s8k", device=torch.device("cuda", 0), config=None, storage=None, budget_s=20)
t0, n = time.time(), 0
for epoch in range(3):
    for images, labels in al:
        n += images.shape[0]
print(f"{n} samples in {time.time() - t0:.1f} s on {images.device}; settled: {al.settled.describe() if al.settled else None}")
al.close()
PY
} 2>&1 | tee $OUT/verify.log
