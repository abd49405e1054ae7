# at 60e6d91 (a build ahead goes to a fresh process only until its kind has a warm one; two warm processes a kind), on
# one 1 x H100 (16 cores) machine, calls back to back (AUTOTUNE_BENCH_COMMIT=60e6d91483aac263658236d75077669d1e2f74a8;
# PYTHONPATH=/tmp/site:$PWD); DALI and Optuna installed into /tmp/site from the six wheel parts of .whl. Each stage's
# OUTDIR was a folder in /tmp, its files copied out.
OUTDIR=/tmp/s4 STAGE=ahead bash benchmarks/gpu_search.sh     # ahead.log: default runs with --build-ahead off and on, seeds 1 and 2
OUTDIR=/tmp/s2 STAGE=methods bash benchmarks/gpu_search.sh   # methods.log, trials.log
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
OUTDIR=/tmp/s3 STAGE=compare bash benchmarks/gpu_search.sh   # compare.log, ttq.json; its 3 rows: benchmarks/results/h100-search.json
