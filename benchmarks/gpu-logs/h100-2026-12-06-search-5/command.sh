# at a440d63, on one 1 x H100 (16 cores) machine, calls back to back (AUTOTUNE_BENCH_COMMIT=a440d63f2678b5f8125be085c0c30f60572f01a0;
# PYTHONPATH=/tmp/site:$PWD); DALI and Optuna installed into /tmp/site from the six wheel parts of .whl. Each stage's
# OUTDIR was a folder in /tmp, its files copied out.
OUTDIR=/tmp/s0 STAGE=build bash benchmarks/gpu_search.sh     # dali-build.log, dali-build.json (benchmarks/dali_build.py --parallel 2,3)
OUTDIR=/tmp/s1 STAGE=line bash benchmarks/gpu_search.sh      # line8.log, line8.json: under taskset -c 0-7, hw start (a) against mixed t6 (b)
OUTDIR=/tmp/s2 STAGE=methods bash benchmarks/gpu_search.sh   # methods.log, trials.log
mkdir -p /tmp/search && cp benchmarks/gpu-logs/h200-2026-12-03-search-2/grid.json /tmp/search/   # the H200's 62-config grid: its best 8 re-measured here
OUTDIR=/tmp/s3 STAGE=compare bash benchmarks/gpu_search.sh   # compare.log, ttq.json; its 3 rows: benchmarks/results/h100-search.json
# back here: python benchmarks/start_spread.py --results benchmarks/RESULTS.md
# then, at ddea706 (which held NVML initialized in DALI processes; removed again, as it changed nothing):
OUTDIR=/tmp/s0 BUILD_ROUNDS=2 BUILD_ARGS=--nvml STAGE=build bash benchmarks/gpu_search.sh   # nvml-held.{log,json} (dali_build.py --nvml, since replaced by --held)
OUTDIR=/tmp/s2 STAGE=methods bash benchmarks/gpu_search.sh                                # methods-2.log, trials-2.log
# and three inline scripts, each kept with what it printed in keeper.log
