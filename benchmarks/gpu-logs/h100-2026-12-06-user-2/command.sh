# at 2d41a49, on one 1 x H100 (16 cores) machine (AUTOTUNE_BENCH_COMMIT=2d41a49d3a950f7d94b20af49809fa7ed23e81b2;
# PYTHONPATH=/tmp/site:$PWD), Optuna and the pipelines' wheels carried as .whl/lite.tar (bash benchmarks/pack_lite.sh)
mkdir -p /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl
OUTDIR=$OUT/u1 WINDOW=2 STAGE=none PIPES=d timeout 330 bash benchmarks/gpu_user.sh    # none-d.log; its tuning's own lines: d-tune.log
OUTDIR=$OUT/u1 WINDOW=2 STAGE=cpus PIPES=c timeout 230 bash benchmarks/gpu_user.sh    # cpus.log; its tuning's own lines: cpus-c-tune.log
#   (the 230 s cap ended it in round 3 of 3, before its rows were written: cpus.log holds rounds 1-2; no row merged)
OUTDIR=$OUT/u2 WINDOW=2 STAGE=none PIPES=b,c bash benchmarks/gpu_user.sh  # none-bc.log; b-tune.log, c-tune.log
# back here:
#   python benchmarks/user_pipelines.py --merge u1/user-pipelines.json && python benchmarks/user_pipelines.py --merge u2/user-pipelines.json
#   python benchmarks/user_pipelines.py --table
