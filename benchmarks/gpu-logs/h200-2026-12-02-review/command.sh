#!/usr/bin/env bash
# One H200, 2026-12-02, after the review fixes: the window relay's spread, CUDA_VISIBLE_DEVICES read as CUDA reads it,
# no torch in the tuner for a fixed batch size's model memory, elapsed from the command's start.
# STAGE=a: the CUDA tests, then a default run (60 s) on 8,000 JPEGs: its lines and the YAML's figures.
# STAGE=b: the GPU seen under CUDA_VISIBLE_DEVICES=-1, 0,5, 0,0 and the GPU's UUID; a 30 s run on the UUID; a run
#          with --model resnet50 --batch-size 256 in the tuner's process: whether it imported torch.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
case "${STAGE:-a}" in
a)
  python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
  python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
  {
  echo "== default run"
  mkdir -p /tmp/r1 && cd /tmp/r1 && python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -E "^(time budget|trial|best|took|re-measur|warning)" | cut -c1-220
  grep -E "^  (samples_per_s|spread|speedup_vs_defaults|defaults_samples_per_s)|^  confirmed" autotune.yaml | cut -c1-200
  } 2>&1 | tee $OUT/verify-a.log
  ;;
b)
  {
  uuid=$(nvidia-smi --query-gpu=uuid --format=csv,noheader | head -1)
  for v in -1 0,5 0,0 "$uuid" "${uuid:0:12}"; do
    echo "CUDA_VISIBLE_DEVICES=$v: $(CUDA_VISIBLE_DEVICES=$v python3 -c 'from autotune.config import fingerprint as f; from autotune.trials import guard; i = f.gpu_info(); print("gpus", i["gpus"], "| guard watches NVML GPU", guard._gpu_index("cuda"))')"
  done
  echo "== a 30 s run under CUDA_VISIBLE_DEVICES=<the GPU's UUID>"
  mkdir -p /tmp/r2 && cd /tmp/r2 && CUDA_VISIBLE_DEVICES=$uuid python3 -m autotune run --dataset /tmp/s8k --budget 30 --no-report 2>&1 | grep -E "^(trial|best|took|warning)" | cut -c1-200
  echo "== --model resnet50 --amp --channels-last --batch-size 256 --budget 90, in the tuner's process"
  mkdir -p /tmp/r3 && cd /tmp/r3 && python3 -c "
import sys, time
from autotune.cli import main
t = time.monotonic()
rc = main(['run', '--dataset', '/tmp/s8k', '--model', 'resnet50', '--amp', '--channels-last', '--batch-size', '256', '--budget', '90', '--no-report'])
print('exit', rc, 'in', round(time.monotonic() - t), 's; torch imported in the tuner:', 'torch' in sys.modules)
" 2>&1 | grep -E "^(trial|best|took|warning|exit)" | cut -c1-200
  grep -E "^  (samples_per_s|spread|of_ceiling)" autotune.yaml | cut -c1-200
  } 2>&1 | tee $OUT/verify-b.log
  ;;
esac
# At the last change (the review fixes), STAGE=a again: tests-final.log and verify-final.log.
