#!/usr/bin/env bash
# One H200, at the last code commit (queued configs repeat only completed trials; --json on a stop), as final/:
# the CUDA tests, ResNet-50 in the loop with the default model budget (120 s), the default run (60 s) twice,
# every line kept, on 8,000 synthetic JPEGs.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1 | tee $OUT/tests.log
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
{
echo "== ResNet-50 in the loop, default budget"
cd /tmp && mkdir -p m && cd m && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --model resnet50 --amp --channels-last 2>&1 | tail -14
grep -E "^  (samples_per_s|model_ceiling|fraction_of|dali_heuristic|speedup_vs_dali)" autotune.yaml; grep -A3 "^loader:" autotune.yaml
python3 - <<'PY'
import optuna, json
st = "sqlite:///autotune.db"
s = optuna.load_study(study_name=optuna.get_all_study_summaries(st)[-1].study_name, storage=st)
c = s.user_attrs["model_ceiling"]; print("ceiling per batch size:", json.dumps({b: (v.get("samples_per_s"), v["outcome"]) for b, v in c["per_batch_size"].items()}))
print("time:", json.dumps(s.user_attrs.get("time", {}).get("spent_s")))
PY
for k in 1 2; do
echo "== default run $k"
cd /tmp && mkdir -p d$k && cd d$k && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k 2>&1 | tail -30
done
} 2>&1 | tee $OUT/verify.log
