# at eea19a8, one H200 machine, calls back to back (AUTOTUNE_BENCH_COMMIT=eea19a871eb8c473e237395d9edce5e85952bc07; PYTHONPATH=/tmp/site:$PWD)
# the grid of 2026-12-03 (h200-2026-12-03-search-2/grid.json, 62 configs) seeded the work folder; its best 8 re-measured
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/
STAGE=methods OUTDIR=/tmp/o bash benchmarks/gpu_search.sh   # methods.log, trials.log, autotune-seed*.json
STAGE=compare OUTDIR=/tmp/o bash benchmarks/gpu_search.sh   # compare.log, ttq.json; 3 rows appended to h200-search.json
# back here: cp OUT/h200-search.json benchmarks/results/h200-search.json && python benchmarks/headlines.py
