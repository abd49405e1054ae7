#!/usr/bin/env bash
# GPU checks on a two-GPU node, in stages that each fit one call of under ten minutes. Results go to $OUT
# (or OUTDIR), a log per stage. Usage: STAGE=a|b|c bash benchmarks/gpu_x2.sh
#  a: data; the CUDA tests; the memory guard (its terminal must show no native library line: those go to the
#     trial logs); several GPUs measured as one process per rank beside two independent processes.
#  b: two ranks against the rules of thumb (scenario 2xH200-ranks) and a DDP ResNet-50 run from the tuned YAML.
#  c: one GPU: the default run under --budget 90 against the rules of thumb (scenario 1xH200-loader).
set -uo pipefail
out=${OUTDIR:-${OUT:-gpu-x2-out}}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
at() { python3 -m autotune "$@"; }
data=/tmp/s8k
[ -f "$data/.complete" ] || { at synth "$data" --images 8000 --classes 100 >/dev/null && touch "$data/.complete"; }
case "${STAGE:-a}" in
a)
  {
    echo "== GPUs"; nvidia-smi -L
    echo "== CUDA tests"; python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -6
  } > "$out/a-tests.log" 2>&1
  echo "== memory guard, terminal as a user sees it" > "$out/a-guard.log"
  TRIALS=8 DATA=/tmp/synth2k bash benchmarks/gpu_guard.sh /tmp/guard-out >> "$out/a-guard.log" 2>&1
  {
    echo "== native library lines on the guard's terminal (expect 0):"
    grep -cE "nvjpeg|\[/opt/dali|Traceback|_pin_memory_loop|DALI iterator does not support" "$out/a-guard.log"
    echo "== the same lines in the trial logs:"
    grep -lE "nvjpeg|Can't allocate|DALI iterator" reports/*/trials/*.log 2>/dev/null | head -5
    grep -hE "nvjpeg|Can't allocate" reports/*/trials/*.log 2>/dev/null | head -3
  } >> "$out/a-guard.log" 2>&1
  python3 benchmarks/ranks_gpu.py --data "$data" --json "$out/h200x2-ranks.json" > "$out/a-ranks.log" 2>&1
  echo "== leftover trial processes (expect none):" >> "$out/a-ranks.log"; pgrep -af "autotune.trials" >> "$out/a-ranks.log" || echo none >> "$out/a-ranks.log"
  ;;
b)
  tuned=/tmp/autotune-ranks-gpu/autotune.yaml
  python3 benchmarks/scenarios.py --scenario 2xH200-ranks --machine "2 x H200, 32 cores" --dataset "$data" --gpus 2 --rounds 2 \
    --window 1 --windows 3 --json "$out/scenarios.json" -- --budget 120 --space default > "$out/b-scenario.log" 2>&1
  tuned=benchmarks/work/scenarios/2xH200-ranks.yaml
  {
    echo "== one-GPU ceiling (ResNet-50 bf16 channels_last)"
    python3 benchmarks/ddp_train.py --ceiling --data "$data" --yaml "$tuned" --model resnet50 --amp --channels-last --seconds 15 --json "$out/ddp.json"
    echo "== DDP, 2 processes, loaders from the tuned YAML"
    torchrun --nproc_per_node 2 benchmarks/ddp_train.py --data "$data" --yaml "$tuned" --model resnet50 --amp --channels-last --seconds 40 --json "$out/ddp.json"
  } > "$out/b-ddp.log" 2>&1
  ;;
c)
  CUDA_VISIBLE_DEVICES=0 python3 benchmarks/scenarios.py --scenario 1xH200-loader --machine "1 x H200 (of 2), 32 cores" --dataset "$data" \
    --rounds 2 --window 1 --windows 3 --json "$out/scenarios.json" -- --budget 90 > "$out/c-scenario.log" 2>&1
  ;;
esac
ls -la "$out"
