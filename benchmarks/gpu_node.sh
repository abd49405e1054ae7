#!/usr/bin/env bash
# A multi-GPU node (4 or 8 GPUs, or 2) against the rules of thumb, one process per rank; in stages that each fit
# one call of under ten minutes. Results go to $OUT (or OUTDIR). Usage: STAGE=a|p|b|c|m bash benchmarks/gpu_node.sh
#  a: data; the CUDA tests; `autotune run --gpus N` (scenario NxH200), its YAML and tuning time kept
#  p: that tuned config against the peers, all ranks loading at once, each round saved as it ends (the torch
#     defaults, num_workers = all cores in every rank, = cores / ranks, 75 % of cores / ranks, DALI's usual
#     start, the largest batch, the tuned config)
#  b: DDP ResNet-50 bf16 with the tuned YAML through build_loader(shard_id=rank, num_shards=N), against N times
#     the one-GPU ceiling and against the same DDP run on resident batches (what communication alone leaves)
#  c: the same DDP run with each rank's loader an autotune.AutoLoader from nothing, tuned inside the loop
#  m: `autotune run --gpus N --model resnet50` (every rank scored by its own training steps), then the DDP run of
#     stage b from that YAML
# GPUS=N uses the first N GPUs (default: all of them).
set -uo pipefail
out=${OUTDIR:-${OUT:-gpu-node-out}}; mkdir -p "$out"
export PYTHONUNBUFFERED=1
gpus=${GPUS:-$(nvidia-smi -L | wc -l)}
[ -n "${GPUS:-}" ] && export CUDA_VISIBLE_DEVICES=$(seq -s, 0 $((gpus - 1)))
cores=$(nproc)
name="${gpus}xH200"
machine="$gpus x H200, $cores cores"
data=/tmp/s8k
[ -f "$data/.complete" ] || { python3 -m autotune synth "$data" --images 8000 --classes 100 >/dev/null && touch "$data/.complete"; }
tuned=${TUNED:-benchmarks/work/scenarios/$name.yaml}  # stages p, b, c: TUNED=a YAML from an earlier call
case "${STAGE:-a}" in
a)
  { nvidia-smi -L; python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -3; } > "$out/a-tests.log" 2>&1
  python3 benchmarks/scenarios.py --scenario "$name" --machine "$machine" --dataset "$data" --gpus "$gpus" --tune-only \
    -- --budget 150 --space default > "$out/a-tune.log" 2>&1
  cp "benchmarks/work/scenarios/$name.yaml" "benchmarks/work/scenarios/$name.yaml.tuning.json" "$out/" 2>/dev/null
  ;;
p)
  [ -f "$tuned" ] || { echo "no $tuned: run stage a first on this machine, or set TUNED=the scenario YAML" >&2; exit 2; }
  python3 benchmarks/scenarios.py --scenario "$name" --machine "$machine" --dataset "$data" --gpus "$gpus" --tuned "$tuned" \
    --rounds 2 --window 1 --windows 3 --trial-timeout 90 --json "$out/scenarios.json" > "$out/p-peers.log" 2>&1
  ;;
b)
  [ -f "$tuned" ] || { echo "no $tuned: run stage a first on this machine, or set TUNED=the scenario YAML" >&2; exit 2; }
  {
    echo "== one-GPU ceiling (ResNet-50 bf16 channels_last)"
    python3 benchmarks/ddp_train.py --ceiling --data "$data" --yaml "$tuned" --model resnet50 --amp --channels-last --seconds 15 --json "$out/ddp.json"
    echo "== DDP, $gpus processes, each on one resident batch (no loader)"
    torchrun --nproc_per_node "$gpus" benchmarks/ddp_train.py --data "$data" --yaml "$tuned" --model resnet50 --amp --channels-last --seconds 30 --resident --json "$out/ddp.json"
    echo "== DDP, $gpus processes, loaders from the tuned YAML"
    torchrun --nproc_per_node "$gpus" benchmarks/ddp_train.py --data "$data" --yaml "$tuned" --model resnet50 --amp --channels-last --seconds 40 --json "$out/ddp.json"
  } > "$out/b-ddp.log" 2>&1
  ;;
c)
  [ -f "$tuned" ] || { echo "no $tuned: run stage a first on this machine, or set TUNED=the scenario YAML" >&2; exit 2; }
  { echo "== DDP, $gpus processes, each rank's loader an AutoLoader from nothing (the YAML only for its batch size)"
    torchrun --nproc_per_node "$gpus" benchmarks/ddp_train.py --data "$data" --yaml "$tuned" --model resnet50 --amp --channels-last --seconds 120 --autoloader --budget-s 60 --json "$out/ddp.json"
  } > "$out/c-autoloader.log" 2>&1
  ;;
m)
  model=benchmarks/work/scenarios/$name-model.yaml; mkdir -p benchmarks/work/scenarios
  { python3 -m autotune run --dataset "$data" --gpus "$gpus" --model resnet50 --amp --channels-last --budget 150 --out "$model" \
      --storage sqlite:///benchmarks/work/scenarios/scenarios.db --no-report --quiet
    cp "$model" "$out/"
    echo "== one-GPU ceiling at that YAML's batch size"
    python3 benchmarks/ddp_train.py --ceiling --data "$data" --yaml "$model" --model resnet50 --amp --channels-last --seconds 15 --json "$out/ddp.json"
    echo "== DDP, $gpus processes, loaders from the model-scored YAML"
    torchrun --nproc_per_node "$gpus" benchmarks/ddp_train.py --data "$data" --yaml "$model" --model resnet50 --amp --channels-last --seconds 40 --json "$out/ddp.json"
  } > "$out/m-model.log" 2>&1
  ;;
esac
ls -la "$out"
