# at 7311c2c, on one 1 x H100 (16 cores) machine (a call for nvidia-h200 got an H100), one call
# (AUTOTUNE_BENCH_COMMIT=7311c2c2cee00d706ddae7391fd7a52d8e431653; PYTHONPATH=/tmp/site:$PWD), Optuna and the pipelines'
# wheels carried as .whl/lite.tar (bash benchmarks/pack_lite.sh).
mkdir -p /tmp/lite /tmp/site && tar xf .whl/lite.tar -C /tmp/lite && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl
OUTDIR=$OUT/u1 WINDOW=2 STAGE=none PIPES=d timeout 540 bash benchmarks/gpu_user.sh > /tmp/u.log 2>&1   # run1: (d), no limit (stage-d.log)
# back here:
#   python benchmarks/user_pipelines.py --merge run1/user-pipelines.json && python benchmarks/user_pipelines.py --table
