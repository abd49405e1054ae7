#!/usr/bin/env bash
# Living with hardware change, on a GPU machine:
#   1. `autotune check` on a YAML made on the CPU machine (benchmarks/cpu-machine.yaml) reports the differences;
#   2. a --warm-start re-tune reaches the previous best in fewer trials than a cold study;
#   3. the multi-rank measurement path runs on the GPUs that are visible (N = all of them, 1 today).
#
# usage (from the repository root, after `pip install -e ".[dali]"`):
#   benchmarks/gpu_retune.sh                 # defaults below; ~10 minutes on one H200
#   TRIALS=10 IMAGES=2000 benchmarks/gpu_retune.sh
#
# Knobs (environment): WORK (benchmarks/work/retune), IMAGES (3000), TRIALS (12), SPACE (default),
# WINDOW (0.5), WINDOWS (3), REACH (0.95: "reached" = a trial within this fraction of the previous best),
# SEEDS ("2 3": each seed runs one warm and one cold study).
set -euo pipefail

WORK="${WORK:-benchmarks/work/retune}"
IMAGES="${IMAGES:-3000}"
TRIALS="${TRIALS:-12}"
SPACE="${SPACE:-default}"
WINDOW="${WINDOW:-0.5}"
WINDOWS="${WINDOWS:-3}"
REACH="${REACH:-0.95}"
SEEDS="${SEEDS:-2 3}"
DB="sqlite:///$WORK/retune.db"
COMMON=(--dataset "$WORK/data" --space "$SPACE" --storage "$DB" --gpus 1 --window "$WINDOW" --windows "$WINDOWS" --quiet --no-report)

mkdir -p "$WORK"
echo "== 1. autotune check on a YAML made on the CPU machine"
set +e
autotune check benchmarks/cpu-machine.yaml --no-dataset
rc=$?
set -e
echo "exit code: $rc (1 = differs in a way that matters)"

echo "== 2. warm start against cold start"
[ -d "$WORK/data" ] || autotune synth "$WORK/data" --images "$IMAGES" --classes 10
rm -f "$WORK/retune.db"
stamp="$(date +%s)"
echo "-- the previous tuning (cold, seed 1, $TRIALS trials, top 3 confirmed)"
autotune run "${COMMON[@]}" --n-trials "$TRIALS" --seed 1 --study-name "previous-$stamp" --out "$WORK/previous.yaml"
studies=()
for seed in $SEEDS; do
    echo "-- warm start from previous.yaml, seed $seed"
    autotune run "${COMMON[@]}" --n-trials "$TRIALS" --seed "$seed" --confirm-top 0 --study-name "warm-$seed-$stamp" \
        --warm-start "$WORK/previous.yaml" --out "$WORK/warm-$seed.yaml"
    echo "-- cold, seed $seed"
    autotune run "${COMMON[@]}" --n-trials "$TRIALS" --seed "$seed" --confirm-top 0 --study-name "cold-$seed-$stamp" \
        --out "$WORK/cold-$seed.yaml"
    studies+=("warm-$seed-$stamp" "cold-$seed-$stamp")
done

python - "$DB" "$WORK/previous.yaml" "$REACH" "${studies[@]}" <<'EOF'
import sys
import warnings

import optuna

from autotune.config import Config, read_yaml
from autotune.study.storage import open_storage

db, previous, reach, names = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4:]
prev = Config.from_dict(read_yaml(previous))
best = prev.result["samples_per_s"]
target = reach * best
print(f"\nprevious best: {prev.loader.describe()}: {best:,.0f} samples/s; reached = a trial >= {target:,.0f} ({reach:.0%})")
print(f"{'study':<28} {'trials to reach':>15} {'best trial':>12} {'first trial':>12}")
totals = {"warm": [], "cold": []}
storage = open_storage(db)
for name in names:
    study = optuna.load_study(study_name=name, storage=storage)
    done = sorted((t for t in study.trials if t.state.is_finished()), key=lambda t: t.number)
    values = [t.value if t.state == optuna.trial.TrialState.COMPLETE and t.value is not None else 0.0 for t in done]
    hit = next((i + 1 for i, v in enumerate(values) if v >= target), None)
    kind = name.split("-")[0]
    totals[kind].append(hit if hit is not None else len(values) + 1)
    first = done[0].user_attrs.get("config", "-") if done else "-"
    print(f"{name:<28} {hit if hit is not None else 'not reached':>15} {max(values, default=0):>12,.0f} {first:>12}")
for kind, hits in totals.items():
    if hits:
        print(f"{kind}: mean trials to reach {sum(hits) / len(hits):.1f} (not reached counts as trials+1)")
EOF

echo "== 3. the multi-rank path on every visible GPU"
python - "$WORK/data" <<'EOF'
import sys

import torch

from autotune.config import LoaderConfig
from autotune.dataset import scan
from autotune.trials.rank_group import measure_ranks
from autotune.trials.spec import TrialSpec

n = torch.cuda.device_count()
if n == 0:
    sys.exit("no GPU visible: skipping the multi-rank check")
spec = TrialSpec(dataset=scan(sys.argv[1]), loader=LoaderConfig.from_params({"backend": "torch", "batch_size": 64, "num_workers": 4, "pin_memory": True}),
                 device="cuda", warmup_batches=2, window_s=0.5, windows=3, seed=0, ranks=n)
p = measure_ranks(spec, lambda k, v, s: False)
print(f"{n} rank(s): per rank {p['per_rank_samples_per_s']} samples/s, node score (slowest x {n}) {p['samples_per_s']:,.0f}, peak GPU {p['peak_gpu_mib']:,.0f} MiB")
EOF
