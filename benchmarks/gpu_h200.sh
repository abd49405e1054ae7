#!/usr/bin/env bash
# The one-GPU checks on an H200 node, in stages that each fit one call of under nine minutes. Results go to
# $OUT (or OUTDIR) as one archive per stage (stage-X.tgz: the logs and JSON files).
# Usage: STAGE=data|a|b|c|d|e|tests bash benchmarks/gpu_h200.sh
#  data: the 8,000-image synthetic set (about a minute)
#  a: time to quality: the grid, then every method as a real `autotune run`
#  b: time to quality: what a cut-off stage a left, then the side-by-side re-measurement (scenario 1xH200-loader);
#     scenario 1xH200-3GiB (the model takes all but about 3 GiB of the GPU); scenario 1xH200-eval (EVAL=1: the eval
#     pipeline; it does not fit in one call with the rest)
#  c: scenario 1xH200-resnet50 (ResNet-50 bf16 channels_last in the loop, the default budget with a model)
#  d: AutoLoader (tune while training): the offline study with the model at batch 256 (OFFLINE_YAML=path: take that
#     YAML instead), then AutoLoader from nothing in a ResNet-50 training loop of five minutes (1,375,000 samples)
#  e: the same loop with the offline YAML, then DALI's usual start and the torch defaults (shorter: settled rate;
#     SKIP_REST=1 leaves them out)
#  tests: the CUDA-marked tests
set -uo pipefail
out=${OUTDIR:-${OUT:-gpu-h200-out}}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
data=${DATA:-/tmp/s8k}
machine="1 x H200, 16 cores"
ttq=(python3 benchmarks/time_to_quality.py --tag h200 --dataset "$data" --work /tmp/ttq-h200 --json "$out/h200-time-to-quality.json"
     --results "$out/RESULTS-h200.md" --scenarios-json "$out/scenarios.json" --machine "$machine")
scen=(python3 benchmarks/scenarios.py --dataset "$data" --machine "$machine" --rounds 2 --window 1 --windows 3 --json "$out/scenarios.json")
case "${STAGE:-a}" in
data)
  [ -f "$data/.complete" ] || { python3 -m autotune synth "$data" --images 8000 --classes 100 > "$out/data.log" 2>&1 && touch "$data/.complete"; }
  sync  # on the disk before anything is measured: writeback of the new files must not compete with the runs
  ;;
tests)
  { nvidia-smi -L; python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -4; } > "$out/tests.log" 2>&1
  ;;
a)
  "${ttq[@]}" --grid-batches 128,256 --stages grid --time-budget 210 > "$out/a-grid.log" 2>&1
  "${ttq[@]}" --stages methods --time-budget 240 > "$out/a-methods.log" 2>&1
  cp /tmp/ttq-h200/*.json "$out/" 2>/dev/null
  ;;
b)
  "${ttq[@]}" --grid-batches 128,256 --stages grid,methods --time-budget 120 > "$out/b-rest.log" 2>&1   # what a cut-off call left
  "${ttq[@]}" --stages compare --scenario 1xH200-loader --window 1.0 > "$out/b-compare.log" 2>&1
  free=$(nvidia-smi --query-gpu=memory.free --format=csv,noheader,nounits | head -1)
  # the GPU budget is 90 % of the free memory minus the reserve: leave the loader about 3 GiB
  "${scen[@]}" --scenario 1xH200-3GiB --reserve-gpu-mem $((free * 9 / 10 - 3072)) > "$out/b-3gib.log" 2>&1
  [ -n "${EVAL:-}" ] && "${scen[@]}" --scenario 1xH200-eval --pipeline imagenet-eval > "$out/b-eval.log" 2>&1
  cp /tmp/ttq-h200/compare.json "$out/" 2>/dev/null
  ;;
c)
  "${scen[@]}" --scenario 1xH200-resnet50 --model resnet50 --amp --channels-last > "$out/c-resnet50.log" 2>&1
  cp benchmarks/work/scenarios/1xH200-resnet50.yaml "$out/" 2>/dev/null
  ;;
d)
  mkdir -p /tmp/ab
  if [ -n "${OFFLINE_YAML:-}" ]; then  # the offline study's YAML from an earlier call on this kind of machine
    cp "$OFFLINE_YAML" /tmp/ab/offline.yaml
  else
    python3 -m autotune run --dataset "$data" --model resnet50 --amp --channels-last --batch-size 256 --out /tmp/ab/offline.yaml \
      --storage sqlite:////tmp/ab/offline.db --no-report --json --quiet > "$out/d-offline.json" 2> "$out/d-offline.log"
  fi
  cp /tmp/ab/offline.yaml "$out/"
  python3 benchmarks/autoloader_gpu.py --data "$data" --yaml /tmp/ab/offline.yaml --work /tmp/ab --variants autoloader \
    --max-wall-s 420 --json "$out/d-autoloader.json" > "$out/d-autoloader.log" 2>&1
  cp /tmp/ab/autoloader.yaml "$out/" 2>/dev/null
  ;;
e)
  [ -f /tmp/ab/offline.yaml ] || { mkdir -p /tmp/ab; cp "${OFFLINE_YAML:?run stage d first, or set OFFLINE_YAML}" /tmp/ab/offline.yaml; }
  python3 benchmarks/autoloader_gpu.py --data "$data" --yaml /tmp/ab/offline.yaml --work /tmp/ab --variants offline-yaml \
    --max-wall-s 420 --json "$out/e-offline.json" > "$out/e-offline.log" 2>&1
  [ -n "${SKIP_REST:-}" ] || python3 benchmarks/autoloader_gpu.py --data "$data" --work /tmp/ab --variants dali-start,torch-defaults --samples 200000 \
    --max-wall-s 90 --json "$out/e-rest.json" > "$out/e-rest.log" 2>&1
  ;;
esac
# one archive per stage: easy to copy off the machine
(cd "$out" && tar czf "stage-${STAGE:-a}.tgz" --exclude '*.tgz' --remove-files -- * 2>/dev/null; ls -la)
