#!/usr/bin/env bash
# Two H200s (nvidia-h200-x2), at the last code of 2026-12-01: the CUDA tests; `autotune run --gpus 2` (one process per
# rank); the tuned YAML's loader under torchrun, two ranks, through build_loader (its memory check counts both local
# ranks) and AutoLoader under DDP with a candidate batch it does not explore (refused on every rank, no hang).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
cat > /tmp/ddp_check.py <<'PY'
import os, sys, time, torch, torch.distributed as dist, autotune
dist.init_process_group("nccl"); rank = dist.get_rank(); torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
if sys.argv[1] == "build":
    cfg = autotune.load_config("/tmp/g2/autotune.yaml")
    loader = autotune.build_loader("/tmp/s8k", cfg, device=f"cuda:{os.environ['LOCAL_RANK']}", shard_id=rank, num_shards=dist.get_world_size())
    t0, n = time.time(), 0
    for i, (x, y) in enumerate(loader):
        n += x.shape[0]
        if i == 60: break
    print(f"rank {rank}: {cfg.loader.describe()}: {n} samples in {time.time() - t0:.1f} s on {x.device}", flush=True)
else:
    try:
        autotune.AutoLoader("/tmp/s8k", device="cuda", config=None, storage=None, batch_size=128, candidates=[{"backend": "dali", "batch_size": 512}])
    except autotune.UserError as e:
        print(f"rank {rank}: UserError: {e}", flush=True)
dist.barrier(); dist.destroy_process_group()
PY
{
echo "== autotune run --gpus 2"
mkdir -p /tmp/g2 && cd /tmp/g2 && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --gpus 2 --no-report 2>&1 | grep -vE "^trial [0-9]+ \(" | tail -6
grep -E "^  (samples_per_s|per_rank_samples_per_s|speedup_vs_defaults|ranks|confirmed)" autotune.yaml | cut -c1-200
cd - >/dev/null
echo "== torchrun, 2 ranks: build_loader"
timeout 180 torchrun --nproc_per_node 2 /tmp/ddp_check.py build 2>&1 | grep -E "^rank|Error" | head
echo "== torchrun, 2 ranks: AutoLoader with a candidate batch it does not explore"
timeout 120 torchrun --nproc_per_node 2 /tmp/ddp_check.py autoloader 2>&1 | grep -E "^rank|Error" | head; echo "rc=${PIPESTATUS[0]}"
} 2>&1 | tee $OUT/verify.log
