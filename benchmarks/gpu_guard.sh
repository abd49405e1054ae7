#!/usr/bin/env bash
# GPU check of the memory guard. Usage: bash benchmarks/gpu_guard.sh [OUTDIR]
#  1. a DALI study with --gpu-budget 1800: large batches are not run (predicted-oom) or are stopped by the
#     NVML sampling (oom-gpu) before they cross the budget; the completed trials peak under it.
#  2. a real CUDA out-of-memory: another process holds all but ~700 MiB of the GPU (the training model's
#     share, as --reserve-gpu-mem would leave it) and the guard is switched off (--gpu-budget far above the
#     GPU), so the trial's own allocation fails; it is recorded as oom-gpu and the study goes on.
set -uo pipefail
out=${1:-${OUT:-gpu-guard-out}}; mkdir -p "$out"
data=${DATA:-/tmp/synth2k}; trials=${TRIALS:-12}
export PYTHONUNBUFFERED=1
fast=(--window 0.5 --windows 3 --confirm-top 0 --no-report --storage "sqlite:///$out/guard.db" --device cuda --quiet)
python -m autotune synth "$data" --images 2000 --classes 10
cat > "$out/big-dali.yaml" <<'YAML'
name: big-dali
params:
  backend: {choices: [dali]}
  batch_size: {choices: [64, 128, 256, 512, 1024]}
  dali_device: {choices: [gpu]}
  num_threads: {int: [2, 8]}
  prefetch_queue_depth: {choices: [1, 2, 3, 4]}
YAML
echo "== 1. --gpu-budget 1800 on a DALI space with batches up to 1024"
python -m autotune run --dataset "$data" --space "$out/big-dali.yaml" --n-trials "$trials" --seed 1 --gpu-budget 1800 \
  --study-name gpu-budget --out "$out/budget.yaml" "${fast[@]}"
echo "exit code $?"
grep -A4 '^budgets' "$out/budget.yaml"

echo "== 2. real CUDA OOM: a hog leaves ~700 MiB free, guard off"
python - <<'PY' &
import time, torch
free, _ = torch.cuda.mem_get_info()
hold = torch.empty(int(free - 700 * 2**20), dtype=torch.uint8, device="cuda")
print(f"hog holds {hold.numel() / 2**20:,.0f} MiB; {torch.cuda.mem_get_info()[0] / 2**20:,.0f} MiB free", flush=True)
time.sleep(600)
PY
hog=$!
sleep 20
python -m autotune run --dataset "$data" --space "$out/big-dali.yaml" --n-trials 3 --seed 2 --gpu-budget 1000000 \
  --no-baselines --study-name real-oom --out "$out/real-oom.yaml" "${fast[@]}"
echo "exit code $? (1 = no trial completed, expected here)"
kill "$hog"; wait "$hog" 2>/dev/null

python - "$out/guard.db" <<'PY'
import sys, optuna
url = f"sqlite:///{sys.argv[1]}"
for name in ("gpu-budget", "real-oom"):
    st = optuna.load_study(study_name=name, storage=url)
    print("study", name, "budgets", st.user_attrs.get("budgets"))
    for t in st.trials:
        a = t.user_attrs
        print(f"  #{t.number:2d} {a.get('config','?'):45s} {a.get('outcome','?'):13s} {t.state.name:8s} {a.get('samples_per_s') or 0:8.0f}/s "
              f"peak gpu {a.get('peak_gpu_mib')} MiB  est {(a.get('estimate') or {}).get('gpu_mib')}  {a.get('message','')[:110]}")
PY
echo "== leftover trial processes (expect none):"; pgrep -af "autotune.trials" || echo none
