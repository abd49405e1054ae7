# at 75eec6e (each DataLoader worker of the user's Dataset caps OpenCV's threads at its share of the usable cores), on
# one 1 x H100 (16 cores) machine, calls back to back (AUTOTUNE_BENCH_COMMIT=75eec6ed119f20dfd96567626501485db5ef63aa;
# PYTHONPATH=/tmp/site:$PWD), Optuna and the pipelines' wheels carried as .whl/lite.tar (bash benchmarks/pack_lite.sh)
mkdir -p /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl
# run1: (c) under cgroup v2 cpu.max 400000 100000 (rows merged)
OUTDIR=$OUT/u1 WINDOW=2 STAGE=cpus PIPES=c bash benchmarks/gpu_user.sh   # run1/cpus.log, run1/c-*-tune.log
# run2: (c) and (d), no limit; its user-pipelines.json did not come back (too many files under $OUT): run2/none-cd.log
# holds every round; no row merged from it
OUTDIR=$OUT/u2 WINDOW=2 STAGE=none PIPES=c,d bash benchmarks/gpu_user.sh
# run3: the same again, its rows merged (run3/user-pipelines.json); its none-cd.log was overwritten by the redirect of
# the call itself (the JSON holds every round)
OUTDIR=/tmp/u3 WINDOW=2 STAGE=none PIPES=c,d bash benchmarks/gpu_user.sh
# back here:
#   python benchmarks/user_pipelines.py --merge run1/user-pipelines.json (as it came back) && python benchmarks/user_pipelines.py --merge run3/user-pipelines.json
#   python benchmarks/user_pipelines.py --table
