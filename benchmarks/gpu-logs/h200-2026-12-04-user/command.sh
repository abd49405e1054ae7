# at 05b4193, on the same machine after the search calls (AUTOTUNE_BENCH_COMMIT=05b4193...; PYTHONPATH=/tmp/site:$PWD)
STAGE=none PIPES=b,c bash benchmarks/gpu_user.sh   # none-bc.log
STAGE=shm bash benchmarks/gpu_user.sh              # shm.log: (a) whole; (c) cut off by the call's limit in round 2
# back here: python benchmarks/user_pipelines.py --merge OUT/user-pipelines.json && python benchmarks/user_pipelines.py --table
