#!/usr/bin/env bash
# Where a default 60 s run's trial time goes on the 2-core CPU (the time attr's trials_s), three seeds, one after another,
# each in a fresh work folder; then the time attr of each study.
set -u
for seed in 1 2 3; do
  rm -rf /tmp/tt$seed && mkdir /tmp/tt$seed && (cd /tmp/tt$seed && autotune run --demo --seed $seed --no-report \
      --out /tmp/tt$seed/autotune.yaml --storage sqlite:////tmp/tt$seed/s.db > run.log 2>&1; echo "exit $?" >> run.log)
  cat /tmp/tt$seed/run.log
  python - "$seed" <<'PY'
import json, sys
import optuna
optuna.logging.set_verbosity(optuna.logging.ERROR)
url = f"sqlite:////tmp/tt{sys.argv[1]}/s.db"
s = optuna.load_study(study_name=optuna.study.get_all_study_names(url)[0], storage=url)
print("seed", sys.argv[1], "time", json.dumps(s.user_attrs["time"]))
print("seed", sys.argv[1], "study", json.dumps({k: s.user_attrs.get("warm_processes") for k in ["warm_processes"]}))
PY
done
