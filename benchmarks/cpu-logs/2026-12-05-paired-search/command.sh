#!/usr/bin/env bash
# The 2-core CPU's search account with the paired re-measurement, three times: at 70dff39 (contenders always paired),
# at 3f44156 (paired only where each one's queue refills within the untimed switch) and at 58b3f1b (after review: the
# order turns each round, rounds priced with the untimed switches, not paired across kinds). Three default runs each (seeds 1-3),
# re-measured with the best 8 of the 51-config grid of c3fe7ad (/tmp/cpusearch/grid.json) and the peers, 3 interleaved
# rounds. Run from a worktree of the commit, so the tree being edited is not what runs. Logs beside this file
# (methods-<commit>.log, compare-<commit>.log); confirmations.txt: each run's re-measurement record (python -c ... over
# the nine study databases); the rows were appended to benchmarks/results/cpu-search.json, then:
#   python benchmarks/headlines.py
for w in 3 4 5; do   # 3: 70dff39, 4: 3f44156, 5: 58b3f1b (git worktree add /tmp/wt-bench <commit>)
mkdir -p /tmp/cpusearch$w && cp /tmp/cpusearch/grid.json /tmp/cpusearch$w/ && cp benchmarks/results/cpu-search.json /tmp/cpusearch$w/
export PYTHONPATH=/tmp/wt-bench; cd /tmp/wt-bench
python benchmarks/time_to_quality.py --tag cpu --dataset ~/.cache/autotune/demo-2000x10 --work /tmp/cpusearch$w --methods autotune --seed 1 --seeds 3 --stages methods > /tmp/cpusearch$w/methods.log 2>&1
python benchmarks/time_to_quality.py --tag cpu --dataset ~/.cache/autotune/demo-2000x10 --work /tmp/cpusearch$w --grid-top 8 --rounds 3 --stages compare \
    --json /tmp/cpusearch$w/ttq.json --results /tmp/cpusearch$w/RESULTS.md --search-json /tmp/cpusearch$w/cpu-search.json > /tmp/cpusearch$w/compare.log 2>&1
done
