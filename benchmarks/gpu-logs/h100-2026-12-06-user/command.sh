# at bf5fa74, two calls on one 1 x H100 (16 cores) machine (AUTOTUNE_BENCH_COMMIT=bf5fa741ab4906732dd93403548a4574e8d063d7;
# PYTHONPATH=/tmp/site:$PWD), Optuna and the pipelines' wheels carried as .whl/lite.tar (bash benchmarks/pack_lite.sh)
mkdir -p /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl
OUTDIR=$OUT/u1 WINDOW=2 STAGE=none PIPES=d bash benchmarks/gpu_user.sh    # none-d.log; its tuning's own lines: d-tune.log
OUTDIR=$OUT/u1 WINDOW=2 STAGE=cpus PIPES=c bash benchmarks/gpu_user.sh    # cpus.log; its tuning's own lines: cpus-c-tune.log
OUTDIR=$OUT/u2 WINDOW=2 STAGE=none PIPES=b,c bash benchmarks/gpu_user.sh  # none-bc.log; b-tune.log, c-tune.log
# back here:
#   python benchmarks/user_pipelines.py --merge u1/user-pipelines.json && python benchmarks/user_pipelines.py --merge u2/user-pipelines.json
#   python benchmarks/user_pipelines.py --table
