# at ed98373, on one 1 x H100 (16 cores) machine, calls back to back (AUTOTUNE_BENCH_COMMIT=ed98373ddd9c4a03338bf065f8efaa594bf1f8b5;
# PYTHONPATH=/tmp/site:$PWD); DALI and Optuna installed into /tmp/site from the six wheel parts of .whl. Each stage's
# OUTDIR was a folder in /tmp, its files copied out.
OUTDIR=/tmp/s0 STAGE=held bash benchmarks/gpu_search.sh      # held.log, held.json: dali_build.py --held --rate-s 1, then a default run --seed 2 and its trials
OUTDIR=/tmp/s2 STAGE=methods bash benchmarks/gpu_search.sh   # methods.log, trials.log
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
OUTDIR=/tmp/s3 STAGE=compare bash benchmarks/gpu_search.sh   # compare.log, ttq.json; its 3 rows: benchmarks/results/h100-search.json
OUTDIR=/tmp/s4 STAGE=ahead bash benchmarks/gpu_search.sh     # ahead.log: default runs with --build-ahead off and on, seeds 1 and 2
rm -rf /tmp/search/methods; OUTDIR=/tmp/s5 STAGE=methods bash benchmarks/gpu_search.sh   # methods-2.log, trials-2.log
