#!/usr/bin/env bash
# One H200: the CUDA tests; the default run (60 s) on 8,000 synthetic JPEGs (a queued baseline the warm start or
# another trial measured is now told as a repeat); ResNet-50 in the loop with the default model budget (120 s; the
# ceiling now takes at most 30 % of the time left); the re-tune from the first YAML (--warm-start, 20 s).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
python3 -m pytest -q -p no:cacheprovider -m cuda tests 2>&1 | tail -1
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null
echo "== default run"
cd /tmp && mkdir -p d && cd d && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k 2>&1 | grep -v "^trial\|^re-meas\|^setting\|^time budget" | tail -9
grep -E "^  (samples_per_s|defaults_samples|heuristic_samples|dali_heuristic|speedup)" autotune.yaml; grep -A6 "^loader:" autotune.yaml
echo "== warm start, 20 s"
/usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --warm-start autotune.yaml --budget 20 --out warm.yaml 2>&1 | grep -v "^trial\|^re-meas\|^setting\|^time budget" | tail -6
grep -E "^  (samples_per_s|dali_heuristic|speedup_vs_dali)" warm.yaml
echo "== ResNet-50 in the loop, default budget"
cd /tmp && mkdir -p m && cd m && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --model resnet50 --amp --channels-last 2>&1 | grep -v "^trial\|^re-meas\|^setting\|^time budget" | tail -8
grep -E "^  (samples_per_s|model_ceiling|fraction_of|dali_heuristic|speedup_vs_dali)" autotune.yaml
python3 - <<'PY'
import optuna, json
s = optuna.load_study(study_name=optuna.get_all_study_summaries("sqlite:///autotune.db")[-1].study_name, storage="sqlite:///autotune.db")
c = s.user_attrs["model_ceiling"]; print("ceiling per batch size:", json.dumps({b: (v.get("samples_per_s"), v["outcome"]) for b, v in c["per_batch_size"].items()}))
print("time:", json.dumps(s.user_attrs.get("time", {}).get("spent_s")))
PY
} 2>&1 | tee $OUT/verify.log
