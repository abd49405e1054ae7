#!/usr/bin/env bash
# One H200, 2026-12-02, after the restructuring (kinds of loader behind one interface, autotune run as named steps,
# a trial's measurement in one attribute). STAGE=a: the CUDA tests and the 8,000-image set. STAGE=b: a default run
# (60 s) and autotune.tune() from Python, its YAML through build_loader on the GPU.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
case "${STAGE:-a}" in
a)
  python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -3 | tee $OUT/tests.log
  python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1; echo "synth exit $?" | tee -a $OUT/tests.log
  ;;
b)
  [ -d /tmp/s8k ] || python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
  {
  echo "== default run"
  mkdir -p /tmp/r1 && cd /tmp/r1 && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -E "^(time budget|trial|best|took|re-measur|warning|wall)" | cut -c1-220
  grep -E "^  (samples_per_s|spread|speedup_vs_defaults|defaults_samples_per_s)|^  confirmed|^  backend|^    device" autotune.yaml | cut -c1-200
  echo "== autotune.tune() from Python, 30 s, then build_loader on cuda"
  mkdir -p /tmp/r2 && cd /tmp/r2 && python3 -c "
import time, autotune, torch
cfg = autotune.tune('/tmp/s8k', budget_s=30, out='api.yaml', report=False)
print('tune ->', cfg.loader.describe(), cfg.result['samples_per_s'], 'samples/s')
loader = autotune.build_loader('/tmp/s8k', autotune.load_config('api.yaml'))
n, t = 0, time.perf_counter()
for i, (x, y) in enumerate(loader):
    n += x.shape[0]
    if i == 40: break
torch.cuda.synchronize()
print('build_loader:', tuple(x.shape), x.dtype, x.device, y.dtype, f'{n / (time.perf_counter() - t):,.0f} samples/s over {i + 1} batches')
" 2>&1 | grep -vE "^\s*$" | tail -6
  } 2>&1 | tee $OUT/verify-b.log
  ;;
esac
