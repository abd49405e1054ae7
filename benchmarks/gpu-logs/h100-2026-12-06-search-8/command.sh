# at 4ce2a85 (the paired re-measurement in the search's kept process of the contenders' kind, priced without a fresh
# process's start-up), on one 1 x H100 (16 cores) machine, calls back to back
# (AUTOTUNE_BENCH_COMMIT=4ce2a85056623310850be4f01149756ea732d1ab; PYTHONPATH=/tmp/site:$PWD); DALI and Optuna installed
# into /tmp/site from the six wheel parts of .whl. Each stage's OUTDIR was a folder in /tmp, its files copied out.
# first/: the machine's first runs (seed 1 paid the first run's torch probe: setup 14.6 s, preflight 10.4 s of it)
OUTDIR=/tmp/s2 STAGE=methods bash benchmarks/gpu_search.sh   # first/methods.log, first/trials.log
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
OUTDIR=/tmp/s3 STAGE=compare bash benchmarks/gpu_search.sh   # first/compare.log, first/ttq.json
# second/: the same in a work folder of their own, the probe remembered
export WORK=/tmp/search-b; mkdir -p $WORK && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json $WORK/
OUTDIR=/tmp/s6 STAGE=methods bash benchmarks/gpu_search.sh   # second/methods.log, second/trials.log
OUTDIR=/tmp/s7 STAGE=compare bash benchmarks/gpu_search.sh   # second/compare.log, second/ttq.json
# both compares' rows (3 each) appended to benchmarks/results/h100-search.json
