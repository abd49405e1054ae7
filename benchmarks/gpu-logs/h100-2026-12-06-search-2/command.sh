# at 2d41a49, on the same 1 x H100 (16 cores) machine as ../h100-2026-12-06-user-2, calls back to back
# (AUTOTUNE_BENCH_COMMIT=2d41a49d3a950f7d94b20af49809fa7ed23e81b2; PYTHONPATH=/tmp/site:$PWD); DALI and Optuna carried
# as the six parts of .whl (../shared/gpu), installed into /tmp/site
STAGE=methods bash benchmarks/gpu_search.sh   # methods.log, trials.log, data.log, autotune-seed*.json
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
STAGE=compare bash benchmarks/gpu_search.sh   # compare.log, ttq.json; its 3 rows: benchmarks/results/h100-search.json
STAGE=ahead bash benchmarks/gpu_search.sh     # ahead.log: --build-ahead off, on, off, on (seeds 1 and 2)
