# at 0e2aec8, on one 1 x H100 (16 cores) machine, calls back to back (AUTOTUNE_BENCH_COMMIT=0e2aec86b020f06b673f8cfb80d6ab046a2cbe92;
# PYTHONPATH=/tmp/site:$PWD), Optuna and the pipelines' wheels carried as .whl/lite.tar (bash benchmarks/pack_lite.sh).
# The tuned row is read through autotune.build_loader(dataset, cfg); the plain peer has the same keywords in a DataLoader.
mkdir -p /tmp/lite && tar xf .whl/lite.tar -C /tmp/lite && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site /tmp/lite/*.whl
OUTDIR=$OUT/u1 WINDOW=2 STAGE=none PIPES=c bash benchmarks/gpu_user.sh > /tmp/u1.log 2>&1   # run1: (c), no limit
OUTDIR=$OUT/u2 WINDOW=2 STAGE=none PIPES=d bash benchmarks/gpu_user.sh > /tmp/u2.log 2>&1   # run2: (d), no limit
OUTDIR=$OUT/u3 WINDOW=2 STAGE=cpus PIPES=c bash benchmarks/gpu_user.sh > /tmp/u3.log 2>&1   # run3: (c), cgroup v2 cpu.max 400000 100000
# back here:
#   for r in 1 2 3; do python benchmarks/user_pipelines.py --merge run$r/user-pipelines.json; done
#   python benchmarks/user_pipelines.py --table
