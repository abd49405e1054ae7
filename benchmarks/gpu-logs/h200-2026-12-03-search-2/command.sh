# at 3fca17a, one H200 machine, calls back to back (AUTOTUNE_BENCH_COMMIT=3fca17a...; PYTHONPATH=/tmp/site:$PWD)
STAGE=methods,cuda bash benchmarks/gpu_search.sh   # methods.log, cuda.log, autotune-seed*.json
STAGE=grid bash benchmarks/gpu_search.sh           # grid.log, grid.json
STAGE=compare bash benchmarks/gpu_search.sh        # compare.log; rows appended to benchmarks/results/h200-search.json
STAGE=none PIPES=b,c bash benchmarks/gpu_user.sh   # none-bc.log (c cut off by the call's limit in its third round)
# a second machine, 2,000 synthetic JPEGs: the mixed decoder's start with the ResNet-50 recipe's nvJPEG paddings
# against DALI's own defaults, fresh process each, interleaved (cut off by the call's limit in round 1)
python3 probe_padding.py probe /tmp/s2k dali-padding-probe.log 80
