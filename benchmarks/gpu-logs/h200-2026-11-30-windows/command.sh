#!/usr/bin/env bash
# One H200 (16 cores), DALI and Optuna from wheels under /tmp/site; run from the repository root.
# How a config's rate moves over its first seconds (window_ramp.py), and what the default 60 s run's trials measured.
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
{
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100
echo "== window_ramp: 16 windows of 0.5 s per config, two fresh processes each"
python3 benchmarks/window_ramp.py --dataset /tmp/s8k --device cuda --windows 16 --repeats 2 --out $OUT/ramp.json
for i in 1 2; do
  echo "== autotune run --dataset /tmp/s8k --budget 60 (#$i)"
  python3 -m autotune run --dataset /tmp/s8k --budget 60 --out $OUT/r$i.yaml --storage sqlite:///$OUT/r.db --no-report
done
echo "== every trial's windows"
python3 - "$OUT/r.db" <<'PY'
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
url = "sqlite:///" + sys.argv[1]
for s in optuna.get_all_study_summaries(url):
    st = optuna.load_study(study_name=s.study_name, storage=url)
    print(s.study_name)
    for t in st.trials:
        a = t.user_attrs
        w = " ".join(f"{x:,.0f}" for x in a.get("windows") or [])
        print(f"  {t.number:2d} {a.get('config')}: {a.get('outcome')} steady_from={a.get('steady_from')} start={a.get('startup_s')} warm={a.get('warmup_s')} dur={a.get('duration_s')} | {w}")
    print("  confirmation:", st.user_attrs.get("confirmation"))
PY
} 2>&1 | tee $OUT/log.txt
