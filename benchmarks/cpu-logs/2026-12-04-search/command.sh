#!/usr/bin/env bash
# The 2-core CPU's search account: three default runs (seeds 1-3), re-measured with the best 8 of the 51-config grid
# measured at c3fe7ad (copied from that run's work folder) and the peers, 3 interleaved rounds.
mkdir -p /tmp/cpusearch2 && cp /tmp/cpusearch/grid.json /tmp/cpusearch2/
cd /work/main
python benchmarks/time_to_quality.py --tag cpu --dataset ~/.cache/autotune/demo-2000x10 --work /tmp/cpusearch2 --methods autotune --seed 1 --seeds 3 --stages methods > methods.log 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset ~/.cache/autotune/demo-2000x10 --work /tmp/cpusearch2 --grid-top 8 --rounds 3 --stages compare \
    --json /tmp/cpusearch2/ttq.json --results /tmp/cpusearch2/RESULTS.md --search-json benchmarks/results/cpu-search.json > compare.log 2>&1
python benchmarks/headlines.py
