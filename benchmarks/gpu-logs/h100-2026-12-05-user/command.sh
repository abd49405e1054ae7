# at 32a7d1c, one call on a 1 x H100 (16 cores) machine (AUTOTUNE_BENCH_COMMIT=32a7d1cfbcaa3b03e2ff01cf1d704fc7d336e66b;
# PYTHONPATH=/tmp/site:$PWD), Optuna and the pipelines' wheels carried as .whl/lite.tar (bash benchmarks/pack_lite.sh)
mkdir -p /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl
OUTDIR=$OUT/u1 WINDOW=2 STAGE=none PIPES=d bash benchmarks/gpu_user.sh   # none-d.log; its tuning's own lines: d-tune.log
OUTDIR=$OUT/u1 WINDOW=2 STAGE=cpus PIPES=c bash benchmarks/gpu_user.sh   # cpus.log; its tuning's own lines: cpus-c-tune.log
# (d): the 16-worker start crashed in its trial ("the loader yields no batch in an epoch"): each of 16 workers held
# 4 of 64 shards, about 250 samples, less than one batch of 256, and the trial dropped each worker's last partial
# batch; build_loader keeps them, and the peers read 1,463-1,828 samples/s. Fixed in 84322cf (a stream is measured
# whole); the row stays as measured until (d) is run again.
# back here:
#   python benchmarks/user_pipelines.py --merge u1/user-pipelines.json && python benchmarks/user_pipelines.py --table
