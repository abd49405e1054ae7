#!/bin/bash
# on the 2-core CPU machine: BASE a worktree at 2d41a49 (the zygote launched after the fingerprint and the dataset), REPO the change;
# /tmp/u1k: `autotune synth /tmp/u1k --images 1000 --classes 10`; budget 30 s, --device cpu, 3 rounds interleaved
# interleaved: the commit before (base) and the change (new); first_wait and configs from each study's time attr
export AUTOTUNE_BENCH_DATA=/tmp/u1k
for r in 1 2 3; do
 for v in base new; do
  src=$BASE; [ $v = new ] && src=$REPO
  for ds in "$REPO/benchmarks/pipelines/albu.py:train_set --batch-size 32" "/tmp/u1k"; do
   d=$(mktemp -d /tmp/fwrun.XXXX); cd $d
   PYTHONPATH=$src timeout 120 python -m autotune run --dataset $ds --budget 30 --device cpu --no-report --quiet > run.log 2>&1
   python - "$v" "$r" "$ds" <<'P'
import sys, optuna
optuna.logging.set_verbosity(optuna.logging.WARNING)
st="sqlite:///autotune.db"; s=optuna.load_study(study_name=optuna.get_all_study_names(st)[0],storage=st)
t=s.user_attrs.get('time',{})
print(sys.argv[1], sys.argv[2], sys.argv[3].split('/')[-1][:20], 'setup', t['spent_s']['setup'], 'first_wait', t['trials_s'].get('first_wait'), 'measured', t['trials_measured'], 'marks', t['setup_marks_s'])
P
  done
 done
done
