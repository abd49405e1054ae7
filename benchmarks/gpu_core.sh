#!/usr/bin/env bash
# GPU check of the core paths: CUDA-marked backend tests, a torch-only study and a default-space study
# (torch + DALI) on an 8,000-image synthetic set. Usage: bash benchmarks/gpu_core.sh [OUTDIR]
set -uo pipefail
out=${1:-${OUT:-gpu-out}}; mkdir -p "$out"
data=${DATA:-/tmp/synth8k}; trials=${TRIALS:-16}
export PYTHONUNBUFFERED=1
fast=(--window 0.5 --windows 3 --no-report --storage "sqlite:///$out/gpu.db")
python -m autotune synth "$data" --images 8000 --classes 100
python -m pytest tests/backends -m cuda -q -p no:cacheprovider 2>&1 | tail -15
echo "== torch-only study"
python -m autotune run --dataset "$data" --space torch --device cuda --n-trials "$trials" --seed 1 --out "$out/torch.yaml" "${fast[@]}"
sed -n '/^loader:/,/^measurement:/p' "$out/torch.yaml"
echo "== default-space study"
python -m autotune run --dataset "$data" --space default --device cuda --n-trials "$trials" --seed 1 --out "$out/default.yaml" "${fast[@]}"
sed -n '/^loader:/,/^measurement:/p' "$out/default.yaml"
python - "$out/gpu.db" <<'PY'
import sys, optuna
for s in optuna.get_all_study_summaries(f"sqlite:///{sys.argv[1]}"):
    st = optuna.load_study(study_name=s.study_name, storage=f"sqlite:///{sys.argv[1]}")
    print("study", s.study_name)
    for t in st.trials:
        a = t.user_attrs
        print(f"  #{t.number:2d} {a.get('config','?'):55s} {a.get('outcome','?'):13s} {a.get('samples_per_s') or 0:9.0f}/s  gpu {a.get('peak_gpu_mib')} MiB  {a.get('message','')[:100]}")
PY
