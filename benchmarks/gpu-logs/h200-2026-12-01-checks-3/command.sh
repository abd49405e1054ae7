#!/usr/bin/env bash
# One H200: the CUDA tests; the default run (re-measurement rounds begun only when whole, the last line's figures
# as the YAML's), show --study's time row, studies; build_loader and check on a hand-edited GPU YAML whose queue
# cannot fit the GPU; AutoLoader's starting points with their params and its defaults figure; on 8,000 JPEGs.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
{
echo "== default run"
cd /tmp && mkdir -p d && cd d && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | tail -8
grep -E "^  (samples_per_s|speedup_vs_defaults|defaults_samples_per_s|confirmed)" autotune.yaml
echo "== show --study (time row)"
python3 -m autotune show --study "$(python3 -m autotune studies --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[0]["name"])')" | grep -E "time|samples/s  " | cut -c1-230
echo "== a hand-edited queue of 1024 batches of 256 on GPU decode"
sed -e 's/prefetch_queue_depth: [0-9]*/prefetch_queue_depth: 1024/' -e 's/batch_size: [0-9]*/batch_size: 256/' autotune.yaml > big.yaml
grep -E "backend|batch_size|prefetch_queue_depth|device: gpu" big.yaml | head -5
python3 -W ignore -c "
import autotune
try:
    autotune.build_loader('/tmp/s8k', autotune.load_config('big.yaml'), device='cuda')
    print('built (not refused)')
except autotune.UserError as e:
    print('UserError:', e)
print('the unedited YAML builds:', type(autotune.build_loader('/tmp/s8k', autotune.load_config('autotune.yaml'), device='cuda')).__name__)
"
python3 -m autotune check big.yaml; echo "check rc=$?"
python3 -m autotune check autotune.yaml; echo "check rc=$?"
echo "== AutoLoader, 25 s budget, no YAML: its starting points' params and roles"
cd /tmp && mkdir -p al && cd al && python3 - <<'PY'
import logging, time, torch, autotune
logging.basicConfig(level=logging.WARNING)
al = autotune.AutoLoader("/tmp/s8k", device=torch.device("cuda", 0), config="al.yaml", budget_s=25)
t0, n = time.time(), 0
for epoch in range(3):
    for images, labels in al:
        n += images.shape[0]
print(f"{n} samples in {time.time() - t0:.1f} s on {images.device}; settled: {al.settled.describe() if al.settled else None}")
al.close()
for t in al.source.study.trials[:6]:
    print(t.number, t.user_attrs.get("role"), t.user_attrs.get("outcome"), t.user_attrs.get("config"), "params:", t.params)
PY
grep -E "^  (samples_per_s|defaults_samples_per_s|speedup_vs_defaults|tuned_by)" al.yaml
python3 -m autotune studies | tail -4
} 2>&1 | tee $OUT/verify.log
