#!/usr/bin/env bash
# One H200, 2026-12-01, after the review fixes (the same checks as checks-6): the CUDA tests; a default run (its trial lines, its YAML); AutoLoader on two torchrun ranks
# sharing the GPU (gloo): one rank's dataset folder missing (every rank told, none waiting), then a normal run to
# its settle (the candidate lines before each decision), `show` of its YAML and its report (the loop's rate marked).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
{
echo "== default run"
cd /tmp && mkdir -p d && cd d && python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -vE "^\s*$" | tail -25; echo "run rc=${PIPESTATUS[0]}"
grep -E "^  (samples_per_s|speedup_vs_defaults)|^  backend|^  batch_size" autotune.yaml | cut -c1-200
echo "== AutoLoader on two ranks (gloo), one GPU"
cat > /tmp/d/al.py <<'PY'
import logging, os, sys, time, torch, torch.distributed as dist, autotune
mode, r = sys.argv[1], int(os.environ["RANK"])
logging.basicConfig(level=logging.INFO, format=f"rank {r} %(name)s: %(message)s")
dist.init_process_group("gloo")
data = "/tmp/not-copied" if mode == "missing" and r == 1 else "/tmp/s8k"
t0 = time.perf_counter()
try:
    al = autotune.AutoLoader(data, device="cuda", config="/tmp/d/al.yaml", storage="sqlite:////tmp/d/al.db", batch_size=128, budget_s=60)
except autotune.UserError as e:
    open(f"/tmp/d/{mode}-{r}.txt", "w").write(f"rank {r}: UserError after {time.perf_counter() - t0:.1f} s: {e}\n")
    sys.exit(2)
for epoch in range(5):
    for images, labels in al:
        pass
al.close()
said = al.settled.describe() if al.settled is not None else "nothing (rank 0 alone settles at close())"
open(f"/tmp/d/{mode}-{r}.txt", "w").write(f"rank {r}: {epoch + 1} epochs in {time.perf_counter() - t0:.1f} s, settled on {said}\n")
dist.destroy_process_group()
PY
for mode in missing normal; do
  timeout 420 torchrun --nproc_per_node 2 --master_port 2950$((RANDOM % 10)) /tmp/d/al.py $mode 2>&1 | grep -E "^rank [01]" | grep -vE "^rank 1 autotune" | cut -c1-240; echo "$mode rc=${PIPESTATUS[0]}"; cat /tmp/d/$mode-*.txt
done
echo "== show al.yaml"
COLUMNS=200 python3 -m autotune show /tmp/d/al.yaml 2>&1 | grep -E "tuned by|loader|samples/s" | cut -c1-220
echo "== report of its study"
python3 -m autotune report --storage sqlite:////tmp/d/al.db --reports-dir /tmp/d/reports --quiet --json > /tmp/d/rep.json 2>/dev/null; echo "report rc=$?"
grep -hE "^\*\*best samples/s|^\| measurement " /tmp/d/reports/*/report.md | cut -c1-260
} 2>&1 | tee $OUT/verify.log
