#!/usr/bin/env bash
# GPU check of the core paths on an 8,000-image synthetic set: the CUDA-marked tests, the doctor, mixed image
# formats through DALI GPU decode, `check` of a CPU-made YAML, a torch-only study and a default-space study
# (torch + DALI). Usage: bash benchmarks/gpu_core.sh [OUTDIR]   (env: DATA, TRIALS)
set -uo pipefail
out=${1:-${OUT:-gpu-out}}; mkdir -p "$out"
data=${DATA:-/tmp/synth8k}; trials=${TRIALS:-20}
export PYTHONUNBUFFERED=1
at() { python3 -m autotune "$@"; }
fast=(--window 0.5 --windows 3 --no-report --quiet --storage "sqlite:///$out/gpu.db" --device cuda --seed 1)
[ -f "$data/.complete" ] || { at synth "$data" --images 8000 --classes 100 && touch "$data/.complete"; }
echo "== CUDA tests";   python3 -m pytest tests/loaders/backends tests/trials/test_zygote.py -m cuda -q -p no:cacheprovider 2>&1 | tail -4
echo "== doctor";       at doctor --dataset "$data"; echo "exit $?"
echo "== mixed formats through DALI GPU decode"; python3 benchmarks/gpu_mixed_formats.py 2>&1 | tail -25; echo "exit $?"
echo "== check of a YAML made on the CPU machine"; at check benchmarks/cpu-machine.yaml --no-dataset; echo "exit $?"
echo "== torch-only study";    at run --dataset "$data" --space torch   --n-trials "$trials" --out "$out/torch.yaml"   "${fast[@]}"; echo "exit $?"
sed -n '/^loader:/,/^measurement:/p' "$out/torch.yaml"
echo "== default-space study"; at run --dataset "$data" --space default --n-trials "$trials" --out "$out/default.yaml" "${fast[@]}"; echo "exit $?"
sed -n '/^loader:/,/^measurement:/p' "$out/default.yaml"
python3 - "$out/gpu.db" <<'PY'
import sys, optuna
url = f"sqlite:///{sys.argv[1]}"
for s in optuna.get_all_study_summaries(url):
    st = optuna.load_study(study_name=s.study_name, storage=url)
    print("study", s.study_name, st.user_attrs.get("space"))
    for t in st.trials:
        a = t.user_attrs
        print(f"  #{t.number:2d} {a.get('config','?'):50s} {a.get('outcome','?'):9s} {a.get('samples_per_s') or 0:8.0f}/s gpu {a.get('peak_gpu_mib')} dur {a.get('duration_s')} {a.get('message','')[:80]}")
PY
