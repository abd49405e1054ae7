# at 0e2aec8, on the same 1 x H100 (16 cores) machine as ../h100-2026-12-06-user-4, calls back to back
# (AUTOTUNE_BENCH_COMMIT=0e2aec86b020f06b673f8cfb80d6ab046a2cbe92; PYTHONPATH=/tmp/site:$PWD); DALI and Optuna
# installed into /tmp/site from the six wheel parts of .whl. Each stage's OUTDIR was a folder in /tmp, its files copied out.
OUTDIR=/tmp/s1 STAGE=methods bash benchmarks/gpu_search.sh   # methods.log, trials.log, data.log
OUTDIR=/tmp/s2 STAGE=noise bash benchmarks/gpu_search.sh     # noise.log, noise.json (benchmarks/paired_noise.py)
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
OUTDIR=/tmp/s3 STAGE=compare bash benchmarks/gpu_search.sh   # compare.log, ttq.json; its 3 rows: benchmarks/results/h100-search.json
OUTDIR=/tmp/s4 STAGE=ahead bash benchmarks/gpu_search.sh     # ahead.log: --build-ahead off/on, seeds 1 and 2, interleaved
