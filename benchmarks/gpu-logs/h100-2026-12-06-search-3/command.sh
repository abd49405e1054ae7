# at 75eec6e, on the same 1 x H100 (16 cores) machine as ../h100-2026-12-06-user-3, calls back to back
# (AUTOTUNE_BENCH_COMMIT=75eec6ed119f20dfd96567626501485db5ef63aa; PYTHONPATH=/tmp/site:$PWD); DALI and Optuna
# installed into /tmp/site from the six wheel parts of .whl
STAGE=methods bash benchmarks/gpu_search.sh   # methods.log, trials.log, data.log, autotune-seed*.json
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
STAGE=compare bash benchmarks/gpu_search.sh   # compare.log, ttq.json; its 3 rows: benchmarks/results/h100-search.json
STAGE=imports bash benchmarks/gpu_search.sh   # imports.log: the imports' seconds in a fresh process, and each run's zygote "ready in" line
