#!/usr/bin/env bash
# The 2-core CPU's search account at adcbbd0 (the paired re-measurement in the search's kept process, the budget
# keeping the less of its four-round price and the contenders' fresh trial time), against the 51-config grid of
# 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt adcbbd0), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
cd /tmp/wt && WORK=/tmp/cpus12 bash /work/main/benchmarks/cpu_search.sh   # what ran, as benchmarks/cpu_search.sh now writes it
