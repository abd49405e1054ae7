#!/usr/bin/env bash
# One H200, 2026-12-01: the CUDA tests; a default run whose stderr is a pipe that closes after three lines (the
# YAML must still be written) and `check` on a full stdout (exit 2, one line); build_loader on two torchrun ranks
# sharing the GPU (gloo) from that YAML: the same config on both (built), then another batch size on rank 1 and
# seed + rank (each refused in one line); AutoLoader on a folder with a truncated JPEG (one line naming it).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
root=$PWD
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
{
echo "== default run, stderr into head -3"
cd /tmp && mkdir -p d && cd d && python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | head -3; echo "run rc=${PIPESTATUS[0]}"
grep -E "^  (samples_per_s|speedup_vs_defaults|confirmed)|^  backend|^  batch_size" autotune.yaml | cut -c1-200
echo "== check on a full stdout"
python3 -m autotune check autotune.yaml > /dev/full; echo "check rc=$?"
echo "== build_loader on two ranks (gloo), one GPU"
cat > /tmp/d/ranks.py <<'PY'
import os, sys, time, torch, torch.distributed as dist, autotune
mode = sys.argv[1]
dist.init_process_group("gloo")
r, w = dist.get_rank(), dist.get_world_size()
cfg = autotune.load_config("/tmp/d/autotune.yaml")
if mode == "batch" and r == 1:
    import dataclasses
    cfg = dataclasses.replace(cfg, loader=dataclasses.replace(cfg.loader, batch_size=cfg.loader.batch_size // 2))
seed = 0 if mode != "seed" else r
if mode == "seed":
    cfg = cfg.dataloader  # the torch DataLoader config: its DistributedSampler shuffles with the seed
try:
    t0 = time.perf_counter()
    loader = autotune.build_loader("/tmp/s8k", cfg, device="cuda:0", shard_id=r, num_shards=w, seed=seed)
    n = sum(int(y.shape[0]) for _, y in loader)
    print(f"rank {r}: {mode}: {len(loader)} batches, {n} samples in {time.perf_counter() - t0:.1f} s", flush=True)
    loader.close()
except autotune.UserError as e:
    print(f"rank {r}: {mode}: UserError: {e}", flush=True)
    sys.exit(2)
dist.destroy_process_group()
PY
for mode in same batch seed; do
  timeout 300 torchrun --nproc_per_node 2 --master_port 2950$((RANDOM % 10)) /tmp/d/ranks.py $mode 2>&1 | grep -E "^rank [01]:" ; echo "$mode rc=${PIPESTATUS[0]}"
done
echo "== AutoLoader, a truncated JPEG"
mkdir -p /tmp/bad && cp -r /tmp/s8k/class_0000 /tmp/s8k/class_0001 /tmp/bad/
f=$(ls /tmp/bad/*/*.jpg | head -1); head -c $(( $(stat -c %s "$f") / 2 )) "$f" > "$(dirname "$f")/zz_bad.jpg"
cd /tmp/bad && python3 -W ignore -c "
import autotune
al = autotune.AutoLoader('/tmp/bad', device='cuda', config=None, storage=None, batch_size=32, budget_s=60,
                         candidates=[{'backend': 'torch', 'num_workers': 4}])
try:
    for _ in range(3):
        for _b in al:
            pass
    print('no error')
except autotune.UserError as e:
    print('UserError:', e)
finally:
    al.close()
"
} 2>&1 | tee $OUT/verify.log
