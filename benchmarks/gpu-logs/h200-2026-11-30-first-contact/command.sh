#!/usr/bin/env bash
# One H200 (16 cores), with DALI and Optuna installed from wheels under /tmp/site; run from the repository root.
# Writes run-log.txt (below), idle.yaml and busy.yaml; loader_rate.txt came from the second block.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
at() { python3 -m autotune "$@"; }
{
echo "== synth"; time at synth /tmp/s8k --images 8000 --classes 100
echo "== CUDA tests"; python3 -m pytest -m cuda -q -p no:cacheprovider 2>&1 | tail -2
echo "== idle run: autotune run --dataset /tmp/s8k --budget 60"; at run --dataset /tmp/s8k --budget 60 --out $OUT/idle.yaml --reports-dir $OUT/reports; echo "exit $?"
grep -n "other jobs\|hardware\|trials |" $OUT/reports/*/report.md | head
echo "== show"; at show $OUT/idle.yaml | head -12
echo "== busy run: 14 CPU hogs, same command"; for i in $(seq 14); do python3 -c 'import time; t=time.time()
while time.time()-t<75: pass' & done; sleep 1
at run --dataset /tmp/s8k --budget 60 --out $OUT/busy.yaml --reports-dir $OUT/reports; echo "exit $?"; wait
echo "== unknown model"; time at run --dataset /tmp/s8k --model resnet5O; echo "exit $?"
echo "== --gpus 2 on one GPU"; at run --dataset /tmp/s8k --gpus 2; echo "exit $?"
} 2>&1 | tee $OUT/log.txt

# loader_rate.txt: each config through autotune.build_loader for three epochs of the 8,000 images, the first
# four batches of each epoch left out, images/s of the whole rest
python3 - <<'PY'
import time, torch, autotune
from autotune.config.schema import LoaderConfig
def dali(b, th, hw, q=2):
    return LoaderConfig.from_params({"backend": "dali", "batch_size": b, "dali_device": "gpu", "num_threads": th, "prefetch_queue_depth": q, "hw_decoder_load": hw})
cfgs = {"dali-gpu b=128 threads=8 queue=2 hw_load=0.65 (the idle run's winner)": dali(128, 8, 0.65),
        "dali-gpu b=256 threads=8 queue=2 hw_load=0.65": dali(256, 8, 0.65),
        "dali-gpu b=256 threads=16 queue=2 hw_load=1": dali(256, 16, 1.0)}
for name, lc in cfgs.items():
    loader = autotune.build_loader("/tmp/s8k", lc, device="cuda")
    for rep in range(3):
        n = 0; t0 = None; k = 0
        for images, labels in loader:
            k += 1
            if k == 5: torch.cuda.synchronize(); t0 = time.perf_counter(); n = 0
            elif k > 5: n += images.shape[0]
        torch.cuda.synchronize()
        print(f"{name}: epoch {rep}: {n / (time.perf_counter() - t0):,.0f} images/s over {n} images")
    del loader
PY

# after-review-log.txt: a second run on a fresh machine, after the process-tree accounting of killed trials' workers
at synth /tmp/s8k --images 8000 --classes 100
python3 -m pytest -m cuda -q -p no:cacheprovider 2>&1 | tail -1
at run --dataset /tmp/s8k --space torch --budget 90 --out $OUT/torch.yaml --reports-dir $OUT/reports
at run --dataset /tmp/s8k --budget 60 --out $OUT/default.yaml --reports-dir $OUT/reports --json > $OUT/default.json
python3 -c "import json; d=json.load(open('$OUT/default.json')); print('json warnings:', d['warnings'])"
grep -h "other jobs\|^| trials" $OUT/reports/*/report.md
