#!/usr/bin/env bash
# The 2-core CPU's search account at 1672b10 (the paired re-measurement in the search's kept process, the budget
# pricing it at four rounds: 11-17 s here, where the fresh trials' time had kept 7-8 s; adcbbd0 keeps the less of the
# two), against the 51-config grid of 2026-12-06-search.
# Run from a worktree of the commit (git worktree add /tmp/wt 1672b10), nothing else running. The 3 rows were appended
# to benchmarks/results/cpu-search.json (the copy below, whole), then python benchmarks/headlines.py.
cd /tmp/wt && WORK=/tmp/cpus11 bash /work/main/benchmarks/cpu_search.sh   # what ran, as benchmarks/cpu_search.sh now writes it
