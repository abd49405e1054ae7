#!/usr/bin/env bash
# One H200, 2026-12-03, after the search's own account (study.configs_measured, sampled_measured, winner_from) and
# the remembered torch probe. Two default 60 s runs back to back on the same 8k set: the first probes torch (and
# writes ~/.cache/autotune/probes/torch-*.json), the second reads that answer. No CUDA tests this time (the device
# time left did not hold them).
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
python3 -m autotune synth /tmp/s8k --images 8000 --classes 100 >/dev/null 2>&1
mkdir -p /tmp/r1 && cd /tmp/r1 && /usr/bin/time -f "wall %e s" python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | tee $OUT/default-run.log
sed -n '/^study:/,$p' autotune.yaml | head -14 | tee -a $OUT/default-run.log
python3 -c "
import optuna; optuna.logging.set_verbosity(optuna.logging.WARNING)
u='sqlite:///autotune.db'; s=optuna.load_study(study_name=optuna.get_all_study_names(u)[0], storage=u); print('time', s.user_attrs.get('time'))" | tee -a $OUT/default-run.log
mkdir -p /tmp/r2 && cd /tmp/r2 && python3 -m autotune run --dataset /tmp/s8k --no-report 2>&1 | grep -E "^(trial|best|measured|took)" | tee $OUT/second-run.log
python3 -c "
import optuna; optuna.logging.set_verbosity(optuna.logging.WARNING)
u='sqlite:///autotune.db'; s=optuna.load_study(study_name=optuna.get_all_study_names(u)[0], storage=u); print('time', s.user_attrs.get('time'))" | tee -a $OUT/second-run.log
# Ran once (commit of this folder): default-run.log (setup 13.0 s, of it 9.4 s waiting on the torch probe; 5 configs,
# 1 sampled, the winner sampled) and second-run.log (setup 3.8 s, the probe read from its file; 7 configs, 3 sampled,
# the winner sampled). The first trial of the second run still ended at 0:14: the measuring process's own imports.
