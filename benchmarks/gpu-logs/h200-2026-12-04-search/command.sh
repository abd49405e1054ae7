# at 05b4193, one H200 machine, calls back to back (AUTOTUNE_BENCH_COMMIT=05b4193...; PYTHONPATH=/tmp/site:$PWD)
# the grid of 2026-12-03 (h200-2026-12-03-search-2/grid.json, 62 configs) seeded the work folder; its best 8 re-measured
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/
STAGE=methods,compare OUTDIR=/tmp/o bash benchmarks/gpu_search.sh   # methods.log, trials.log, compare.log, autotune-seed*.json; rows appended to h200-search.json
