#!/usr/bin/env bash
# Two H200s, 32 cores: the two-GPU node scenario again, with the memory guard's exact reads spaced by their cost
# (guard.TreeMemory), stage by stage, each stage one call; then the offline YAML against the AutoLoader's pick in
# plain DDP, interleaved.
export PYTHONPATH=/tmp/site:$PWD
STAGE=a bash benchmarks/gpu_node.sh   # CUDA tests; autotune run --gpus 2 --budget 150 (a-tests.log, a-tune.log, 2xH200.yaml)
STAGE=p bash benchmarks/gpu_node.sh   # the peers, 2 rounds, all ranks at once (p-peers.log, scenarios.json)
STAGE=b bash benchmarks/gpu_node.sh   # one-GPU ceiling; DDP on resident batches; DDP from the tuned YAML (b-ddp.log)
STAGE=c bash benchmarks/gpu_node.sh   # DDP, each rank an AutoLoader from nothing (c-autoloader.log); b and c -> ddp-bc.json
# the AutoLoader's settled config as a YAML (autoloader-pick.yaml), then each YAML twice in plain DDP, interleaved (ab.log, ddp-ab.json)
T=benchmarks/work/scenarios/2xH200.yaml
python3 - <<'PY'
import yaml
d = yaml.safe_load(open("benchmarks/work/scenarios/2xH200.yaml"))
d["loader"]["dali"].update({"num_threads": 7, "prefetch_queue_depth": 4, "hw_decoder_load": 0.4})
open("/tmp/al.yaml", "w").write(yaml.safe_dump(d, sort_keys=False))
PY
for i in 1 2; do for y in $T /tmp/al.yaml; do
  torchrun --nproc_per_node 2 benchmarks/ddp_train.py --data /tmp/s8k --yaml $y --model resnet50 --amp --channels-last --seconds 30 --json $OUT/ddp-ab.json
done; done
STAGE=m bash benchmarks/gpu_node.sh   # autotune run --gpus 2 --model resnet50 (2xH200-model.yaml), then DDP from it (m-model.log, ddp-m.json)
